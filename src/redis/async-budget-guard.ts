import { type Budget, type BudgetSpec, normalizeBudgets } from '../budget/budget.js';
import {
  type BudgetDecision,
  type BudgetReservation,
  type BudgetSpend,
  BudgetWindows,
  decisionOf,
  missingMethods,
  reservationIdOf,
  reservationRequest,
  spendFromSnapshot,
} from '../budget/budget-guard.js';
import { BudgetExceededError } from '../budget/errors.js';
import { checkMicros } from '../budget/money.js';
import { type Clock, systemClock } from '../clock.js';
import { integer, invalid, plainObject } from '../validate.js';
import type { AsyncLedger } from './async-ledger.js';

export interface AsyncBudgetGuardOptions {
  /** One budget or several; a call must fit all that apply. Names must be distinct. */
  budgets: BudgetSpec | readonly BudgetSpec[];
  /** Where spend is recorded: a `RedisLedger` (or any `AsyncLedger`). Not closed by the guard. */
  ledger: AsyncLedger;
  /** @default systemClock */
  clock?: Pick<Clock, 'now'>;
  /**
   * A reservation not settled or released this long after it was made counts as spent at its
   * estimate (its process probably died after sending); it counts either way until its window ends
   * (rolling: for `rollingMs` after it expired). Integer >= 1.
   * @default 900_000 (15 minutes)
   */
  reservationTtlMs?: number;
}

/**
 * `BudgetGuard` for an asynchronous ledger (Redis): the same budgets, windows, ids and refusals,
 * answered with promises. A shared gate takes it as `budget`. Threshold events are not emitted
 * (use `spend()`); everything else follows `BudgetGuard`.
 */
export class AsyncBudgetGuard {
  readonly budgets: readonly Budget[];
  readonly currency: string;
  readonly reservationTtlMs: number;
  readonly ledger: AsyncLedger;
  private readonly clock: Pick<Clock, 'now'>;
  private readonly windows: BudgetWindows;

  constructor(options: AsyncBudgetGuardOptions) {
    const o = plainObject('options', options);
    for (const key of Object.keys(o)) {
      if (!['budgets', 'ledger', 'clock', 'reservationTtlMs'].includes(key))
        throw invalid(key, 'not set (known: budgets, ledger, clock, reservationTtlMs)', o[key]);
    }
    this.budgets = normalizeBudgets(o['budgets']);
    this.currency = this.budgets[0]!.currency;
    this.reservationTtlMs = integer('reservationTtlMs', o['reservationTtlMs'] ?? 900_000, 1);
    const ledger = o['ledger'];
    if (typeof ledger !== 'object' || ledger === null)
      throw invalid('ledger', 'an AsyncLedger (a RedisLedger)', ledger);
    // Every method this guard calls (it never resets or closes the ledger), checked now rather
    // than as a TypeError on the first release.
    const missing = missingMethods(ledger, ['reserve', 'settle', 'release', 'snapshot']);
    if (missing.length > 0)
      throw invalid('ledger', `an AsyncLedger (a RedisLedger; missing method ${missing.join(', ')})`, ledger);
    this.ledger = ledger as AsyncLedger;
    const clock = o['clock'] ?? systemClock;
    if (typeof (clock as Clock | null)?.now !== 'function')
      throw invalid('clock', 'an object with a now() method', clock);
    this.clock = clock as Pick<Clock, 'now'>;
    this.windows = new BudgetWindows(this.budgets);
  }

  /** Reserve on every budget that applies to `key`, all or nothing; a refusal is a value. */
  async tryReserve(
    estimateMicros: number,
    key?: string,
    now: number = this.clock.now(),
  ): Promise<BudgetDecision> {
    const request = reservationRequest(
      this.budgets,
      this.windows,
      estimateMicros,
      key,
      now,
      this.reservationTtlMs,
    );
    const result = await this.ledger.reserve(request.entries, now);
    return decisionOf(this.budgets, this.currency, request, result);
  }

  /** Like `tryReserve`; a refusal rejects with `BudgetExceededError`. */
  async reserve(
    estimateMicros: number,
    key?: string,
    now: number = this.clock.now(),
  ): Promise<BudgetReservation> {
    const decision = await this.tryReserve(estimateMicros, key, now);
    if (!decision.ok) throw new BudgetExceededError(decision);
    return decision.reservation;
  }

  /** The call was sent and cost `actualMicros`. Resolves false if already settled or released. */
  async settle(
    reservation: BudgetReservation,
    actualMicros: number,
    now: number = this.clock.now(),
  ): Promise<boolean> {
    checkMicros(actualMicros, 'actualMicros');
    return (await this.ledger.settle(reservationIdOf(reservation), actualMicros, now)).found;
  }

  /** The call was not sent: give its reservation back. */
  async release(reservation: BudgetReservation, now: number = this.clock.now()): Promise<boolean> {
    return (await this.ledger.release(reservationIdOf(reservation), now)).found;
  }

  /** Spend per budget (and key) in its current window. */
  async spend(now: number = this.clock.now()): Promise<BudgetSpend[]> {
    return spendFromSnapshot(this.budgets, this.windows, await this.ledger.snapshot(now), now);
  }
}

/** Build an `AsyncBudgetGuard`. Throws `InvalidOptionError` naming a bad option. */
export function createAsyncBudgetGuard(options: AsyncBudgetGuardOptions): AsyncBudgetGuard {
  return new AsyncBudgetGuard(options);
}
