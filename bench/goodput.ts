// Goodput against the simulated paid API: tollgate and its peers send the same batch to the same hidden
// policy; the server (in this process) counts what it accepted, refused and when; each contender runs
// in a child process (bench/goodput-child.ts) so its timers, sockets and event loop are its own.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type SimulatedApiStats, startSimulatedApi } from '../src/testing/index.js';
import type { ChildReport } from './goodput-child.js';
import {
  type ContenderName,
  contenders,
  hostileDeadlineMs,
  type Scenario,
  scenarios,
} from './goodput-scenarios.js';
import { fmt, percentile, table } from './stats.js';

const run = promisify(execFile);
const childPath = fileURLToPath(new URL('./goodput-child.ts', import.meta.url));

export interface GoodputRow {
  readonly scenario: Scenario;
  readonly contender: ContenderName;
  readonly report: ChildReport;
  /** 429s the server answered. */
  readonly rejected: number;
  /** 5xx storm answers. */
  readonly unavailable: number;
  readonly accepted: number;
  readonly overLimitWindows: number;
  /** First arrival to last accepted arrival at the server, ms. */
  readonly spanMs: number;
  /** The least span the policy allows for the whole batch, from the run's first arrival, ms. */
  readonly minimumMs: number;
  /** The same for only the calls that were accepted (hostile scenario: the others were refused by design). */
  readonly minimumAcceptedMs: number;
  /** Dispatch-to-arrival delay of each request (ms, across processes on one machine clock). */
  readonly delays: readonly number[];
}

async function measure(scenario: Scenario, contender: ContenderName): Promise<GoodputRow> {
  // Arrival time of every request id that reached admission (storm answers excluded).
  const arrivedAt = new Map<string, number>();
  const api = await startSimulatedApi({
    ...scenario.server,
    price: (request) => {
      arrivedAt.set(request.id, request.arrivedAt);
      return 0;
    },
  });
  let report: ChildReport;
  try {
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', childPath, scenario.id, contender, api.url],
      {
        encoding: 'utf8',
        // The child stops itself at the scenario's timeout; this only guards against a wedged child.
        timeout: scenario.timeoutMs + 30_000,
        killSignal: 'SIGKILL',
        maxBuffer: 1 << 20,
      },
    );
    report = JSON.parse(stdout.trim().split('\n').at(-1)!) as ChildReport;
  } finally {
    await api.close();
  }
  const stats: SimulatedApiStats = api.stats();
  const delays: number[] = [];
  for (const [id, at] of Object.entries(report.sentAt)) {
    const arrival = arrivedAt.get(id);
    if (arrival !== undefined) delays.push(arrival - at);
  }
  const first = stats.firstArrivalAt ?? 0;
  const last = stats.acceptedAt.at(-1) ?? first;
  const tokensPerRequest = scenario.tokensPerRequest;
  return {
    scenario,
    contender,
    report,
    rejected: stats.rejected,
    unavailable: stats.unavailable,
    accepted: stats.accepted,
    overLimitWindows: stats.overLimitWindows(),
    spanMs: last - first,
    minimumMs: stats.physicalMinimumMs({ requests: scenario.requests, tokensPerRequest }),
    minimumAcceptedMs: stats.physicalMinimumMs({ requests: stats.accepted, tokensPerRequest }),
    delays,
  };
}

const failedCalls = (r: GoodputRow) =>
  Object.values(r.report.failures).reduce((a, b) => a + b, 0) + r.report.unsettled;
const refused = (r: GoodputRow) => r.rejected + r.unavailable;
const ratio = (r: GoodputRow) => (r.minimumMs > 0 ? r.spanMs / r.minimumMs : Number.NaN);
const seconds = (ms: number) => fmt(ms / 1000, 2);

function failedCell(r: GoodputRow): string {
  const parts = Object.entries(r.report.failures).map(([reason, n]) => `${n} ${reason}`);
  if (r.report.unsettled > 0) {
    // Calls stuck behind a day-long Retry-After hang; elsewhere they were only too slow.
    const stuck = r.scenario.id === 'hostile' ? 'hung' : 'unfinished at the timeout';
    parts.push(`**${r.report.unsettled} ${stuck}**`);
  }
  return parts.length === 0 ? '0' : parts.join(', ');
}

/** Span over the least span the accepted calls needed, plus the waits the server imposed. */
const honouredRatio = (r: GoodputRow) => r.spanMs / (r.minimumAcceptedMs + r.report.retryAfterMs);

/** Span over minimum; for a run stopped at the timeout, the wall time so far over the minimum (a lower bound). */
const paceOf = (r: GoodputRow) => (r.report.unsettled > 0 ? r.report.wallMs / r.minimumMs : ratio(r));

