/**
 * `tollgate demo`: offline, in under half a minute. A simulated paid API on 127.0.0.1 enforces a
 * limit the client is not told (50 requests/s, bursts of 10) and answers with OpenAI-style
 * rate-limit headers and a price per accepted request. The same workload runs twice: as the usual
 * client does it (a p-queue of 16, retry 429s with backoff), then through `tollgate run` told only
 * `--concurrency 8` and a budget. It prints the comparison and writes a self-contained chart.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { formatMicros } from '../../index.js';
import { startSimulatedApi } from '../../testing/index.js';
import { CliError } from '../cli-error.js';
import { ExitCode, type ExitCodeValue } from '../exit-codes.js';
import { parseInteger } from '../parse-units.js';
import type { ProgressMode } from '../progress.js';
import { parseArgv, parseRunOptions } from '../run-options.js';
import { type AttemptRecord, runBatch } from '../runner.js';
import { formatMs } from '../summary.js';
import { type ChartRun, reportHtml } from './report-html.js';
import { runUnthrottled } from './unthrottled.js';

const flags = {
  requests: { type: 'string' },
  report: { type: 'string' },
  progress: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const demoHelp = `Usage: tollgate demo [options]

Offline: starts a simulated paid API on 127.0.0.1 with a hidden limit (50 requests/s, burst 10),
OpenAI-style rate-limit headers and a price of $0.0025 per accepted request; runs the same
workload without tollgate and through \`tollgate run\`; prints the comparison and writes a chart.

Options:
  --requests 300          size of the workload (default 300)
  --report FILE           where the chart goes (default demo-report.html)
  --progress auto|bar|plain|none`;

// The hidden server and the job's settings.
const hidden = { ratePerSec: 50, burst: 10 } as const;
const priceMicros = 2_500;
const budgetMicros = 600_000;
const unthrottledConcurrency = 16;

const now = () => performance.timeOrigin + performance.now();

function pct(part: number, whole: number): string {
  return whole === 0 ? '0%' : `${Math.round((100 * part) / whole)}%`;
}

function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => `  ${r.map((c, i) => c.padEnd(widths[i]!)).join('   ')}`.trimEnd()).join('\n');
}

export async function demoCommand(args: readonly string[]): Promise<ExitCodeValue> {
  const { values } = parseArgv('demo', args, flags, false);
  if (values.help) {
    process.stdout.write(`${demoHelp}\n`);
    return ExitCode.ok;
  }
  const n = values.requests === undefined ? 300 : parseInteger('--requests', values.requests, 1);
  const reportPath = resolve(values.report ?? 'demo-report.html');
  const progress = (values.progress ?? 'auto') as ProgressMode;
  if (!['auto', 'bar', 'plain', 'none'].includes(progress)) {
    throw new CliError(`Expected --progress to be auto, bar, plain or none, got \`${progress}\``);
  }

  const api = await startSimulatedApi({
    policy: { kind: 'token-bucket', limit: hidden.ratePerSec, intervalMs: 1_000, burst: hidden.burst },
    headers: 'openai',
    price: priceMicros,
    latencyMs: { min: 20, max: 80 },
  });
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-demo-'));
  const out = process.stdout;
  try {
    out.write(
      `tollgate demo: a simulated paid API at ${api.url}\n` +
        `  hidden limit ${hidden.ratePerSec} requests/s (bursts of ${hidden.burst}), OpenAI-style rate-limit headers,\n` +
        `  ${formatMicros(priceMicros)} per accepted request; the job's budget: ${formatMicros(budgetMicros)} a day.\n` +
        `  Workload: ${n} GET requests (${formatMicros(n * priceMicros)} if all are sent).\n\n`,
    );
    const urls = Array.from({ length: n }, (_, i) => `${api.url}/v1/items/${i + 1}`);

    // 1. Without tollgate.
    out.write(
      `1/2 without tollgate: ${unthrottledConcurrency} at a time, 429s retried with backoff (up to 8 attempts)\n`,
    );
    const before = await runUnthrottled({
      urls,
      concurrency: unthrottledConcurrency,
      maxAttempts: 8,
      backoffBaseMs: 100,
      progress,
      now,
      random: Math.random,
      priceMicros,
    });
    const s1 = api.stats();
    const beforeMinMs = s1.physicalMinimumMs({ requests: s1.accepted });
    api.reset();

    // 2. Through `tollgate run`, told nothing about the limit.
    const input = join(dir, 'requests.jsonl');
    writeFileSync(input, `${urls.map((url, i) => JSON.stringify({ id: `r${i + 1}`, url })).join('\n')}\n`);
    const runArgs = [
      '--concurrency',
      '8',
      '--budget',
      `demo=${budgetMicros / 1e6}usd/day`,
      '--price',
      `${priceMicros / 1e6}usd`,
      '--ledger',
      'memory',
    ];
    out.write(`\n2/2 through tollgate: tollgate run requests.jsonl ${runArgs.join(' ')}\n`);
    const { config } = parseRunOptions([
      input,
      '--out',
      join(dir, 'results.jsonl'),
      '--progress',
      progress,
      ...runArgs,
    ]);
    const attempts: AttemptRecord[] = [];
    const pauses: { at: number; untilMs: number }[] = [];
    const spend: { at: number; micros: number }[] = [];
    const after = await runBatch(
      config,
      {},
      {
        onAttempt: (a) => attempts.push(a),
        onPause: (p) => pauses.push({ at: p.at, untilMs: p.untilMs }),
        onResult: (r) => {
          if (r.priceMicros !== undefined && r.ok) spend.push({ at: r.at, micros: r.priceMicros });
        },
      },
    );
    const s2 = api.stats();
    const afterMinMs = s2.physicalMinimumMs({ requests: s2.accepted });

    // The comparison.
    const beforeMs = before.lastDone - before.firstStart;
    const afterStart = attempts.reduce((t, a) => Math.min(t, a.startedAt), Number.POSITIVE_INFINITY);
    const afterEnd = spend.reduce((t, s) => Math.max(t, s.at), afterStart);
    const afterMs = Number.isFinite(afterStart) ? afterEnd - afterStart : 0;
    const beforeWasted = before.attempts.length - before.ok;
    const afterWasted = after.attempts - after.ok;
    const heldBack = n - after.sent;
    const rows = [
      ['', 'without tollgate', 'with tollgate'],
      [
        'requests sent',
        `${n}`,
        `${after.sent}${heldBack > 0 ? ` (${heldBack} held back by the budget)` : ''}`,
      ],
      ['succeeded', `${before.ok}${before.failed > 0 ? ` (${before.failed} gave up)` : ''}`, `${after.ok}`],
      ['answered 429', `${s1.rejected}`, `${s2.rejected}`],
      [
        'wasted calls',
        `${beforeWasted} (${pct(beforeWasted, before.attempts.length)} of ${before.attempts.length} calls)`,
        `${afterWasted} (${pct(afterWasted, after.attempts)} of ${after.attempts} calls)`,
      ],
      ['wall time', formatMs(beforeMs), formatMs(afterMs)],
      ["server's minimum", formatMs(beforeMinMs), formatMs(afterMinMs)],
      [
        'spend',
        `${formatMicros(s1.totalChargedMicros)} (${pct(s1.totalChargedMicros, budgetMicros)} of the budget)`,
        `${formatMicros(s2.totalChargedMicros)} (${pct(s2.totalChargedMicros, budgetMicros)} of the budget)`,
      ],
    ];
    out.write(`\n${table(rows)}\n`);
    out.write(
      `\n  "server's minimum": the least time the hidden limit allows for the requests each run got accepted.\n` +
        `  tollgate was told only --concurrency 8: it paced itself from the response headers, and it\n` +
        `  reserved each request's price before sending, so ${heldBack > 0 ? 'spend stopped at the budget' : 'spend could not pass the budget'}.\n`,
    );

    const runs: ChartRun[] = [
      {
        title: 'Without tollgate',
        subtitle: `${n} requests, ${s1.rejected} × 429, ${formatMs(beforeMs)}, ${formatMicros(s1.totalChargedMicros)} spent`,
        attempts: before.attempts,
        pauses: [],
        spend: before.results.filter((r) => r.ok).map((r) => ({ at: r.at, micros: priceMicros })),
        origin: before.firstStart,
      },
      {
        title: 'Through tollgate',
        subtitle: `${after.sent} requests, ${s2.rejected} × 429, ${formatMs(afterMs)}, ${formatMicros(s2.totalChargedMicros)} spent; ${after.pauses} pauses`,
        attempts,
        pauses,
        spend,
        origin: Number.isFinite(afterStart) ? afterStart : now(),
      },
    ];
    writeFileSync(
      reportPath,
      reportHtml({
        title: 'tollgate demo: the same paid-API job without and with tollgate',
        limitLabel: `${hidden.ratePerSec} requests/s = ${hidden.ratePerSec / 10} per 100 ms (bursts of ${hidden.burst})`,
        limitPerBin: hidden.ratePerSec / 10,
        budgetMicros,
        runs,
        table: rows,
        notes: [
          `Simulated API on 127.0.0.1: token bucket ${hidden.ratePerSec}/s, burst ${hidden.burst}, OpenAI-style x-ratelimit-* headers, Retry-After on 429, 20–80 ms latency, ${formatMicros(priceMicros)} per accepted request.`,
          `Without tollgate: p-queue with concurrency ${unthrottledConcurrency}; a 429 is retried after random(0, 100 ms · 2^attempt), up to 8 attempts; headers ignored.`,
          `Through tollgate: tollgate run requests.jsonl ${runArgs.join(' ')}`,
          `Generated ${new Date().toISOString()} by \`npm run demo\`.`,
        ],
      }),
    );
    const shown = relative(process.cwd(), reportPath);
    out.write(
      `\nChart: ${shown.startsWith('..') ? reportPath : shown} (${pathToFileURL(reportPath).href})\n`,
    );
    return ExitCode.ok;
  } finally {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
