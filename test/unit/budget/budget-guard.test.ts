import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  type BudgetGuardOptions,
  createBudgetGuard,
  type ThresholdEvent,
} from '../../../src/budget/budget-guard.js';
import { BudgetExceededError } from '../../../src/budget/errors.js';
import { MemoryLedger } from '../../../src/budget/memory-ledger.js';
import { InvalidCostError, InvalidOptionError, isTollgateError } from '../../../src/errors.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = Date.parse('2026-03-07T12:00:00Z');
const $ = (dollars: number) => Math.round(dollars * 1e6);

function guardWith(options: Partial<BudgetGuardOptions> = {}, start = T0) {
  const clock = new ManualClock(start);
  const events: ThresholdEvent[] = [];
  const guard = createBudgetGuard({
    budgets: { name: 'day', limit: 1, period: 'day' },
    ledger: 'memory',
    clock,
    onThreshold: (e) => events.push(e),
    ...options,
  });
  return { guard, clock, events };
}

function refusal(fn: () => unknown): BudgetExceededError {
  try {
    fn();
  } catch (error) {
    if (error instanceof BudgetExceededError) return error;
    throw error;
  }
  throw new Error('expected BudgetExceededError');
}

describe('createBudgetGuard: reserve, settle, release', () => {
  it('refuses the call that would cross the cap, with the numbers in fields', () => {
    const { guard } = guardWith();
    guard.reserve($(0.6));
    const r = guard.reserve($(0.3));
    guard.settle(r, $(0.25));
    const error = refusal(() => guard.reserve($(0.2)));
    expect(isTollgateError(error) && error.code).toBe('ERR_BUDGET_EXCEEDED');
    expect(error).toMatchObject({
      budget: 'day',
      key: undefined,
      budgetId: 'day',
      currency: 'usd',
      spentMicros: $(0.25),
      reservedMicros: $(0.6),
      limitMicros: $(1),
      estimateMicros: $(0.2),
      resetAt: Date.parse('2026-03-08T00:00:00Z'),
      retryAt: Date.parse('2026-03-08T00:00:00Z'),
    });
    expect(error.message).toBe(
      'Budget `day` exceeded: spent $0.25 + reserved $0.60 + this call $0.20 > limit $1.00; resets at 2026-03-08T00:00:00.000Z',
    );
  });

  it('tryReserve returns the refusal as a value', () => {
    const { guard } = guardWith();
    const decision = guard.tryReserve($(2));
    expect(decision).toMatchObject({ ok: false, retryAt: Infinity, estimateMicros: $(2) });
  });

  it('estimate above actual refunds; below actual charges the difference', () => {
    const { guard } = guardWith();
    const a = guard.reserve($(0.5));
    expect(guard.settle(a, $(0.1))).toBe(true);
    expect(guard.spend()[0]).toMatchObject({
      spentMicros: $(0.1),
      reservedMicros: 0,
      remainingMicros: $(0.9),
    });
    const b = guard.reserve($(0.1));
    guard.settle(b, $(0.4));
    expect(guard.spend()[0]).toMatchObject({ spentMicros: $(0.5), remainingMicros: $(0.5) });
  });

  it('release returns the reservation; a second settle or release is a no-op', () => {
    const { guard } = guardWith();
    const r = guard.reserve($(1));
    expect(guard.release(r)).toBe(true);
    expect(guard.release(r)).toBe(false);
    expect(guard.settle(r, $(1))).toBe(false);
    expect(guard.spend()[0]).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
  });

  it('settle or release of something that is not a reservation is refused, naming it', () => {
    const { guard } = guardWith();
    for (const bad of [undefined, null, {}, { id: 5 }]) {
      expect(() => guard.release(bad as never)).toThrow(/`reservation`/);
      expect(() => guard.settle(bad as never, 0)).toThrow(/`reservation`/);
    }
  });

  it('a reservation carries its id, estimate, key, budgets and times', () => {
    const { guard } = guardWith({ reservationTtlMs: 60_000 });
    const r = guard.reserve(1234, 'k', T0 + 5);
    expect(r).toEqual({
      id: expect.any(String),
      estimateMicros: 1234,
      key: 'k',
      budgetIds: ['day'],
      reservedAt: T0 + 5,
      expiresAt: T0 + 5 + 60_000,
    });
    expect(Object.isFrozen(r)).toBe(true);
  });

  it('spend starts from zero in the next period (UTC end of day)', () => {
    const { guard, clock } = guardWith();
    guard.settle(guard.reserve($(1)), $(1));
    clock.advanceTo(Date.parse('2026-03-07T23:59:59.999Z'));
    expect(() => guard.reserve(1)).toThrow(BudgetExceededError);
    clock.advanceTo(Date.parse('2026-03-08T00:00:00Z'));
    expect(guard.spend()[0]).toMatchObject({ spentMicros: 0, resetAt: Date.parse('2026-03-09T00:00:00Z') });
    guard.reserve($(1));
  });

  it('month rollover', () => {
    const { guard, clock } = guardWith(
      { budgets: { name: 'm', limit: '$10', period: 'month' } },
      Date.parse('2026-01-31T23:00:00Z'),
    );
    guard.settle(guard.reserve($(10)), $(10));
    expect(guard.tryReserve(1)).toMatchObject({ ok: false, resetAt: Date.parse('2026-02-01T00:00:00Z') });
    clock.advanceTo(Date.parse('2026-02-01T00:00:00Z'));
    expect(guard.tryReserve($(10)).ok).toBe(true);
  });

  it('day budget in America/New_York on the 23-hour day of 2026-03-08', () => {
    const { guard, clock } = guardWith(
      { budgets: { name: 'ny', limit: 1, period: 'day', timeZone: 'America/New_York' } },
      Date.parse('2026-03-08T05:00:00Z'), // local midnight EST
    );
    guard.settle(guard.reserve($(1)), $(1));
    const error = refusal(() => guard.reserve(1));
    expect(error.resetAt).toBe(Date.parse('2026-03-09T04:00:00Z')); // local midnight EDT, 23 h later
    clock.advanceTo(Date.parse('2026-03-09T03:59:59.999Z'));
    expect(guard.tryReserve(1).ok).toBe(false);
    clock.advanceTo(Date.parse('2026-03-09T04:00:00Z'));
    expect(guard.tryReserve(1).ok).toBe(true);
  });

  it('day budget in Europe/Berlin on the 25-hour day of 2026-10-25', () => {
    const { guard, clock } = guardWith(
      { budgets: { name: 'be', limit: 1, period: 'day', timeZone: 'Europe/Berlin' } },
      Date.parse('2026-10-24T22:00:00Z'), // local midnight CEST
    );
    guard.settle(guard.reserve($(1)), $(1));
    clock.advanceTo(Date.parse('2026-10-25T22:30:00Z')); // 23:30 CET, still the 25th
    expect(guard.tryReserve(1)).toMatchObject({ ok: false, resetAt: Date.parse('2026-10-25T23:00:00Z') });
    clock.advanceTo(Date.parse('2026-10-25T23:00:00Z'));
    expect(guard.tryReserve(1).ok).toBe(true);
  });

  it('rolling window: spend leaves after rollingMs, retryAt says when', () => {
    const { guard, clock } = guardWith({ budgets: { name: 'r', limit: 1, period: { rollingMs: 60_000 } } });
    guard.settle(guard.reserve($(0.7)), $(0.7));
    clock.advance(30_000);
    guard.settle(guard.reserve($(0.3)), $(0.3));
    clock.advance(10_000);
    expect(guard.tryReserve($(0.5))).toMatchObject({ ok: false, retryAt: T0 + 60_000, resetAt: T0 + 60_000 });
    clock.advanceTo(T0 + 60_000);
    expect(guard.tryReserve($(0.5)).ok).toBe(true);
    expect(guard.tryReserve($(0.3))).toMatchObject({ ok: false, retryAt: T0 + 90_000 });
  });
});

