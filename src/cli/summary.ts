/** The end-of-run summary of `tollgate run`, as plain text lines. */
import { relative, resolve } from 'node:path';
import { defaultLedgerPath, formatMicros } from '../index.js';
import { ExitCode } from './exit-codes.js';
import type { RunReport } from './runner.js';

export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '∞';
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60_000);
  if (m < 120) return `${m} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

function shortPath(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel.startsWith('..') || rel === '' ? path : rel;
}

/** One line per topic: requests, attempts, spend, time, outcome. */
export function formatSummary(report: RunReport): string {
  const lines: string[] = [];
  const input = report.input === '-' ? 'stdin' : shortPath(report.input);
  lines.push(`Summary: ${input} → ${shortPath(report.out)}`);

  const req = [`${report.sent} sent`, `${report.ok} ok`, `${report.failed} failed`];
  if (report.skipped > 0) {
    const earlier = report.earlierFailures > 0 ? `; ${report.earlierFailures} of them failed earlier` : '';
    req.unshift(`${report.skipped} already done (skipped${earlier})`);
  }
  if (report.aborted > 0) req.push(`${report.aborted} aborted in flight (no result)`);
  if (report.notSent > 0) req.push(`${report.notSent} not sent`);
  if (report.malformed > 0) req.push(`${plural(report.malformed, 'malformed line')} skipped`);
  lines.push(`  requests   ${req.join(' · ')}`);

  const att = [
    plural(report.attempts, 'attempt'),
    `${plural(report.retried, 'request')} retried`,
    `${report.throttled} × 429`,
  ];
  if (report.serverErrors > 0) att.push(`${report.serverErrors} × 5xx`);
  att.push(
    `${plural(report.pauses, 'pause')}${report.pauses > 0 ? ` (${formatMs(report.pausedMs)} paused)` : ''}`,
  );
  lines.push(`  attempts   ${att.join(' · ')}`);

  if (report.spend.length > 0) {
    for (const s of report.spend) {
      const reset = Number.isFinite(s.resetAt) ? new Date(s.resetAt).toISOString() : 'never';
      const reserved =
        s.reservedMicros > 0 ? ` (+${formatMicros(s.reservedMicros, s.currency)} reserved)` : '';
      lines.push(
        `  spend      ${formatMicros(s.spentMicros, s.currency)}${reserved} of ${formatMicros(s.limitMicros, s.currency)} ` +
          `(budget \`${s.budgetId}\`, ${s.period}; resets ${reset})`,
      );
    }
    if (report.ledger !== undefined) {
      lines.push(`  ledger     ${ledgerText(report.ledger)}`);
    }
  }

  const shared = report.sharedStore;
  if (shared !== undefined && (shared.fallbackCalls > 0 || shared.down)) {
    const parts: string[] = [];
    if (shared.fallbackCalls > 0) {
      parts.push(
        `${plural(shared.fallbackCalls, 'request')} went through the local fallback while Redis was not answering ` +
          '(limits held for this process only, not shared)',
      );
    }
    if (shared.down) parts.push('Redis was still not answering at the end');
    lines.push(`  redis      ${parts.join('; ')}`);
  }

  let time = `  wall time  ${formatMs(report.wallMs)}`;
  if (report.finished > 0 && report.sent > 0)
    time += ` (first start to last result ${formatMs(report.activeMs)})`;
  if (report.minimumMs !== undefined && report.sent > 1) {
    time += `; your limits allow no less than ${formatMs(report.minimumMs)}`;
    if ((report.sharedStore?.fallbackCalls ?? 0) > 0) {
      // Those requests went at the fallback's share of each limit: the full limits' pace is no yardstick.
      time += ' (pace not judged: some requests ran on the local fallback)';
    } else if (report.minimumMs > 0 && report.activeMs > 0) {
      time += ` (${Math.round((100 * report.minimumMs) / report.activeMs)}% of the ideal pace)`;
    }
  } else if (report.sent > 1) time += '; no rate limit configured';
  lines.push(time);

  lines.push(`  exit ${report.exitCode}     ${outcome(report)}`);
  return lines.join('\n');
}

// A word the shell takes as it is; anything else (a space, a per-key id's brackets) is quoted.
function shellWord(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}

/** The key prefix of a run's Redis ledger (its label is `redis:<prefix>`), or undefined. */
function redisLedgerPrefix(ledger: string | undefined): string | undefined {
  return ledger?.startsWith('redis:') ? ledger.slice('redis:'.length) : undefined;
}

function ledgerText(ledger: string): string {
  if (ledger === 'memory') return 'memory (not kept)';
  const prefix = redisLedgerPrefix(ledger);
  return prefix === undefined
    ? shortPath(ledger)
    : `Redis, key prefix ${prefix} (shared with every process using it)`;
}

/**
 * ` (or \`tollgate budget reset …\`)` for the budget that stopped the run, in the ledger it used:
 * without `--budget` the command resets every budget, and without `--ledger` the default file.
 */
function resetHint(ledger: string | undefined, budgetId: string): string {
  // A memory ledger is not kept: a re-run starts from zero, there is nothing to reset.
  if (ledger === 'memory') return '';
  const words = ['tollgate', 'budget', 'reset'];
  const prefix = redisLedgerPrefix(ledger);
  // The Redis URL is not repeated (it may hold a password): URL stands for it.
  if (prefix !== undefined) {
    words.push('--redis', 'URL');
    if (prefix !== 'tollgate') words.push('--key-prefix', shellWord(prefix));
  } else if (ledger !== undefined && resolve(ledger) !== defaultLedgerPath())
    words.push('--ledger', shellWord(shortPath(ledger)));
  words.push('--budget', shellWord(budgetId), '--yes');
  return ` (or \`${words.join(' ')}\`)`;
}

function outcome(report: RunReport): string {
  switch (report.exitCode) {
    case ExitCode.interrupted:
      return `interrupted${report.killed ? ' (requests in flight aborted)' : ''}: ${plural(report.finished, 'result')} written; run the same command again to resume`;
    case ExitCode.budget: {
      const b = report.budgetStop!;
      const reset = Number.isFinite(b.resetAt) ? new Date(b.resetAt).toISOString() : 'never';
      return `stopped by budget \`${b.budgetId}\` (${formatMicros(b.spentMicros + b.reservedMicros, b.currency)} of ${formatMicros(b.limitMicros, b.currency)}): the rest was not sent; re-run after ${reset}${resetHint(report.ledger, b.budgetId)} to resume`;
    }
    case ExitCode.usage:
      return `stopped by --strict at a malformed line: ${report.strictStop ?? ''}`;
    case ExitCode.partial: {
      const parts: string[] = [];
      if (report.failed > 0)
        parts.push(`${plural(report.failed, 'request')} failed ("ok": false in the results)`);
      if (report.earlierFailures > 0)
        parts.push(
          `${plural(report.earlierFailures, 'earlier failure')} still in the results (not sent again in this run)`,
        );
      if (report.malformed > 0) parts.push(`${plural(report.malformed, 'malformed line')} skipped`);
      const retry = report.failed > 0 || report.earlierFailures > 0;
      return `partial failure: ${parts.join('; ')}${retry ? '; re-run with --retry-failed to send them again' : ''}`;
    }
    default:
      return report.finished === 0 && report.skipped > 0
        ? 'nothing to do: every request already has a result'
        : 'done: every request has a successful result';
  }
}