function ratioCell(r: GoodputRow): string {
  // Still busy at the timeout: the batch will take at least the wall time so far.
  if (r.report.unsettled > 0)
    return `> ${fmt(r.report.wallMs / r.minimumMs, 2)}× (${r.accepted}/${r.scenario.requests} accepted)`;
  const partial = r.accepted < r.scenario.requests ? ` (${r.accepted}/${r.scenario.requests} accepted)` : '';
  return `${fmt(ratio(r), 3)}×${partial}`;
}

function scenarioTable(rows: readonly GoodputRow[]): string {
  const scenario = rows[0]!.scenario;
  const headersOnly = scenario.server.headers === 'x-ratelimit-epoch';
  const headers = [
    'contender',
    'wall s',
    'span / minimum',
    '429s',
    '503s',
    'over-limit windows',
    'calls failed',
    'slowest call s',
    'sends inside a Retry-After',
    'requests sent',
    'dispatch→arrival ms (p50 / max)',
  ];
  if (headersOnly) headers.push('most 429s in one window (windows with any)');
  // Where the server asks for waits, what honouring them costs: the minimum of the calls accepted
  // plus the time the server forbade.
  const waits = scenario.server.storms !== undefined;
  if (waits) headers.push('Retry-After time s', 'span / (minimum of calls accepted + Retry-After time)');
  const body = rows.map((r) => {
    if (r.report.skipped !== undefined)
      return [r.contender, r.report.skipped, ...headers.slice(2).map(() => '')];
    const timedOut = r.report.unsettled > 0;
    const cells: (string | number)[] = [
      r.contender,
      `${timedOut ? '> ' : ''}${seconds(r.report.wallMs)}`,
      ratioCell(r),
      r.rejected,
      r.unavailable,
      r.overLimitWindows,
      failedCell(r),
      `${timedOut ? '> ' : ''}${seconds(r.report.slowestMs)}`,
      r.report.retryAfterViolations,
      r.report.dispatches,
      r.delays.length === 0
        ? '—'
        : `${fmt(percentile([...r.delays], 50), 1)} / ${fmt(Math.max(...r.delays), 1)}`,
    ];
    if (headersOnly) cells.push(`${r.report.max429PerReset} (${r.report.resetsWith429})`);
    if (waits) cells.push(seconds(r.report.retryAfterMs), `${fmt(honouredRatio(r), 3)}×`);
    return cells;
  });
  return table(headers, body);
}

const mark = (ok: boolean) => (ok ? '**pass**' : '**FAIL**');

const isPeer = (r: GoodputRow) => !r.contender.startsWith('tollgate');

