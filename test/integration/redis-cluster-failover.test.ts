/**
 * The Redis store across a failover of a Redis Cluster primary: a private cluster of three
 * primaries with one replica each, started by this file on free loopback ports (and stopped). A
 * coordinated failover (CLUSTER FAILOVER) promotes a replica that holds every write but, as after
 * any restart, perhaps none of the scripts: the store reloads them there and the limits hold, with
 * every decision answered. Runs in CI; elsewhere it skips, visibly, with no `redis-server` binary.
 */
import { type Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimit } from '../../src/core/create-limit.js';
import { StoreUnavailableError } from '../../src/errors.js';
import { DigestCache } from '../../src/redis/redis-keys.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import type { StoreDecision, StoreLevel } from '../../src/redis/store.js';
import { DedicatedCluster, hasRedisServer, REDIS_SERVER_BIN } from '../helpers/redis-server.js';

const skip =
  hasRedisServer() || process.env['CI'] === 'true'
    ? false
    : `no ${REDIS_SERVER_BIN} binary to start a cluster with (install redis-server)`;
if (skip) console.log(`[redis cluster failover] skipped (${skip})`);

const cluster = new DedicatedCluster({ replicas: true });
if (!skip) await cluster.start();
const clients: (Cluster | Redis)[] = [];
afterAll(async () => {
  for (const c of clients) c.disconnect();
  await cluster.stop();
});
const prefix = `tollgate-failover-${process.pid}`;
const digests = new DigestCache();
const T0 = 1_800_000_000_000;

/** A partition whose keys live on primary `i` (slot ranges as DedicatedCluster assigns them). */
async function partitionOn(i: number, name: string): Promise<string> {
  const node = new Redis(cluster.ports[0]!, '127.0.0.1');
  clients.push(node);
  for (let n = 0; ; n++) {
    const p = `${name}-${n}`;
    const slot = (await node.call('CLUSTER', ['KEYSLOT', `{${prefix}:${digests.get(p)}}`])) as number;
    if ((slot <= 5460 ? 0 : slot <= 10922 ? 1 : 2) === i) return p;
  }
}

function store(): RedisStore {
  const client = cluster.client();
  clients.push(client);
  return new RedisStore({ redis: client, keyPrefix: prefix });
}

const leaky: StoreLevel = {
  id: 'l',
  spec: createLimit({ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }).spec,
};
const log: StoreLevel = {
  id: 's',
  spec: createLimit({ algorithm: 'sliding-log', limit: 3, intervalMs: 1000 }).spec,
};

describe.skipIf(skip !== false)('redis store across a cluster failover', () => {
  it('the promoted replica holds every reservation made before, and the store reloads its scripts there', async () => {
    const s = store();
    const p = await partitionOn(0, 'before-after');
    const starts: number[] = [];
    for (let i = 0; i < 3; i++) {
      const d = await s.reserveAt(p, [leaky], [1], 10_000, T0);
      if (d.ok) starts.push(d.startAt - T0);
    }
    expect((await s.reserveAt(p, [log], [3], 0, T0)).ok).toBe(true);
    await cluster.failover(0);
    // A replica that restarted since holds no scripts: make sure this one does not either.
    const promoted = new Redis(cluster.ports[0]!, '127.0.0.1');
    clients.push(promoted);
    await promoted.script('FLUSH');
    // The bucket (batched script) and the log (general script) go on from where they were.
    const after = await s.reserveAt(p, [leaky], [1], 10_000, T0 + 10);
    const full = await s.reserveAt(p, [log], [1], 0, T0 + 10);
    starts.push(after.ok ? after.startAt - T0 : -1);
    expect(starts).toEqual([0, 100, 200, 300]);
    expect(full).toMatchObject({ ok: false, reason: 'wait' });
    await s.close();
  });

  it('decisions issued through a failover are all answered, and the admitted ones keep the limit', async () => {
    const s = store();
    // 50 per second: one start every 20 ms (store time), never two closer.
    const paced: StoreLevel = {
      id: 'paced',
      spec: createLimit({ algorithm: 'leaky-bucket', limit: 50, intervalMs: 1000 }).spec,
    };
    const p = await partitionOn(1, 'during');
    const answers: (StoreDecision | Error)[] = [];
    const pending: Promise<void>[] = [];
    let issuing = true;
    const issue = async () => {
      while (issuing) {
        const decision = s.reserve(p, [paced], [1], 0).then(
          (d) => void answers.push(d),
          (error: Error) => void answers.push(error),
        );
        pending.push(decision);
        await new Promise((r) => setTimeout(r, 2));
      }
    };
    const issuer = issue();
    await new Promise((r) => setTimeout(r, 300));
    await cluster.failover(1);
    await new Promise((r) => setTimeout(r, 500));
    issuing = false;
    await issuer;
    await Promise.all(pending);
    expect(answers).toHaveLength(pending.length);
    const errors = answers.filter((a): a is Error => a instanceof Error);
    for (const error of errors) expect(error).toBeInstanceOf(StoreUnavailableError);
    const starts = answers
      .filter((a): a is StoreDecision & { ok: true } => !(a instanceof Error) && a.ok)
      .map((d) => d.startAt)
      .sort((a, b) => a - b);
    for (let i = 1; i < starts.length; i++)
      expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(20 - 1e-6);
    // It went on deciding after the failover: admitted calls span most of the run.
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThan(500);
    console.log(
      `[redis cluster failover] ${answers.length} decisions through a failover: ${starts.length} admitted, ${errors.length} StoreUnavailableError`,
    );
    await s.close();
  });
});
