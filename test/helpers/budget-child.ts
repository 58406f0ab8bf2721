/**
 * A process that spends from a shared file ledger, for the multi-process budget tests. Run as
 *   node --import tsx test/helpers/budget-child.ts '<json config>'
 * Each admitted call is appended to `sideFile` as `sent <id> <micros>` right after `reserve` returns
 * (that is when a real client would send it; the simulated server charges the estimate), and as
 * `settled <id> <micros>` once settled. Prints a JSON summary on exit.
 */
import { appendFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { createBudgetGuard } from '../../src/budget/budget-guard.js';
import { BudgetExceededError } from '../../src/budget/errors.js';

interface Config {
  ledgerPath: string;
  /** Budget limit in dollars. */
  limit: number;
  /** Concurrent loops in this process. */
  concurrency: number;
  /** Calls attempted per loop. */
  attempts: number;
  /** Each call is "in flight" for a random 0..maxDelayMs. */
  maxDelayMs: number;
  sideFile: string;
  seed: number;
  /** The shared clock origin (ms); this process's clock is t0 + its uptime. */
  t0: number;
  /** Wall-clock time (Date.now()) to start at, so several children start together. */
  startAt?: number;
  /** The simulated paid API: each admitted call is really sent there (it charges the estimate). */
  url?: string;
  /** The budget's thresholds; the ones this process fired are in its summary (`fired`). */
  thresholds?: number[];
  /** Settle each call at this fraction of its estimate (rounded down), so committed spend dips. @default 1 */
  settleFraction?: number;
}

const config = JSON.parse(process.argv[2] ?? '{}') as Config;

// mulberry32: a small seeded generator, so runs are reproducible per seed.
let state = config.seed >>> 0;
function random(): number {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

const fired: number[] = [];
const guard = createBudgetGuard({
  budgets: {
    name: 'shared',
    limit: config.limit,
    period: 'day',
    ...(config.thresholds === undefined ? {} : { thresholds: config.thresholds }),
  },
  onThreshold: (event) => fired.push(event.threshold),
  ledger: { path: config.ledgerPath },
  clock: { now: () => config.t0 + performance.now() },
  reservationTtlMs: 60_000,
});

let sent = 0;
let sentMicros = 0;
let refused = 0;

async function loop(): Promise<void> {
  for (let i = 0; i < config.attempts; i++) {
    const estimateMicros = 1_000 + Math.floor(random() * 20_000);
    let reservation: ReturnType<typeof guard.reserve>;
    try {
      reservation = guard.reserve(estimateMicros);
    } catch (error) {
      if (!(error instanceof BudgetExceededError)) throw error;
      refused++;
      await new Promise((r) => setImmediate(r));
      continue;
    }
    appendFileSync(config.sideFile, `sent ${reservation.id} ${estimateMicros}\n`);
    sent++;
    sentMicros += estimateMicros;
    if (config.url !== undefined) {
      const response = await fetch(`${config.url}/v1/complete`, {
        headers: { 'x-estimate-micros': String(estimateMicros) },
      });
      await response.arrayBuffer();
    }
    await new Promise((r) => setTimeout(r, Math.floor(random() * (config.maxDelayMs + 1))));
    const actualMicros = Math.floor(estimateMicros * (config.settleFraction ?? 1));
    guard.settle(reservation, actualMicros);
    appendFileSync(config.sideFile, `settled ${reservation.id} ${actualMicros}\n`);
  }
}

if (config.startAt !== undefined)
  await new Promise((r) => setTimeout(r, Math.max(0, config.startAt! - Date.now())));
await Promise.all(Array.from({ length: config.concurrency }, loop));
guard.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, sent, sentMicros, refused, fired })}\n`);
