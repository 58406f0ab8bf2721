import {
  type Budget,
  type BudgetSpec,
  budgetKeyOf,
  budgetNameOf,
  normalizeBudget,
} from '../budget/budget.js';
import {
  type BudgetDecision,
  type BudgetReservation,
  type BudgetSpend,
  ledgerEntry,
  refusalOf,
} from '../budget/budget-guard.js';
import { BudgetExceededError } from '../budget/errors.js';
import type { LedgerEntry } from '../budget/ledger.js';
import { checkMicros } from '../budget/money.js';
import { describePeriod, type PeriodWindow, periodWindow } from '../budget/period.js';
import { type Clock, systemClock } from '../clock.js';
import { InvalidCostError } from '../errors.js';
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
   * estimate (its process probably died after sending); it counts either way until its window ends.
   * Integer >= 1.
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
  private readonly windows: (PeriodWindow | undefined)[];

  constructor(options: AsyncBudgetGuardOptions) {
    const o = plainObject('options', options);
    for (const key of Object.keys(o)) {
      if (!['budgets', 'ledger', 'clock', 'reservationTtlMs'].includes(key))
        throw invalid(key, 'not set (known: budgets, ledger, clock, reservationTtlMs)', o[key]);
    }
    const specs = o['budgets'];
    if (specs === undefined) throw invalid('budgets', 'a budget or an array of budgets', specs);
    const list = Array.isArray(specs) ? specs : [specs];
    if (list.length === 0) throw invalid('budgets', 'at least one budget', specs);
    const budgets = list.map((spec, i) =>
      normalizeBudget(Array.isArray(specs) ? `budgets[${i}]` : 'budget', spec),
    );
    const names = new Set<string>();
    budgets.forEach((b, i) => {
      if (names.has(b.name))
        throw invalid(`budgets[${i}].name`, "distinct from the other budgets' names", b.name);
      names.add(b.name);
      if (b.currency !== budgets[0]!.currency)
        throw invalid(
          `budgets[${i}].currency`,
          `the same currency as the first budget (${budgets[0]!.currency})`,
          b.currency,
        );
    });
    this.budgets = Object.freeze(budgets);
    this.currency = budgets[0]!.currency;
    this.reservationTtlMs = integer('reservationTtlMs', o['reservationTtlMs'] ?? 900_000, 1);
    const ledger = o['ledger'] as Partial<AsyncLedger> | undefined;
    if (typeof ledger?.reserve !== 'function' || typeof ledger.settle !== 'function')
      throw invalid('ledger', 'an AsyncLedger (a RedisLedger)', ledger);
    this.ledger = ledger as AsyncLedger;
    const clock = o['clock'] ?? systemClock;
    if (typeof (clock as Clock | null)?.now !== 'function')
      throw invalid('clock', 'an object with a now() method', clock);
    this.clock = clock as Pick<Clock, 'now'>;
    this.windows = budgets.map(() => undefined);
  }

  /** Reserve on every budget that applies to `key`, all or nothing; a refusal is a value. */
  async tryReserve(
    estimateMicros: number,
    key?: string,
    now: number = this.clock.now(),
  ): Promise<BudgetDecision> {
    checkMicros(estimateMicros, 'estimateMicros');
    if (key !== undefined && typeof key !== 'string')
      throw new InvalidCostError(`key must be a string or undefined, got ${typeof key}`);
    const expiresAt = now + this.reservationTtlMs;
    const entries: LedgerEntry[] = this.budgets.map((budget, i) =>
      ledgerEntry(budget, key, this.windowAt(i, now), estimateMicros, expiresAt),
    );
    const result = await this.ledger.reserve(entries, now);
    if (!result.ok) return refusalOf(this.budgets, entries, result, key, estimateMicros, this.currency);
    return {
      ok: true,
      reservation: Object.freeze({
        id: result.reservationId,
        estimateMicros,
        key,
        budgetIds: Object.freeze(entries.map((e) => e.budgetId)),
        reservedAt: now,
        expiresAt,
      }),
    };
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
    return (await this.ledger.settle(reservation.id, actualMicros, now)).found;
  }

  /** The call was not sent: give its reservation back. */
  async release(reservation: BudgetReservation, now: number = this.clock.now()): Promise<boolean> {
    return (await this.ledger.release(reservation.id, now)).found;
  }

  /** Spend per budget (and key) in its current window. */
  async spend(now: number = this.clock.now()): Promise<BudgetSpend[]> {
    const snapshot = await this.ledger.snapshot(now);
    const out: BudgetSpend[] = [];
    this.budgets.forEach((budget, i) => {
      const window = this.windowAt(i, now);
      const rollingMs = budget.period.kind === 'rolling' ? budget.period.rollingMs : undefined;
      const matches = snapshot.filter(
        (w) =>
          budgetNameOf(w.budgetId) === budget.name &&
          (budget.perKey ? w.budgetId !== budget.name : w.budgetId === budget.name) &&
          (rollingMs === undefined
            ? w.rollingMs === undefined && w.windowStart === window.startMs && w.windowEnd === window.endMs
            : w.rollingMs === rollingMs),
      );
      for (const w of matches) {
        if (budget.perKey && w.spentMicros === 0 && w.reservedMicros === 0) continue;
        out.push({
          budget: budget.name,
          key: budget.perKey ? budgetKeyOf(w.budgetId) : undefined,
          budgetId: w.budgetId,
          currency: budget.currency,
          period: describePeriod(budget.period),
          spentMicros: w.spentMicros,
          reservedMicros: w.reservedMicros,
          limitMicros: budget.limitMicros,
          remainingMicros: Math.max(0, budget.limitMicros - w.spentMicros - w.reservedMicros),
          windowStart: w.windowStart,
          resetAt: w.resetAt,
        });
      }
      if (!budget.perKey && matches.length === 0) {
        out.push({
          budget: budget.name,
          key: undefined,
          budgetId: budget.name,
          currency: budget.currency,
          period: describePeriod(budget.period),
          spentMicros: 0,
          reservedMicros: 0,
          limitMicros: budget.limitMicros,
          remainingMicros: budget.limitMicros,
          windowStart: window.startMs,
          resetAt: rollingMs === undefined ? window.endMs : now,
        });
      }
    });
    return out;
  }

  private windowAt(i: number, now: number): PeriodWindow {
    const budget = this.budgets[i]!;
    if (budget.period.kind === 'rolling') return periodWindow(budget.period, now);
    const cached = this.windows[i];
    if (cached !== undefined && cached.startMs <= now && now < cached.endMs) return cached;
    const window = periodWindow(budget.period, now);
    this.windows[i] = window;
    return window;
  }
}

/** Build an `AsyncBudgetGuard`. Throws `InvalidOptionError` naming a bad option. */
export function createAsyncBudgetGuard(options: AsyncBudgetGuardOptions): AsyncBudgetGuard {
  return new AsyncBudgetGuard(options);
}
