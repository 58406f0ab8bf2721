/**
 * Flag values with units, parsed strictly: `50/s`, `90000tokens/min`, `5usd/day`, `30s`, `on`.
 * Every error names the flag and the value and shows the expected shape, e.g.
 *   Expected --rate like 50/s or 3000/min, got `fast`
 * The result is always something the public API takes as it is (a LimitSpec, a BudgetSpec, ms).
 */
import { type BudgetSpec, type LimitSpec, parseMoney, windowSafe } from '../index.js';
import { CliError } from './cli-error.js';
import { headerNameProblem, headerValueProblem } from './header-value.js';

// Milliseconds per time unit, by every spelling we accept.
const timeUnits: Readonly<Record<string, number>> = {
  ms: 1,
  msec: 1,
  millisecond: 1,
  milliseconds: 1,
  s: 1_000,
  sec: 1_000,
  secs: 1_000,
  second: 1_000,
  seconds: 1_000,
  m: 60_000,
  min: 60_000,
  mins: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hr: 3_600_000,
  hrs: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000,
  d: 86_400_000,
  day: 86_400_000,
  days: 86_400_000,
};

const unitAliases: Readonly<Record<string, string>> = {
  req: 'requests',
  reqs: 'requests',
  request: 'requests',
  requests: 'requests',
  tok: 'tokens',
  token: 'tokens',
  tokens: 'tokens',
};

const algorithms = [
  'token-bucket',
  'leaky-bucket',
  'fixed-window',
  'sliding-log',
  'sliding-window',
] as const satisfies readonly LimitSpec['algorithm'][];

function shown(value: string): string {
  return `\`${value}\``;
}

/** A positive safe integer written with optional `_` or `,` separators (`90_000`, `90,000`). */
function count(text: string): number | undefined {
  if (!/^\d[\d_,]*$/.test(text)) return undefined;
  const n = Number(text.replace(/[_,]/g, ''));
  return Number.isSafeInteger(n) && n >= 1 ? n : undefined;
}

/** The candidate nearest to `word`, within 2 edits (for "did you mean"). */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  // Edit distance: small lists, short words.
  const distance = (a: string, b: string): number => {
    const row = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
      let prev = row[0]!;
      row[0] = i;
      for (let j = 1; j <= b.length; j++) {
        const here = row[j]!;
        row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
        prev = here;
      }
    }
    return row[b.length]!;
  };
  let best: string | undefined;
  let bestDistance = 3;
  for (const c of candidates) {
    const d = distance(word, c);
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * A duration in whole milliseconds: `500ms`, `30s`, `2m`, `1.5h`, `1d`; `0` alone; with
 * `allowInfinity`, also `inf`, `infinity` or `none` (no deadline). A bare number other than 0 is
 * refused: ms or s would be a guess. A fraction of a millisecond rounds up (`1.0005s` is 1001 ms):
 * timers take integers, and a deadline never ends early.
 */
export function parseDuration(flag: string, text: string, { allowInfinity = false } = {}): number {
  const expected = `Expected ${flag} like 500ms, 30s or 2m${allowInfinity ? ' (or `inf` for none)' : ''}, got ${shown(text)}`;
  const t = text.trim().toLowerCase();
  if (t === '0') return 0;
  if (allowInfinity && (t === 'inf' || t === 'infinity' || t === 'none')) return Number.POSITIVE_INFINITY;
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]+)$/.exec(t);
  const per = m === null ? undefined : timeUnits[m[2]!];
  if (m === null || per === undefined) throw new CliError(expected);
  // Exact decimal arithmetic: 1.005 * 1000 is 1004.9999999999999 in floating point. With k
  // fraction digits, ms = ceil(digits * per / 10^k).
  const [whole, fraction = ''] = m[1]!.split('.');
  const scaled = BigInt(`${whole}${fraction}`) * BigInt(per);
  const denominator = 10n ** BigInt(fraction.length);
  const ms = Number((scaled + denominator - 1n) / denominator);
  if (!Number.isSafeInteger(ms)) throw new CliError(expected);
  return ms;
}

/** The message for a rate of zero or less (`--rate -5/s`, `--limit 0/min`). */
export function notPositiveRate(flag: string, text: string, example: string): string {
  return `Expected ${flag} to be a positive rate like ${example}, got ${shown(text)}: a rate must be a positive number`;
}

/** The examples each rate flag's messages show. */
export const rateExamples = {
  rate: '50/s or 3000/min',
  limit: '500/min, 90000tokens/min or sliding-log:20/min',
} as const;

/** `N[unit]/[n]window`: a count of some unit per time window. */
export interface RateText {
  readonly count: number;
  readonly unit: string;
  readonly intervalMs: number;
}

/**
 * `50/s`, `3000/min`, `5/100ms`, `90000tokens/min`, `500 requests/minute`, `10/2s`. The unit before
 * the slash defaults to requests; `tok`/`token(s)` mean tokens; any other word of letters is a unit
 * of its own, counted by lines whose `cost` names it (`"cost": {"points": 5}`), unless it is one
 * edit or two from requests or tokens: a misspelt unit would be a limit that no line is charged to.
 */