describe('several budgets', () => {
  it('a call reserves on all or none: $5/day and $50/month', () => {
    const { guard, clock } = guardWith({
      budgets: [
        { name: 'daily', limit: 5, period: 'day' },
        { name: 'monthly', limit: 50, period: 'month' },
      ],
    });
    for (let d = 0; d < 10; d++) {
      guard.settle(guard.reserve($(5)), $(5));
      expect(() => guard.reserve(1)).toThrow(expect.objectContaining({ budget: 'daily' }));
      clock.advance(86_400_000);
    }
    // 2026-03-17: $50 spent this month; the day budget is empty but the month refuses.
    const error = refusal(() => guard.reserve($(1)));
    expect(error).toMatchObject({ budget: 'monthly', spentMicros: $(50) });
    expect(guard.spend().map((s) => [s.budget, s.spentMicros, s.reservedMicros])).toEqual([
      ['daily', 0, 0],
      ['monthly', $(50), 0],
    ]);
  });

  it('per-key budgets count each key apart; unkeyed calls share the key ""', () => {
    const { guard } = guardWith({
      budgets: [
        { name: 'tenant', limit: 1, period: 'day', perKey: true },
        { name: 'all', limit: 2.5, period: 'day' },
      ],
    });
    guard.reserve($(1), 'a');
    expect(refusal(() => guard.reserve($(0.5), 'a'))).toMatchObject({
      budget: 'tenant',
      key: 'a',
      budgetId: 'tenant[a]',
    });
    guard.reserve($(1), 'b');
    guard.reserve($(0.5));
    expect(refusal(() => guard.reserve($(0.1), 'c'))).toMatchObject({ budget: 'all' });
    expect(guard.spend().map((s) => [s.budgetId, s.key, s.reservedMicros])).toEqual([
      ['tenant[]', '', $(0.5)],
      ['tenant[a]', 'a', $(1)],
      ['tenant[b]', 'b', $(1)],
      ['all', undefined, $(2.5)],
    ]);
  });

  it('reset forgets a budget, a key, or everything', () => {
    const { guard } = guardWith({ budgets: [{ name: 't', limit: 1, period: 'day', perKey: true }] });
    guard.settle(guard.reserve($(1), 'a'), $(1));
    guard.settle(guard.reserve($(1), 'b'), $(1));
    guard.reset('t[a]');
    expect(guard.spend().map((s) => s.budgetId)).toEqual(['t[b]']);
    guard.reset();
    expect(guard.spend()).toEqual([]);
    expect(() => guard.reset('nope')).toThrow(InvalidOptionError);
  });
});

