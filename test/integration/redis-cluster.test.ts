/**
 * The Redis store, the Redis ledger and the shared gate on a Redis Cluster: a private cluster of
 * three primaries this file starts on free loopback ports (and stops). Runs in CI; elsewhere it
 * skips, visibly, when no `redis-server` binary is installed.
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimit } from '../../src/core/create-limit.js';
import { DigestCache } from '../../src/redis/redis-keys.js';
import { RedisLedger } from '../../src/redis/redis-ledger.js';
import * as storeScripts from '../../src/redis/redis-scripts.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import { createSharedGate, type SharedGate } from '../../src/redis/shared-gate.js';
import type { StoreLevel } from '../../src/redis/store.js';
import { storeContract } from '../contract/store-contract.js';
import { asyncLedgerContract } from '../helpers/budget-ledger-contract.js';
import { DedicatedCluster, hasRedisServer, keysOfTag, REDIS_SERVER_BIN } from '../helpers/redis-server.js';

const skip =
  hasRedisServer() || process.env['CI'] === 'true'
    ? false
    : `no ${REDIS_SERVER_BIN} binary to start a cluster with (install redis-server)`;
if (skip) console.log(`[redis cluster] skipped (${skip})`);

const cluster = new DedicatedCluster();
if (!skip) await cluster.start();
const clients: (Cluster | Redis)[] = [];
afterAll(async () => {
  for (const c of clients) c.disconnect();
  await cluster.stop();
});
const client = () => {
  const c = cluster.client();
  clients.push(c);
  return c;
};
const nodes = () => {
  const ns = cluster.nodes();
  clients.push(...ns);
  return ns;
};
const prefix = `tollgate-cluster-${process.pid}`;
/** The SHA-1 of every script the store runs. */
const storeShas = Object.entries(storeScripts)
  .filter(([name, value]) => name.endsWith('_LUA') && typeof value === 'string')
  .map(([, source]) =>
    createHash('sha1')
      .update(source as string)
      .digest('hex'),
  );
const digests = new DigestCache();

/** Keys matching `pattern` on every primary (SCAN runs per node). */
async function clusterKeys(pattern: string): Promise<string[][]> {
  return Promise.all(nodes().map((node) => keysOfTag(node, pattern)));
}

storeContract('redis cluster', () => new RedisStore({ redis: client(), keyPrefix: prefix }), {
  skip,
  shared: true,
  countKeys: async (_store, partition) =>
    (await clusterKeys(`{${prefix}:${digests.get(partition)}}*`)).flat().length,
});

let ledgers = 0;
asyncLedgerContract(
  'redis cluster',
  () => new RedisLedger({ redis: client(), keyPrefix: `${prefix}-ledger-${ledgers++}` }),
  skip,
);

