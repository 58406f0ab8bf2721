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
