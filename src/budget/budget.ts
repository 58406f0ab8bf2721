/**
 * Money budgets: the spec users write, its validation, and the pure accounting of one budget in one
 * window. No I/O, no clock reads: every function takes `now` (ms). The ledgers store this state;
 * the memory ledger runs exactly these functions, the file ledger the same rules in SQL.
 *
 * The hard cap: a reservation of `estimate` is admitted only if
 *   spent + reserved + estimate <= limit
 * where `reserved` is every reservation still in flight (admitted, not yet settled or released).
 * Settling moves a reservation's estimate out of `reserved` and its actual cost into `spent`. An
 * actual cost above the estimate is charged in full even if `spent` then exceeds the limit: the call
 * was already sent and the provider will bill it, so the ledger records the truth; the overshoot is
 * at most the sum of (actual - estimate) over calls in flight, and every later call is refused
 * until the window has room again.
 */

import { invalid, plainObject } from '../validate.js';
import { addMicros, normalizeCurrency, parseMoney } from './money.js';
import { describePeriod, normalizePeriod, type Period, type PeriodSpec } from './period.js';

/** A budget as users write it. */
export interface BudgetSpec {
  /**
   * Stable name: the ledger stores spend under it, so a re-run with the same name sees the same
   * spend. Letters, digits and `-_.:/ ` only.
   * @default the period, e.g. `'day'`, `'month Europe/Berlin'`, `'rolling 3600000ms'`
   */
  name?: string;
  /** The cap per period: `5` (units of `currency`), `'$5'`, `'5 usd'`, or `{ micros: 5_000_000 }`. >= 0. */
  limit: number | string | { readonly micros: number };
  /** `'hour' | 'day' | 'week' | 'month'` (calendar), `{ rollingMs }`, or `{ calendar, timeZone }`. */
  period: PeriodSpec;
  /**
   * IANA time zone for calendar periods. Weeks start on Monday.
   * @default 'UTC'
   */
  timeZone?: string;
  /**
   * ISO 4217 currency of `limit` and of every cost; all budgets of one guard share one currency.
   * @default 'usd'
   */
  currency?: string;
  /**
   * Fractions of the limit at which a threshold event fires (once per period), each in (0, 1].
   * @default [0.5, 0.8, 1]
   */
  thresholds?: readonly number[];
  /**
   * One budget per call key (e.g. per tenant, or per API key through `hashKey`) instead of one for
   * all calls. A call without a key counts against the key `''`, so unkeyed calls never bypass the
   * cap. The key is part of the budget's id (`name[key]`), which errors, events and the ledger
   * show: key calls by a hash of a secret, never by the secret itself.
   * @default false
   */
  perKey?: boolean;
}

/** A validated, frozen budget. */
export interface Budget {
  readonly name: string;
  readonly limitMicros: number;
  readonly period: Period;
  readonly currency: string;
  /** Sorted ascending, distinct. */
  readonly thresholds: readonly number[];
  /** `thresholds[i] * limitMicros`, rounded up to whole micros. */
  readonly thresholdMicros: readonly number[];
  readonly perKey: boolean;
}

const nameShape = /^[\w\-.:/ ]+$/;