describe.skipIf(skip !== false)('redis store on a cluster: scripts on every primary', () => {
  const level: StoreLevel = {
    id: 'a',
    spec: createLimit({ algorithm: 'token-bucket', limit: 1000, intervalMs: 1000 }).spec,
  };
  const windowLevel: StoreLevel = {
    id: 'w',
    spec: createLimit({ algorithm: 'sliding-log', limit: 1000, intervalMs: 1000 }).spec,
  };
  /** `count` partitions, and how many of them each primary holds. */
  const partitions = async (name: string, count: number) => {
    const ps = Array.from({ length: count }, (_, i) => `${name}-${Date.now()}-${i}`);
    const [first] = nodes();
    const slots = await Promise.all(
      ps.map((p) => first!.call('CLUSTER', ['KEYSLOT', `{${prefix}:${digests.get(p)}}`]) as Promise<number>),
    );
    const perNode = [0, 0, 0];
    for (const slot of slots) perNode[slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2]!++;
    return { ps, perNode };
  };

  it('a new store on a cluster that holds no scripts decides at once on every primary', async () => {
    for (const node of nodes()) await node.script('FLUSH');
    const store = new RedisStore({ redis: client(), keyPrefix: prefix });
    try {
      const { ps, perNode } = await partitions('fresh', 30);
      for (const n of perNode) expect(n).toBeGreaterThan(0);
      // Bucket calls (the batched scripts) and window calls (the general one), all at once.
      const decisions = await Promise.all(
        ps.flatMap((p) => [store.reserve(p, [level], [1], 0), store.reserve(p, [windowLevel], [1], 0)]),
      );
      expect(decisions.filter((d) => !d.ok)).toEqual([]);
      // Every primary holds every script the store runs.
      const shas = await Promise.all(
        nodes().map((node) => node.script('EXISTS', ...storeShas) as Promise<number[]>),
      );
      expect(storeShas).toHaveLength(13);
      for (const exists of shas) expect(exists).toEqual(storeShas.map(() => 1));
    } finally {
      await store.close();
    }
  });

  it('a batch holds the decisions of one partition (one hash slot) only: one EVALSHA per partition', async () => {
    const store = new RedisStore({ redis: client(), keyPrefix: prefix });
    try {
      await store.preload();
      const { ps, perNode } = await partitions('batch', 6);
      const before = store.commandsSent;
      const answers = await Promise.all(
        Array.from({ length: 18 }, (_, i) => store.reserve(ps[i % 6]!, [level], [1], 0)),
      );
      expect(answers.every((a) => a.ok)).toBe(true);
      expect(store.commandsSent - before).toBe(6);
      expect(perNode.reduce((a, b) => a + b)).toBe(6);
    } finally {
      await store.close();
    }
  });

  it('a primary that loses its scripts mid-run is given them again, and every decision is made', async () => {
    const store = new RedisStore({ redis: client(), keyPrefix: prefix });
    try {
      const { ps } = await partitions('flushed', 30);
      expect((await Promise.all(ps.map((p) => store.reserve(p, [level], [1], 0)))).every((d) => d.ok)).toBe(
        true,
      );
      const [, second] = nodes();
      await second!.script('FLUSH');
      const again = await Promise.all(ps.map((p) => store.reserve(p, [level], [1], 0)));
      expect(again.filter((d) => !d.ok)).toEqual([]);
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(skip !== false)('shared gate on a cluster', () => {
  const gates: SharedGate[] = [];
  afterAll(async () => {
    for (const g of gates) await g.close();
  });
  const gate = (options: Parameters<typeof createSharedGate>[0]) => {
    const g = createSharedGate(options);
    gates.push(g);
    return g;
  };
  /** Two gates on their own cluster connections (two processes), both connected. */
  const twoGates = async (options: Omit<Parameters<typeof createSharedGate>[0], 'redis'>) => {
    const a = gate({ redis: client(), ...options });
    const b = gate({ redis: client(), ...options });
    await Promise.all([a.store.time(), b.store.time()]);
    return [a, b] as const;
  };

  it('two gates: keys spread over the primaries each keep their own pace together', async () => {
    const keyPrefix = `${prefix}-gate-${Date.now()}`;
    const perKey = [{ algorithm: 'leaky-bucket', limit: 50, intervalMs: 1000 }] as const;
    const [a, b] = await twoGates({ keyPrefix, perKey: [...perKey] });
    const keys = Array.from({ length: 12 }, (_, i) => `key-${i}`);
    const starts = new Map<string, number[]>(keys.map((k) => [k, []]));
    const t0 = performance.now();
    await Promise.all(
      keys.flatMap((key) =>
        Array.from({ length: 10 }, (_, i) =>
          (i % 2 ? a : b).schedule(() => starts.get(key)!.push(performance.now()), { key }),
        ),
      ),
    );
    const elapsed = performance.now() - t0;
    // 10 calls a key at 50/s: 9 gaps of 20 ms on the store's clock, started within a few ms of it.
    for (const key of keys) {
      const s = starts.get(key)!.sort((x, y) => x - y);
      expect(s).toHaveLength(10);
      expect(s.at(-1)! - s[0]!).toBeGreaterThan(150);
    }
    // The keys ran side by side, not one after another (12 keys one after another: over 2 s).
    expect(elapsed).toBeLessThan(1500);
    // The keys' state lives on more than one primary.
    const perNode = await clusterKeys(`{${keyPrefix}:*`);
    expect(perNode.filter((keysOfNode) => keysOfNode.length > 0).length).toBeGreaterThan(1);
  });

  it('a gate-wide limit holds across two gates (its keys share one slot)', async () => {
    const keyPrefix = `${prefix}-wide-${Date.now()}`;
    const limits = [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }] as const;
    const [a, b] = await twoGates({ keyPrefix, limits: [...limits] });
    const starts: number[] = [];
    await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        (i % 2 ? a : b).schedule(() => starts.push(performance.now()), { key: `k${i % 5}` }),
      ),
    );
    starts.sort((x, y) => x - y);
    // 30 calls at 100/s: 29 gaps of 10 ms (less the starts' lateness and clock-offset error).
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThan(250);
  });

  it('a pause from one gate reaches the other through the cluster', async () => {
    const keyPrefix = `${prefix}-pause-${Date.now()}`;
    // Slots 100 ms apart: the pause, asked 20 ms after b's calls took theirs, has 80 ms to reach b
    // before the second (as in redis-shared-gate.test.ts).
    const perKey = [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] as const;
    const a = gate({ redis: client(), keyPrefix, perKey: [...perKey] });
    const b = gate({ redis: client(), keyPrefix, perKey: [...perKey] });
    const heard: number[] = [];
    b.onPause((e) => heard.push(e.untilMs));
    await b.schedule(() => {}, { key: 'k' });
    // Let b's subscription settle.
    await new Promise((r) => setTimeout(r, 200));
    const waiting = Array.from({ length: 3 }, () => b.schedule(() => performance.now(), { key: 'k' }));
    await new Promise((r) => setTimeout(r, 20));
    const pausedAt = performance.now();
    a.pauseFor(400, 'k');
    const starts = await Promise.all(waiting);
    for (const s of starts.slice(1)) expect(s - pausedAt).toBeGreaterThanOrEqual(395);
    for (let i = 0; i < 50 && heard.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(heard.length).toBeGreaterThan(0);
  });
});
