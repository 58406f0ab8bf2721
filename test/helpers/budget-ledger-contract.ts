import { afterEach, describe, expect, it } from 'vitest';
import type { Ledger, LedgerEntry, ThresholdClaim, ThresholdClaimResult } from '../../src/budget/ledger.js';
import { InvalidOptionError } from '../../src/errors.js';
import type { AsyncLedger } from '../../src/redis/async-ledger.js';

/**
 * The behaviour every ledger must have. Run it against each backend:
 * `ledgerContract('memory', () => new MemoryLedger())`.
 */
export function ledgerContract(name: string, makeLedger: () => Ledger): void {
  describe(`${name} ledger contract`, () => {
    cases(makeLedger, 'sync');
  });
}

/**
 * The same contract, every case the same, for ledgers answering with promises (`AsyncLedger`): the
 * Redis ledger, and the memory ledger through `asyncLedger` as the reference. `skip` is a reason to
 * skip the suite (printed) or false.
 */
export function asyncLedgerContract(
  name: string,
  makeLedger: () => AsyncLedger,
  skip: string | false = false,
): void {
  if (skip) console.log(`[ledger contract] ${name}: skipped (${skip})`);
  describe.skipIf(skip !== false)(`${name} async ledger contract`, () => {
    cases(makeLedger, 'async');
  });
}

type AnyLedger = Ledger | AsyncLedger;

// A bad argument is refused as the ledger answers: thrown by a synchronous ledger, rejected by an
// asynchronous one.
async function expectRefused(
  call: () => unknown,
  expected: string | RegExp | (new (...args: never[]) => Error),
): Promise<void> {
  let outcome: unknown;
  try {
    outcome = call();
  } catch (error) {
    expect(() => {
      throw error;
    }).toThrow(expected as never);
    return;
  }
  await expect(outcome as Promise<unknown>).rejects.toThrow(expected as never);
}