describe('thresholds', () => {
  it('fire once per period at 50/80/100% by default', () => {
    const { guard, events, clock } = guardWith();
    guard.settle(guard.reserve($(0.4)), $(0.4));
    expect(events).toEqual([]);
    const r = guard.reserve($(0.2)); // 60%: crosses 50
    expect(events.map((e) => e.threshold)).toEqual([0.5]);
    guard.release(r); // back to 40%
    guard.reserve($(0.45)); // 85%: crosses 50 again (not re-fired) and 80
    expect(events.map((e) => e.threshold)).toEqual([0.5, 0.8]);
    guard.reserve($(0.15)); // 100%
    expect(events.map((e) => e.threshold)).toEqual([0.5, 0.8, 1]);
    expect(events[2]).toMatchObject({
      budget: 'day',
      budgetId: 'day',
      spentMicros: $(0.4),
      reservedMicros: $(0.6),
      limitMicros: $(1),
      resetAt: Date.parse('2026-03-08T00:00:00Z'),
      currency: 'usd',
    });
    clock.advanceTo(Date.parse('2026-03-08T01:00:00Z'));
    guard.reserve($(0.9));
    expect(events.map((e) => e.threshold)).toEqual([0.5, 0.8, 1, 0.5, 0.8]);
  });

  it('an extra charge at settle can cross a threshold; custom thresholds; listeners can unsubscribe', () => {
    const guard = createBudgetGuard({
      budgets: { name: 'd', limit: 10, period: 'day', thresholds: [0.9, 0.25] },
      ledger: 'memory',
      clock: new ManualClock(T0),
    });
    const seen: number[] = [];
    const stop = guard.onThreshold((e) => seen.push(e.threshold));
    const r = guard.reserve($(1));
    guard.settle(r, $(3)); // 30%
    expect(seen).toEqual([0.25]);
    stop();
    guard.reserve($(7));
    expect(seen).toEqual([0.25]);
  });

  it("a call settled after its day ended crosses that day's thresholds, not the new day's", () => {
    const { guard, clock, events } = guardWith(
      { budgets: { name: 'day', limit: 10, period: 'day' } },
      Date.parse('2026-03-07T23:59:00Z'),
    );
    const late = guard.reserve($(1));
    clock.advanceTo(Date.parse('2026-03-08T00:01:00Z'));
    guard.settle(late, $(6)); // 60% of March 7
    expect(events.map((e) => [e.threshold, e.resetAt])).toEqual([[0.5, Date.parse('2026-03-08T00:00:00Z')]]);
    guard.reserve($(6)); // 60% of March 8: its own 50% event
    expect(events.map((e) => [e.threshold, e.resetAt])).toEqual([
      [0.5, Date.parse('2026-03-08T00:00:00Z')],
      [0.5, Date.parse('2026-03-09T00:00:00Z')],
    ]);
    guard.reserve($(1)); // 70%: nothing new
    expect(events).toHaveLength(2);
  });

  it('guards sharing a file ledger fire each threshold once per period between them, a restarted one too', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-thresholds-'));
    try {
      const clock = new ManualClock(T0);
      const path = join(dir, 'ledger.sqlite');
      const fired: string[] = [];
      const guard = (name: string) =>
        createBudgetGuard({
          budgets: { name: 'day', limit: 10, period: 'day' },
          ledger: { path },
          clock,
          onThreshold: (e) => fired.push(`${name} ${e.threshold} ${e.resetAt! - T0}`),
        });
      const a = guard('a');
      const b = guard('b');
      a.settle(a.reserve($(6)), $(2)); // 60%, then 20% once settled
      const held = b.reserve($(4)); // 60% again: 50% fired in this period already
      b.reserve($(3)); // 90%: b's spend crossed 80%
      a.close();
      const restarted = guard('a2');
      b.release(held); // 50%
      restarted.reserve($(4)); // 90% again
      expect(fired).toEqual(['a 0.5 43200000', 'b 0.8 43200000']);
      clock.advanceTo(Date.parse('2026-03-08T01:00:00Z'));
      restarted.reserve($(6)); // a new day: its own 50%
      expect(fired).toEqual(['a 0.5 43200000', 'b 0.8 43200000', 'a2 0.5 129600000']);
      b.close();
      restarted.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rolling, guards sharing a ledger: a threshold fires once per window length between them', () => {
    const clock = new ManualClock(T0);
    const ledger = new MemoryLedger();
    const fired: string[] = [];
    const guard = (name: string) =>
      createBudgetGuard({
        budgets: { name: 'roll', limit: 10, period: { rollingMs: 60_000 }, thresholds: [0.5] },
        ledger,
        clock,
        onThreshold: (e) => fired.push(`${name} ${e.at - T0}`),
      });
    const a = guard('a');
    const b = guard('b');
    a.release(a.reserve($(6))); // 60% at 0, then nothing
    clock.advance(30_000);
    b.release(b.reserve($(6))); // 60% again, 30 s later: fired within the window length
    clock.advance(29_999);
    b.release(b.reserve($(6))); // 59.999 s after a fired it
    clock.advance(1);
    b.release(b.reserve($(6))); // a window length after a fired it: b's turn
    a.release(a.reserve($(6))); // and not a's at once
    expect(fired).toEqual(['a 0', 'b 60000']);
  });

  it('a throwing listener does not undo the reservation', async () => {
    const { guard } = guardWith({
      onThreshold: () => {
        throw new Error('listener bug');
      },
    });
    const errors: unknown[] = [];
    const handler = (e: unknown) => errors.push(e);
    process.on('uncaughtException', handler);
    try {
      guard.reserve($(0.6));
      await new Promise((r) => setTimeout(r, 0));
    } finally {
      process.off('uncaughtException', handler);
    }
    expect(guard.spend()[0]!.reservedMicros).toBe($(0.6));
    expect(errors).toHaveLength(1);
  });
});

