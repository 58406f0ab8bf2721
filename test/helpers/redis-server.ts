/**
 * Redis for the integration tests: the server at `REDIS_URL` (default redis://127.0.0.1:6379), and
 * dedicated `redis-server` processes on free ports for tests that stop and restart one.
 *
 * A suite skips (visibly) only when no server answers and `CI` is not 'true': in CI it must run.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import type { StoreDecision } from '../../src/redis/store.js';

export const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';

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
      'redis-server',
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
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
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
