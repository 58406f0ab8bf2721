import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimit } from '../../src/core/create-limit.js';
import { DigestCache } from '../../src/redis/redis-keys.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import { storeContract } from '../contract/store-contract.js';
import { keysOfTag, REDIS_URL, redisSkipReason } from '../helpers/redis-server.js';

const skip = await redisSkipReason();
const admin = skip ? undefined : new Redis(REDIS_URL);
afterAll(() => admin?.disconnect());
const prefix = `tollgate-contract-${process.pid}`;
const digests = new DigestCache();

storeContract('redis', () => new RedisStore({ redis: REDIS_URL, keyPrefix: prefix }), {
  skip,
  shared: true,
  countKeys: async (_store, partition) =>
    (await keysOfTag(admin!, `{${prefix}:${digests.get(partition)}}*`)).length,
});

describe.skipIf(skip !== false)('redis store: garbage where a learned limit keeps its expiry', () => {
  it('an unreadable expiry leaves the limit in force (no crash), and learning it again writes a good one', async () => {
    const store = new RedisStore({ redis: REDIS_URL, keyPrefix: `${prefix}-garbage` });
    try {
      const p = `garbage-${Date.now()}`;
      const spec = { algorithm: 'sliding-log', limit: 2, intervalMs: 60_000 } as const;
      const level = {
        id: 'none',
        spec: createLimit({ algorithm: 'token-bucket', limit: 1000, intervalMs: 1000 }).spec,
      };
      expect(await store.learn(p, spec)).toBe(true);
      const metas = (await keysOfTag(admin!, `{${prefix}-garbage:${digests.get(p)}}*`)).filter((k) =>
        k.includes(':m:'),
      );
      expect(metas.length).toBeGreaterThan(0);
      for (const garbage of ['NaN', '', 'soon', '1e999', '0x', ' ', '9'.repeat(400)]) {
        for (const meta of metas) {
          const fields = Object.keys(await admin!.hgetall(meta)).filter((f) => f.startsWith('e:'));
          expect(fields.length).toBeGreaterThan(0);
          for (const field of fields) await admin!.hset(meta, field, garbage);
        }
        const decision = await store.reserve(p, [level], [1], 0);
        if (!decision.ok) throw new Error(`expected a reservation, got ${JSON.stringify(decision)}`);
        expect(decision.learned).toHaveLength(1);
        await store.refund(decision);
        // Known and unchanged: learning it again is no change, and puts a readable expiry back.
        expect(await store.learn(p, spec)).toBe(false);
      }
      for (const meta of metas) {
        for (const [field, value] of Object.entries(await admin!.hgetall(meta)))
          if (field.startsWith('e:')) expect(Number.isFinite(Number(value))).toBe(true);
      }
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(skip !== false)(
  'redis store: an older bucket take given back waits in a hash beside its state',
  () => {
    const leaky = {
      id: 'leaky',
      spec: createLimit({ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }).spec,
    };
    const granted = (d: Awaited<ReturnType<RedisStore['reserve']>>) => {
      if (!d.ok) throw new Error(`expected a reservation, got ${JSON.stringify(d)}`);
      return d;
    };

    it('lives no longer than the state, and goes with the latest take', async () => {
      const store = new RedisStore({ redis: REDIS_URL, keyPrefix: `${prefix}-waiting` });
      try {
        const p = `waiting-${Date.now()}`;
        const [a, b, c] = [
          granted(await store.reserve(p, [leaky], [1], 10_000)),
          granted(await store.reserve(p, [leaky], [1], 10_000)),
          granted(await store.reserve(p, [leaky], [1], 10_000)),
        ];
        await store.refund(b);
        const keys = await keysOfTag(admin!, `{${prefix}-waiting:${digests.get(p)}}*`);
        const waiting = keys.filter((k) => k.endsWith(':g'));
        expect(waiting).toHaveLength(1);
        const state = waiting[0]!.slice(0, -2);
        expect(keys).toContain(state);
        // Expiry times, not TTLs: two PTTL reads a few ms apart compare two moments (a CI run saw
        // 299 against 298). Each script sets ceil(idleAt - now) + 1 ms from its own reading of the
        // server clock, so the two instants may differ by the rounding: at most 2 ms.
        const [waitingExpiresAt, stateExpiresAt] = (await admin!
          .multi()
          .call('PEXPIRETIME', waiting[0]!)
          .call('PEXPIRETIME', state)
          .exec())!.map(([error, at]) => {
          if (error) throw error;
          return Number(at);
        }) as [number, number];
        expect(waitingExpiresAt).toBeGreaterThan(0);
        expect(waitingExpiresAt).toBeLessThanOrEqual(stateExpiresAt + 2);
        // c is the latest: it goes, then b; a still stands.
        await store.refund(c);
        expect(await admin!.exists(waiting[0]!)).toBe(0);
        const next = granted(await store.reserve(p, [leaky], [1], 10_000));
        // A slot after a's (b's and c's were given back), or at once if that slot has passed: the
        // steps above are some ten round trips, longer than a slot on a loaded machine.
        const due = Math.max(a.startAt + 100, next.serverNow);
        expect(next.startAt).toBeGreaterThanOrEqual(due - 1);
        expect(next.startAt).toBeLessThan(due + 50);
      } finally {
        await store.close();
      }
    });

    it('garbage in the hash is dropped, never given back, and never fails a refund', async () => {
      const store = new RedisStore({ redis: REDIS_URL, keyPrefix: `${prefix}-waiting` });
      try {
        const p = `waiting-garbage-${Date.now()}`;
        const takes = [];
        for (let i = 0; i < 3; i++) takes.push(granted(await store.reserve(p, [leaky], [1], 10_000)));
        await store.refund(takes[1]!);
        const waiting = (await keysOfTag(admin!, `{${prefix}-waiting:${digests.get(p)}}*`)).find((k) =>
          k.endsWith(':g'),
        )!;
        const [field] = Object.keys(await admin!.hgetall(waiting));
        // Every field and cost that is not a finite mark and a positive cost, beside the real entry.
        await admin!.hset(waiting, {
          x: '1',
          NaN: '1',
          '1e999': '1',
          [`${field}0`]: 'y',
          '-inf': '-1',
          '5': 'nan',
          '6': '1e999',
        });
        await store.refund(takes[2]!);
        // The real entry went with the latest take; the garbage was dropped.
        expect(await admin!.exists(waiting)).toBe(0);
        const next = granted(await store.reserve(p, [leaky], [1], 10_000));
        // A slot after the first take's, or at once if that has passed (as above).
        const due = Math.max(takes[0]!.startAt + 100, next.serverNow);
        expect(next.startAt).toBeGreaterThanOrEqual(due - 1);
        expect(next.startAt).toBeLessThan(due + 50);
      } finally {
        await store.close();
      }
    });
  },
);

describe.skipIf(skip !== false)('redis store: commandTimeoutMs and a busy process', () => {
  /** Keep this process's event loop busy for `ms` (a long task, a GC pause, a starved CPU). */
  const busyFor = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until) {
      // spin
    }
  };
  const level = {
    id: 'busy',
    spec: createLimit({ algorithm: 'token-bucket', limit: 1_000, intervalMs: 1000 }).spec,
  };

  it('a reply Redis sent in time is not a timeout because this process read it late', async () => {
    const store = new RedisStore({
      redis: REDIS_URL,
      keyPrefix: `${prefix}-busy`,
      commandTimeoutMs: 100,
      batch: false,
    });
    try {
      await store.preload();
      for (let i = 0; i < 3; i++) {
        const decision = store.reserve(`busy-${Date.now()}-${i}`, [level], [1], 10_000);
        // Redis answers within a ms or so; this process reads the reply only after 250 ms.
        busyFor(250);
        expect((await decision).ok).toBe(true);
      }
    } finally {
      await store.close();
    }
  });
});