/** Validate one budget spec; `option` is its path in errors, e.g. `budgets[1]`. */
export function normalizeBudget(option: string, value: unknown): Budget {
  const spec: { [K in keyof BudgetSpec]?: unknown } & Record<string, unknown> = plainObject(option, value);
  for (const key of Object.keys(spec)) {
    if (!['name', 'limit', 'period', 'timeZone', 'currency', 'thresholds', 'perKey'].includes(key)) {
      throw invalid(
        `${option}.${key}`,
        'not set (known: name, limit, period, timeZone, currency, thresholds, perKey)',
        spec[key],
      );
    }
  }
  const currencyOption =
    spec.currency === undefined ? undefined : normalizeCurrency(`${option}.currency`, spec.currency);
  if (spec.limit === undefined) throw invalid(`${option}.limit`, 'an amount >= 0', undefined);
  const limit = parseMoney(`${option}.limit`, spec.limit, 'exact');
  if (limit.currency !== undefined && currencyOption !== undefined && limit.currency !== currencyOption) {
    throw invalid(
      `${option}.limit`,
      `an amount in ${currencyOption.toUpperCase()} (the budget's currency)`,
      spec.limit,
    );
  }
  const currency = currencyOption ?? limit.currency ?? 'usd';
  const period = normalizePeriod(
    `${option}.period`,
    spec.period,
    spec.timeZone ?? 'UTC',
    `${option}.timeZone`,
  );
  if (spec.timeZone !== undefined && period.kind === 'rolling') {
    throw invalid(`${option}.timeZone`, 'unset for a rolling period', spec.timeZone);
  }
  // Two zones for one period: refuse rather than pick one silently (the period's own would win).
  if (
    spec.timeZone !== undefined &&
    typeof spec.period === 'object' &&
    spec.period !== null &&
    (spec.period as { timeZone?: unknown }).timeZone !== undefined
  ) {
    throw invalid(`${option}.timeZone`, `unset when \`${option}.period.timeZone\` is set`, spec.timeZone);
  }
  let name = describePeriod(period);
  if (spec.name !== undefined) {
    if (typeof spec.name !== 'string' || !nameShape.test(spec.name) || spec.name.length > 200) {
      throw invalid(
        `${option}.name`,
        'a non-empty string of letters, digits and `-_.:/ ` (at most 200)',
        spec.name,
      );
    }
    name = spec.name;
  }
  let thresholds: number[] = [0.5, 0.8, 1];
  if (spec.thresholds !== undefined) {
    const t = spec.thresholds;
    if (!Array.isArray(t)) throw invalid(`${option}.thresholds`, 'an array of fractions in (0, 1]', t);
    t.forEach((f, i) => {
      if (typeof f !== 'number' || !Number.isFinite(f) || f <= 0 || f > 1) {
        throw invalid(`${option}.thresholds[${i}]`, 'a fraction in (0, 1]', f);
      }
    });
    thresholds = [...new Set(t as number[])].sort((a, b) => a - b);
  }
  const perKey = spec.perKey ?? false;
  if (typeof perKey !== 'boolean') throw invalid(`${option}.perKey`, 'a boolean', perKey);
  return Object.freeze({
    name,
    limitMicros: limit.micros,
    period,
    currency,
    thresholds: Object.freeze(thresholds),
    // t * limit in floats can land a hair above the exact product (0.8 * 1e6 = 800000.0000000001);
    // round to 6 decimals first, then up to a whole micro.
    thresholdMicros: Object.freeze(thresholds.map((f) => Math.ceil(Number((f * limit.micros).toFixed(6))))),
    perKey,
  });
}

/**
 * Validate a guard's `budgets` option: one spec or a non-empty array of them, with distinct names and
 * one currency. Returns the budgets frozen, in the order given.
 */
export function normalizeBudgets(specs: unknown): readonly Budget[] {
  if (specs === undefined) throw invalid('budgets', 'a budget or an array of budgets', specs);
  const list: readonly unknown[] = Array.isArray(specs) ? specs : [specs];
  if (list.length === 0) throw invalid('budgets', 'at least one budget', specs);
  const budgets = list.map((spec, i) =>
    normalizeBudget(Array.isArray(specs) ? `budgets[${i}]` : 'budget', spec),
  );
  const names = new Set<string>();
  budgets.forEach((b, i) => {
    if (names.has(b.name))
      throw invalid(`budgets[${i}].name`, "distinct from the other budgets' names", b.name);
    names.add(b.name);
    if (b.currency !== budgets[0]!.currency) {
      throw invalid(
        `budgets[${i}].currency`,
        `the same currency as the first budget (${budgets[0]!.currency})`,
        b.currency,
      );
    }
  });
  return Object.freeze(budgets);
}

/**
 * The id a budget's spend is stored under: the name, or `name[key]` for a per-key budget (names
 * cannot contain `[`, so the id is unambiguous).
 */
