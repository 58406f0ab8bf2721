/**
 * `tollgate budget [show|reset]`: the persistent ledger as it stands (per budget: spent, reserved,
 * limit, remaining, resets at), and resetting it (only with --yes). The ledger file, or with
 * --redis the Redis ledger that shared gates of several processes keep.
 */
import { existsSync } from 'node:fs';
import { relative, resolve } from 'node:path';
import type { LedgerWindow } from '../budget/ledger.js';
import { defaultLedgerPath, FileLedger, formatMicros, isTollgateError, systemClock } from '../index.js';
import { RedisLedger } from '../redis/redis-ledger.js';
import { CliError } from './cli-error.js';
import { ExitCode, type ExitCodeValue } from './exit-codes.js';
import { parseArgv } from './run-options.js';

const flags = {
  ledger: { type: 'string' },
  redis: { type: 'string' },
  'key-prefix': { type: 'string' },
  budget: { type: 'string' },
  yes: { type: 'boolean', short: 'y' },
  json: { type: 'boolean' },
  currency: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const budgetHelp = `Usage: tollgate budget [show|reset] [options]

  show (default)   per budget: spent, reserved (in flight), limit, remaining, when it resets
  reset            forget recorded spend (all budgets, or --budget NAME and its per-key budgets);
                   needs --yes

Options:
  --ledger PATH    the ledger file (default .tollgate/ledger.sqlite in this directory)
  --redis URL      the Redis ledger instead (RedisLedger: the budgets shared gates keep in Redis)
  --key-prefix P   with --redis: the ledger's key prefix (default tollgate)
  --budget NAME    only this budget (e.g. day, or a name given as name=5usd/day)
  --yes, -y        confirm a reset
  --json           show as JSON
  --currency usd   how to print amounts (the ledger stores micro-units, not the currency)`;

interface Row {
  budget: string;
  period: string;
  spentMicros: number;
  reservedMicros: number;
  limitMicros: number;
  remainingMicros: number;
  resetsAt: string;
}

function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function iso(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : 'never';
}

export async function budgetCommand(args: readonly string[]): Promise<ExitCodeValue> {
  const { values, positionals } = parseArgv('budget', args, flags, true);
  if (values.help) {
    process.stdout.write(`${budgetHelp}\n`);
    return ExitCode.ok;
  }
  const action = positionals[0] ?? 'show';
  if (positionals.length > 1 || (action !== 'show' && action !== 'reset')) {
    throw new CliError(
      `Expected \`tollgate budget show\` or \`tollgate budget reset\`, got \`${positionals.join(' ')}\``,
    );
  }
  const currency = (values.currency ?? 'usd').toLowerCase();
  if (!/^[a-z]{3}$/.test(currency))
    throw new CliError(`Expected --currency to be a code like usd or eur, got \`${values.currency}\``);
  const name = values.budget;
  const { ledger, shown } = openLedger(values);
  if (ledger === undefined) {
    if (values.json) process.stdout.write('[]\n');
    else process.stdout.write(`No ledger at ${shown}: nothing has been spent through a budget here yet.\n`);
    return ExitCode.ok;
  }
  try {
    const now = systemClock.now();
    const matches = (id: string) => name === undefined || id === name || id.startsWith(`${name}[`);
    const all = await ledgerCall(() => ledger.snapshot(now));
    const windows = all.filter((w) => matches(w.budgetId));
    const rows: Row[] = windows.map((w) => ({
      budget: w.budgetId,
      period:
        w.rollingMs !== undefined
          ? `rolling ${w.rollingMs} ms`
          : `${iso(w.windowStart)} → ${iso(w.windowEnd)}`,
      spentMicros: w.spentMicros,
      reservedMicros: w.reservedMicros,
      limitMicros: w.limitMicros,
      remainingMicros: w.remainingMicros,
      resetsAt: iso(w.resetAt),
    }));

    if (action === 'show') {
      if (values.json) {
        process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
        return ExitCode.ok;
      }
      if (rows.length === 0) {
        process.stdout.write(
          `Ledger ${shown}: ${name === undefined ? 'no budget has spend in its current period' : `no spend for budget \`${name}\` in its current period`}.\n`,
        );
        return ExitCode.ok;
      }
      const money = (m: number) => formatMicros(m, currency);
      process.stdout.write(`Ledger ${shown}\n`);
      process.stdout.write(
        `${table([
          ['budget', 'spent', 'reserved', 'limit', 'remaining', 'resets at', 'period'],
          ...rows.map((r) => [
            r.budget,
            money(r.spentMicros),
            money(r.reservedMicros),
            money(r.limitMicros),
            money(r.remainingMicros),
            r.resetsAt,
            r.period,
          ]),
        ])}\n`,
      );
      return ExitCode.ok;
    }

    if (name !== undefined && rows.length === 0) {
      // A misspelt name would otherwise "reset" nothing and report success.
      const known = [...new Set(all.map((w) => w.budgetId.replace(/\[.*/, '')))];
      throw new CliError(
        `No budget \`${name}\` in ${shown}; known budgets: ${known.length === 0 ? 'none' : known.join(', ')}. Nothing was reset.`,
      );
    }
    const what = name === undefined ? 'every budget' : `budget \`${name}\``;
    if (!values.yes) {
      const spent = rows.reduce((sum, r) => sum + r.spentMicros + r.reservedMicros, 0);
      process.stderr.write(
        `This would forget the recorded spend of ${what} in ${shown} (${formatMicros(spent, currency)} in current periods). ` +
          'Add --yes to do it.\n',
      );
      return ExitCode.usage;
    }
    await ledgerCall(() => (name === undefined ? ledger.reset() : ledger.reset(name)));
    process.stdout.write(`Reset ${what} in ${shown}.\n`);
    return ExitCode.ok;
  } finally {
    await ledger.close();
  }
}

/** What the command needs of a ledger: the file ledger's methods, answered now or later. */
interface ShownLedger {
  snapshot(now: number): LedgerWindow[] | Promise<LedgerWindow[]>;
  reset(budgetId?: string): void | Promise<void>;
  close(): void | Promise<void>;
}

/** The ledger the options name, and how to name it (no ledger: there is no file yet). */
function openLedger(values: {
  ledger?: string | undefined;
  redis?: string | undefined;
  'key-prefix'?: string | undefined;
}): { ledger: ShownLedger | undefined; shown: string } {
  try {
    if (values.redis !== undefined) {
      if (values.ledger !== undefined) throw new CliError('Give --ledger or --redis, not both');
      const prefix = values['key-prefix'] ?? 'tollgate';
      const ledger = new RedisLedger({ redis: values.redis, keyPrefix: prefix });
      // Named by host and port: the URL may hold a password (an '@' in it too).
      const where = hostOf(values.redis);
      return { ledger, shown: `redis://${where} (key prefix ${prefix})` };
    }
    if (values['key-prefix'] !== undefined) throw new CliError('--key-prefix goes with --redis');
    const path = values.ledger === undefined ? defaultLedgerPath() : resolve(values.ledger);
    const shown = relative(process.cwd(), path).startsWith('..') ? path : relative(process.cwd(), path);
    if (!existsSync(path)) return { ledger: undefined, shown };
    return { ledger: new FileLedger({ path }), shown };
  } catch (error) {
    if (isTollgateError(error)) throw new CliError(error.message);
    throw error;
  }
}

/** `host:port` of a Redis URL, never its user or password; `Redis` when it does not parse. */
function hostOf(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.hostname}:${parsed.port || '6379'}`;
  } catch {
    return 'Redis';
  }
}

/** A ledger call; a typed failure (Redis unreachable, a corrupt file) is the command's error. */
async function ledgerCall<T>(call: () => T | Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (isTollgateError(error)) throw new CliError(error.message);
    throw error;
  }
}