describe('options are validated at construction', () => {
  const cases: [string, Partial<BudgetGuardOptions> | Record<string, unknown>, RegExp][] = [
    [
      'negative limit',
      { budgets: { limit: -1, period: 'day' } },
      /Expected `budget.limit` to be a finite amount >= 0/,
    ],
    ['NaN limit', { budgets: { limit: Number.NaN, period: 'day' } }, /`budget.limit`.*`NaN`/],
    ['Infinity limit', { budgets: { limit: Infinity, period: 'day' } }, /`budget.limit`.*`Infinity`/],
    [
      'limit with 7 decimals',
      { budgets: { limit: 0.1 + 0.2, period: 'day' } },
      /`budget.limit`.*at most 6 decimals/,
    ],
    ['missing limit', { budgets: { period: 'day' } }, /`budget.limit`/],
    [
      'unknown currency',
      { budgets: { limit: 1, period: 'day', currency: 'doubloons' } },
      /`budget.currency`/,
    ],
    [
      'unknown currency in limit',
      { budgets: { limit: '5 abc', period: 'day' } },
      /`budget.limit`.*unknown `abc`/,
    ],
    [
      'limit in another currency',
      { budgets: { limit: '5 eur', period: 'day', currency: 'usd' } },
      /`budget.limit` to be an amount in USD/,
    ],
    ['bad period', { budgets: { limit: 1, period: 'daily' } }, /`budget.period`/],
    ['bad time zone', { budgets: { limit: 1, period: 'day', timeZone: 'Mars/Base' } }, /`budget.timeZone`/],
    [
      'time zone on a rolling period',
      { budgets: { limit: 1, period: { rollingMs: 1000 }, timeZone: 'UTC' } },
      /`budget.timeZone`/,
    ],
    [
      'bad threshold',
      { budgets: { limit: 1, period: 'day', thresholds: [0.5, 1.5] } },
      /`budget.thresholds\[1\]`/,
    ],
    ['bad name', { budgets: { name: 'a[b]', limit: 1, period: 'day' } }, /`budget.name`/],
    ['unknown budget option', { budgets: { limit: 1, period: 'day', max: 3 } }, /`budget.max`/],
    [
      'duplicate names',
      {
        budgets: [
          { limit: 1, period: 'day' },
          { limit: 2, period: 'day' },
        ],
      },
      /`budgets\[1\].name` to be distinct/,
    ],
    [
      'mixed currencies',
      {
        budgets: [
          { name: 'a', limit: 1, period: 'day' },
          { name: 'b', limit: '1 eur', period: 'month' },
        ],
      },
      /`budgets\[1\].currency`/,
    ],
    ['no budgets', { budgets: [] }, /`budgets` to be at least one budget/],
    ['bad onExceeded', { onExceeded: 'panic' }, /`onExceeded`/],
    ['bad ttl', { reservationTtlMs: 0 }, /`reservationTtlMs`/],
    ['bad ledger', { ledger: 'redis' }, /`ledger`/],
    // Not file options either: each opened ./.tollgate/ledger.sqlite in the working directory.
    [
      'a Map as the ledger',
      { ledger: new Map() },
      /`ledger` to be 'file', 'memory', \{ path \} or a Ledger, got/,
    ],
    ['a Date as the ledger', { ledger: new Date(0) }, /`ledger`/],
    ['null as the ledger', { ledger: null }, /`ledger`.*got `null`/],
    [
      'decimal comma in the limit',
      { budgets: { limit: '0,5 EUR', period: 'day' } },
      /`budget.limit`.*a comma only between digit groups.*"0,5 EUR"/,
    ],
    [
      'misspelt period key',
      { budgets: { limit: 1, period: { calendar: 'day', timezone: 'Europe/Berlin' } } },
      /`budget.period.timezone` to be not set \(known: rollingMs, calendar, timeZone\), got `"Europe\/Berlin"`/,
    ],
    [
      'rolling and calendar period at once',
      { budgets: { limit: 1, period: { rollingMs: 3_600_000, calendar: 'day' } } },
      /`budget.period.calendar` to be unset when `rollingMs` is set, got `"day"`/,
    ],
    [
      'rolling period with its own time zone',
      { budgets: { limit: 1, period: { rollingMs: 3_600_000, timeZone: 'Europe/Berlin' } } },
      /`budget.period.timeZone`.*`"Europe\/Berlin"`/,
    ],
    [
      'a time zone on the budget and on its period',
      {
        budgets: {
          limit: 1,
          period: { calendar: 'day', timeZone: 'Europe/Berlin' },
          timeZone: 'America/New_York',
        },
      },
      /`budget.timeZone` to be unset when `budget.period.timeZone` is set, got `"America\/New_York"`/,
    ],
    ['bad clock', { clock: {} }, /`clock`/],
    ['bad listener', { onThreshold: 'yes' }, /`onThreshold`/],
  ];
  it.each(cases)('%s', (_name, options, message) => {
    const make = () =>
      createBudgetGuard({
        budgets: { limit: 1, period: 'day' },
        ledger: 'memory',
        ...(options as Partial<BudgetGuardOptions>),
      });
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(message);
  });

  it('normalizes a valid spec and freezes it', () => {
    const guard = createBudgetGuard({
      budgets: { limit: '$5', period: { calendar: 'week', timeZone: 'Europe/Berlin' } },
      ledger: new MemoryLedger(),
    });
    expect(guard.budgets[0]).toMatchObject({
      name: 'week Europe/Berlin',
      limitMicros: 5_000_000,
      currency: 'usd',
      thresholds: [0.5, 0.8, 1],
      thresholdMicros: [2_500_000, 4_000_000, 5_000_000],
      perKey: false,
    });
    expect(Object.isFrozen(guard.budgets[0])).toBe(true);
    expect(guard.onExceeded).toBe('refuse');
  });
});

