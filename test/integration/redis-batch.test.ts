/**
 * Batching of concurrent decisions: the bucket decisions a RedisStore receives in one tick go to
 * Redis as one EVALSHA, and each caller gets its own answer, identical to what the TypeScript cores
 * decide for the same calls one after another. A failing batch fails each of its decisions with the
 * typed error; a batch reaching a server without the scripts waits for them to load, then runs once.
 */
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimit } from '../../src/core/create-limit.js';
import type { LimitSpec } from '../../src/core/limit.js';
import { InvalidOptionError, StoreUnavailableError } from '../../src/errors.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import type { StoreLevel } from '../../src/redis/store.js';
import {
  comparable,
  DedicatedRedis,
  freePort,
  hasRedisServer,
  keysOfTag,
  REDIS_URL,
  redisSkipReason,
} from '../helpers/redis-server.js';

const skip = await redisSkipReason();
if (skip) console.log(`[redis batch] skipped (${skip})`);
const prefix = `tollgate-batch-${process.pid}`;
const T0 = 1_800_000_000_000;
const level = (id: string, spec: LimitSpec): StoreLevel => ({ id, spec: createLimit(spec).spec });

describe.skipIf(skip !== false)('RedisStore batches concurrent decisions', () => {
  const admin = skip ? undefined : new Redis(REDIS_URL);
  const stores: RedisStore[] = [];
  const make = (options: { batch?: boolean; redis?: Redis | string } = {}) => {
    const store = new RedisStore({ redis: REDIS_URL, keyPrefix: prefix, minTtlMs: 600_000, ...options });
    stores.push(store);
    return store;
  };
  afterAll(async () => {
    for (const store of stores) await store.close();
    if (admin === undefined) return;
    const keys = await keysOfTag(admin, `{${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  });
  let serial = 0;
  const fresh = () => `batch-${Date.now()}-${serial++}`;

  const tb = level('tb', { algorithm: 'token-bucket', limit: 10, intervalMs: 1000, burst: 3 });
  const lb = level('lb', { algorithm: 'leaky-bucket', limit: 4, intervalMs: 1000 });
  const other = level('other', { algorithm: 'token-bucket', limit: 2, intervalMs: 500 });

  it('one tick of decisions is one EVALSHA, and each answer is what the cores decide in order', async () => {
    const store = make();
    // Loaded before: a server that never ran the script answers the first batch NOSCRIPT (3 commands).
    await store.preload();
    const memory = new MemoryStore();
    const [p, q] = [fresh(), fresh()];
    // Two partitions, two shapes, costs that differ, a level not consulted (cost 0), a deadline that
    // refuses, a cost above capacity, and a scope.
    const calls: [string, StoreLevel[], number[], number, string][] = [
      [p, [tb, lb], [1, 1], 10_000, ''],
      [p, [tb, lb], [1, 1], 10_000, ''],
      [p, [tb, lb], [2, 0], 10_000, ''],
      [q, [other], [1], 0, 's1'],
      [p, [tb, lb], [1, 1], 0, ''],
      [p, [tb, lb], [4, 1], 10_000, ''],
      [q, [other], [1], 0, 's1'],
      [q, [other], [1], 0, 's1'],
      [p, [tb, lb], [0, 2], Infinity, ''],
    ];
    const before = store.commandsSent;
    const now = T0 + 0.25;
    const answers = await Promise.all(
      calls.map(([partition, levels, costs, maxWaitMs, scope]) =>
        store.reserveAt(partition, levels, costs, maxWaitMs, now, { scope }),
      ),
    );
    expect(store.commandsSent - before).toBe(1);
    const expected = calls.map(([partition, levels, costs, maxWaitMs, scope]) =>
      memory.reserveAt(partition, levels, costs, maxWaitMs, now, { scope }),
    );
    expect(answers.map(comparable)).toEqual(expected.map(comparable));
    // Every kind of answer came back through the split.
    expect(answers.map((a) => (a.ok ? (a.startAt > now ? 'later' : 'now') : a.reason))).toEqual([
      'now',
      'later',
      'later',
      'now',
      'wait',
      'capacity',
      'now',
      'wait',
      'later',
    ]);
    // Each reservation refunds on its own: the latest take of each level gives its slot back.
    const last = answers[8]!;
    if (!last.ok) throw new Error('expected a reservation');
    await store.refundAt(last, now);
    memory.refundAt(expected[8] as never, now);
    const again = await store.reserveAt(p, [tb, lb], [0, 2], Infinity, now);
    expect(comparable(again)).toEqual(comparable(memory.reserveAt(p, [tb, lb], [0, 2], Infinity, now)));
  });

  it('batched decisions at Redis time share one server clock reading, and each has its own id', async () => {
    const store = make();
    const p = fresh();
    const answers = await Promise.all(Array.from({ length: 5 }, () => store.reserve(p, [tb], [1], 10_000)));
    const nows = new Set(answers.map((a) => a.serverNow));
    expect(nows.size).toBe(1);
    const ids = answers.map((a) => (a.ok ? a.id : ''));
    expect(new Set(ids).size).toBe(5);
    // The burst of 3 at once, then one every 100 ms.
    const starts = answers.map((a) => (a.ok ? a.startAt - a.serverNow : -1));
    expect(starts.slice(0, 3)).toEqual([0, 0, 0]);
    expect(starts[3]).toBeCloseTo(100, 6);
    expect(starts[4]).toBeCloseTo(200, 6);
  });

  it('random batches decide exactly as the cores do one by one', async () => {
    const store = make();
    const specArb: fc.Arbitrary<LimitSpec> = fc.oneof(
      fc
        .record({
          limit: fc.integer({ min: 1, max: 20 }),
          intervalMs: fc.constantFrom(1000, 60_000, 333.3, 7, 2500.5),
          burst: fc.integer({ min: 1, max: 25 }),
        })
        .map((r) => ({ algorithm: 'token-bucket' as const, ...r })),
      fc
        .record({ limit: fc.integer({ min: 1, max: 20 }), intervalMs: fc.constantFrom(1000, 333.3, 7) })
        .map((r) => ({ algorithm: 'leaky-bucket' as const, ...r })),
    );
    const costArb = fc.oneof(fc.integer({ min: 0, max: 6 }), fc.constantFrom(0.5, 1.5));
    const callArb = fc.record({
      shape: fc.nat(),
      costs: fc.array(costArb, { minLength: 3, maxLength: 3 }),
      maxWaitMs: fc.constantFrom(0, 50, 1000, Infinity),
    });
    const workloadArb = fc.record({
      specs: fc.array(specArb, { minLength: 3, maxLength: 3 }),
      // A token bucket's capacity above its burst by this much (arrivalMarginMs builds such levels).
      wider: fc.array(fc.constantFrom(0, 0, 1, 3), { minLength: 3, maxLength: 3 }),
      start: fc.integer({ min: 0, max: 10_000_000 }).map((n) => T0 + n / 4),
      ticks: fc.array(
        fc.record({
          dtMs: fc.integer({ min: 0, max: 400 }).map((ms) => ms + 1 / 3),
          calls: fc.array(callArb, { minLength: 1, maxLength: 12 }),
          // Give back one admitted call of the tick: only the latest take on a level gives back,
          // so the marks answered must be the states the batch wrote.
          refund: fc.option(fc.nat(), { nil: undefined }),
        }),
        { minLength: 1, maxLength: 6 },
      ),
    });
    await fc.assert(
      fc.asyncProperty(workloadArb, async ({ specs, wider, start, ticks }) => {
        const memory = new MemoryStore();
        const levels = specs.map((spec, i): StoreLevel => {
          const plain = level(`l${i}`, spec);
          const extra = spec.algorithm === 'token-bucket' ? wider[i]! : 0;
          return extra === 0 ? plain : { ...plain, capacity: plain.spec.burst + extra };
        });
        // Shapes over shared levels, in two partitions: later calls see earlier takes of the batch.
        const shapes: [string, StoreLevel[]][] = [
          ['a', [levels[0]!, levels[1]!]],
          ['a', [levels[1]!, levels[2]!]],
          ['a', [levels[0]!]],
          ['b', [levels[0]!, levels[2]!]],
        ];
        const run = fresh();
        let now = start;
        for (const tick of ticks) {
          now += tick.dtMs;
          const calls = tick.calls.map((c) => {
            const [partition, shapeLevels] = shapes[c.shape % shapes.length]!;
            return {
              partition: `${run}-${partition}`,
              shapeLevels,
              costs: c.costs.slice(0, shapeLevels.length),
              c,
            };
          });
          const answers = await Promise.all(
            calls.map(({ partition, shapeLevels, costs, c }) =>
              store.reserveAt(partition, shapeLevels, costs, c.maxWaitMs, now),
            ),
          );
          const expected = calls.map(({ partition, shapeLevels, costs, c }) =>
            memory.reserveAt(partition, shapeLevels, costs, c.maxWaitMs, now),
          );
          expect(answers.map(comparable)).toEqual(expected.map(comparable));
          const admitted = answers.flatMap((d, i) => (d.ok ? [[d, expected[i]!] as const] : []));
          if (tick.refund !== undefined && admitted.length > 0) {
            const [r, m] = admitted[tick.refund % admitted.length]!;
            if (!m.ok) throw new Error('the stores disagree');
            await store.refundAt(r, now);
            memory.refundAt(m, now);
          }
        }
      }),
      { numRuns: 150 },
    );
  }, 60_000);

  it('a scope with learned limits leaves the batch for the general script, with the same answers', async () => {
    const store = make();
    const memory = new MemoryStore();
    const p = fresh();
    const learned = { algorithm: 'sliding-log' as const, limit: 3, intervalMs: 2000, unit: 'tokens' };
    await store.learnAt(p, learned, T0, { scope: 's' });
    memory.learnAt(p, learned, T0, { scope: 's' });
    const now = T0 + 10;
    const calls: [string, number][] = [
      ['s', 1],
      ['', 1],
      ['s', 2],
      ['s', 1],
    ];
    const answers = await Promise.all(
      calls.map(([scope, tokens]) =>
        store.reserveAt(p, [tb], [1], 10_000, now, { scope, units: { tokens } }),
      ),
    );
    const expected = calls.map(([scope, tokens]) =>
      memory.reserveAt(p, [tb], [1], 10_000, now, { scope, units: { tokens } }),
    );
    expect(answers.map(comparable)).toEqual(expected.map(comparable));
    expect(answers.map((a) => (a.ok ? a.learned.length : -1))).toEqual([1, 0, 1, 1]);
  });

  it('calls with ownFrom stay in the batch; those it would refuse are decided by the general script, in order', async () => {
    const store = make();
    await store.preload();
    const memory = new MemoryStore();
    const p = fresh();
    const wide = level('wide', { algorithm: 'token-bucket', limit: 100, intervalMs: 1000, burst: 100 });
    const own = level('own', { algorithm: 'token-bucket', limit: 10, intervalMs: 1000, burst: 3 });
    const opts = { scope: 's', ownFrom: 1, ownWaitMs: 5 };
    const before = store.commandsSent;
    const decide = (s: RedisStore | MemoryStore) =>
      Array.from({ length: 6 }, () => s.reserveAt(p, [wide, own], [1, 1], 60_000, T0, opts));
    const answers = await Promise.all(decide(store));
    // The key's burst of 3 starts at once; the other 3 are held by its own level and refused.
    expect(answers.map((d) => d.ok)).toEqual([true, true, true, false, false, false]);
    expect(answers.slice(3)).toEqual(
      (await Promise.all(decide(memory))).slice(3).map((d) => ({ ...d, shared: false })),
    );
    // One batch, then one general script per refused call.
    expect(store.commandsSent - before).toBe(1 + 3);
  });

  // Found by review (session 16): a call of another shape (a window level) was sent at once, ahead
  // of the bucket calls queued before it in the same tick, and took the slot the first one had.
  it('a call for the general script asked after bucket calls of the same tick is decided after them', async () => {
    const store = make();
    const memory = new MemoryStore();
    const p = fresh();
    const one = level('one', { algorithm: 'token-bucket', limit: 1, intervalMs: 1000 });
    const window = level('w', { algorithm: 'fixed-window', limit: 10, intervalMs: 1000 });
    const calls = [
      (s: RedisStore | MemoryStore) => s.reserveAt(p, [one], [1], 0, T0),
      (s: RedisStore | MemoryStore) => s.reserveAt(p, [one, window], [1, 1], 0, T0),
    ];
    const answers = await Promise.all(calls.map((call) => call(store)));
    const expected = await Promise.all(calls.map((call) => call(memory)));
    expect(answers.map((a) => a.ok)).toEqual([true, false]);
    expect(answers.map(comparable)).toEqual(expected.map(comparable));
  });

  it('batch: false sends one EVALSHA per decision, with the same answers', async () => {
    const batched = make();
    const single = make({ batch: false });
    await single.preload();
    const [p, q] = [fresh(), fresh()];
    const now = T0 + 3;
    const run = (store: RedisStore, partition: string) =>
      Promise.all(Array.from({ length: 6 }, () => store.reserveAt(partition, [tb, lb], [1, 1], 10_000, now)));
    const before = single.commandsSent;
    const a = await run(single, p);
    expect(single.commandsSent - before).toBe(6);
    const b = await run(batched, q);
    expect(a.map(comparable)).toEqual(b.map(comparable));
  });

  it('a failing batch rejects each of its decisions with StoreUnavailableError', async () => {
    const client = new Redis(REDIS_URL);
    const call = client.call.bind(client) as (command: string, args: unknown[]) => Promise<unknown>;
    let failNext = true;
    (client as unknown as { call: typeof call }).call = (command, args) => {
      if (command === 'EVALSHA' && failNext) {
        failNext = false;
        return Promise.reject(new Error('ERR simulated failure'));
      }
      return call(command, args);
    };
    const store = make({ redis: client });
    const p = fresh();
    const settled = await Promise.allSettled(
      Array.from({ length: 4 }, () => store.reserveAt(p, [tb], [1], 10_000, T0)),
    );
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'rejected', 'rejected']);
    for (const s of settled) {
      const error = (s as PromiseRejectedResult).reason as StoreUnavailableError;
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(error.message).toMatch(/simulated failure/);
    }
    // Nothing was committed: the next batch finds the bucket full.
    const next = await Promise.all(Array.from({ length: 3 }, () => store.reserveAt(p, [tb], [1], 0, T0)));
    expect(next.every((d) => d.ok && d.startAt === T0)).toBe(true);
    await store.close();
    client.disconnect();
  });

  it('a reply that does not match its batch rejects each undecided decision', async () => {
    const client = new Redis(REDIS_URL);
    const call = client.call.bind(client) as (command: string, args: unknown[]) => Promise<unknown>;
    (client as unknown as { call: typeof call }).call = async (command, args) => {
      const reply = await call(command, args);
      // Keep the clock and the first answer, drop the rest.
      return command === 'EVALSHA' ? (reply as unknown[]).slice(0, 3).concat(['junk']) : reply;
    };
    const store = make({ redis: client });
    const settled = await Promise.allSettled(
      Array.from({ length: 3 }, () => store.reserveAt(fresh(), [tb], [1], 10_000, T0)),
    );
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    expect((settled[1] as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
    await store.close();
    client.disconnect();
  });

  it('decisions queued when the store closes are rejected', async () => {
    const store = make();
    const pending = Promise.allSettled([
      store.reserve(fresh(), [tb], [1], 0),
      store.reserve(fresh(), [tb], [1], 0),
    ]);
    await store.close();
    const settled = await pending;
    for (const s of settled) {
      expect(s.status).toBe('rejected');
      expect((s as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
    }
  });

  it('a state that is not a number (written by something else) counts as no state, alone and in a batch', async () => {
    const store = make();
    const spoil = async (partition: string) => {
      // The level states of the partition: its tag with ':s:' (see redis-keys.ts).
      const tag = store.pauseId(partition).replace(/:m:-$/, '');
      const keys = await keysOfTag(admin!, `${tag}:s:*`);
      expect(keys.length).toBe(2);
      for (const key of keys) await admin!.set(key, 'garbage \u0000 1e', 'PX', 600_000);
    };
    const alone = fresh();
    const batched = fresh();
    for (const p of [alone, batched])
      expect((await store.reserveAt(p, [tb, lb], [1, 1], Infinity, T0)).ok).toBe(true);
    await spoil(alone);
    await spoil(batched);
    const memory = new MemoryStore();
    const now = T0 + 10;
    const lone = await store.reserveAt(alone, [tb, lb], [1, 1], Infinity, now);
    const pair = await Promise.all([
      store.reserveAt(batched, [tb, lb], [1, 1], Infinity, now),
      store.reserveAt(batched, [tb, lb], [1, 1], Infinity, now),
    ]);
    // As a fresh partition decides at the same time.
    const expected = [
      memory.reserveAt('a', [tb, lb], [1, 1], Infinity, now),
      memory.reserveAt('b', [tb, lb], [1, 1], Infinity, now),
      memory.reserveAt('b', [tb, lb], [1, 1], Infinity, now),
    ];
    expect([lone, ...pair].map(comparable)).toEqual(expected.map(comparable));
    expect(lone.ok && lone.startAt).toBe(now);
  });

  it('refuses a batch option that is not a boolean', () => {
    let error: unknown;
    try {
      new RedisStore({ redis: REDIS_URL, batch: 'yes' as never });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as InvalidOptionError).option).toBe('batch');
  });

  it.skipIf(!hasRedisServer())(
    'a batch reaching a server without the scripts waits for them to load, then runs once',
    async () => {
      const server = new DedicatedRedis(await freePort());
      await server.start();
      const stats = new Redis(server.url);
      try {
        const store = make({ redis: server.url });
        const p = fresh();
        const memory = new MemoryStore();
        const answers = await Promise.all(
          Array.from({ length: 5 }, () => store.reserveAt(p, [tb, lb], [1, 1], 10_000, T0)),
        );
        // Every script loaded first (SCRIPT LOAD each), then one EVALSHA for the batch, no NOSCRIPT.
        const info = (await stats.info('commandstats')) as string;
        expect(info).toMatch(/cmdstat_evalsha:calls=1,.*failed_calls=0/);
        const loads = Number(/cmdstat_script\|load:calls=(\d+)/.exec(info)?.[1]);
        expect(loads).toBeGreaterThan(1);
        expect(store.commandsSent).toBe(loads + 1);
        const expected = Array.from({ length: 5 }, () => memory.reserveAt(p, [tb, lb], [1, 1], 10_000, T0));
        expect(answers.map(comparable)).toEqual(expected.map(comparable));
        await store.close();
      } finally {
        stats.disconnect();
        await server.stop();
      }
    },
  );
});
