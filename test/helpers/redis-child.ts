/**
 * A process that sends calls through a shared gate, for the multi-process Redis tests. Forked with
 * `--import tsx`; it receives one JSON config over IPC and answers over IPC.
 *
 * - `traffic`: warm up, answer `ready`, wait for `go` with a wall-clock `startAt` (so the processes
 *   start together), schedule `calls` GET requests to `apiUrl` through a gate on `redisUrl`, report
 *   each call's outcome.
 * - `hold`: take concurrency permits, budget reservations and future limit slots, report
 *   `holding`, then wait (the test kills it with SIGKILL).
 */
import type { LimitSpec } from '../../src/core/limit.js';
import type { Inspection } from '../../src/gate/gate.js';
import { AsyncBudgetGuard } from '../../src/redis/async-budget-guard.js';
import { RedisLedger } from '../../src/redis/redis-ledger.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';

export interface TrafficConfig {
  readonly scenario: 'traffic';
  readonly id: number;
  readonly redisUrl: string;
  readonly keyPrefix: string;
  readonly limits: readonly LimitSpec[];
  readonly apiUrl: string;
  readonly calls: number;
  readonly maxQueueTimeMs?: number;
  readonly arrivalMarginMs?: number;
}

export interface HoldConfig {
  readonly scenario: 'hold';
  readonly redisUrl: string;
  readonly keyPrefix: string;
  readonly limits: readonly LimitSpec[];
  readonly perKey: readonly LimitSpec[];
  readonly concurrencyLeaseMs: number;
  readonly hangUrl: string;
  /** Calls that take a permit and never finish. */
  readonly held: number;
  /** Further calls that reserve future slots on the timed limits. */
  readonly queued: number;
  readonly budget: {
    readonly limitMicros: number;
    readonly rollingMs: number;
    readonly ttlMs: number;
    readonly priceMicros: number;
  };
}

export interface CallOutcome {
  readonly ok: boolean;
  readonly status?: number;
  readonly error?: string;
  /** Wall-clock ms when the request was sent (its last attempt). */
  readonly sentAt?: number;
  /** Wall-clock ms of every attempt, in order (a throttled call is sent again after the pause). */
  readonly sends: readonly number[];
  /** Wall-clock ms when the last attempt's response had been read. */
  readonly doneAt?: number;
}

export type ChildMessage =
  | {
      readonly type: 'done';
      readonly id: number;
      readonly outcomes: readonly CallOutcome[];
      readonly paused: number;
      /** Wall-clock ms when the gate first applied a pause (its own or heard from another process). */
      readonly firstPauseAt?: number;
    }
  | { readonly type: 'ready'; readonly id: number }
  | { readonly type: 'holding'; readonly budgetIds: readonly string[] }
  | { readonly type: 'error'; readonly message: string };

const wallNow = () => performance.timeOrigin + performance.now();

/** Answer the parent; `exit` ends the process once the message is out (keep-alive sockets linger). */
function reply(message: ChildMessage, exit: boolean): void {
  process.send!(message, () => {
    if (exit) process.exit(0);
  });
}

async function traffic(config: TrafficConfig): Promise<void> {
  const gate = createSharedGate({
    redis: config.redisUrl,
    keyPrefix: config.keyPrefix,
    limits: config.limits,
    failure: 'fail-closed',
    commandTimeoutMs: 1000,
    ...(config.maxQueueTimeMs === undefined ? {} : { maxQueueTimeMs: config.maxQueueTimeMs }),
    ...(config.arrivalMarginMs === undefined ? {} : { arrivalMarginMs: config.arrivalMarginMs }),
  });
  let paused = 0;
  let firstPauseAt: number | undefined;
  gate.onPause(() => {
    paused++;
    firstPauseAt ??= wallNow();
  });
  // Warm up Redis (connection, scripts, pause subscription) and fetch (undici loads lazily, and a
  // cold first request is tens of ms late) before the common start; the parent then resets the API.
  await gate.store.time();
  await fetch(`${config.apiUrl}/warmup`).then((r) => r.arrayBuffer());
  const go = new Promise<number>((resolve) =>
    process.once('message', (m: { type: 'go'; startAt: number }) => resolve(m.startAt)),
  );
  reply({ type: 'ready', id: config.id }, false);
  const startAt = await go;
  await new Promise((r) => setTimeout(r, Math.max(0, startAt - Date.now())));
  const inspect = (r: { status: number; headers: Headers }): Inspection => ({
    status: r.status,
    headers: r.headers,
  });
  const outcomes = await Promise.all(
    Array.from({ length: config.calls }, async (_, call): Promise<CallOutcome> => {
      let sentAt: number | undefined;
      let doneAt: number | undefined;
      const sends: number[] = [];
      try {
        const r = await gate.schedule(
          async () => {
            sentAt = wallNow();
            // The server can tell each attempt apart: process, call and attempt number.
            const send = `${config.id}-${call}-${sends.length}`;
            sends.push(sentAt);
            const res = await fetch(config.apiUrl, {
              headers: { 'x-proc': String(config.id), 'x-send': send },
            });
            await res.arrayBuffer();
            doneAt = wallNow();
            return res;
          },
          { inspect },
        );
        return {
          ok: true,
          status: r.status,
          sends,
          ...(sentAt === undefined ? {} : { sentAt }),
          ...(doneAt === undefined ? {} : { doneAt }),
        };
      } catch (error) {
        return {
          ok: false,
          error: String((error as Error).message ?? error),
          sends,
          ...(sentAt === undefined ? {} : { sentAt }),
        };
      }
    }),
  );
  await gate.close();
  reply(
    {
      type: 'done',
      id: config.id,
      outcomes,
      paused,
      ...(firstPauseAt === undefined ? {} : { firstPauseAt }),
    },
    true,
  );
}

async function hold(config: HoldConfig): Promise<void> {
  const store = new RedisStore({
    redis: config.redisUrl,
    keyPrefix: config.keyPrefix,
    concurrencyLeaseMs: config.concurrencyLeaseMs,
  });
  const ledger = new RedisLedger({ redis: config.redisUrl, keyPrefix: config.keyPrefix });
  const budget = new AsyncBudgetGuard({
    budgets: {
      name: 'rolling',
      limit: { micros: config.budget.limitMicros },
      period: { rollingMs: config.budget.rollingMs },
    },
    ledger,
    reservationTtlMs: config.budget.ttlMs,
  });
  const gate = createSharedGate({
    store,
    limits: config.limits,
    perKey: config.perKey,
    budget,
    failure: 'fail-closed',
  });
  let started = 0;
  const hang = () => {
    started++;
    return fetch(config.hangUrl).then((r) => r.arrayBuffer());
  };
  // Held calls take the per-key permits of key 'held'; queued ones (key 'queued') only wait for slots.
  for (let i = 0; i < config.held + config.queued; i++) {
    const key = i < config.held ? 'held' : 'queued';
    gate.schedule(hang, { key, priceMicros: config.budget.priceMicros }).catch(() => {});
  }
  while (started < config.held) await new Promise((r) => setTimeout(r, 5));
  // Let the queued calls' reservations land in Redis.
  await new Promise((r) => setTimeout(r, 100));
  reply({ type: 'holding', budgetIds: ['rolling'] }, false);
}

process.once('message', (config: TrafficConfig | HoldConfig) => {
  const run = config.scenario === 'traffic' ? traffic(config) : hold(config);
  run.catch((error: unknown) => {
    reply({ type: 'error', message: String((error as Error)?.stack ?? error) }, true);
  });
});
