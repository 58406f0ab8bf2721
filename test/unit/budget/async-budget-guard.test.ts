import { describe, expect, it } from 'vitest';
import { MemoryLedger } from '../../../src/budget/memory-ledger.js';
import { InvalidOptionError } from '../../../src/errors.js';
import { createAsyncBudgetGuard } from '../../../src/redis/async-budget-guard.js';
import { type AsyncLedger, asyncLedger } from '../../../src/redis/async-ledger.js';

const budgets = { limit: 1, period: 'day' } as const;

describe('AsyncBudgetGuard checks its ledger at construction', () => {
  it.each([
    ['release', /`ledger` to be an AsyncLedger \(a RedisLedger; missing method release\(\)\)/],
    ['snapshot', /missing method snapshot\(\)/],
    ['settle', /missing method settle\(\)/],
  ])('a ledger without %s() is refused, naming it', (method, message) => {
    const ledger: Record<string, unknown> = { ...asyncLedger(new MemoryLedger()) };
    delete ledger[method];
    const make = () => createAsyncBudgetGuard({ budgets, ledger: ledger as unknown as AsyncLedger });
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(message);
  });

  it('a ledger without reset() or close() is enough: the guard never calls them', async () => {
    const { reset: _reset, close: _close, ...rest } = asyncLedger(new MemoryLedger());
    const guard = createAsyncBudgetGuard({
      budgets,
      ledger: rest as unknown as AsyncLedger,
      clock: { now: () => 10 },
    });
    const reservation = await guard.reserve(100);
    expect(await guard.release(reservation)).toBe(true);
    expect((await guard.spend())[0]).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
  });

  it.each([[undefined], [null], ['redis']])('a ledger that is not an object (%j) is refused', (ledger) => {
    expect(() => createAsyncBudgetGuard({ budgets, ledger: ledger as never })).toThrow(/`ledger`/);
  });
});

describe('AsyncBudgetGuard refuses what is not a reservation', () => {
  it('settle or release of undefined, null or another object is rejected, naming `reservation`', async () => {
    const guard = createAsyncBudgetGuard({
      budgets,
      ledger: asyncLedger(new MemoryLedger()),
      clock: { now: () => 10 },
    });
    for (const bad of [undefined, null, {}, { id: 5 }]) {
      await expect(guard.release(bad as never)).rejects.toThrow(InvalidOptionError);
      await expect(guard.settle(bad as never, 0)).rejects.toThrow(/`reservation`/);
    }
  });
});

describe('AsyncBudgetGuard threshold events', () => {
  // A $1 daily budget with thresholds at 50% and 80%; the clock stands at 10 ms into day 0.
  const spec = { limit: 1, period: 'day', thresholds: [0.5, 0.8] } as const;
  const flush = () => new Promise((resolve) => setImmediate(resolve));

  /** A guard on `ledger` at 10 ms into day 0, and the thresholds it fires. */
  const listening = (ledger: AsyncLedger) => {
    const events: number[] = [];
    const guard = createAsyncBudgetGuard({
      budgets: spec,
      ledger,
      clock: { now: () => 10 },
      onThreshold: (e) => events.push(e.threshold),
    });
    return { guard, events };
  };

  it('fires once per threshold and period across the guards sharing a ledger, after the claim', async () => {
    const ledger = asyncLedger(new MemoryLedger());
    const events: [string, number][] = [];
    const guard = (name: string) =>
      createAsyncBudgetGuard({
        budgets: spec,
        ledger,
        clock: { now: () => 10 },
        onThreshold: (e) => events.push([name, e.threshold]),
      });
    const a = guard('a');
    const b = guard('b');
    const first = await a.reserve(600_000);
    await flush();
    expect(events).toEqual([['a', 0.5]]);
    // Spend dips under the threshold and crosses it again, through the other guard: nothing more.
    await a.release(first);
    await b.reserve(600_000);
    await flush();
    expect(events).toEqual([['a', 0.5]]);
    // A guard made afresh (a restarted process) does not fire it again either; 80% is new.
    const c = guard('c');
    await c.reserve(250_000);
    await flush();
    expect(events).toEqual([
      ['a', 0.5],
      ['c', 0.8],
    ]);
  });

  it('a settle above the estimate fires what it crosses; the event carries the numbers', async () => {
    const events: unknown[] = [];
    const g = createAsyncBudgetGuard({
      budgets: spec,
      ledger: asyncLedger(new MemoryLedger()),
      clock: { now: () => 10 },
    });
    const off = g.onThreshold((e) => events.push(e));
    const r = await g.reserve(100_000);
    await g.settle(r, 550_000);
    await flush();
    expect(events).toEqual([
      {
        budget: 'day',
        key: undefined,
        budgetId: 'day',
        currency: 'usd',
        threshold: 0.5,
        spentMicros: 550_000,
        reservedMicros: 0,
        limitMicros: 1_000_000,
        resetAt: 86_400_000,
        at: 10,
      },
    ]);
    off();
    await g.reserve(300_000);
    await flush();
    expect(events).toHaveLength(1);
  });

  it('a claim that fails leaves the event to the guard: fired once, and the call goes on', async () => {
    const inner = asyncLedger(new MemoryLedger());
    let claims = 0;
    const ledger: AsyncLedger = {
      ...inner,
      claimThreshold: () => {
        claims++;
        return Promise.reject(new Error('Redis unavailable'));
      },
    };
    const { guard: g, events } = listening(ledger);
    const r = await g.reserve(600_000);
    await flush();
    expect(events).toEqual([0.5]);
    await g.release(r);
    await g.reserve(600_000);
    await flush();
    expect(events).toEqual([0.5]);
    expect(claims).toBe(1);
  });

  it("a claim answered with something else than a claim (a custom ledger) is the guard's: fired, nothing thrown", async () => {
    const inner = asyncLedger(new MemoryLedger());
    const ledger = { ...inner, claimThreshold: () => Promise.resolve(undefined) } as unknown as AsyncLedger;
    const { guard: g, events } = listening(ledger);
    await g.reserve(600_000);
    await flush();
    expect(events).toEqual([0.5]);
  });

  it('a ledger without claims: the guard fires from its own memory, once per period', async () => {
    const { claimThreshold: _claim, ...inner } = asyncLedger(new MemoryLedger());
    const { guard: g, events } = listening(inner as AsyncLedger);
    const [r] = await Promise.all([g.reserve(500_000), g.reserve(100_000)]);
    await g.release(r);
    await g.reserve(500_000);
    await flush();
    expect(events).toEqual([0.5]);
  });

  it('onThreshold must be a function', () => {
    expect(() =>
      createAsyncBudgetGuard({
        budgets: spec,
        ledger: asyncLedger(new MemoryLedger()),
        onThreshold: 'x' as never,
      }),
    ).toThrow(/`onThreshold`/);
  });
});
