/**
 * Two shared gates on one store (two processes), calls of random keys, priorities and deadlines
 * arriving at random times: every call settles exactly once, none starts past its deadline, a call
 * of a higher priority goes before the lower ones of its gate and key that were still waiting, and
 * the starts of both gates together keep the gate-wide leaky bucket's spacing and each key's token
 * bucket.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isTollgateError } from '../../src/errors.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';
import { ManualClock } from '../helpers/manual-clock.js';

const numRuns = Number(process.env['GATE_PROPERTY_RUNS'] ?? 1000);
const T0 = Date.parse('2026-12-01T12:00:00Z');
/** Gate-wide: 10 per second, one every 100 ms. */
const SPACING_MS = 100;
/** Each key: 5 per second in bursts of 2 (a token bucket), or 2 per second spaced (a leaky bucket). */
const KEY_LIMITS = [
  {
    perKey: { algorithm: 'token-bucket', limit: 5, intervalMs: 1000, burst: 2 },
    ratePerMs: 5 / 1000,
    burst: 2,
  },
  { perKey: { algorithm: 'leaky-bucket', limit: 2, intervalMs: 1000 }, ratePerMs: 2 / 1000, burst: 1 },
] as const;

type Step =
  | { kind: 'schedule'; gate: 0 | 1; key: number; priority: number; maxQueueTimeMs: number }
  | { kind: 'abort'; pick: number }
  | { kind: 'tick'; ms: number };

const stepArb = (priorities: readonly number[]): fc.Arbitrary<Step> =>
  fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('schedule' as const),
        gate: fc.constantFrom(0 as const, 1 as const),
        key: fc.integer({ min: 0, max: 2 }),
        priority: fc.constantFrom(...priorities),
        maxQueueTimeMs: fc.constantFrom(0, 150, 400, 1_000, 5_000, 60_000),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 400 }) }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('abort' as const), pick: fc.nat() }) },
  );

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

interface Outcome {
  readonly gate: number;
  readonly priority: number;
  readonly key: number;
  readonly scheduledAt: number;
  readonly deadline: number;
  startedAt?: number;
  settled: number;
  error?: unknown;
}

async function replay(steps: readonly Step[], later: boolean, keyLimit: number): Promise<Outcome[]> {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  // `later`: the store answers its decisions a turn later, as Redis does.
  const store = later
    ? new Proxy(memory, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver);
          if (typeof value !== 'function') return value;
          if (property !== 'reserve' && property !== 'refund' && property !== 'recount')
            return value.bind(target);
          return (...args: unknown[]) => Promise.resolve().then(() => value.apply(target, args));
        },
      })
    : memory;
  const options = {
    store,
    clock,
    limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
    perKey: [KEY_LIMITS[keyLimit]!.perKey],
  } as const;
  const gates = [createSharedGate(options), createSharedGate(options)];
  const outcomes: Outcome[] = [];
  // Time moves from timer to timer, letting the store answer in between (an answer comes a turn
  // after its question, not after the clock has jumped past the time it was asked).
  const advance = async (ms: number) => {
    const target = clock.now() + ms;
    for (let at = clock.nextTimerAt(); at !== undefined && at <= target; at = clock.nextTimerAt()) {
      clock.advanceTo(at);
      await flush();
    }
    clock.advanceTo(target);
    await flush();
  };
  const aborts: AbortController[] = [];
  for (const step of steps) {
    if (step.kind === 'tick') {
      await advance(step.ms);
      continue;
    }
    if (step.kind === 'abort') {
      aborts[step.pick % Math.max(1, aborts.length)]?.abort();
      await flush();
      continue;
    }
    const abort = new AbortController();
    aborts.push(abort);
    const outcome: Outcome = {
      gate: step.gate,
      priority: step.priority,
      key: step.key,
      scheduledAt: clock.now(),
      deadline: clock.now() + step.maxQueueTimeMs,
      settled: 0,
    };
    outcomes.push(outcome);
    gates[step.gate]!.schedule(
      () => {
        outcome.startedAt = clock.now();
      },
      {
        key: `k${step.key}`,
        priority: step.priority,
        maxQueueTimeMs: step.maxQueueTimeMs,
        signal: abort.signal,
      },
    ).then(
      () => {
        outcome.settled++;
      },
      (error: unknown) => {
        outcome.settled++;
        outcome.error = error;
      },
    );
    await flush();
  }
  // Long enough for every call accepted to start or be refused (the longest deadline is 60 s).
  for (let t = 0; t < 700 && outcomes.some((o) => o.settled === 0); t++) await advance(100);
  for (const gate of gates) await gate.close();
  return outcomes;
}

function check(outcomes: readonly Outcome[], keyLimit: number): void {
  const { ratePerMs, burst } = KEY_LIMITS[keyLimit]!;
  for (const o of outcomes) {
    expect(o.settled).toBe(1);
    if (o.error !== undefined) {
      expect(isTollgateError(o.error)).toBe(true);
      expect(o.startedAt).toBeUndefined();
    } else {
      expect(o.startedAt).toBeDefined();
      expect(o.startedAt!).toBeLessThanOrEqual(o.deadline + 1e-9);
    }
  }
  const starts = outcomes.filter((o) => o.startedAt !== undefined);
  // Priority within one gate and key: a call that started more than lateToleranceMs (10 ms: a
  // start the store granted just before) after a higher-priority call of its gate and key came
  // did not start before that call.
  for (const high of starts) {
    for (const low of starts) {
      if (high.gate !== low.gate || high.key !== low.key || high.priority <= low.priority) continue;
      if (low.startedAt! > high.scheduledAt + 10) expect(high.startedAt!).toBeLessThanOrEqual(low.startedAt!);
    }
  }
  const all = starts.map((o) => o.startedAt!).sort((a, b) => a - b);
  for (let i = 1; i < all.length; i++)
    expect(all[i]! - all[i - 1]!).toBeGreaterThanOrEqual(SPACING_MS - 1e-9);
  for (const key of [0, 1, 2]) {
    const times = starts
      .filter((o) => o.key === key)
      .map((o) => o.startedAt!)
      .sort((a, b) => a - b);
    let tokens: number = burst;
    let at = T0;
    for (const t of times) {
      tokens = Math.min(burst, tokens + (t - at) * ratePerMs);
      at = t;
      expect(tokens).toBeGreaterThanOrEqual(1 - 1e-9);
      tokens -= 1;
    }
  }
}

describe('shared gates with priorities (property)', () => {
  for (const [name, priorities, later] of [
    ['mixed priorities', [-1, 0, 0, 1, 3], false],
    ['mixed priorities, a store answering later', [-1, 0, 0, 1, 3], true],
    ['no priorities', [0], false],
    ['no priorities, a store answering later', [0], true],
  ] as const) {
    it(`${name}: every call settles once, none starts late, both limits hold across two gates`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(stepArb(priorities), { minLength: 1, maxLength: 40 }),
          fc.integer({ min: 0, max: KEY_LIMITS.length - 1 }),
          async (steps, keyLimit) => {
            check(await replay(steps, later, keyLimit), keyLimit);
          },
        ),
        { numRuns },
      );
    }, 120_000);
  }
});
