/**
 * Scripts run in the order they were asked for, even when the server lacks some of them (a fresh or
 * restarted server, one that other processes loaded only some scripts into, a SCRIPT FLUSH): a
 * NOSCRIPT retry must not let a command sent later run first. On a dedicated `redis-server` (its
 * own port: SCRIPT FLUSH would disturb the suites sharing the main server).
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimit } from '../../src/core/create-limit.js';
import { RESERVE_BUCKET_LUA, RESERVE_BUCKETS_LUA, TIME_LUA } from '../../src/redis/redis-scripts.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import type { StoreLevel } from '../../src/redis/store.js';
import { DedicatedRedis, freePort, hasRedisServer } from '../helpers/redis-server.js';

const skip =
  hasRedisServer() || process.env['CI'] === 'true'
    ? false
    : 'redis-server is not on PATH (apt-get install redis-server)';
if (skip) console.log(`[redis script order] skipped (${skip})`);

const levels: StoreLevel[] = [
  { id: 'g', spec: createLimit({ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }).spec },
];

describe.skipIf(skip !== false)('Redis scripts run in the order they were asked for', () => {
  let server: DedicatedRedis;
  let admin: Redis;
  const stores: RedisStore[] = [];
  beforeAll(async () => {
    server = new DedicatedRedis(await freePort());
    await server.start();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    for (const store of stores) await store.close();
    admin?.disconnect();
    await server?.stop();
  });
  const open = () => {
    const store = new RedisStore({ redis: server.url, keyPrefix: `order-${stores.length}` });
    stores.push(store);
    return store;
  };

  it('a server holding only some scripts: a pause asked for before a reservation holds it', async () => {
    // Another process loaded the decision scripts, not the pause script.
    await admin.script('FLUSH');
    for (const source of [RESERVE_BUCKET_LUA, RESERVE_BUCKETS_LUA, TIME_LUA])
      await admin.script('LOAD', source);
    const store = open();
    const pausing = store.pauseFor('p', 1_000);
    const decision = await store.reserve('p', levels, [1], 60_000);
    const pause = await pausing;
    expect(decision.ok).toBe(true);
    // Reserved behind the pause: the pause ran first, though its script had to be loaded.
    if (decision.ok) expect(decision.startAt).toBeGreaterThanOrEqual(pause.untilMs);
  });

  it('after SCRIPT FLUSH mid-run, the failed commands run again in order, before the ones asked for meanwhile', async () => {
    const store = open();
    await store.reserve('q', levels, [1], 60_000);
    await admin.script('FLUSH');
    // Both fail with NOSCRIPT; a third is asked for while the scripts load.
    const pausing = store.pauseFor('q', 1_000);
    const first = store.reserve('q', levels, [1], 60_000);
    await new Promise((resolve) => setImmediate(resolve));
    const second = store.reserve('q', levels, [1], 60_000);
    const pause = await pausing;
    const [a, b] = await Promise.all([first, second]);
    expect(a.ok && b.ok).toBe(true);
    if (a.ok && b.ok) {
      expect(a.startAt).toBeGreaterThanOrEqual(pause.untilMs);
      // 10 ms apart, in the order asked for.
      expect(b.startAt - a.startAt).toBeCloseTo(10, 6);
    }
  });

  it('loads that fail fail the commands waiting for them; once the server answers, the next command loads again', async () => {
    const later = new DedicatedRedis(await freePort());
    // Nothing listens on its port yet: the loads fail, and the command waiting for them with them.
    const store = new RedisStore({ redis: later.url, keyPrefix: 'later', commandTimeoutMs: 200 });
    stores.push(store);
    await expect(store.reserve('r', levels, [1], 0)).rejects.toThrow(/Redis/);
    await later.start();
    try {
      let decision: Awaited<ReturnType<RedisStore['reserve']>> | undefined;
      for (let i = 0; i < 50 && decision === undefined; i++) {
        decision = await store.reserve('r', levels, [1], 0).catch(async () => {
          await new Promise((resolve) => setTimeout(resolve, 100));
          return undefined;
        });
      }
      expect(decision?.ok).toBe(true);
    } finally {
      await store.close();
      await later.stop();
    }
  });
});