export function budgetIdFor(budget: Budget, key: string | undefined): string {
  return budget.perKey ? `${budget.name}[${key ?? ''}]` : budget.name;
}

/** The budget name part of an id (`'daily[tenant-a]'` -> `'daily'`). */
export function budgetNameOf(budgetId: string): string {
  const i = budgetId.indexOf('[');
  return i === -1 ? budgetId : budgetId.slice(0, i);
}

/** The key part of a per-key id (`'daily[tenant-a]'` -> `'tenant-a'`), or undefined. */
export function budgetKeyOf(budgetId: string): string | undefined {
  const i = budgetId.indexOf('[');
  return i === -1 ? undefined : budgetId.slice(i + 1, -1);
}

// ---------------------------------------------------------------------------------------------
// Accounting of one budget in one window (pure; the memory ledger's state).

/** A reservation's hold on one budget. */
export interface Hold {
  readonly reservationId: string;
  /**
   * When the reservation was made (the call is sent right after): spend is dated here, or, rolling,
   * at the settle when that is `rollingMs` or more later (see `rollingSettleDate`).
   */
  readonly at: number;
  readonly micros: number;
  /**
   * After this, a hold whose process never settled it is reported as spent (at its estimate).
   * Rolling: never before `at` (`addHold` raises it), and the hold leaves the window `rollingMs`
   * after it.
   */
  readonly expiresAt: number;
}

/** Spend dated `at`, for rolling windows. */
export interface LogEntry {
  readonly at: number;
  readonly micros: number;
}

/**
 * One budget's state in one window. A calendar window is `[windowStart, windowEnd)`; a rolling
 * window keeps a log of settled spend (sorted by `at`) and drops entries as they leave it.
 */
export interface Account {
  readonly budgetId: string;
  readonly windowStart: number;
  readonly windowEnd: number;
  /** Set for a rolling window: spend at `at` counts while `now - at < rollingMs`. */
  readonly rollingMs: number | undefined;
  limitMicros: number;
  /** Settled spend in the window. */
  spentMicros: number;
  /** Sum of `holds` (in flight, including expired ones). */
  reservedMicros: number;
  readonly holds: Map<string, Hold>;
  /** Rolling only: settled spend by time, ascending. */
  readonly log: LogEntry[];
  /** Thresholds fired in the window (the fraction -> when), see `thresholdDue`. */
  readonly fired: Map<number, number>;
}

export function newAccount(
  budgetId: string,
  windowStart: number,
  windowEnd: number,
  rollingMs: number | undefined,
  limitMicros: number,
): Account {
  return {
    budgetId,
    windowStart,
    windowEnd,
    rollingMs,
    limitMicros,
    spentMicros: 0,
    reservedMicros: 0,
    holds: new Map(),
    log: [],
    fired: new Map(),
  };
}

/** True when `estimate` fits under the cap on top of what is spent and in flight. */
export function fits(
  spentMicros: number,
  reservedMicros: number,
  estimateMicros: number,
  limitMicros: number,
): boolean {
  // Subtract instead of adding three terms: the comparison stays exact even near MAX_MICROS.
  return estimateMicros <= limitMicros - spentMicros - reservedMicros;
}

/**
 * Rolling: drop settled spend that left the window by `now` (dated at or before `now - rollingMs`)
 * and holds that expired at or before `now - rollingMs`. A hold counts until it is settled or
 * released however old it is (its call may still be in flight: a long stream, a call queued behind
 * a pause), and once expired (its process probably died) for `rollingMs` more, at its estimate.
 * Returns true when anything was dropped.
 */
export function pruneRolling(account: Account, now: number): boolean {
  if (account.rollingMs === undefined) return false;
  const cutoff = now - account.rollingMs; // entries at <= cutoff have been in the window rollingMs
  let dropped = 0;
  while (dropped < account.log.length && account.log[dropped]!.at <= cutoff) {
    account.spentMicros -= account.log[dropped]!.micros;
    dropped++;
  }
  if (dropped > 0) account.log.splice(0, dropped);
  let droppedHolds = false;
  for (const hold of account.holds.values()) {
    if (hold.expiresAt <= cutoff) {
      account.holds.delete(hold.reservationId);
      account.reservedMicros -= hold.micros;
      droppedHolds = true;
    }
  }
  return dropped > 0 || droppedHolds;
}