export function parseRateText(flag: string, text: string, example: string): RateText {
  const expected = `Expected ${flag} like ${example}, got ${shown(text)}`;
  // `-5/s` or `0/s`: said as such, not as a shape the user did follow.
  if (/^\s*-\s*\d/.test(text) || /^\s*0[0_,]*\s*[a-z_-]*\s*\//i.test(text))
    throw new CliError(notPositiveRate(flag, text, example));
  // Letters only in the unit, so that `1e3/s` is refused rather than read as 1 of a unit `e3`.
  const m = /^\s*(\d[\d_,]*)\s*([a-z][a-z_-]*)?\s*\/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$/i.exec(text);
  if (m === null) throw new CliError(expected);
  const n = count(m[1]!);
  const per = timeUnits[m[4]!.toLowerCase()];
  const windows = m[3] === undefined ? 1 : Number(m[3]);
  if (n === undefined || per === undefined || !(windows > 0)) throw new CliError(expected);
  // Limits count in whole ms at least (the gate's floor for intervalMs): say so with the flag.
  if (windows * per < 1)
    throw new CliError(`Expected ${flag} with a window of at least 1ms, got ${shown(text)}`);
  const word = m[2]?.toLowerCase();
  const unit = word === undefined ? 'requests' : (unitAliases[word] ?? word);
  const own = word !== undefined && unitAliases[word] === undefined;
  const meant = own ? closest(unit, ['requests', 'request', 'tokens', 'token']) : undefined;
  if (meant !== undefined) {
    throw new CliError(
      `Expected ${flag}'s unit to be requests or tokens (did you mean ${unitAliases[meant]}?), got ${shown(unit)} in ${shown(text)}`,
    );
  }
  return { count: n, unit, intervalMs: windows * per };
}

/**
 * `--rate 50/s` (+ `--burst 10`): a token bucket of 50 requests per second. Its burst defaults to
 * the library's (the whole limit), so it may start up to burst + rate·W in a window W: use `--limit`
 * for a provider's "never more than N per W".
 */
export function parseRate(text: string, burst: number | undefined, flag = '--rate'): LimitSpec {
  const rate = parseRateText(flag, text, rateExamples.rate);
  if (rate.unit !== 'requests') {
    throw new CliError(
      `Expected ${flag} to count requests (like 50/s), got ${shown(text)}; use a limit (--limit ${text}) for other units`,
    );
  }
  const spec: LimitSpec = { algorithm: 'token-bucket', limit: rate.count, intervalMs: rate.intervalMs };
  if (burst !== undefined) spec.burst = burst;
  return spec;
}

/**
 * `--limit 500/min`, `--limit 90000tokens/min`: never more than N units in any window W, as a
 * provider counts them (the library's `windowSafe` preset; a limit of 1 becomes a leaky bucket of 1
 * per W). `--limit sliding-log:20/min` picks an algorithm explicitly.
 */
export function parseLimit(text: string, flag = '--limit'): LimitSpec {
  const example = rateExamples.limit;
  const colon = text.indexOf(':');
  let algorithm: LimitSpec['algorithm'] | undefined;
  let rest = text;
  if (colon !== -1) {
    const name = text.slice(0, colon).trim().toLowerCase();
    algorithm = algorithms.find((a) => a === name);
    if (algorithm === undefined) {
      throw new CliError(
        `Expected ${flag}'s algorithm to be one of ${algorithms.join(', ')}, got ${shown(text.slice(0, colon))} in ${shown(text)}`,
      );
    }
    rest = text.slice(colon + 1);
  }
  const rate = parseRateText(flag, rest, example);
  if (algorithm !== undefined) {
    return { algorithm, limit: rate.count, intervalMs: rate.intervalMs, unit: rate.unit };
  }
  if (rate.count === 1) {
    return { algorithm: 'leaky-bucket', limit: 1, intervalMs: rate.intervalMs, unit: rate.unit };
  }
  // Units other than requests (tokens): one request may cost much of the window, which a
  // window-safe bucket refuses above its burst (a tenth: `--limit 1000tokens/min` refused a
  // 500-token prompt, found by a review). A sliding log holds N in any window and admits up to N.
  if (rate.unit !== 'requests')
    return { algorithm: 'sliding-log', limit: rate.count, intervalMs: rate.intervalMs, unit: rate.unit };
  return windowSafe(rate.count, rate.intervalMs, { unit: rate.unit });
}

const calendarPeriods: Readonly<Record<string, 'hour' | 'day' | 'week' | 'month'>> = {
  hour: 'hour',
  hourly: 'hour',
  day: 'day',
  daily: 'day',
  week: 'week',
  weekly: 'week',
  month: 'month',
  monthly: 'month',
};

/**
 * `--budget 5usd/day`: a money cap per period. Forms: `[name=]AMOUNT/PERIOD[@TIMEZONE]`, where
 * AMOUNT is `5usd`, `$5`, `5 EUR`; PERIOD is a calendar `hour|day|week|month` (UTC unless
 * `@Europe/Berlin`) or a rolling window such as `24h` or `30m`.
 */
export function parseBudget(text: string, flag = '--budget'): BudgetSpec {
  const expected = `Expected ${flag} like 5usd/day, $20/month or daily=2usd/24h, got ${shown(text)}`;
  let rest = text.trim();
  let name: string | undefined;
  const eq = rest.indexOf('=');
  if (eq !== -1) {
    name = rest.slice(0, eq).trim();
    rest = rest.slice(eq + 1);
    if (!/^[\w\-.:/ ]+$/.test(name)) {
      throw new CliError(
        `Expected ${flag}'s name to use letters, digits and -_.:/ only, got ${shown(name)} in ${shown(text)}`,
      );
    }
  }
  let timeZone: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at !== -1) {
    timeZone = rest.slice(at + 1).trim();
    rest = rest.slice(0, at);
  }
  const slash = rest.indexOf('/');
  if (slash === -1) throw new CliError(expected);
  const amountText = rest.slice(0, slash).trim();
  const periodText = rest
    .slice(slash + 1)
    .trim()
    .toLowerCase();
  let money: ReturnType<typeof parseMoney>;
  try {
    money = parseMoney(flag, amountText);
  } catch {
    throw new CliError(expected);
  }
  const spec: BudgetSpec = {
    limit: { micros: money.micros },
    period: 'day',
  };
  if (money.currency !== undefined) spec.currency = money.currency;
  const calendar = calendarPeriods[periodText];
  if (calendar !== undefined) spec.period = calendar;
  else {
    let rollingMs: number;
    try {
      rollingMs = parseDuration(flag, periodText);
    } catch {
      throw new CliError(expected);
    }
    if (!(rollingMs >= 1) || !Number.isSafeInteger(rollingMs)) throw new CliError(expected);
    if (timeZone !== undefined) {
      throw new CliError(
        `Expected ${flag}'s time zone only with a calendar period (hour, day, week, month), got ${shown(text)}`,
      );
    }
    spec.period = { rollingMs };
  }
  if (timeZone !== undefined) spec.timeZone = timeZone;
  if (name !== undefined) spec.name = name;
  return spec;
}