describe('a ledger option that is neither a Ledger nor file-ledger options fails at construction', () => {
  // The default file ledger lives under the working directory: point it at a scratch directory, so
  // a ledger option wrongly taken for file-ledger options shows up as a file there.
  let cwd: string;
  beforeEach(() => {
    cwd = mkdtempSync(join(tmpdir(), 'tollgate-guard-ledger-'));
    vi.spyOn(process, 'cwd').mockReturnValue(cwd);
  });
  afterEach(() => {
    vi.restoreAllMocks();
    rmSync(cwd, { recursive: true, force: true });
  });
  const budgets = { limit: 1, period: 'day' } as const;
  const methods = () => ({
    reserve() {},
    settle() {},
    release() {},
    snapshot() {},
    reset() {},
    close() {},
  });

  it('a misspelt file-ledger option is named, and no default ledger file is opened', () => {
    const make = () => createBudgetGuard({ budgets, ledger: { pth: '/tmp/x.sqlite' } as never });
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(
      /`ledger.pth` to be not set \(known: path, busyTimeoutMs, synchronous\), got `"\/tmp\/x.sqlite"`/,
    );
    expect(existsSync(join(cwd, '.tollgate'))).toBe(false);
  });

  it.each([
    ['close', /`ledger` to be a Ledger \(missing method close\(\)\)/],
    ['release', /missing method release\(\)/],
  ])('a custom ledger without %s() is named, not opened as a file ledger', (method, message) => {
    const ledger: Record<string, unknown> = methods();
    delete ledger[method];
    const make = () => createBudgetGuard({ budgets, ledger: ledger as never });
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(message);
    expect(existsSync(join(cwd, '.tollgate'))).toBe(false);
  });

  it('names every missing method', () => {
    const make = () => createBudgetGuard({ budgets, ledger: { reserve() {}, settle() {} } as never });
    expect(make).toThrow(/missing method release\(\), snapshot\(\), reset\(\), close\(\)/);
  });

  it('a ledger with every method (own or inherited) is used as given', () => {
    const ledger = new MemoryLedger();
    expect(createBudgetGuard({ budgets, ledger }).ledger).toBe(ledger);
  });
});

