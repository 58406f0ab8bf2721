/**
 * The shared gate's money: `close()` waits until no call holds a budget reservation (as the
 * in-process gate does), and a budget it cannot honour (`onExceeded: 'wait'`) is refused when the
 * gate is made. A memory store and memory ledgers: no Redis, no sleeps.
 */
import { describe, expect, it } from 'vitest';
import { BudgetGuard } from '../../../src/budget/budget-guard.js';
import { MemoryLedger } from '../../../src/budget/memory-ledger.js';
import { InvalidOptionError } from '../../../src/errors.js';
import type { Inspection } from '../../../src/gate/gate.js';
import { AsyncBudgetGuard } from '../../../src/redis/async-budget-guard.js';
import { type AsyncLedger, asyncLedger } from '../../../src/redis/async-ledger.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const budgets = { name: 'day', limit: '$10', period: 'day' } as const;

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((res) => {
    resolve = res;
  });
  return { promise, resolve };
}

/** Let every pending promise callback run (no timers involved). */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

/** Watch a promise: `done()` says whether it has settled yet. */
function watch(promise: Promise<unknown>) {
  let settled = false;
  promise.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  return () => settled;
}

describe('SharedGate.close() waits for money', () => {
  it('close() resolves only after a call whose inspection is asynchronous has settled its budget', async () => {
    const clock = new ManualClock(1_000);
    const guard = new BudgetGuard({ budgets, ledger: 'memory', clock });
    const gate = createSharedGate({ store: new MemoryStore({ clock }), budget: guard, clock });
    const inspection = deferred<Inspection>();
    const call = gate.schedule(() => 'body', { priceMicros: 500, inspect: () => inspection.promise });
    await flush();
    // The call ran; its inspection (the fetch adapter reading the body for a price) has not ended.
    expect(gate.stats()).toMatchObject({ queued: 0, started: 1 });
    const closed = watch(gate.close());
    await flush();
    expect(closed()).toBe(false);
    expect(guard.spend()[0]).toMatchObject({ spentMicros: 0, reservedMicros: 500 });
    inspection.resolve({ status: 200, headers: {}, actualPriceMicros: 300 });
    await expect(call).resolves.toBe('body');
    await flush();
    expect(closed()).toBe(true);
    expect(guard.spend()[0]).toMatchObject({ spentMicros: 300, reservedMicros: 0 });
  });

  it('close() resolves only after the ledger has answered the settle (a Redis ledger: close it next)', async () => {
    const clock = new ManualClock(1_000);
    const memory = asyncLedger(new MemoryLedger());
    const settles: (() => void)[] = [];
    // A ledger whose settles answer only when the test says so (a round trip to Redis).
    const ledger: AsyncLedger = {
      ...memory,
      settle: (id, actual, now) =>
        new Promise((resolve, reject) => {
          settles.push(() => memory.settle(id, actual, now).then(resolve, reject));
        }),
    };
    const guard = new AsyncBudgetGuard({ budgets, ledger, clock });
    const gate = createSharedGate({ store: new MemoryStore({ clock }), budget: guard, clock });
    await expect(gate.schedule(() => 'ok', { priceMicros: 500 })).resolves.toBe('ok');
    const closed = watch(gate.close());
    await flush();
    expect(settles).toHaveLength(1);
    expect(closed()).toBe(false);
    settles[0]!();
    await flush();
    expect(closed()).toBe(true);
    expect((await guard.spend())[0]).toMatchObject({ spentMicros: 500, reservedMicros: 0 });
  });

  it('close() waits for a budget reservation still on its way for an aborted call, and gives it back', async () => {
    const clock = new ManualClock(1_000);
    const memory = asyncLedger(new MemoryLedger());
    const reserves: (() => void)[] = [];
    // A ledger whose reserves answer only when the test says so (a round trip to Redis).
    const ledger: AsyncLedger = {
      ...memory,
      reserve: (entries, now) =>
        new Promise((resolve, reject) => {
          reserves.push(() => memory.reserve(entries, now).then(resolve, reject));
        }),
    };
    const guard = new AsyncBudgetGuard({ budgets, ledger, clock });
    const gate = createSharedGate({ store: new MemoryStore({ clock }), budget: guard, clock });
    let sent = 0;
    const controller = new AbortController();
    const call = gate.schedule(
      () => {
        sent++;
      },
      { priceMicros: 500, signal: controller.signal },
    );
    controller.abort();
    await expect(call).rejects.toMatchObject({ code: 'ERR_ABORTED' });
    const closed = watch(gate.close());
    await flush();
    expect(closed()).toBe(false);
    // The reservation lands after the call was refused: it is given back, then close resolves.
    reserves[0]!();
    await flush();
    expect(closed()).toBe(true);
    expect(sent).toBe(0);
    expect((await guard.spend())[0]).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
  });
});

describe('a shared gate with a budget that waits for room', () => {
  it('is refused at construction, naming `budget.onExceeded` (the shared gate does not wait)', () => {
    const budget = new BudgetGuard({ budgets, ledger: 'memory', onExceeded: 'wait' });
    const make = () => createSharedGate({ store: new MemoryStore(), budget });
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(/`budget\.onExceeded`/);
  });

  it("a budget that refuses (the default, or `onExceeded: 'refuse'`) is accepted", () => {
    for (const onExceeded of [undefined, 'refuse'] as const) {
      const budget = new BudgetGuard({
        budgets,
        ledger: 'memory',
        ...(onExceeded === undefined ? {} : { onExceeded }),
      });
      expect(() => createSharedGate({ store: new MemoryStore(), budget })).not.toThrow();
    }
  });
});