/** Add a hold admitted by `fits` (so `spent + reserved` stays <= the limit, an exact sum). */
export function addHold(account: Account, hold: Hold): void {
  // Rolling: a hold leaves rollingMs after it expired, so never before rollingMs after it was made.
  if (account.rollingMs !== undefined && hold.expiresAt < hold.at) hold = { ...hold, expiresAt: hold.at };
  account.holds.set(hold.reservationId, hold);
  account.reservedMicros += hold.micros;
}

/**
 * The hold of `reservationId` if it still counts at `now`. A rolling hold that expired `rollingMs`
 * or more ago has left the window: it is dropped here as `pruneRolling` would drop it, and is not
 * held.
 */
function heldAt(account: Account, reservationId: string, now: number): Hold | undefined {
  const hold = account.holds.get(reservationId);
  if (hold === undefined) return undefined;
  if (account.rollingMs !== undefined && hold.expiresAt <= now - account.rollingMs) {
    account.holds.delete(reservationId);
    account.reservedMicros -= hold.micros;
    return undefined;
  }
  return hold;
}

/**
 * Throw `InvalidCostError` (changing nothing but dropping a hold that left its window) if settling
 * `reservationId` at `actualMicros` would take `spent + reserved` past the exact range. Call it on
 * every account a reservation holds before settling any, so a settle changes all or none.
 */
export function checkCharge(
  account: Account,
  reservationId: string,
  actualMicros: number,
  now: number,
): void {
  const hold = heldAt(account, reservationId, now);
  if (hold === undefined) return;
  // spent + reserved is exact (the invariant, see money.ts) and so is removing the hold from it;
  // adding the actual cost, which may exceed the estimate by any amount, is the step to check.
  addMicros(
    account.spentMicros + account.reservedMicros - hold.micros,
    actualMicros,
    `Settling reservation ${reservationId} on budget \`${account.budgetId}\` (spent + reserved, then the actual cost)`,
  );
}

/**
 * Settle a hold at `actualMicros` (refund or extra charge); `checkCharge` must have passed. Returns
 * false if it was not held here at `now` (unknown, or a rolling hold that expired `rollingMs` ago):
 * then nothing is charged. Rolling spend is dated by `rollingSettleDate`.
 */
export function settleHold(
  account: Account,
  reservationId: string,
  actualMicros: number,
  now: number,
): boolean {
  const hold = heldAt(account, reservationId, now);
  if (hold === undefined) return false;
  account.holds.delete(reservationId);
  account.reservedMicros -= hold.micros;
  account.spentMicros += actualMicros;
  if (account.rollingMs !== undefined && actualMicros > 0)
    insertLog(account.log, { at: rollingSettleDate(hold.at, account.rollingMs, now), micros: actualMicros });
  return true;
}

/**
 * Rolling: the date of a hold's spend settled at `now`: when it was reserved (the call was sent
 * then), unless that has left the window (`rollingMs` or more ago: a long call), then `now`, so the
 * spend still counts for a whole window after the settle (until then its hold counted it at its
 * estimate). Dating such a settle at `at` would drop spend already made from the window at once.
 */
export function rollingSettleDate(at: number, rollingMs: number, now: number): number {
  return at > now - rollingMs ? at : now;
}

/**
 * Rolling: the date a counted hold leaves the window from (it leaves `rollingMs` after): expired,
 * `expiresAt` (it is not settled any more, see `pruneRolling`); in flight, the date its spend would
 * have settled at its estimate now (`rollingSettleDate`). `rollingResetAt` and `rollingRetryAt`
 * read holds so: a hold older than the window leaves no earlier than `now + rollingMs`, never in
 * the past.
 */