describe('money past the exact range fails loudly', () => {
  const MAX = Number.MAX_SAFE_INTEGER;

  it('a settle that would take spend past 2^53 micros throws and changes nothing', () => {
    const { guard } = guardWith({ budgets: { name: 'day', limit: { micros: MAX }, period: 'day' } });
    const a = guard.reserve(0);
    const b = guard.reserve(0);
    expect(guard.settle(a, MAX)).toBe(true);
    expect(() => guard.settle(b, MAX)).toThrow(InvalidCostError);
    expect(() => guard.settle(b, MAX)).toThrow(/Settling reservation .* on budget `day`.*overflows/);
    expect(guard.spend()[0]).toMatchObject({ spentMicros: MAX, reservedMicros: 0 });
    // Still held, so it can still be settled within range (or released).
    expect(guard.settle(b, 0)).toBe(true);
    expect(guard.spend()[0]).toMatchObject({ spentMicros: MAX, reservedMicros: 0 });
  });

  it('a rolling budget never ends at a negative or rounded spend', () => {
    const { guard, clock } = guardWith({
      budgets: { name: 'hour', limit: { micros: MAX }, period: { rollingMs: 3_600_000 } },
    });
    const ids = [guard.reserve(0), guard.reserve(0), guard.reserve(0)];
    guard.settle(ids[0]!, MAX);
    expect(() => guard.settle(ids[1]!, MAX)).toThrow(InvalidCostError);
    expect(() => guard.settle(ids[2]!, MAX - 1)).toThrow(InvalidCostError);
    clock.advance(3_600_000);
    expect(guard.spend()[0]).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
  });
});

describe('bad amounts at run time are typed errors and nothing is reserved', () => {
  it.each([[-1], [Number.NaN], [Infinity], [0.5], ['1000']])('estimate %j', (estimate) => {
    const { guard } = guardWith();
    expect(() => guard.reserve(estimate as number)).toThrow(InvalidCostError);
    expect(guard.spend()[0]).toMatchObject({ reservedMicros: 0, spentMicros: 0 });
  });
  it('actual cost', () => {
    const { guard } = guardWith();
    const r = guard.reserve(100);
    expect(() => guard.settle(r, -5)).toThrow(InvalidCostError);
    expect(() => guard.settle(r, Number.NaN)).toThrow(InvalidCostError);
    expect(guard.spend()[0]).toMatchObject({ reservedMicros: 100 });
  });
});
