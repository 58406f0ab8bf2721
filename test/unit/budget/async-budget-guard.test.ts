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