/** `on|off` (also true/false, yes/no, 1/0). */
export function parseOnOff(flag: string, text: string): boolean {
  const t = text.trim().toLowerCase();
  if (['on', 'true', 'yes', '1'].includes(t)) return true;
  if (['off', 'false', 'no', '0'].includes(t)) return false;
  throw new CliError(`Expected ${flag} to be on or off, got ${shown(text)}`);
}

/** An integer >= `min`. */
export function parseInteger(flag: string, text: string, min: number): number {
  const t = text.trim();
  const n = /^\d[\d_]*$/.test(t) ? Number(t.replace(/_/g, '')) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min) {
    throw new CliError(`Expected ${flag} to be an integer >= ${min}, got ${shown(text)}`);
  }
  return n;
}

/** An amount of money (`0.002`, `$0.002`, `0.002usd`) in integer micro-units, rounded up. */
export function parsePrice(flag: string, value: unknown): { micros: number; currency: string | undefined } {
  try {
    return parseMoney(flag, value, 'up');
  } catch {
    throw new CliError(
      `Expected ${flag} to be an amount like 0.002, $0.002 or 0.002usd, got \`${String(value)}\``,
    );
  }
}

/**
 * Why a price (from `parsePrice`) cannot be reserved against budgets in `currency`, as the start of
 * an "Expected ..." message, or undefined. The ledger counts micro-units without a currency: a
 * price in another one would be counted 1:1 (0.003 USD as 0.003 EUR). No currency named is the budget's.
 */
export function priceCurrencyProblem(
  price: { readonly currency: string | undefined },
  currency: string | undefined,
): string | undefined {
  if (currency === undefined || price.currency === undefined || price.currency === currency) return undefined;
  return `in ${currency.toUpperCase()}, the budget's currency`;
}

/**
 * `Name: value` (a header to add to every request). The value is usually a secret: messages name
 * the header, never show the value.
 */
export function parseHeader(text: string, flag = '--header'): [string, string] {
  const colon = text.indexOf(':');
  if (colon === -1) {
    throw new CliError(
      `Expected ${flag} like "Authorization: Bearer …", got one without a colon (not shown)`,
    );
  }
  const name = text.slice(0, colon).trim();
  const nameProblem = headerNameProblem(name);
  if (nameProblem !== undefined) {
    throw new CliError(`Expected ${flag} like "Authorization: Bearer …": ${nameProblem}`);
  }
  const value = text.slice(colon + 1).trim();
  const valueProblem = headerValueProblem(value);
  if (valueProblem !== undefined) {
    throw new CliError(
      `Expected ${flag} "${name}" to have a valid value: it ${valueProblem} (value not shown)`,
    );
  }
  return [name, value];
}