/** One line per must-show of issue 3 for `who` (a tollgate variant), from the rows of one run. */
function mustShows(rows: readonly GoodputRow[], who: ContenderName): string[] {
  const of = (id: string) => rows.filter((r) => r.scenario.id === id && r.report.skipped === undefined);
  const ours = (id: string) => of(id).find((r) => r.contender === who);
  const lines: string[] = [];

  const known = [
    ['token-bucket', 1.02],
    ['sliding-window', 1.05],
    ['requests-tokens', 1.05],
  ] as const;
  for (const [id, bound] of known) {
    const r = ours(id);
    if (r === undefined) continue;
    const ok = r.rejected === 0 && ratio(r) <= bound && failedCalls(r) === 0;
    lines.push(
      `- ${mark(ok)} limit known, ${id}: ${r.rejected} 429s (want 0), span ${ratioCell(r)} the physical minimum (want <= ${bound}×).`,
    );
  }

  const h = ours('headers-only');
  if (h !== undefined) {
    const limit = 100;
    // One whole second of Reset resolution per window the batch has to wait for.
    const waits = Math.ceil(h.scenario.requests / limit) - 1;
    const boundMs = h.minimumMs + 1000 * waits;
    const peerRates = of('headers-only')
      .filter(isPeer)
      .map((r) => r.rejected / Math.max(1, r.report.dispatches));
    const ok = h.report.max429PerReset <= 1 && h.spanMs <= boundMs && failedCalls(h) === 0;
    lines.push(
      `- ${mark(ok)} only headers reveal the limit: at most ${h.report.max429PerReset} 429 per reset window (want <= 1; ${h.rejected} in all), ` +
        `span ${seconds(h.spanMs)} s vs ${seconds(boundMs)} s allowed (minimum ${seconds(h.minimumMs)} s + 1 s per reset waited, ${waits}); ` +
        (peerRates.length === 0
          ? 'no peer ran.'
          : `the peers' 429s per request sent: ${fmt(Math.min(...peerRates), 2)} at best.`),
    );
  }

  const s = ours('503-storms');
  const stormPeers = of('503-storms').filter(isPeer);
  if (s !== undefined && stormPeers.length > 0) {
    const peers = stormPeers;
    const best = peers.reduce((a, b) => (refused(a) <= refused(b) ? a : b));
    const ok = refused(s) * 5 <= refused(best) && s.report.retryAfterViolations === 0 && failedCalls(s) === 0;
    lines.push(
      `- ${mark(ok)} 503 storms: ${refused(s)} refused responses vs ${refused(best)} for the best peer (${best.contender}), ` +
        `${fmt(refused(best) / Math.max(1, refused(s)), 1)}× fewer (want >= 5×); ${s.report.retryAfterViolations} sends inside a Retry-After (want 0).`,
    );
  }

  const over = rows
    .filter((r) => r.contender === 'tollgate')
    .map((r) => `${r.scenario.id} ${r.overLimitWindows}`);
  const overOk = rows.filter((r) => r.contender === 'tollgate').every((r) => r.overLimitWindows === 0);
  lines.push(`- ${mark(overOk)} never an over-limit window at the server: ${over.join(', ')}.`);

  // Better: no more refused responses than the peer, and no slower unless the peer lost calls.
  const worse: string[] = [];
  for (const scenario of scenarios) {
    const r = ours(scenario.id);
    if (r === undefined) continue;
    for (const p of of(scenario.id).filter(isPeer)) {
      const fewerRefused = refused(r) <= refused(p);
      // Against each run's own minimum: fixed windows are aligned on the epoch, so the least
      // possible span depends on where in a window a run happened to start.
      const faster = paceOf(r) <= paceOf(p) || failedCalls(p) > failedCalls(r);
      if (!fewerRefused || !faster) {
        worse.push(
          `${scenario.id} vs ${p.contender} (${refused(r)} vs ${refused(p)} refused, ${fmt(paceOf(r), 3)}× vs ${fmt(paceOf(p), 3)}× the minimum)`,
        );
      }
    }
  }
  if (!rows.some(isPeer)) lines.push('- better than every peer: no peer ran.');
  else
    lines.push(
      `- ${mark(worse.length === 0)} better than every peer on every scenario (no more refused responses, no slower against the run's own minimum unless the peer lost calls)` +
        `${worse.length === 0 ? '.' : `: not against ${worse.join('; ')}.`}`,
    );

  const x = ours('hostile');
  if (x !== undefined) {
    const peersHung = of('hostile').filter((r) => isPeer(r) && r.report.unsettled > 0);
    // The deadline is to start; a started call then takes one round trip (20 ms at most here).
    const slackMs = 1000;
    const near = honouredRatio(x);
    // Only the calls answered "come back in a day" may fail (fast); every other call must succeed.
    const otherFailures = failedCalls(x) - (x.report.failures['ERR_RATE_LIMITED'] ?? 0);
    const ok =
      x.report.unsettled === 0 &&
      otherFailures === 0 &&
      x.report.slowestMs <= hostileDeadlineMs + slackMs &&
      near <= 1.1;
    lines.push(
      `- ${mark(ok)} hostile server: slowest call ${seconds(x.report.slowestMs)} s (deadline ${seconds(hostileDeadlineMs)} s), ` +
        `${x.report.unsettled} hung, ${failedCalls(x)} refused fast (${failedCell(x)}); the ${x.accepted} accepted calls took ` +
        `${fmt(near, 3)}× their physical minimum plus the ${seconds(x.report.retryAfterMs)} s the server forbade (capped waits; want <= 1.1×); ` +
        `peers hung: ${peersHung.map((r) => `${r.contender} (${r.report.unsettled})`).join(', ') || 'none'}.`,
    );
  }
  return lines;
}

export interface GoodputResult {
  readonly rows: readonly GoodputRow[];
  readonly markdown: string;
  /** Must-show lines per tollgate variant. */
  readonly mustShows: Readonly<Record<string, readonly string[]>>;
}

/**
 * Run the scenarios (all, or those named in `only`) against every contender (or those in `who`).
 * Sequential: one server and one client at a time on this machine.
 */
export async function goodput(only?: readonly string[], who?: readonly string[]): Promise<GoodputResult> {
  const rows: GoodputRow[] = [];
  const parts: string[] = [];
  for (const scenario of scenarios) {
    if (only !== undefined && !only.includes(scenario.id)) continue;
    const scenarioRows: GoodputRow[] = [];
    for (const contender of contenders) {
      if (who !== undefined && !who.includes(contender)) continue;
      console.log(`goodput: ${scenario.id} / ${contender}...`);
      const row = await measure(scenario, contender);
      scenarioRows.push(row);
      rows.push(row);
    }
    const minimum = scenarioRows[0]?.minimumMs ?? 0;
    parts.push(
      `### ${scenario.title}`,
      '',
      `${scenario.description} ${scenario.requests} calls scheduled at once; physical minimum ${seconds(minimum)} s ` +
        '(first to last arrival, from the first arrival of the run).',
      '',
      scenarioTable(scenarioRows),
      '',
    );
  }
  const variants = contenders.filter((c) => c.startsWith('tollgate') && rows.some((r) => r.contender === c));
  const lines = Object.fromEntries(variants.map((c) => [c, mustShows(rows, c)]));
  return { rows, markdown: parts.join('\n'), mustShows: lines };
}
