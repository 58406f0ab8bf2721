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
  type ThresholdCrossing,
  type ThresholdEvent,
  Thresholds,
} from '../budget/budget-guard.js';
import { BudgetExceededError } from '../budget/errors.js';
import type { ThresholdClaimResult } from '../budget/ledger.js';
import { checkMicros } from '../budget/money.js';
import { type Clock, systemClock } from '../clock.js';
import { fn, integer, invalid, plainObject } from '../validate.js';
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
  /**
   * Called when committed spend crosses a threshold: each once per period per budget and key, across
   * the processes sharing the ledger (the one whose spend crossed it fires; a restarted one does not
   * fire it again). Fired once the ledger has recorded the claim, a round trip after the reserve or
   * settle that crossed it resolved; if the claim fails (Redis unavailable), this guard fires it
   * from its own memory.
   */
  onThreshold?: (event: ThresholdEvent) => void;
}

/**
 * `BudgetGuard` for an asynchronous ledger (Redis): the same budgets, windows, ids and refusals,
 * answered with promises. A shared gate takes it as `budget`. Everything follows `BudgetGuard`
 * (threshold events too, claimed through the ledger: see `onThreshold`).
 */
export class AsyncBudgetGuard {
  readonly budgets: readonly Budget[];
  readonly currency: string;
  readonly reservationTtlMs: number;
  readonly ledger: AsyncLedger;
  private readonly clock: Pick<Clock, 'now'>;
  private readonly windows: BudgetWindows;
  private readonly thresholds: Thresholds;

  constructor(options: AsyncBudgetGuardOptions) {
    const o = plainObject('options', options);
    for (const key of Object.keys(o)) {
      if (!['budgets', 'ledger', 'clock', 'onThreshold', 'reservationTtlMs'].includes(key))
        throw invalid(key, 'not set (known: budgets, ledger, clock, onThreshold, reservationTtlMs)', o[key]);
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
    this.thresholds = new Thresholds(this.budgets, this.windows);
    if (o['onThreshold'] !== undefined)
      this.thresholds.on(fn('onThreshold', o['onThreshold']) as (e: ThresholdEvent) => void);
  }

  /** Subscribe to threshold events; returns a function that unsubscribes. */
  onThreshold(listener: (event: ThresholdEvent) => void): () => void {
    fn('listener', listener);
    return this.thresholds.on(listener);
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
    this.claimAll(this.thresholds.reserved(result, estimateMicros, now), now);
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
    const result = await this.ledger.settle(reservationIdOf(reservation), actualMicros, now);
    this.claimAll(this.thresholds.settled(result, reservation, actualMicros, now), now);
    return result.found;
  }

  /** The call was not sent: give its reservation back. */
  async release(reservation: BudgetReservation, now: number = this.clock.now()): Promise<boolean> {
    return (await this.ledger.release(reservationIdOf(reservation), now)).found;
  }

  /** Spend per budget (and key) in its current window. */
  async spend(now: number = this.clock.now()): Promise<BudgetSpend[]> {
    return spendFromSnapshot(this.budgets, this.windows, await this.ledger.snapshot(now), now);
  }

  /**
   * Claim each threshold crossed (see `BudgetGuard`): not awaited by the call that crossed it, which
   * goes on; a claim that fails leaves it to this guard's memory (better an event twice than none).
   */
  private claimAll(crossings: readonly ThresholdCrossing[], now: number): void {
    const ledger = this.ledger;
    for (const crossing of crossings) {
      const mine: ThresholdClaimResult = { claimed: true, firedAt: now };
      if (ledger.claimThreshold === undefined) {
        this.thresholds.claimed(crossing, mine);
        continue;
      }
      // A claim that fails, or answers something else than a claim (a custom ledger), is this guard's.
      void new Promise<ThresholdClaimResult>((resolve) =>
        resolve(ledger.claimThreshold!(crossing.claim, now)),
      )
        .then(
          (result) => (typeof result?.claimed === 'boolean' ? result : mine),
          () => mine,
        )
        .then((result) => this.thresholds.claimed(crossing, result));
    }
  }
}

/** Build an `AsyncBudgetGuard`. Throws `InvalidOptionError` naming a bad option. */
export function createAsyncBudgetGuard(options: AsyncBudgetGuardOptions): AsyncBudgetGuard {
  return new AsyncBudgetGuard(options);
}