export function rollingHoldDate(at: number, expiresAt: number, rollingMs: number, now: number): number {
  return expiresAt <= now ? expiresAt : rollingSettleDate(at, rollingMs, now);
}

/** Return a hold unspent (the call was never sent). Returns false if it was not held here at `now`. */
export function releaseHold(account: Account, reservationId: string, now: number): boolean {
  const hold = heldAt(account, reservationId, now);
  if (hold === undefined) return false;
  account.holds.delete(reservationId);
  account.reservedMicros -= hold.micros;
  return true;
}

/** Forget an account's holds: its window was dropped, so settling them must find nothing. */
export function dropHolds(account: Account): void {
  account.holds.clear();
  account.reservedMicros = 0;
}

// Settles arrive nearly in `at` order: search from the end.
function insertLog(log: LogEntry[], entry: LogEntry): void {
  let i = log.length;
  while (i > 0 && log[i - 1]!.at > entry.at) i--;
  log.splice(i, 0, entry);
}

/** Holds past `expiresAt` at `now`: reported as spent (their process may have died after sending). */
export function expiredMicros(account: Account, now: number): number {
  let sum = 0;
  for (const hold of account.holds.values()) if (hold.expiresAt <= now) sum += hold.micros;
  return sum;
}

/** What a snapshot or a refusal reports: expired holds count as spent, live ones as reserved. */
export function reportedTotals(
  account: Account,
  now: number,
): { spentMicros: number; reservedMicros: number } {
  const expired = expiredMicros(account, now);
  return { spentMicros: account.spentMicros + expired, reservedMicros: account.reservedMicros - expired };
}

/**
 * Rolling: when the oldest counted spend (settled or in flight) leaves the window, i.e. the next time
 * `spent + reserved` drops without anyone settling; `now` if nothing is counted. `entries`: settled
 * spend by its date, holds by `rollingHoldDate`.
 */
export function rollingResetAt(entries: readonly LogEntry[], rollingMs: number, now: number): number {
  let oldest = Infinity;
  for (const e of entries) if (e.at < oldest) oldest = e.at;
  return oldest === Infinity ? now : oldest + rollingMs;
}

/**
 * Rolling: the earliest time at which `estimate` fits if nothing else happens, counting holds in
 * flight as spent at their estimate (settled now). Infinity when `estimate > limit` (it never fits).
 * An entry at `at` leaves the window at `at + rollingMs`; holds are dated by `rollingHoldDate`.
 */
export function rollingRetryAt(
  entries: readonly LogEntry[],
  rollingMs: number,
  estimateMicros: number,
  limitMicros: number,
  now: number,
): number {
  if (estimateMicros > limitMicros) return Infinity;
  const sorted = [...entries].sort((a, b) => a.at - b.at);
  let total = 0;
  for (const e of sorted) total += e.micros;
  let retryAt = now;
  for (const e of sorted) {
    if (fits(total, 0, estimateMicros, limitMicros)) break;
    total -= e.micros;
    retryAt = Math.max(retryAt, e.at + rollingMs);
  }
  return retryAt;
}

/**
 * Indexes of thresholds crossed upwards by a change of committed spend (`spent + reserved`) from
 * `beforeMicros` to `afterMicros`.
 */
export function crossedThresholds(
  thresholdMicros: readonly number[],
  beforeMicros: number,
  afterMicros: number,
): number[] {
  const crossed: number[] = [];
  for (let i = 0; i < thresholdMicros.length; i++) {
    const t = thresholdMicros[i]!;
    if (beforeMicros < t && afterMicros >= t) crossed.push(i);
  }
  return crossed;
}

/**
 * True when a threshold last fired at `lastFiredAt` (undefined: never) may fire at `now`: once per
 * calendar window; a rolling window has no period, so once per window length.
 */
export function thresholdDue(
  lastFiredAt: number | undefined,
  rollingMs: number | undefined,
  now: number,
): boolean {
  return lastFiredAt === undefined || (rollingMs !== undefined && now - lastFiredAt >= rollingMs);
}
