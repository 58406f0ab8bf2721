/**
 * Redis for the integration tests: the server at `REDIS_URL` (default redis://127.0.0.1:6379), and
 * dedicated `redis-server` processes on free ports for tests that stop and restart one.
 *
 * A suite skips (visibly) only when no server answers and `CI` is not 'true': in CI it must run.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import type { StoreDecision } from '../../src/redis/store.js';

export const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
/**
 * The server binary the tests start their own servers with: `redis-server`, or another
 * (`REDIS_SERVER_BIN=valkey-server` in CI's Valkey pass).
 */
export const REDIS_SERVER_BIN = process.env['REDIS_SERVER_BIN'] || 'redis-server';

/** True when a Redis server answers PING at `url` within a second. */
export async function redisAnswers(url = REDIS_URL): Promise<boolean> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await Promise.race([
      client.connect().then(() => client.ping()),
      new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 1000)),
    ]);
    return true;
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/**
 * Why a Redis suite is skipped, or false to run it. Never skips in CI: a missing server there is a
 * failure the suite reports.
 */
export async function redisSkipReason(url = REDIS_URL): Promise<string | false> {
  if (await redisAnswers(url)) return false;
  if (process.env['CI'] === 'true') return false;
  return `no Redis server answers at ${url} (set REDIS_URL, or start redis-server)`;
}

/** A port nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}

/** A private `redis-server` (no persistence) on `port`, for outage tests. */
export class DedicatedRedis {
  private proc: ChildProcess | undefined;
  constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const proc = spawn(
      REDIS_SERVER_BIN,
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    this.proc = proc;
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`redis-server on ${this.port} exited (${proc.exitCode})`);
      if (await redisAnswers(this.url)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`redis-server on ${this.port} did not answer`);
  }

  /** Kill it at once (no shutdown handshake): an outage. */
  async stop(): Promise<void> {
    const proc = this.proc;
    this.proc = undefined;
    if (proc === undefined || proc.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      proc.once('exit', () => resolve());
      proc.kill('SIGKILL');
    });
  }
}

/** Keys under a partition's hash tag (SCAN, so it is safe on a shared server). */
export async function keysOfTag(client: Redis, pattern: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  return keys;
}

