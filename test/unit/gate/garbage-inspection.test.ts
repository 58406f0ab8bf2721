/**
 * An `inspect` hook is user code: whatever it answers, the call settles once and the gate closes.
 * Found by a fuzzing review (session 13): an answer of `null`, or a `method` that is not text,
 * threw inside the gate (null.status, method.toUpperCase), so the call never settled, its budget
 * stayed reserved, and a shared gate's close() never resolved. Session 14: an `actualCost` of null
 * did the same in the in-memory gate.
 */
import { describe, expect, it } from 'vitest';
import { MemoryLedger } from '../../../src/budget/memory-ledger.js';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { AsyncBudgetGuard } from '../../../src/redis/async-budget-guard.js';
import { asyncLedger } from '../../../src/redis/async-ledger.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = Date.parse('2026-12-01T12:00:00Z');
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** What a hook may answer: garbage of every shape, at once or through a promise. */
const answers: [string, () => unknown][] = [
  ['null', () => null],
  ['a promise of null', () => Promise.resolve(null)],
  ['a number', () => 42],
  ['a string', () => 'ok'],
  ['a method that is a number', () => ({ status: 200, headers: {}, method: 5 })],
  [
    'a method that is an object, on a 429',
    () => ({ status: 429, headers: { 'retry-after': '0' }, method: {} }),
  ],
  [
    'a method that is an object, on a 503',
    () => ({ status: 503, headers: { 'retry-after': '0' }, method: {} }),
  ],
  ['a status that is NaN', () => ({ status: Number.NaN, headers: {} })],
  ['headers that are null', () => ({ status: 200, headers: null })],
  ['a promise of a number method', () => Promise.resolve({ status: 200, headers: {}, method: 7 })],
  // Found in session 14: an actualCost of null threw in the in-memory gate's settlement.
  ['an actualCost that is null', () => ({ status: 200, headers: {}, actualCost: null })],
  ['an actualCost that is an array', () => ({ status: 200, headers: {}, actualCost: [3] })],
  ['an actualCost that is a number', () => ({ status: 200, headers: {}, actualCost: 3 })],
  [
    'an actualCost of garbage counts',
    () => ({ status: 200, headers: {}, actualCost: { requests: 'x', tokens: Number.NaN } }),
  ],
];

/** Settlement of `promise`, readable after a flush. */
function watch(promise: Promise<unknown>) {
  const state: { settled: number; value?: unknown } = { settled: 0 };
  promise.then(
    (value) => {
      state.settled++;
      state.value = value;
    },
    (error: unknown) => {
      state.settled++;
      state.value = error;
    },
  );
  return state;
}

describe.each([
  ['in-memory gate', 'memory'],
  ['shared gate', 'shared'],
] as const)('%s: a garbage inspection', (_name, kind) => {
  it.each(answers)(
    '%s: the call settles once, its budget is settled, and close() resolves',
    async (_what, answer) => {
      const clock = new ManualClock(T0);
      const ledger = new MemoryLedger();
      const budgets = { name: 'day', limit: '$1', period: 'day' as const };
      // A 429 or 503 with a garbage method is retried (or not) like any other: at most 3 attempts.
      const adapt = { maxRetries: 2 };
      // A limit, so an actual cost has something to settle.
      const limits = [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000 }] as const;
      const gate =
        kind === 'memory'
          ? createGate({ clock, budget: { budgets, ledger }, adapt, limits: [...limits] })
          : createSharedGate({
              store: new MemoryStore({ clock }),
              clock,
              adapt,
              limits: [...limits],
              budget: new AsyncBudgetGuard({ budgets, ledger: asyncLedger(ledger), clock }),
            });
      let runs = 0;
      const call = watch(
        gate.schedule(
          () => {
            runs++;
            return 'value';
          },
          { priceMicros: 1_000, inspect: answer as () => Inspection },
        ),
      );
      for (let t = 0; t < 50 && call.settled === 0; t++) {
        await flush();
        clock.advance(100);
      }
      expect(call.settled).toBe(1);
      expect(runs).toBeGreaterThanOrEqual(1);
      expect(runs).toBeLessThanOrEqual(3);
      // The estimate is spent or released, never left reserved.
      const day = ledger.snapshot(clock.now()).find((b) => b.budgetId === 'day');
      expect(day).toBeDefined();
      expect(day!.reservedMicros).toBe(0);
      const closed = watch(gate.close());
      await flush();
      expect(closed.settled).toBe(1);
    },
  );
});
