/**
 * 05: several workers sharing one quota through Redis.
 *
 * An API allows 30 requests/s per account, and three worker processes call it with the same
 * account. Each worker has its own gate, but the gates keep their limit state in Redis (one
 * reservation per call, decided by a Lua script on Redis time), so together they stay under the
 * account's quota instead of each taking 30/s. A 429 seen by one worker would pause all three.
 *
 * Needs a Redis server: REDIS_URL (default redis://127.0.0.1:6379). Without one it says so and exits
 * 0, except in CI (CI=true), where a missing Redis is an error.
 *
 * Run: node --import tsx examples/05-redis-shared-quota.ts
 * In your project the shared gate comes from the package's Redis entry point (see the README).
 */
import { fork } from 'node:child_process';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { startSimulatedApi } from '../src/testing/index.js';

const redisUrl = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const workers = 3;
const callsPerWorker = 30;

interface WorkerReport {
  readonly worker: number;
  readonly ok: number;
  readonly failed: number;
}

async function worker(): Promise<void> {
  const { createSharedGate } = await import('../src/redis/shared-gate.js');
  const { apiUrl, keyPrefix, id } = JSON.parse(process.env['EXAMPLE_WORKER']!) as {
    apiUrl: string;
    keyPrefix: string;
    id: number;
  };
  // 25/s evenly spaced for the whole account: under 30, for network and scheduling jitter.
  const gate = createSharedGate({
    redis: redisUrl,
    keyPrefix,
    limits: [{ algorithm: 'leaky-bucket', limit: 25, intervalMs: 1_000 }],
  });
  const results = await Promise.allSettled(
    Array.from({ length: callsPerWorker }, (_, i) =>
      gate.schedule(() => fetch(`${apiUrl}/v1/accounts/acme/events/${id}-${i}`).then((r) => r.status)),
    ),
  );
  await gate.close();
  const report: WorkerReport = {
    worker: id,
    ok: results.filter((r) => r.status === 'fulfilled' && r.value === 200).length,
    failed: results.filter((r) => r.status === 'rejected' || r.value !== 200).length,
  };
  process.send!(report, () => process.exit(0));
}

function redisAnswers(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port || 6379) });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function main(): Promise<void> {
  if (!(await redisAnswers(redisUrl))) {
    const message = `05-redis-shared-quota: skipped, no Redis answers at ${redisUrl} (set REDIS_URL or start redis-server)`;
    if (process.env['CI'] === 'true') {
      console.error(`${message}; CI must provide one`);
      process.exitCode = 1;
    } else console.log(message);
    return;
  }
  // The provider's quota: 30 requests in any second for the account. The simulated server accepts
  // everything and records arrivals, so the check below measures what the workers sent.
  const quota = { kind: 'sliding-window', limit: 30, intervalMs: 1_000 } as const;
  const api = await startSimulatedApi({ policy: { kind: 'none' } });
  const keyPrefix = `tollgate-example-${process.pid}-${Date.now()}`;
  const started = performance.now();
  const reports = await Promise.all(
    Array.from(
      { length: workers },
      (_, id) =>
        new Promise<WorkerReport>((resolve, reject) => {
          const child = fork(fileURLToPath(import.meta.url), [], {
            execArgv: ['--import', 'tsx'],
            env: {
              ...process.env,
              EXAMPLE_WORKER: JSON.stringify({ apiUrl: api.url, keyPrefix, id: id + 1 }),
            },
          });
          child.once('message', (m) => resolve(m as WorkerReport));
          child.once(
            'exit',
            (code) => code !== 0 && reject(new Error(`worker ${id + 1} exited with ${code}`)),
          );
        }),
    ),
  );
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const stats = api.stats();
  for (const r of reports) console.log(`worker ${r.worker}: ${r.ok} ok, ${r.failed} failed`);
  console.log(
    `${workers} workers, ${workers * callsPerWorker} calls in ${seconds} s; ` +
      `busiest second ${stats.maxAcceptedInWindow(1_000).requests}/30, seconds over the quota: ${stats.overLimitWindows(quota)}`,
  );
  await api.close();
  if (stats.overLimitWindows(quota) !== 0 || reports.some((r) => r.ok !== callsPerWorker))
    process.exitCode = 1;
}

if (process.env['EXAMPLE_WORKER'] !== undefined) await worker();
else await main();
