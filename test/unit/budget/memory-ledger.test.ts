import { describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../../../src/budget/ledger.js';
import { MemoryLedger } from '../../../src/budget/memory-ledger.js';
import { InvalidCostError } from '../../../src/errors.js';
import { ledgerContract } from '../../helpers/budget-ledger-contract.js';

ledgerContract('memory', () => new MemoryLedger());

const DAY = 86_400_000;
const MAX = Number.MAX_SAFE_INTEGER;
const day = (over: Partial<LedgerEntry> = {}): LedgerEntry => ({
  budgetId: 'day',
  windowStart: 0,
  windowEnd: DAY,
  limitMicros: 1_000_000,
  estimateMicros: 100_000,
  expiresAt: 10 * DAY,
  ...over,
});
const rolling = (now: number, over: Partial<LedgerEntry> = {}): LedgerEntry => ({
  budgetId: 'roll',
  windowStart: now - 60_000,
  windowEnd: now,
  rollingMs: 60_000,
  limitMicros: 1_000_000,
  estimateMicros: 100_000,
  expiresAt: now + 1_000_000,
  ...over,
});
function reserveOk(ledger: MemoryLedger, entries: LedgerEntry[], now: number): string {
  const r = ledger.reserve(entries, now);
  if (!r.ok) throw new Error(`expected admission, got ${JSON.stringify(r)}`);
  return r.reservationId;
}

describe('MemoryLedger: a reservation whose window was dropped is not found', () => {
  it.each(['settle', 'release'] as const)('%s of a rolling hold that left the window', (op) => {
    const ledger = new MemoryLedger();
    const id = reserveOk(ledger, [rolling(0)], 0);
    // A later reserve prunes the hold (dated 0, now 60_000 - 0 >= rollingMs).
    reserveOk(ledger, [rolling(60_000, { estimateMicros: 1 })], 60_000);
    const result = op === 'settle' ? ledger.settle(id, 500_000, 60_001) : ledger.release(id, 60_001);
    expect(result).toEqual({ found: false, totals: [] });
    expect(ledger.snapshot(60_002)[0]).toMatchObject({ spentMicros: 0, reservedMicros: 1 });
  });

  it('settle of a rolling hold older than the window, before anything pruned it', () => {
    const ledger = new MemoryLedger();
    const id = reserveOk(ledger, [rolling(0)], 0);
    expect(ledger.settle(id, 500_000, 60_000)).toEqual({ found: false, totals: [] });
    expect(ledger.snapshot(60_000)[0]).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
  });

  it.each(['settle', 'release'] as const)('%s of a hold in a calendar window two periods back', (op) => {
    const ledger = new MemoryLedger();
    const id = reserveOk(ledger, [day()], 10);
    reserveOk(ledger, [day({ windowStart: DAY, windowEnd: 2 * DAY })], DAY + 10);
    reserveOk(ledger, [day({ windowStart: 2 * DAY, windowEnd: 3 * DAY })], 2 * DAY + 10);
    const result =
      op === 'settle' ? ledger.settle(id, 500_000, 2 * DAY + 11) : ledger.release(id, 2 * DAY + 11);
    expect(result).toEqual({ found: false, totals: [] });
    expect(ledger.snapshot(2 * DAY + 12)).toEqual([
      expect.objectContaining({ spentMicros: 0, reservedMicros: 100_000 }),
    ]);
  });

  it('found when one of its budgets still holds it', () => {
    const ledger = new MemoryLedger();
    const month = day({ budgetId: 'month', windowEnd: 31 * DAY });
    const id = reserveOk(ledger, [day(), month], 10);
    reserveOk(ledger, [day({ windowStart: DAY, windowEnd: 2 * DAY })], DAY + 10);
    reserveOk(ledger, [day({ windowStart: 2 * DAY, windowEnd: 3 * DAY })], 2 * DAY + 10);
    expect(ledger.settle(id, 70_000, 2 * DAY + 11)).toMatchObject({
      found: true,
      totals: [{ budgetId: 'month', spentMicros: 70_000, reservedMicros: 0 }],
    });
  });
});

describe('MemoryLedger: spend past the exact range', () => {
  it('a settle that would overflow one budget throws and changes no budget', () => {
    const ledger = new MemoryLedger();
    const big = day({ budgetId: 'big', limitMicros: MAX, estimateMicros: 0 });
    const small = day({ budgetId: 'small', limitMicros: MAX, estimateMicros: 0 });
    const first = reserveOk(ledger, [big], 10);
    ledger.settle(first, MAX - 5, 11);
    const both = reserveOk(ledger, [small, big], 12);
    expect(() => ledger.settle(both, 6, 13)).toThrow(InvalidCostError);
    expect(ledger.snapshot(14).map((w) => [w.budgetId, w.spentMicros, w.reservedMicros])).toEqual([
      ['big', MAX - 5, 0],
      ['small', 0, 0],
    ]);
    expect(ledger.settle(both, 5, 15).found).toBe(true);
    expect(ledger.snapshot(16).map((w) => w.spentMicros)).toEqual([MAX, 5]);
  });
});
