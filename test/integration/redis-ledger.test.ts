import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { BudgetExceededError } from '../../src/budget/errors.js';
import { MemoryLedger } from '../../src/budget/memory-ledger.js';
import { AsyncBudgetGuard } from '../../src/redis/async-budget-guard.js';
import { asyncLedger } from '../../src/redis/async-ledger.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { RedisLedger } from '../../src/redis/redis-ledger.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';
import { asyncLedgerContract } from '../helpers/budget-ledger-contract.js';
import { keysOfTag, REDIS_URL, redisSkipReason } from '../helpers/redis-server.js';

const skip = await redisSkipReason();
const prefix = `tollgate-ledger-${process.pid}-${Date.now()}`;
let n = 0;

afterAll(async () => {
  if (skip) return;
  const admin = new Redis(REDIS_URL);
  const keys = await keysOfTag(admin, `{${prefix}-*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

// The reference: the memory ledger, whose rules the Redis scripts implement.
asyncLedgerContract('memory', () => asyncLedger(new MemoryLedger()));
// Each case gets its own ledger (its own hash tag) on the shared server.
asyncLedgerContract(
  'redis',
  () => new RedisLedger({ redis: REDIS_URL, keyPrefix: `${prefix}-${n++}` }),
  skip,
);

describe.skipIf(skip !== false)('Redis ledger keys', () => {
  const now = Date.now();
  const DAY = 86_400_000;
  const ws = Math.floor(now / DAY) * DAY;
  /** An entry of today's window for budget `budgetId`. */
  const entry = (budgetId: string, estimateMicros: number, limitMicros: number) => ({
    budgetId,
    windowStart: ws,
    windowEnd: ws + DAY,
    limitMicros,
    estimateMicros,
    expiresAt: now + 60_000,
  });
  const admin = skip ? undefined : new Redis(REDIS_URL);
  const ledgers: RedisLedger[] = [];
  afterAll(async () => {
    for (const ledger of ledgers) await ledger.close();
    admin?.disconnect();
  });
  /** An entry of budget 'roll': 10,000 micros per rolling minute, at `at`. */
  const rolling = (at: number, estimateMicros: number, expiresAt = at + 600_000) => ({
    budgetId: 'roll',
    windowStart: at - 60_000,
    windowEnd: at,
    rollingMs: 60_000,
    limitMicros: 10_000,
    estimateMicros,
    expiresAt,
  });
  /** A ledger of its own (its own hash tag), closed after the suite. */
  const ledgerAt = (keyPrefix: string) => {
    const ledger = new RedisLedger({ redis: REDIS_URL, keyPrefix });
    ledgers.push(ledger);
    return ledger;
  };

  it('a refused reserve leaves no key without a TTL (one budget, and the second of two refused)', async () => {
    const keyPrefix = `${prefix}-ttl`;
    const ledger = ledgerAt(keyPrefix);
    expect((await ledger.reserve([entry('alone', 500, 100)], now)).ok).toBe(false);
    expect((await ledger.reserve([entry('first', 50, 100), entry('second', 500, 100)], now)).ok).toBe(false);
    const keys = await keysOfTag(admin!, `{${keyPrefix}:*`);
    expect(keys.length).toBeGreaterThan(0);
    // PTTL -1: a key that never expires; every key of a refused reserve must.
    const ttls = await Promise.all(keys.map(async (key) => [key, await admin!.pttl(key)] as const));
    expect(ttls.filter(([, ttl]) => ttl < 0)).toEqual([]);
  });

  it('holds written before the hold indexes existed are indexed when next read: expired ones count, then leave', async () => {
    const keyPrefix = `${prefix}-legacy`;
    const ledger = ledgerAt(keyPrefix);
    const t = now;
    for (let i = 0; i < 4; i++) {
      const r = await ledger.reserve(
        [rolling(t + i * 1000, 1_000, t + i * 1000 + (i < 2 ? 10 : 600_000))],
        t + i * 1000,
      );
      expect(r.ok).toBe(true);
    }
    // An older tollgate wrote the holds with no index.
    const indexes = (await keysOfTag(admin!, `{${keyPrefix}:*`)).filter((key) => /:h[ea]:/.test(key));
    expect(indexes.length).toBe(2);
    await admin!.del(...indexes);
    // The two holds whose process died count as spent.
    const refused = await ledger.reserve([rolling(t + 5000, 9_000, t + 600_000)], t + 5000);
    expect(refused).toMatchObject({ ok: false, spentMicros: 2_000, reservedMicros: 2_000 });
    // The rebuilt indexes expire with the holds (a refusal sets no other TTL).
    for (const key of indexes) expect(await admin!.pttl(key), key).toBeGreaterThan(0);
    // A minute after the first two expired, they have left the window; the other two, in flight,
    // still count.
    const later = t + 61_010;
    const windows = await ledger.snapshot(later);
    expect(windows.find((w) => w.budgetId === 'roll')).toMatchObject({
      spentMicros: 0,
      reservedMicros: 2_000,
    });
    expect((await ledger.reserve([rolling(later, 8_000, later + 600_000)], later)).ok).toBe(true);
  });

  it('an older tollgate writing beside this one (holds settled but left in the indexes, holds never indexed): no overspend, no phantom spend', async () => {
    // What an older version's scripts leave, made here from this version's writes: its settle
    // removes the hold but not its index members, its reserve adds a hold with no index member.
    const keyPrefix = `${prefix}-mixed`;
    const ledger = ledgerAt(keyPrefix);
    const indexKeys = async () => {
      const keys = await keysOfTag(admin!, `{${keyPrefix}:*`);
      return { he: keys.filter((k) => k.includes(':he:')), ha: keys.filter((k) => k.includes(':ha:')) };
    };
    const oldSettle = async (id: string, micros: number, actual: number, at: number) => {
      const { he, ha } = await indexKeys();
      const member = `${id}:${micros}`;
      const keys = [...he, ...ha];
      const scores = await Promise.all(keys.map((k) => admin!.zscore(k, member)));
      expect(scores.filter((s) => s !== null).length).toBeGreaterThan(0);
      expect((await ledger.settle(id, actual, at)).found).toBe(true);
      await Promise.all(keys.map((k, i) => (scores[i] === null ? 0 : admin!.zadd(k, scores[i]!, member))));
    };
    const oldReserve = async (entries: Parameters<RedisLedger['reserve']>[0], at: number) => {
      const r = await ledger.reserve(entries, at);
      if (!r.ok) throw new Error('expected the reserve to be admitted');
      const { he, ha } = await indexKeys();
      await Promise.all(
        [...he, ...ha].map((k) => admin!.zrem(k, `${r.reservationId}:${entries[0]!.estimateMicros}`)),
      );
    };
    const t = now;
    const a = await ledger.reserve([rolling(t, 3_000)], t);
    if (!a.ok) throw new Error('expected A to be admitted');
    // Its process died: it expires at once.
    await oldReserve([rolling(t + 1_000, 1_000, t + 1_010)], t + 1_000);
    await oldSettle(a.reservationId, 3_000, 0, t + 2_000);
    // A minute after B expired, both have left the window: 10,000 fits, and then nothing more.
    const later = t + 61_010;
    const admitted = [];
    for (const micros of [10_000, 2_000, 1_000])
      admitted.push((await ledger.reserve([rolling(later, micros)], later)).ok);
    expect(admitted).toEqual([true, false, false]);
    expect((await ledger.snapshot(later)).find((w) => w.budgetId === 'roll')).toMatchObject({
      spentMicros: 0,
      reservedMicros: 10_000,
    });

    // A calendar hold settled by the older version and past its expiry is not counted again.
    const b = await ledger.reserve([{ ...entry('cal', 500, 1_000), expiresAt: t + 10 }], t);
    if (!b.ok) throw new Error('expected B to be admitted');
    await oldSettle(b.reservationId, 500, 200, t + 5);
    expect((await ledger.snapshot(t + 20)).find((w) => w.budgetId === 'cal')).toMatchObject({
      spentMicros: 200,
      reservedMicros: 0,
    });
  });

  it('ledgers sharing a prefix (other processes, or this one restarted) never choose the same id', async () => {
    const keyPrefix = `${prefix}-ids`;
    // Ids are chosen by each ledger: a random prefix and a counter, with no counter in Redis.
    const ledger = ledgerAt(keyPrefix);
    const restarted = ledgerAt(keyPrefix);
    const a = await ledger.reserve([entry('b', 100, 1000)], now);
    const b = await restarted.reserve([entry('b', 300, 1000)], now);
    if (!a.ok || !b.ok) throw new Error('expected two reservations');
    expect(b.reservationId).not.toBe(a.reservationId);
    // Settling the older one settles it, not the newer one.
    expect((await restarted.settle(a.reservationId, 50, now)).found).toBe(true);
    const [window] = await ledger.snapshot(now);
    expect(window).toMatchObject({ spentMicros: 50, reservedMicros: 300 });
    // No key of the ledger holds a counter (nothing for an idle hour to expire and restart).
    expect(await keysOfTag(admin!, `{${keyPrefix}:*:seq`)).toEqual([]);
  });
});

describe.skipIf(skip !== false)('shared gates with a Redis budget', () => {
  it('two gates, 300 concurrent calls at random prices against $0.05: admitted estimates never pass the cap', async () => {
    const ledger = new RedisLedger({ redis: REDIS_URL, keyPrefix: `${prefix}-gates` });
    const budget = () =>
      new AsyncBudgetGuard({ budgets: { name: 'day', limit: '$0.05', period: 'day' }, ledger });
    const store = new MemoryStore();
    const gates = [0, 1].map(() => createSharedGate({ store, budget: budget() }));
    let charged = 0;
    let refused = 0;
    await Promise.all(
      Array.from({ length: 300 }, async (_, i) => {
        const price = 100 + Math.floor(Math.random() * 400);
        try {
          await gates[i % 2]!.schedule(
            async () => {
              charged += price;
              await new Promise((r) => setTimeout(r, Math.random() * 3));
            },
            { priceMicros: price },
          );
        } catch (error) {
          expect(error).toBeInstanceOf(BudgetExceededError);
          refused++;
        }
      }),
    );
    const [spend] = await budget().spend();
    expect(charged).toBeLessThanOrEqual(50_000);
    expect(refused).toBeGreaterThan(0);
    expect(spend).toMatchObject({ spentMicros: charged, reservedMicros: 0 });
    await ledger.close();
  });
});

describe.skipIf(skip !== false)('threshold events through a Redis ledger', () => {
  it('fire once per threshold and period across processes sharing the ledger, a restarted one too', async () => {
    const keyPrefix = `${prefix}-thresholds`;
    const ledgers: RedisLedger[] = [];
    const events: [string, string | undefined, number][] = [];
    // Each guard on its own connection, as separate processes would be.
    const guard = (name: string) => {
      const ledger = new RedisLedger({ redis: REDIS_URL, keyPrefix });
      ledgers.push(ledger);
      return new AsyncBudgetGuard({
        budgets: [
          { name: 'day', limit: 2, period: 'day', thresholds: [0.5, 0.8] },
          { name: 'per-key', limit: 1, period: 'day', perKey: true, thresholds: [0.5] },
        ],
        ledger,
        onThreshold: (e) => events.push([name, e.key, e.threshold]),
      });
    };
    // A claim is sent on its guard's connection when the reserve that crossed answers: a command
    // sent after it on each connection is answered after it (Redis and ioredis keep their order).
    const claimsAnswered = async () => {
      for (const ledger of ledgers) await ledger.snapshot(Date.now());
      await new Promise((resolve) => setImmediate(resolve));
    };
    try {
      const a = guard('a');
      const b = guard('b');
      await a.reserve(600_000, 'k1');
      const second = await b.reserve(500_000, 'k2');
      await claimsAnswered();
      expect(events).toEqual([
        ['a', 'k1', 0.5],
        ['b', undefined, 0.5],
        ['b', 'k2', 0.5],
      ]);
      // Spend dips under 50% (the day's and k2's) and crosses it again through the other guard:
      // nothing more.
      await b.release(second);
      const third = await a.reserve(500_000, 'k2');
      await claimsAnswered();
      expect(events).toHaveLength(3);
      // A guard made afresh (a restarted process): the day's 50% is not fired again; a new key's
      // 50% and the day's 80% are new, and its own.
      await a.release(third);
      const c = guard('c');
      await c.reserve(500_000, 'k4');
      await c.reserve(500_000, 'k5');
      await claimsAnswered();
      expect(events.slice(3)).toEqual([
        ['c', 'k4', 0.5],
        ['c', undefined, 0.8],
        ['c', 'k5', 0.5],
      ]);
    } finally {
      for (const ledger of ledgers) await ledger.close();
    }
  });
});
