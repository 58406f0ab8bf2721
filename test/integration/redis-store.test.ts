import { Redis } from 'ioredis';
import { afterAll } from 'vitest';
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