// The cases, written once: every ledger call is awaited (a no-op on a synchronous answer). `mode`
// only decides how a closed ledger must refuse: a synchronous ledger throws, an asynchronous one rejects.
function cases(makeLedger: () => AnyLedger, mode: 'sync' | 'async'): void {
  let open: AnyLedger[] = [];
  const make = () => {
    const ledger = makeLedger();
    open.push(ledger);
    return ledger;
  };
  afterEach(async () => {
    for (const l of open) await l.close();
    open = [];
  });

  const DAY = 86_400_000;
  // A calendar day window [0, DAY) with a $1 limit unless said otherwise.
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
  const reserveOk = async (ledger: AnyLedger, entries: LedgerEntry[], now: number): Promise<string> => {
    const r = await ledger.reserve(entries, now);
    if (!r.ok) throw new Error(`expected admission, got ${JSON.stringify(r)}`);
    return r.reservationId;
  };
  const only = async (ledger: AnyLedger, now: number, id = 'day') =>
    (await ledger.snapshot(now)).find((w) => w.budgetId === id);

  it('admits up to the limit exactly and refuses one micro more', async () => {
    const ledger = make();
    await reserveOk(ledger, [day({ estimateMicros: 999_999 })], 10);
    const refused = await ledger.reserve([day({ estimateMicros: 2 })], 11);
    expect(refused).toMatchObject({ ok: false, budgetId: 'day', reservedMicros: 999_999, spentMicros: 0 });
    await reserveOk(ledger, [day({ estimateMicros: 1 })], 12);
    expect(await only(ledger, 13)).toMatchObject({ reservedMicros: 1_000_000, remainingMicros: 0 });
  });

  it('a refusal carries spent, reserved, limit, estimate, resetAt and retryAt', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [day({ estimateMicros: 600_000 })], 10);
    await ledger.settle(id, 500_000, 11);
    await reserveOk(ledger, [day({ estimateMicros: 300_000 })], 12);
    expect(await ledger.reserve([day({ estimateMicros: 300_000 })], 13)).toEqual({
      ok: false,
      budgetId: 'day',
      spentMicros: 500_000,
      reservedMicros: 300_000,
      limitMicros: 1_000_000,
      estimateMicros: 300_000,
      resetAt: DAY,
      retryAt: DAY,
    });
  });

  it('an estimate above the limit can never fit: retryAt is Infinity', async () => {
    const ledger = make();
    expect(await ledger.reserve([day({ estimateMicros: 1_000_001 })], 10)).toMatchObject({
      ok: false,
      retryAt: Infinity,
    });
  });

  it('reserves on all budgets or on none', async () => {
    const ledger = make();
    const month = day({ budgetId: 'month', windowEnd: 31 * DAY, limitMicros: 150_000 });
    await reserveOk(ledger, [day(), month], 10);
    const refused = await ledger.reserve([day(), month], 11);
    expect(refused).toMatchObject({ ok: false, budgetId: 'month' });
    expect(await only(ledger, 12, 'day')).toMatchObject({ reservedMicros: 100_000 });
    expect(await only(ledger, 12, 'month')).toMatchObject({ reservedMicros: 100_000 });
  });

  it('settle refunds an estimate above the actual cost', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [day({ estimateMicros: 300_000 })], 10);
    expect(await ledger.settle(id, 120_000, 11)).toMatchObject({
      found: true,
      totals: [{ budgetId: 'day', spentMicros: 120_000, reservedMicros: 0, limitMicros: 1_000_000 }],
    });
    expect(await only(ledger, 12)).toMatchObject({
      spentMicros: 120_000,
      reservedMicros: 0,
      remainingMicros: 880_000,
    });
  });

  it('settle charges an actual cost above the estimate, even past the limit', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [day({ estimateMicros: 900_000 })], 10);
    await ledger.settle(id, 1_200_000, 11);
    expect(await only(ledger, 12)).toMatchObject({ spentMicros: 1_200_000, remainingMicros: 0 });
    expect((await ledger.reserve([day({ estimateMicros: 0 })], 13)).ok).toBe(false);
  });

  it('release gives the whole estimate back', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [day({ estimateMicros: 1_000_000 })], 10);
    expect((await ledger.release(id, 11)).found).toBe(true);
    expect(await only(ledger, 12)).toMatchObject({
      spentMicros: 0,
      reservedMicros: 0,
      remainingMicros: 1_000_000,
    });
  });

  it('settling or releasing twice, or an unknown id, changes nothing', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [day()], 10);
    expect((await ledger.settle(id, 50_000, 11)).found).toBe(true);
    expect((await ledger.settle(id, 50_000, 12)).found).toBe(false);
    expect((await ledger.release(id, 12)).found).toBe(false);
    expect(await ledger.settle('nope', 1, 12)).toEqual({ found: false, totals: [] });
    expect(await only(ledger, 13)).toMatchObject({ spentMicros: 50_000, reservedMicros: 0 });
  });

  it('a new calendar window starts from zero; a late settle lands in the window it was reserved in', async () => {
    const ledger = make();
    const late = await reserveOk(ledger, [day({ estimateMicros: 900_000 })], DAY - 1);
    expect((await ledger.reserve([day({ estimateMicros: 200_000 })], DAY - 1)).ok).toBe(false);
    const next = day({ windowStart: DAY, windowEnd: 2 * DAY, estimateMicros: 1_000_000 });
    const id = await reserveOk(ledger, [next], DAY);
    await ledger.settle(late, 950_000, DAY + 5);
    const snap = await ledger.snapshot(DAY + 10);
    expect(snap).toHaveLength(1);
    expect(snap[0]).toMatchObject({
      windowStart: DAY,
      windowEnd: 2 * DAY,
      reservedMicros: 1_000_000,
      spentMicros: 0,
    });
    await ledger.release(id, DAY + 11);
  });

  it('a reservation past expiresAt is reported as spent at its estimate, and still counts', async () => {
    const ledger = make();
    await reserveOk(ledger, [day({ estimateMicros: 700_000, expiresAt: 100 })], 10);
    expect(await only(ledger, 99)).toMatchObject({ spentMicros: 0, reservedMicros: 700_000 });
    expect(await only(ledger, 100)).toMatchObject({
      spentMicros: 700_000,
      reservedMicros: 0,
      remainingMicros: 300_000,
    });
    expect(await ledger.reserve([day({ estimateMicros: 300_001 })], 5_000)).toMatchObject({
      ok: false,
      spentMicros: 700_000,
      reservedMicros: 0,
    });
    expect((await ledger.reserve([day({ estimateMicros: 300_000 })], 5_000)).ok).toBe(true);
  });

  it('a late settle after expiry replaces the estimate with the actual cost', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [day({ estimateMicros: 700_000, expiresAt: 100 })], 10);
    expect((await ledger.settle(id, 200_000, 500)).found).toBe(true);
    expect(await only(ledger, 600)).toMatchObject({ spentMicros: 200_000, reservedMicros: 0 });
  });

  it('a reservation of 0 micros settles and releases like any other', async () => {
    const ledger = make();
    const settled = await reserveOk(ledger, [day({ estimateMicros: 0 })], 10);
    expect(await ledger.settle(settled, 30_000, 11)).toMatchObject({ found: true });
    const released = await reserveOk(
      ledger,
      [day({ estimateMicros: 0 }), rolling(12, { estimateMicros: 0 })],
      12,
    );
    expect(await ledger.release(released, 13)).toMatchObject({ found: true });
    expect(await only(ledger, 14)).toMatchObject({ spentMicros: 30_000, reservedMicros: 0 });
  });

  // Found by review: a rolling hold dated rollingMs or more ago left the window while its call could
  // still be in flight (a long stream, a call queued behind a pause), and settling it then charged
  // nothing. A rolling hold now counts until it is settled or released, or for rollingMs after it
  // expired; a settle of a hold older than rollingMs is dated at the settle.
  it('rolling: a hold older than rollingMs still counts; a refusal retries when its spend could leave', async () => {
    const ledger = make();
    await reserveOk(ledger, [rolling(0, { estimateMicros: 500_000 })], 0);
    const refused = await ledger.reserve([rolling(90_000, { estimateMicros: 500_001 })], 90_000);
    // Settled now it would be dated now: it could leave at 90_000 + 60_000, not before.
    expect(refused).toEqual({
      ok: false,
      budgetId: 'roll',
      spentMicros: 0,
      reservedMicros: 500_000,
      limitMicros: 1_000_000,
      estimateMicros: 500_001,
      resetAt: 150_000,
      retryAt: 150_000,
    });
    expect(await only(ledger, 90_000, 'roll')).toMatchObject({
      spentMicros: 0,
      reservedMicros: 500_000,
      remainingMicros: 500_000,
      resetAt: 150_000,
    });
    // A younger entry leaves first (at 95_000 + 60_000): it is what a smaller estimate waits for.
    const young = await reserveOk(ledger, [rolling(95_000, { estimateMicros: 300_000 })], 95_000);
    await ledger.settle(young, 300_000, 95_001);
    expect(await ledger.reserve([rolling(100_000, { estimateMicros: 500_000 })], 100_000)).toMatchObject({
      ok: false,
      spentMicros: 300_000,
      reservedMicros: 500_000,
      resetAt: 155_000,
      retryAt: 155_000,
    });
    expect((await ledger.reserve([rolling(100_000, { estimateMicros: 200_000 })], 100_000)).ok).toBe(true);
  });

  it('rolling: settling a hold older than rollingMs charges the actual cost, dated at the settle', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [rolling(0, { estimateMicros: 500_000 })], 0);
    expect(await ledger.settle(id, 400_000, 90_000)).toEqual({
      found: true,
      totals: [{ budgetId: 'roll', spentMicros: 400_000, reservedMicros: 0, limitMicros: 1_000_000 }],
    });
    expect(await only(ledger, 149_999, 'roll')).toMatchObject({
      spentMicros: 400_000,
      reservedMicros: 0,
      resetAt: 150_000,
    });
    expect(await ledger.reserve([rolling(149_999, { estimateMicros: 600_001 })], 149_999)).toMatchObject({
      ok: false,
      spentMicros: 400_000,
      retryAt: 150_000,
    });
    expect(await only(ledger, 150_000, 'roll')).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    expect((await ledger.reserve([rolling(150_000, { estimateMicros: 1_000_000 })], 150_000)).ok).toBe(true);
  });

  it('rolling: a settle after a later reserve pruned the window still finds the hold and charges it', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [rolling(0)], 0);
    // Dated 0: at 60_000 its date has left the window, and this reserve prunes what left.
    await reserveOk(ledger, [rolling(60_000, { estimateMicros: 1 })], 60_000);
    expect(await only(ledger, 60_000, 'roll')).toMatchObject({ spentMicros: 0, reservedMicros: 100_001 });
    expect(await ledger.settle(id, 500_000, 60_001)).toMatchObject({
      found: true,
      totals: [{ budgetId: 'roll', spentMicros: 500_000, reservedMicros: 1 }],
    });
    expect(await only(ledger, 120_000, 'roll')).toMatchObject({ spentMicros: 500_000, reservedMicros: 1 });
    expect(await only(ledger, 120_001, 'roll')).toMatchObject({ spentMicros: 0, reservedMicros: 1 });
  });

  it('rolling: releasing a hold older than rollingMs finds it, charges nothing and frees the room', async () => {
    const ledger = make();
    const id = await reserveOk(ledger, [rolling(0, { estimateMicros: 600_000 })], 0);
    await reserveOk(ledger, [rolling(60_000, { estimateMicros: 1 })], 60_000);
    expect((await ledger.reserve([rolling(90_000, { estimateMicros: 500_000 })], 90_000)).ok).toBe(false);
    expect(await ledger.release(id, 90_000)).toEqual({
      found: true,
      totals: [{ budgetId: 'roll', spentMicros: 0, reservedMicros: 1, limitMicros: 1_000_000 }],
    });
    expect((await ledger.reserve([rolling(90_000, { estimateMicros: 999_999 })], 90_000)).ok).toBe(true);
  });

  it('rolling: an expired hold counts at its estimate for rollingMs after it expired, then leaves', async () => {
    const ledger = make();
    // Expired at 30_000, long after it was made: counted until 30_000 + 60_000.
    await reserveOk(ledger, [rolling(0, { estimateMicros: 700_000, expiresAt: 30_000 })], 0);
    // Expired at once (its process died): counted until 10 + 60_000, not only until 60_000.
    await reserveOk(ledger, [rolling(0, { budgetId: 'died', expiresAt: 10 })], 0);
    expect(await only(ledger, 60_009, 'died')).toMatchObject({ spentMicros: 100_000, resetAt: 60_010 });
    expect(await only(ledger, 60_010, 'died')).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    expect(await only(ledger, 61_000, 'roll')).toMatchObject({
      spentMicros: 700_000,
      reservedMicros: 0,
      resetAt: 90_000,
    });
    expect(await ledger.reserve([rolling(89_999, { estimateMicros: 300_001 })], 89_999)).toMatchObject({
      ok: false,
      spentMicros: 700_000,
      reservedMicros: 0,
      resetAt: 90_000,
      retryAt: 90_000,
    });
    expect(await only(ledger, 90_000, 'roll')).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    expect((await ledger.reserve([rolling(90_000, { estimateMicros: 1_000_000 })], 90_000)).ok).toBe(true);
  });

  it('rolling: an expired hold older than rollingMs settles at its actual cost, dated at the settle; after it left, a settle finds nothing', async () => {
    const ledger = make();
    const late = await reserveOk(ledger, [rolling(0, { estimateMicros: 700_000, expiresAt: 30_000 })], 0);
    const gone = await reserveOk(
      ledger,
      [rolling(0, { budgetId: 'gone', estimateMicros: 700_000, expiresAt: 30_000 })],
      0,
    );
    expect(await ledger.settle(late, 200_000, 80_000)).toMatchObject({
      found: true,
      totals: [{ budgetId: 'roll', spentMicros: 200_000, reservedMicros: 0 }],
    });
    // Counted at its estimate from 0 to 90_000, then gone, as a calendar window two periods back.
    expect(await ledger.settle(gone, 200_000, 90_000)).toEqual({ found: false, totals: [] });
    expect(await only(ledger, 90_001, 'gone')).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    expect(await only(ledger, 139_999, 'roll')).toMatchObject({ spentMicros: 200_000, resetAt: 140_000 });
    expect(await only(ledger, 140_000, 'roll')).toMatchObject({ spentMicros: 0 });
  });

  it.each(['settle', 'release'] as const)(
    '%s of a reservation in a calendar window two periods back finds nothing (the window was dropped)',
    async (op) => {
      const ledger = make();
      const id = await reserveOk(ledger, [day()], 10);
      await reserveOk(ledger, [day({ windowStart: DAY, windowEnd: 2 * DAY })], DAY + 10);
      await reserveOk(ledger, [day({ windowStart: 2 * DAY, windowEnd: 3 * DAY })], 2 * DAY + 10);
      const at = 2 * DAY + 11;
      const result = op === 'settle' ? await ledger.settle(id, 500_000, at) : await ledger.release(id, at);
      expect(result).toEqual({ found: false, totals: [] });
      expect(await only(ledger, 2 * DAY + 12)).toMatchObject({ spentMicros: 0, reservedMicros: 100_000 });
    },
  );

  it('a reservation is found while one of its budgets still holds it', async () => {
    const ledger = make();
    const month = day({ budgetId: 'month', windowEnd: 31 * DAY });
    const id = await reserveOk(ledger, [day(), month], 10);
    await reserveOk(ledger, [day({ windowStart: DAY, windowEnd: 2 * DAY })], DAY + 10);
    await reserveOk(ledger, [day({ windowStart: 2 * DAY, windowEnd: 3 * DAY })], 2 * DAY + 10);
    expect(await ledger.settle(id, 70_000, 2 * DAY + 11)).toMatchObject({
      found: true,
      totals: [{ budgetId: 'month', spentMicros: 70_000, reservedMicros: 0 }],
    });
  });

  it('a settle that would take spend past 2^53 - 1 micros throws InvalidCostError and changes no budget', async () => {
    const ledger = make();
    const MAX = Number.MAX_SAFE_INTEGER;
    const big = day({ budgetId: 'big', limitMicros: MAX, estimateMicros: 0 });
    const small = day({ budgetId: 'small', limitMicros: MAX, estimateMicros: 0 });
    await ledger.settle(await reserveOk(ledger, [big], 10), MAX - 5, 11);
    const both = await reserveOk(ledger, [small, big], 12);
    await expect(Promise.resolve().then(() => ledger.settle(both, 6, 13))).rejects.toMatchObject({
      code: 'ERR_INVALID_COST',
    });
    const spent = async () =>
      (await ledger.snapshot(14)).map((w) => [w.budgetId, w.spentMicros, w.reservedMicros]);
    expect(await spent()).toEqual([
      ['big', MAX - 5, 0],
      ['small', 0, 0],
    ]);
    expect((await ledger.settle(both, 5, 15)).found).toBe(true);
    expect((await ledger.snapshot(16)).map((w) => w.spentMicros)).toEqual([MAX, 5]);
  });

  // Found by review (session 16): the Redis ledger's settle script dropped the hold, then failed to
  // charge 1.5 micros (the hold lost, nothing charged), and a reserve at now NaN or Infinity wrote
  // holds under keys that never expired. Every ledger now refuses such input before writing.
  it('bad amounts and times are refused with typed errors, and the reservation stays as it was', async () => {
    const ledger = make();
    const refuses = (call: () => unknown, code: string) =>
      expect(Promise.resolve().then(call)).rejects.toMatchObject({ code });
    const id = await reserveOk(ledger, [day({ estimateMicros: 1_000 })], 10);
    for (const bad of [1.5, Number.NaN, -1, Number.POSITIVE_INFINITY, 'abc', '700', undefined])
      await refuses(() => ledger.settle(id, bad as never, 11), 'ERR_INVALID_COST');
    for (const now of [Number.NaN, Number.POSITIVE_INFINITY, '5'])
      await refuses(() => ledger.settle(id, 1_000, now as never), 'ERR_INVALID_OPTION');
    for (const now of [Number.NaN, Number.NEGATIVE_INFINITY, 1e20 * 1e300, '5']) {
      await refuses(() => ledger.reserve([day()], now as never), 'ERR_INVALID_OPTION');
      await refuses(() => ledger.release(id, now as never), 'ERR_INVALID_OPTION');
      await refuses(() => ledger.snapshot(now as never), 'ERR_INVALID_OPTION');
    }
    for (const over of [{ estimateMicros: 1.5 }, { limitMicros: Number.NaN }, { estimateMicros: -1 }])
      await refuses(() => ledger.reserve([day(over)], 12), 'ERR_INVALID_COST');
    for (const over of [{ expiresAt: Number.NaN }, { windowEnd: Number.POSITIVE_INFINITY }, { budgetId: '' }])
      await refuses(() => ledger.reserve([day(over as Partial<LedgerEntry>)], 12), 'ERR_INVALID_OPTION');
    await refuses(() => ledger.reserve([rolling(12, { rollingMs: 0.5 })], 12), 'ERR_INVALID_OPTION');
    // Nothing was written: the one hold is still there, and settles at its actual cost.
    expect(await only(ledger, 13)).toMatchObject({ spentMicros: 0, reservedMicros: 1_000 });
    expect((await ledger.settle(id, 700, 14)).found).toBe(true);
    expect(await only(ledger, 15)).toMatchObject({ spentMicros: 700, reservedMicros: 0 });
    expect((await ledger.snapshot(16)).map((w) => w.budgetId)).toEqual(['day']);
  });

  it('rolling: spend counts for rollingMs after it was reserved, then leaves the window', async () => {
    const ledger = make();
    const a = await reserveOk(ledger, [rolling(1_000, { estimateMicros: 600_000 })], 1_000);
    await ledger.settle(a, 600_000, 1_500);
    await reserveOk(ledger, [rolling(30_000, { estimateMicros: 400_000 })], 30_000);
    // Full until the first spend leaves at 1_000 + 60_000.
    const refused = await ledger.reserve([rolling(60_999, { estimateMicros: 500_000 })], 60_999);
    expect(refused).toMatchObject({ ok: false, resetAt: 61_000, retryAt: 61_000 });
    expect((await ledger.reserve([rolling(61_000, { estimateMicros: 500_000 })], 61_000)).ok).toBe(true);
    expect(await only(ledger, 61_000, 'roll')).toMatchObject({ spentMicros: 0, reservedMicros: 900_000 });
  });

  it('rolling: retryAt waits for enough spend to leave, holds in flight included', async () => {
    const ledger = make();
    const a = await reserveOk(ledger, [rolling(0, { estimateMicros: 200_000 })], 0);
    await ledger.settle(a, 200_000, 1);
    await reserveOk(ledger, [rolling(10_000, { estimateMicros: 300_000 })], 10_000);
    await reserveOk(ledger, [rolling(20_000, { estimateMicros: 500_000 })], 20_000);
    // Needs 500_000 free: 0's 200k and 10_000's 300k must leave -> at 70_000.
    expect(await ledger.reserve([rolling(30_000, { estimateMicros: 500_000 })], 30_000)).toMatchObject({
      ok: false,
      resetAt: 60_000,
      retryAt: 70_000,
    });
  });

  it('rolling, 300 entries: settled spend and holds (some expired) count in order of time; retryAt, resetAt and pruning read only what leaves', async () => {
    const ledger = make();
    const limit = 300_000;
    // One entry every 100 ms: even ones settled at 1_000, odd ones held, those before 10_000
    // expiring at once (their process died), the later ones held until long after.
    for (let i = 0; i < 300; i++) {
      const at = i * 100;
      const expiresAt = i % 2 === 1 && at < 10_000 ? at + 10 : at + 1_000_000;
      const id = await reserveOk(
        ledger,
        [rolling(at, { limitMicros: limit, estimateMicros: 1_000, expiresAt })],
        at,
      );
      if (i % 2 === 0) await ledger.settle(id, 1_000, at + 1);
    }
    // Full. 150_500 free needs the 151 oldest entries to leave: entry 150, at 15_000, leaves at 75_000.
    const now = 29_950;
    const refused = await ledger.reserve(
      [rolling(now, { limitMicros: limit, estimateMicros: 150_500 })],
      now,
    );
    expect(refused).toEqual({
      ok: false,
      budgetId: 'roll',
      // 150 settled, plus the 50 expired holds reported as spent.
      spentMicros: 200_000,
      reservedMicros: 100_000,
      limitMicros: limit,
      estimateMicros: 150_500,
      resetAt: 60_000,
      retryAt: 75_000,
    });
    // At 70_000 every entry up to 10_000 has left (101 of them, the expired holds with them): 99
    // settled and 100 held remain, the oldest at 10_100.
    expect(await only(ledger, 70_000, 'roll')).toMatchObject({
      spentMicros: 99_000,
      reservedMicros: 100_000,
      resetAt: 70_100,
    });
    expect(
      (await ledger.reserve([rolling(70_000, { limitMicros: limit, estimateMicros: 100_000 })], 70_000)).ok,
    ).toBe(true);
  });

  it('rolling: the snapshot reports the sliding window and when its oldest spend leaves', async () => {
    const ledger = make();
    const a = await reserveOk(ledger, [rolling(5_000, { estimateMicros: 100_000 })], 5_000);
    await ledger.settle(a, 80_000, 6_000);
    expect(await only(ledger, 10_000, 'roll')).toMatchObject({
      windowStart: -50_000,
      windowEnd: 10_000,
      rollingMs: 60_000,
      spentMicros: 80_000,
      resetAt: 65_000,
    });
    expect(await only(ledger, 65_000, 'roll')).toMatchObject({ spentMicros: 0, resetAt: 65_000 });
  });

  it('snapshot lists each budget current window, ordered by id', async () => {
    const ledger = make();
    await reserveOk(ledger, [day({ budgetId: 'b' }), day({ budgetId: 'a', limitMicros: 500_000 })], 10);
    expect(await ledger.snapshot(20)).toEqual([
      {
        budgetId: 'a',
        windowStart: 0,
        windowEnd: DAY,
        rollingMs: undefined,
        spentMicros: 0,
        reservedMicros: 100_000,
        limitMicros: 500_000,
        remainingMicros: 400_000,
        resetAt: DAY,
      },
      expect.objectContaining({ budgetId: 'b', remainingMicros: 900_000 }),
    ]);
    expect(await ledger.snapshot(DAY)).toEqual([]);
  });

  it('the latest limit applies', async () => {
    const ledger = make();
    await reserveOk(ledger, [day({ estimateMicros: 500_000 })], 10);
    expect((await ledger.reserve([day({ estimateMicros: 500_000, limitMicros: 900_000 })], 11)).ok).toBe(
      false,
    );
    expect(await only(ledger, 12)).toMatchObject({ limitMicros: 900_000 });
  });

  it('reset forgets one budget with its per-key ids, or everything', async () => {
    const ledger = make();
    const id = await reserveOk(
      ledger,
      [
        day({ budgetId: 'd' }),
        day({ budgetId: 'd[k1]' }),
        day({ budgetId: 'dx' }),
        day({ budgetId: 'other' }),
      ],
      10,
    );
    await ledger.reset('d');
    expect((await ledger.snapshot(11)).map((w) => w.budgetId)).toEqual(['dx', 'other']);
    await ledger.settle(id, 100_000, 12);
    expect((await ledger.snapshot(13)).map((w) => [w.budgetId, w.spentMicros])).toEqual([
      ['dx', 100_000],
      ['other', 100_000],
    ]);
    await ledger.reset();
    expect(await ledger.snapshot(14)).toEqual([]);
  });

  it('zero-cost calls are admitted even when the budget is exactly full', async () => {
    const ledger = make();
    await reserveOk(ledger, [day({ estimateMicros: 1_000_000 })], 10);
    expect((await ledger.reserve([day({ estimateMicros: 0 })], 11)).ok).toBe(true);
  });

  it('a closed ledger refuses to work', async () => {
    const ledger = make();
    await ledger.close();
    if (mode === 'sync') expect(() => ledger.reserve([day()], 1)).toThrow(/closed/);
    else await expect(ledger.reserve([day()], 1)).rejects.toThrow(/closed/);
  });

  // Threshold claims (`Ledger.claimThreshold`, optional, but every ledger of tollgate has it): awaited,
  // a no-op on a synchronous answer.
  describe('threshold claims', () => {
    type Claimer = {
      claimThreshold(
        claim: ThresholdClaim,
        now: number,
      ): ThresholdClaimResult | Promise<ThresholdClaimResult>;
    };
    const claimer = () => {
      const ledger = make();
      expect(typeof ledger.claimThreshold).toBe('function');
      return ledger as AnyLedger & Claimer;
    };
    const claimOf = (over: Partial<ThresholdClaim> = {}): ThresholdClaim => ({
      budgetId: 'day',
      windowStart: 0,
      windowEnd: DAY,
      threshold: 0.5,
      ...over,
    });

    it('a threshold is claimed once per calendar window; another threshold, or the next window, has its own', async () => {
      const ledger = claimer();
      await reserveOk(ledger, [day()], 10);
      expect(await ledger.claimThreshold(claimOf(), 20)).toEqual({ claimed: true, firedAt: 20 });
      expect(await ledger.claimThreshold(claimOf(), 30)).toEqual({ claimed: false, firedAt: 20 });
      expect(await ledger.claimThreshold(claimOf({ threshold: 0.8 }), 40)).toEqual({
        claimed: true,
        firedAt: 40,
      });
      await reserveOk(ledger, [day({ windowStart: DAY, windowEnd: 2 * DAY })], DAY + 10);
      const next = claimOf({ windowStart: DAY, windowEnd: 2 * DAY });
      expect(await ledger.claimThreshold(next, DAY + 20)).toEqual({ claimed: true, firedAt: DAY + 20 });
      // The previous window keeps its claims (a late settle may cross its thresholds).
      expect(await ledger.claimThreshold(claimOf(), DAY + 30)).toEqual({ claimed: false, firedAt: 20 });
      expect(await ledger.claimThreshold(claimOf({ threshold: 1 }), DAY + 40)).toEqual({
        claimed: true,
        firedAt: DAY + 40,
      });
    });

    it('rolling: a threshold is claimed again a window length after it was, not before', async () => {
      const ledger = claimer();
      const t = 1_000_000;
      await reserveOk(ledger, [rolling(t)], t);
      const claim = {
        budgetId: 'roll',
        windowStart: t - 60_000,
        windowEnd: t,
        rollingMs: 60_000,
        threshold: 0.5,
      };
      expect(await ledger.claimThreshold(claim, t)).toEqual({ claimed: true, firedAt: t });
      // The window slides: the claim finds it whatever bounds the caller saw.
      const later = { ...claim, windowStart: t, windowEnd: t + 60_000 };
      expect(await ledger.claimThreshold(later, t + 59_999)).toEqual({ claimed: false, firedAt: t });
      expect(await ledger.claimThreshold(later, t + 60_000)).toEqual({ claimed: true, firedAt: t + 60_000 });
      expect(await ledger.claimThreshold(later, t + 60_001)).toEqual({ claimed: false, firedAt: t + 60_000 });
    });

    it('a window not in the ledger claims nothing; claims go with their window and with reset', async () => {
      const ledger = claimer();
      expect(await ledger.claimThreshold(claimOf(), 10)).toEqual({ claimed: false, firedAt: undefined });
      await reserveOk(ledger, [day()], 10);
      expect((await ledger.claimThreshold(claimOf(), 11)).claimed).toBe(true);
      await ledger.reset('day');
      expect(await ledger.claimThreshold(claimOf(), 12)).toEqual({ claimed: false, firedAt: undefined });
      await reserveOk(ledger, [day()], 13);
      expect(await ledger.claimThreshold(claimOf(), 14)).toEqual({ claimed: true, firedAt: 14 });
      // Two windows later the first is dropped, its claims with it.
      await reserveOk(ledger, [day({ windowStart: 2 * DAY, windowEnd: 3 * DAY })], 2 * DAY);
      expect(await ledger.claimThreshold(claimOf(), 2 * DAY + 1)).toEqual({
        claimed: false,
        firedAt: undefined,
      });
    });

    it('a bad claim is refused naming the field, and records nothing', async () => {
      const ledger = claimer();
      await reserveOk(ledger, [day()], 10);
      for (const [over, field] of [
        [{ budgetId: '' }, 'claim.budgetId'],
        [{ windowEnd: Number.NaN }, 'claim.windowEnd'],
        [{ rollingMs: 0.5 }, 'claim.rollingMs'],
        [{ threshold: 0 }, 'claim.threshold'],
        [{ threshold: 1.5 }, 'claim.threshold'],
      ] as const) {
        await expectRefused(() => ledger.claimThreshold(claimOf(over), 11), InvalidOptionError);
        await expectRefused(() => ledger.claimThreshold(claimOf(over), 11), `\`${field}\``);
      }
      await expectRefused(() => ledger.claimThreshold(claimOf(), Number.NaN), /`now`/);
      expect(await ledger.claimThreshold(claimOf(), 12)).toEqual({ claimed: true, firedAt: 12 });
    });
  });
}
