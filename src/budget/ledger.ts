/**
 * Where spend is recorded. One interface, two implementations that pass one contract suite:
 * `MemoryLedger` (one process, lost on exit) and `FileLedger` (SQLite file, shared by processes on one
 * machine, survives restarts). Methods are synchronous: both backends answer without I/O waits
 * worth yielding for, and a reservation must be recorded before the caller sends the request.
 *
 * All amounts are integer micro-units; all times ms on the caller's clock.
 */

import { invalid } from '../validate.js';
import { checkMicros } from './money.js';

/** One budget's part of a reservation. */
export interface LedgerEntry {
  /** The budget (or `name[key]`) to charge. */
  readonly budgetId: string;
  /** Calendar: the period's start. Rolling: `now - rollingMs` (informational). */
  readonly windowStart: number;
  /** Calendar: the period's end, when spend resets. Rolling: `now` (informational). */
  readonly windowEnd: number;
  /** Set for a rolling window: spend at `at` counts while `now - at < rollingMs`. */
  readonly rollingMs?: number | undefined;
  readonly limitMicros: number;
  readonly estimateMicros: number;
  /**
   * A reservation not settled or released by then is reported as spent at its estimate (its process
   * probably died after sending). It is never dropped before its window ends. Rolling: a hold counts
   * until settled or released however old it is, and once expired for `rollingMs` more (an
   * `expiresAt` before the reserve's `now` is taken as `now`).
   */
  readonly expiresAt: number;
}

/** A budget's committed totals in its current window (raw: expired holds are still in `reserved`). */
export interface LedgerTotals {
  readonly budgetId: string;
  readonly spentMicros: number;
  readonly reservedMicros: number;
  readonly limitMicros: number;
}

export type LedgerReserveResult =
  | {
      readonly ok: true;
      readonly reservationId: string;
      /** Totals after this reservation, in the order of the entries. */
      readonly totals: readonly LedgerTotals[];
    }
  | {
      readonly ok: false;
      /** The first budget (in entry order) the estimate does not fit. Nothing was reserved anywhere. */
      readonly budgetId: string;
      /** Settled spend, plus holds past `expiresAt` at their estimate. */
      readonly spentMicros: number;
      /** Holds in flight and not expired. */
      readonly reservedMicros: number;
      readonly limitMicros: number;
      readonly estimateMicros: number;
      /**
       * Calendar: the window's end. Rolling: when the oldest counted spend leaves the window (a hold in
       * flight leaves as if settled now at its estimate, an expired one `rollingMs` after it expired).
       */
      readonly resetAt: number;
      /** Earliest time this estimate could fit if nothing else happened; Infinity if never. */
      readonly retryAt: number;
    };

export interface LedgerSettleResult {
  /**
   * False when the reservation was unknown (already settled or released, reset, its calendar window
   * dropped, or, rolling, expired `rollingMs` or more ago).
   */
  readonly found: boolean;
  /** Totals after the change, one per budget the reservation held. */
  readonly totals: readonly LedgerTotals[];
}

/** One budget's current window, as `snapshot` reports it. */
export interface LedgerWindow {
  readonly budgetId: string;
  /** Calendar: the period's start. Rolling: `now - rollingMs`. */
  readonly windowStart: number;
  /** Calendar: the period's end. Rolling: `now`. */
  readonly windowEnd: number;
  readonly rollingMs: number | undefined;
  /** Settled spend, plus holds past `expiresAt` at their estimate. */
  readonly spentMicros: number;
  /** Holds in flight and not expired. */
  readonly reservedMicros: number;
  readonly limitMicros: number;
  /** `max(0, limit - spent - reserved)`. */
  readonly remainingMicros: number;
  /** Calendar: the window's end. Rolling: when the oldest counted spend leaves the window (now if none). */
  readonly resetAt: number;
}

/** A threshold of one budget window, as `Ledger.claimThreshold` records it. */
export interface ThresholdClaim {
  /** The budget (or `name[key]`). */
  readonly budgetId: string;
  /** The window, as in the `LedgerEntry` of a call reserved in it. */
  readonly windowStart: number;
  readonly windowEnd: number;
  readonly rollingMs?: number | undefined;
  /** The fraction of the limit crossed, e.g. `0.8`. */
  readonly threshold: number;
}

export interface ThresholdClaimResult {
  /** True when this claim recorded the threshold: its caller fires the event, nobody else does. */
  readonly claimed: boolean;
  /** When it fired (`now` when claimed); undefined when the window is not in the ledger. */
  readonly firedAt: number | undefined;
}

