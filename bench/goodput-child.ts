// One goodput run in its own process: one contender sends one scenario's batch to the simulated API
// that the parent runs, then prints a JSON line of what it saw. A contender still busy at the
// scenario's timeout is reported as such and the process exits (its timers die with it).
// Usage: node --import tsx bench/goodput-child.ts <scenario id> <contender> <api url>
import { isTollgateError } from '../src/index.js';
import { HttpStatusError, makeContender, type WireLog } from './goodput-contenders.js';
import { type ContenderName, contenders, scenarios } from './goodput-scenarios.js';

/** What the child reports to the parent. */
export interface ChildReport {
  /** Why the contender could not run (a missing optional peer), if so. */
  readonly skipped?: string;
  readonly ok: number;
  /** Calls that settled with an error, by reason. */
  readonly failures: Record<string, number>;
  /** Calls still unsettled when the timeout struck. */
  readonly unsettled: number;
  /** First send to last settle (or to the timeout), ms. */
  readonly wallMs: number;
  /** Longest schedule-to-settle of a settled call, ms; the timeout for unsettled ones. */
  readonly slowestMs: number;
  /** HTTP requests dispatched (retries included). */
  readonly dispatches: number;
  /** Requests dispatched while a Retry-After received earlier still ran (each wait capped as in `retryAfterMs`). */
  readonly retryAfterViolations: number;
  /**
   * Time the server forbade: the union of [answer, answer + Retry-After] over 429 and 5xx answers,
   * each wait capped at the scenario's maxRetryAfterMs. What honouring every Retry-After costs at least.
   */
  readonly retryAfterMs: number;
  /** Most 429s in one server window (grouped by X-RateLimit-Reset), and windows that had any. */
  readonly max429PerReset: number;
  readonly resetsWith429: number;
  /** Dispatch times by request id (fetch-based contenders only), to measure dispatch-to-arrival delays. */
  readonly sentAt: Record<string, number>;
}

// Server-given waits are honoured up to this long unless the scenario caps them (the gate's default cap).
const honouredRetryAfterMs = 60_000;

/** Waits the server announced on 429 and 5xx answers: [answer, answer + Retry-After capped at `capMs`]. */
function waitsOf(log: WireLog, capMs: number): (readonly [number, number])[] {
  return log.responses
    .filter((r) => r.retryAfterMs !== undefined && r.status >= 429)
    .map((r) => [r.at, r.at + Math.min(r.retryAfterMs!, capMs)] as const)
    .sort((a, b) => a[0] - b[0]);
}

function retryAfterViolations(log: WireLog, capMs: number): number {
  const waits = waitsOf(log, capMs);
  let violations = 0;
  for (const at of log.dispatches) {
    // A dispatch strictly inside a wait that was announced before it.
    if (waits.some(([from, until]) => from < at && at < until)) violations++;
  }
  return violations;
}

function forbiddenMs(log: WireLog, capMs: number): number {
  const waits = waitsOf(log, capMs);
  // Length of the union of the intervals, swept in order of start.
  let total = 0;
  let end = -Infinity;
  for (const [from, until] of waits) {
    if (until <= end) continue;
    total += until - Math.max(from, end);
    end = until;
  }
  return total;
}

function refusalsPerReset(log: WireLog): { max: number; windows: number } {
  const counts = new Map<string, number>();
  for (const r of log.responses) {
    if (r.status === 429 && r.reset !== undefined) counts.set(r.reset, (counts.get(r.reset) ?? 0) + 1);
  }
  return { max: Math.max(0, ...counts.values()), windows: counts.size };
}

function reason(error: unknown): string {
  if (isTollgateError(error)) return error.code;
  if (error instanceof HttpStatusError) return `HTTP ${error.status}`;
  return error instanceof Error ? error.name : 'error';
}

async function main(): Promise<void> {
  const [scenarioId, name, url] = process.argv.slice(2);
  const scenario = scenarios.find((s) => s.id === scenarioId);
  if (scenario === undefined || url === undefined || !contenders.includes(name as ContenderName)) {
    throw new Error('usage: goodput-child.ts <scenario id> <contender> <api url>');
  }
  const log: WireLog = { dispatches: [], responses: [], sentAt: {} };
  const send = await makeContender(name as ContenderName, scenario, url, log);
  if (typeof send === 'string') {
    const report: ChildReport = {
      skipped: send,
      ok: 0,
      failures: {},
      unsettled: 0,
      wallMs: 0,
      slowestMs: 0,
      dispatches: 0,
      retryAfterViolations: 0,
      retryAfterMs: 0,
      max429PerReset: 0,
      resetsWith429: 0,
      sentAt: {},
    };
    process.stdout.write(`${JSON.stringify(report)}\n`);
    process.exit(0);
  }

  let ok = 0;
  let unsettled = scenario.requests;
  let slowestMs = 0;
  const failures: Record<string, number> = {};
  const startedAt = performance.now();
  let lastSettleAt = startedAt;
  const settle = (scheduledAt: number) => {
    const now = performance.now();
    slowestMs = Math.max(slowestMs, now - scheduledAt);
    lastSettleAt = now;
    unsettled--;
  };
  const calls = Array.from({ length: scenario.requests }, (_, index) => {
    const scheduledAt = performance.now();
    return send(index).then(
      () => {
        ok++;
        settle(scheduledAt);
      },
      (error: unknown) => {
        const key = reason(error);
        failures[key] = (failures[key] ?? 0) + 1;
        settle(scheduledAt);
      },
    );
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = await Promise.race([
    Promise.all(calls).then(() => false),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), scenario.timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  const endAt = timedOut ? performance.now() : lastSettleAt;
  const perReset = refusalsPerReset(log);
  const capMs = scenario.maxRetryAfterMs ?? honouredRetryAfterMs;
  const report: ChildReport = {
    ok,
    failures,
    unsettled,
    wallMs: endAt - startedAt,
    slowestMs: unsettled > 0 ? endAt - startedAt : slowestMs,
    dispatches: log.dispatches.length,
    retryAfterViolations: retryAfterViolations(log, capMs),
    retryAfterMs: forbiddenMs(log, capMs),
    max429PerReset: perReset.max,
    resetsWith429: perReset.windows,
    sentAt: log.sentAt,
  };
  process.stdout.write(`${JSON.stringify(report)}\n`);
  // Peers may hold timers for a day (a honoured Retry-After): leave without waiting for them.
  process.exit(0);
}

await main();