/** True when a `redis-server` binary is installed (tests that start their own server need it). */
export function hasRedisServer(): boolean {
  try {
    execFileSync(REDIS_SERVER_BIN, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A decision without its per-store id, marks as numbers (JS and Lua print doubles differently). */
export function comparable(d: StoreDecision): unknown {
  if (!d.ok) return d;
  return {
    startAt: d.startAt,
    serverNow: d.serverNow,
    marks: d.marks.map((m) => (m === '' ? '' : Number(m))),
    // Learned ids are store-specific names (Redis hashes them).
    learned: d.learned.map((l) => ({ cost: l.cost, mark: l.mark === '' ? '' : Number(l.mark) })),
  };
}

/**
 * A private Redis Cluster of three primaries (no persistence), with one replica each when asked, on
 * free loopback ports, its configuration in a temporary directory: slots given with CLUSTER
 * ADDSLOTSRANGE, the nodes introduced with CLUSTER MEET and replicas attached with CLUSTER REPLICATE
 * (no redis-cli needed). `stop()` kills the servers and removes it.
 */
export class DedicatedCluster {
  /** The primaries' ports, in slot order (a failover swaps a primary's and its replica's). */
  readonly ports: number[] = [];
  /** Each primary's replica's port (with `replicas`), same order. */
  readonly replicaPorts: number[] = [];
  private readonly procs: ChildProcess[] = [];
  private dir: string | undefined;

  constructor(private readonly options: { readonly replicas?: boolean } = {}) {}

  /** A new ioredis Cluster client on it (the caller disconnects it). */
  client(): Cluster {
    return new Cluster([{ host: '127.0.0.1', port: this.ports[0]! }], {
      redisOptions: { showFriendlyErrorStack: false },
    });
  }

  /** A plain connection to each primary (the caller disconnects them). */
  nodes(): Redis[] {
    return this.ports.map((port) => new Redis(port, '127.0.0.1'));
  }

  private async spawnNode(): Promise<number> {
    const port = await freePort();
    const proc = spawn(
      REDIS_SERVER_BIN,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `nodes-${port}.conf`,
        '--dir',
        this.dir!,
      ],
      { stdio: 'ignore' },
    );
    this.procs.push(proc);
    return port;
  }

  async start(): Promise<void> {
    this.dir = mkdtempSync(join(tmpdir(), 'tollgate-cluster-'));
    for (let i = 0; i < 3; i++) this.ports.push(await this.spawnNode());
    if (this.options.replicas) for (let i = 0; i < 3; i++) this.replicaPorts.push(await this.spawnNode());
    const deadline = Date.now() + 30_000;
    const wait = async (what: string, done: () => Promise<boolean>) => {
      while (!(await done())) {
        if (Date.now() > deadline) throw new Error(what);
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    const all = [...this.ports, ...this.replicaPorts];
    for (const port of all)
      await wait(`cluster node on ${port} did not answer`, () => redisAnswers(`redis://127.0.0.1:${port}`));
    const nodes = all.map((port) => new Redis(port, '127.0.0.1'));
    try {
      const ranges: [number, number][] = [
        [0, 5460],
        [5461, 10922],
        [10923, 16383],
      ];
      for (let i = 0; i < 3; i++)
        await nodes[i]!.call('CLUSTER', ['ADDSLOTSRANGE', ranges[i]![0], ranges[i]![1]]);
      // Every node meets every other (quicker to agree than waiting for gossip to spread).
      for (const node of nodes) {
        for (const port of all) await node.call('CLUSTER', ['MEET', '127.0.0.1', port]);
      }
      for (let i = 0; i < this.replicaPorts.length; i++) {
        const primaryId = String(await nodes[i]!.call('CLUSTER', ['MYID']));
        const replica = nodes[3 + i]!;
        // Refused until the replica has heard of the primary through the meeting.
        await wait('a replica did not attach to its primary', () =>
          replica.call('CLUSTER', ['REPLICATE', primaryId]).then(
            () => true,
            () => false,
          ),
        );
        await wait('a replica did not sync with its primary', async () =>
          String(await replica.info('replication')).includes('master_link_status:up'),
        );
      }
      for (const node of nodes) {
        await wait('the cluster did not reach cluster_state:ok', async () =>
          String(await node.call('CLUSTER', ['INFO'])).includes('cluster_state:ok'),
        );
        // Every node knows every slot's owner (a client asking any node is routed right).
        await wait(
          'the cluster nodes did not learn every slot',
          async () => ((await node.call('CLUSTER', ['SLOTS'])) as unknown[]).length >= 3,
        );
      }
    } finally {
      for (const node of nodes) node.disconnect();
    }
  }

  /**
   * A manual failover of primary `i` (CLUSTER FAILOVER on its replica: the replica catches up with
   * every write first, then takes the slots): resolves once every node routes them to it.
   */
  async failover(i: number): Promise<void> {
    const replicaPort = this.replicaPorts[i]!;
    const oldPort = this.ports[i]!;
    const replica = new Redis(replicaPort, '127.0.0.1');
    const others = [...this.ports, ...this.replicaPorts].map((port) => new Redis(port, '127.0.0.1'));
    try {
      await replica.call('CLUSTER', ['FAILOVER']);
      const deadline = Date.now() + 30_000;
      for (const node of others) {
        for (;;) {
          const slots = (await node.call('CLUSTER', ['SLOTS'])) as [number, number, [string, number]][];
          if (slots.some(([, , [, port]]) => port === replicaPort)) break;
          if (Date.now() > deadline) throw new Error(`the failover to ${replicaPort} did not spread`);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      this.ports[i] = replicaPort;
      this.replicaPorts[i] = oldPort;
    } finally {
      replica.disconnect();
      for (const node of others) node.disconnect();
    }
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.procs.map(
        (proc) =>
          new Promise<void>((resolve) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
            proc.once('exit', () => resolve());
            proc.kill('SIGKILL');
          }),
      ),
    );
    this.procs.length = 0;
    if (this.dir !== undefined) rmSync(this.dir, { recursive: true, force: true });
    this.dir = undefined;
  }
}
