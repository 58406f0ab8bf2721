import { TollgateError } from '../errors.js';
import { formatMicros } from './money.js';

/** Fields of a budget refusal: which budget, and the numbers that made the call not fit. */
export interface BudgetRefusal {
  /** The budget's name (`BudgetSpec.name`). */
  readonly budget: string;
  /** The call's key for a per-key budget, else undefined. */
  readonly key: string | undefined;
  /** Where the ledger stores it: the name, or `name[key]`. */
  readonly budgetId: string;
  readonly currency: string;
  /** Settled spend in the window (plus reservations past `expiresAt`, counted at their estimate). */
  readonly spentMicros: number;
  /** Reservations in flight. */
  readonly reservedMicros: number;
  readonly limitMicros: number;
  /** The refused call's estimate. */
  readonly estimateMicros: number;
  /**
   * Calendar: when the period ends and spend starts again from 0 (ms, the guard's clock).
   * Rolling: when the oldest counted spend leaves the window.
   */
  readonly resetAt: number;
  /**
   * The earliest time at which this estimate could fit if nothing else happened (calls in flight
   * counted at their estimate); `Infinity` when it never fits (estimate above the limit). With
   * `onExceeded: 'wait'`, a gate waits until then if that is within the call's deadline.
   */
  readonly retryAt: number;
}

/**
 * A call was refused before sending: its estimated cost does not fit under a budget's cap
 * (spent + reserved + estimate > limit). Amounts are integer micro-units of `currency`.
 */
export class BudgetExceededError extends TollgateError implements BudgetRefusal {
  readonly budget: string;
  readonly key: string | undefined;
  readonly budgetId: string;
  readonly currency: string;
  readonly spentMicros: number;
  readonly reservedMicros: number;
  readonly limitMicros: number;
  readonly estimateMicros: number;
  readonly resetAt: number;
  readonly retryAt: number;

  constructor(refusal: BudgetRefusal) {
    const c = refusal.currency;
    const reset = Number.isFinite(refusal.resetAt) ? new Date(refusal.resetAt).toISOString() : 'never';
    super(
      'ERR_BUDGET_EXCEEDED',
      `Budget \`${refusal.budgetId}\` exceeded: spent ${formatMicros(refusal.spentMicros, c)} + reserved ` +
        `${formatMicros(refusal.reservedMicros, c)} + this call ${formatMicros(refusal.estimateMicros, c)} > ` +
        `limit ${formatMicros(refusal.limitMicros, c)}; resets at ${reset}`,
    );
    this.budget = refusal.budget;
    this.key = refusal.key;
    this.budgetId = refusal.budgetId;
    this.currency = refusal.currency;
    this.spentMicros = refusal.spentMicros;
    this.reservedMicros = refusal.reservedMicros;
    this.limitMicros = refusal.limitMicros;
    this.estimateMicros = refusal.estimateMicros;
    this.resetAt = refusal.resetAt;
    this.retryAt = refusal.retryAt;
  }
}

/**
 * The ledger file cannot be read as a tollgate ledger (not SQLite, damaged, another program's
 * database, or a newer schema). Nothing was changed: tollgate never resets spend to zero silently.
 * Move or delete the file (after looking at it) to start a new ledger.
 */
export class LedgerCorruptError extends TollgateError {
  readonly path: string;
  constructor(path: string, reason: string, options?: { cause?: unknown }) {
    super(
      'ERR_LEDGER_CORRUPT',
      `Ledger file ${path} is unreadable: ${reason}. It was left untouched.`,
      options,
    );
    this.path = path;
  }
}
