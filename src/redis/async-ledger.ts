/**
 * The asynchronous twin of `Ledger` (src/budget/ledger.ts): the same operations, the same results,
 * answered with promises, for ledgers behind a network (Redis). A synchronous `Ledger` is an
 * `AsyncLedger` through `asyncLedger(ledger)`, so one contract suite checks both.
 */
import type {
  Ledger,
  LedgerEntry,
  LedgerReserveResult,
  LedgerSettleResult,
  LedgerWindow,
  ThresholdClaim,
  ThresholdClaimResult,
} from '../budget/ledger.js';
import { invalid } from '../validate.js';

export interface AsyncLedger {
  /**
   * As `Ledger.reserve`: all budgets or none, atomically across processes; durable once resolved.
   * A reserve that rejects (no answer in time, a lost connection) must end up holding nothing,
   * even if the ledger applies it late: the caller sends nothing and never releases it.
   */
  reserve(entries: readonly LedgerEntry[], now: number): Promise<LedgerReserveResult>;
  /**
   * Optional, as `Ledger.claimThreshold`: record a threshold crossed once per window across the
   * processes sharing the ledger. Without it, each `AsyncBudgetGuard` remembers what it fired itself.
   */
  claimThreshold?(claim: ThresholdClaim, now: number): Promise<ThresholdClaimResult>;
  settle(reservationId: string, actualMicros: number, now: number): Promise<LedgerSettleResult>;
  release(reservationId: string, now: number): Promise<LedgerSettleResult>;
  snapshot(now: number): Promise<LedgerWindow[]>;
  reset(budgetId?: string): Promise<void>;
  close(): Promise<void>;
}

/** A synchronous ledger (memory, file) seen through the asynchronous interface. */
export function asyncLedger(ledger: Ledger): AsyncLedger {
  for (const method of ['reserve', 'settle', 'release', 'snapshot', 'reset'] as const) {
    if (typeof (ledger as Partial<Ledger> | null)?.[method] !== 'function')
      throw invalid('ledger', 'a ledger (reserve, settle, release, snapshot, reset)', ledger);
  }
  const wrap =
    <A extends unknown[], R>(fn: (...args: A) => R) =>
    (...args: A): Promise<R> => {
      try {
        return Promise.resolve(fn(...args));
      } catch (error) {
        return Promise.reject(error);
      }
    };
  return {
    reserve: wrap((entries: readonly LedgerEntry[], now: number) => ledger.reserve(entries, now)),
    settle: wrap((id: string, actual: number, now: number) => ledger.settle(id, actual, now)),
    release: wrap((id: string, now: number) => ledger.release(id, now)),
    snapshot: wrap((now: number) => ledger.snapshot(now)),
    reset: wrap((budgetId?: string) => ledger.reset(budgetId)),
    close: wrap(() => ledger.close()),
    ...(typeof ledger.claimThreshold === 'function' && {
      claimThreshold: wrap((claim: ThresholdClaim, now: number) => ledger.claimThreshold!(claim, now)),
    }),
  };
}