export interface Ledger {
  /**
   * Reserve `estimateMicros` on every entry's budget, all or nothing, atomically (also across
   * processes for a shared ledger): admitted only if `spent + reserved + estimate <= limit` holds for
   * each. When this returns `ok: true` the reservation is durable.
   */
  reserve(entries: readonly LedgerEntry[], now: number): LedgerReserveResult;
  /**
   * Optional. Record that committed spend crossed `claim.threshold` of the window at `now`, unless
   * that was recorded already (rolling: less than `rollingMs` ago), atomically across the processes
   * sharing the ledger, so that of the guards whose spend crosses it one fires the event, once per
   * period (a restarted one too). Claims live and go with their window (`reset` forgets them). A
   * window not in the ledger (reset, or dropped) claims nothing. Without this method, each guard
   * remembers what it fired itself.
   */
  claimThreshold?(claim: ThresholdClaim, now: number): ThresholdClaimResult;
  /** Replace the reservation's estimate by the actual cost on each budget it held. */
  settle(reservationId: string, actualMicros: number, now: number): LedgerSettleResult;
  /** Give the reservation back unspent (the request was not sent). */
  release(reservationId: string, now: number): LedgerSettleResult;
  /** Every budget's current window at `now`, ordered by budget id. */
  snapshot(now: number): LedgerWindow[];
  /**
   * Forget recorded spend: of one budget (and its per-key budgets `budgetId[...]`), or of all.
   * Reservations in flight are forgotten too; settling them later is a no-op.
   */
  reset(budgetId?: string): void;
  /** Release resources (the file handle). Further calls throw. */
  close(): void;
}

/**
 * Check what a ledger is asked to record before anything is written: a store that ran part of a
 * write and failed on a bad number (a Redis script stops at the first error and keeps what it
 * wrote) would hold money nobody settles, under keys that never expire. Throws `InvalidOptionError`
 * naming `now` or the entry's field, `InvalidCostError` for an amount that is not an integer
 * number of micros >= 0.
 */
export function checkLedgerNow(now: number): void {
  if (typeof now !== 'number' || !Number.isFinite(now)) throw invalid('now', 'a finite number of ms', now);
}

/** See `checkLedgerNow`: every entry of a reservation. */
export function checkLedgerEntries(entries: readonly LedgerEntry[]): void {
  if (!Array.isArray(entries)) throw invalid('entries', 'an array of ledger entries', entries);
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const at = `entries[${i}]`;
    if (typeof entry?.budgetId !== 'string' || entry.budgetId === '')
      throw invalid(`${at}.budgetId`, 'a non-empty string', entry?.budgetId);
    for (const field of ['windowStart', 'windowEnd', 'expiresAt'] as const) {
      if (typeof entry[field] !== 'number' || !Number.isFinite(entry[field]))
        throw invalid(`${at}.${field}`, 'a finite number of ms', entry[field]);
    }
    const rollingMs = entry.rollingMs;
    if (
      rollingMs !== undefined &&
      !(typeof rollingMs === 'number' && Number.isSafeInteger(rollingMs) && rollingMs > 0)
    )
      throw invalid(`${at}.rollingMs`, 'an integer number of ms > 0, or undefined', rollingMs);
    checkMicros(entry.limitMicros, `${at}.limitMicros`);
    checkMicros(entry.estimateMicros, `${at}.estimateMicros`);
  }
}

/** See `checkLedgerNow`: a threshold claim. */
export function checkThresholdClaim(claim: ThresholdClaim): void {
  if (typeof claim?.budgetId !== 'string' || claim.budgetId === '')
    throw invalid('claim.budgetId', 'a non-empty string', claim?.budgetId);
  for (const field of ['windowStart', 'windowEnd'] as const) {
    if (typeof claim[field] !== 'number' || !Number.isFinite(claim[field]))
      throw invalid(`claim.${field}`, 'a finite number of ms', claim[field]);
  }
  const rollingMs = claim.rollingMs;
  if (
    rollingMs !== undefined &&
    !(typeof rollingMs === 'number' && Number.isSafeInteger(rollingMs) && rollingMs > 0)
  )
    throw invalid('claim.rollingMs', 'an integer number of ms > 0, or undefined', rollingMs);
  const threshold = claim.threshold;
  if (typeof threshold !== 'number' || !(threshold > 0 && threshold <= 1))
    throw invalid('claim.threshold', 'a fraction in (0, 1]', threshold);
}

/**
 * Rolling windows are stored as one window per (budget, rollingMs) under these bounds, so a budget
 * whose period changes between runs never mixes two definitions' spend.
 */
export const ROLLING_WINDOW_START = -8_640_000_000_000_000; // the earliest Date; no calendar window starts there

/** The stored (start, end) key of an entry's window. */
export function windowKey(entry: {
  readonly windowStart: number;
  readonly windowEnd: number;
  readonly rollingMs?: number | undefined;
}): { start: number; end: number } {
  return entry.rollingMs === undefined
    ? { start: entry.windowStart, end: entry.windowEnd }
    : { start: ROLLING_WINDOW_START, end: ROLLING_WINDOW_START + entry.rollingMs };
}

/** True when `budgetId` is `target` or one of its per-key ids (`target[...]`). */
export function matchesBudget(budgetId: string, target: string | undefined): boolean {
  return target === undefined || budgetId === target || budgetId.startsWith(`${target}[`);
}
