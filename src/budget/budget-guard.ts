/**
 * The budget guard: what the gate asks before sending a paid call. It reserves the call's estimated
 * cost on every budget that applies (all or nothing), and settles or releases it afterwards.
 *
 *   const guard = createBudgetGuard({ budgets: [{ limit: 5, period: 'day' }, { limit: 50, period: 'month' }] });
 *   const reservation = guard.reserve(costMicros, key);  // throws BudgetExceededError: do not send
 *   try { response = await send(); guard.settle(reservation, actualMicros); }
 *   catch (e) { notSent ? guard.release(reservation) : guard.settle(reservation, reservation.estimateMicros); }
 *
 * Amounts on this API are integer micro-units (1 USD = 1_000_000); convert with `unitsToMicros`,
 * `parseMoney` or a `CostModel`.
 */

import { type Clock, systemClock } from '../clock.js';
import { InvalidCostError } from '../errors.js';
import { Emitter } from '../gate/events.js';
import { fn, integer, invalid, oneOf, plainObject } from '../validate.js';
import {
  type Budget,
  type BudgetSpec,
  budgetIdFor,
  budgetKeyOf,
  budgetNameOf,
  crossedThresholds,
  normalizeBudgets,
  thresholdDue,
} from './budget.js';
import { BudgetExceededError, type BudgetRefusal } from './errors.js';
import { FileLedger, type FileLedgerOptions } from './file-ledger.js';
import type {
  Ledger,
  LedgerEntry,
  LedgerReserveResult,
  LedgerSettleResult,
  LedgerTotals,
  LedgerWindow,
  ThresholdClaim,
  ThresholdClaimResult,
} from './ledger.js';
import { MemoryLedger } from './memory-ledger.js';
import { checkMicros } from './money.js';
import { describePeriod, type PeriodWindow, periodWindow } from './period.js';

/** A threshold crossed: committed spend (spent + reserved) reached `threshold` of the limit. */
export interface ThresholdEvent {
  readonly budget: string;
  readonly key: string | undefined;
  readonly budgetId: string;
  readonly currency: string;
  /** The fraction crossed, e.g. `0.8`. */
  readonly threshold: number;
  readonly spentMicros: number;
  readonly reservedMicros: number;
  readonly limitMicros: number;
  /** Calendar: the period's end. Rolling: undefined (the window slides). */
  readonly resetAt: number | undefined;
  /** When it was crossed (the guard's clock). */
  readonly at: number;
}

export interface BudgetGuardOptions {
  /** One budget or several; a call must fit all that apply. Names must be distinct. */
  budgets: BudgetSpec | readonly BudgetSpec[];
  /**
   * Where spend is recorded: `'file'` (the default: a SQLite file at `defaultLedgerPath()`, shared by
   * processes and kept across runs; needs `better-sqlite3`), `{ path }` (a file ledger elsewhere, plus
   * other `FileLedgerOptions`), `'memory'` (this process only), or any `Ledger`.
   * @default 'file'
   */
  ledger?: Ledger | 'file' | 'memory' | FileLedgerOptions;
  /** @default systemClock */
  clock?: Pick<Clock, 'now'>;
  /**
   * What a gate does with a call that does not fit: `'refuse'` rejects it at once with
   * `BudgetExceededError`; `'wait'` waits until `retryAt` (the next period, or when enough rolling
   * spend leaves the window) if that is within the call's deadline, else rejects. The guard itself
   * never waits: it reports `retryAt`, the gate decides.
   * @default 'refuse'
   */
  onExceeded?: 'refuse' | 'wait';
  /**
   * Called when committed spend crosses a threshold: each once per period per budget and key, across
   * the processes sharing a file ledger (the one whose spend crossed it fires; a restarted one does
   * not fire it again). With another ledger, each guard remembers what it fired itself.
   */
  onThreshold?: (event: ThresholdEvent) => void;
  /**
   * A reservation not settled or released this long after it was made is reported as spent at its
   * estimate (its process likely died after sending). It keeps counting against the cap either way
   * until its window ends (rolling: for `rollingMs` after it expired; a rolling reservation settled
   * or released before then is found however old it is). Integer >= 1.
   * @default 900_000 (15 minutes)
   */
  reservationTtlMs?: number;
}

/** A call's hold on its budgets, from `reserve` until `settle` or `release`. */
export interface BudgetReservation {
  /** The ledger's reservation id. */
  readonly id: string;
  readonly estimateMicros: number;
  readonly key: string | undefined;
  /** The ledger ids held: budget names, or `name[key]` for per-key budgets. */
  readonly budgetIds: readonly string[];
  readonly reservedAt: number;
  readonly expiresAt: number;
}

export type BudgetDecision =
  | { readonly ok: true; readonly reservation: BudgetReservation }
  | ({ readonly ok: false } & BudgetRefusal);

/** One budget's (and key's) spend in its current window. */
export interface BudgetSpend {
  readonly budget: string;
  readonly key: string | undefined;
  readonly budgetId: string;
  readonly currency: string;
  /** `'day'`, `'month Europe/Berlin'`, `'rolling 3600000ms'`. */
  readonly period: string;
  /** Settled spend, plus reservations past their TTL at their estimate. */
  readonly spentMicros: number;
  /** Reservations in flight. */
  readonly reservedMicros: number;
  readonly limitMicros: number;
  /** `max(0, limit - spent - reserved)`. */
  readonly remainingMicros: number;
  readonly windowStart: number;
  /** Calendar: when the period ends. Rolling: when the oldest counted spend leaves the window. */
  readonly resetAt: number;
}

/** The ledger entry of one budget for a call: its window, its cap, the call's estimate. */
export function ledgerEntry(
  budget: Budget,
  key: string | undefined,
  window: PeriodWindow,
  estimateMicros: number,
  expiresAt: number,
): LedgerEntry {
  return {
    budgetId: budgetIdFor(budget, key),
    windowStart: window.startMs,
    windowEnd: window.endMs,
    rollingMs: budget.period.kind === 'rolling' ? budget.period.rollingMs : undefined,
    limitMicros: budget.limitMicros,
    estimateMicros,
    expiresAt,
  };
}

/** A ledger's refusal as the guard reports it: which budget, and the numbers that did not fit. */
export function refusalOf(
  budgets: readonly Budget[],
  entries: readonly LedgerEntry[],
  result: Extract<LedgerReserveResult, { ok: false }>,
  key: string | undefined,
  estimateMicros: number,
  currency: string,
): BudgetDecision {
  const budget = budgets[entries.findIndex((e) => e.budgetId === result.budgetId)] ?? budgets[0]!;
  return {
    ok: false,
    budget: budget.name,
    key: budget.perKey ? (key ?? '') : undefined,
    budgetId: result.budgetId,
    currency,
    spentMicros: result.spentMicros,
    reservedMicros: result.reservedMicros,
    limitMicros: result.limitMicros,
    estimateMicros,
    resetAt: result.resetAt,
    retryAt: result.retryAt,
  };
}

/** Each budget's window at `now`, cached until it ends (calendar windows cost Intl calls in a zone). */
export class BudgetWindows {
  private readonly budgets: readonly Budget[];
  private readonly cached: (PeriodWindow | undefined)[];

  constructor(budgets: readonly Budget[]) {
    this.budgets = budgets;
    this.cached = budgets.map(() => undefined);
  }

  /** The window of `budgets[i]` at `now`. */
  at(i: number, now: number): PeriodWindow {
    const budget = this.budgets[i]!;
    if (budget.period.kind === 'rolling') return periodWindow(budget.period, now);
    const cached = this.cached[i];
    if (cached !== undefined && cached.startMs <= now && now < cached.endMs) return cached;
    const window = periodWindow(budget.period, now);
    this.cached[i] = window;
    return window;
  }
}

/** A call's reservation as a guard asks its ledger for it: one entry per budget, in budget order. */
export interface ReservationRequest {
  readonly estimateMicros: number;
  readonly key: string | undefined;
  readonly reservedAt: number;
  readonly expiresAt: number;
  readonly entries: readonly LedgerEntry[];
}

/**
 * Check a call's arguments and build what the ledger is asked to reserve at `now`. Throws
 * `InvalidCostError` for an estimate that is not an integer >= 0 or a key that is not a string.
 */
export function reservationRequest(
  budgets: readonly Budget[],
  windows: BudgetWindows,
  estimateMicros: number,
  key: string | undefined,
  now: number,
  reservationTtlMs: number,
): ReservationRequest {
  checkMicros(estimateMicros, 'estimateMicros');
  if (key !== undefined && typeof key !== 'string') {
    throw new InvalidCostError(`key must be a string or undefined, got ${typeof key}`);
  }
  const expiresAt = now + reservationTtlMs;
  const entries = budgets.map((budget, i) =>
    ledgerEntry(budget, key, windows.at(i, now), estimateMicros, expiresAt),
  );
  return { estimateMicros, key, reservedAt: now, expiresAt, entries };
}

/** The guard's decision from the ledger's answer to `request`: the reservation, or the refusal. */
export function decisionOf(
  budgets: readonly Budget[],
  currency: string,
  request: ReservationRequest,
  result: LedgerReserveResult,
): BudgetDecision {
  const { entries, key, estimateMicros } = request;
  if (!result.ok) return refusalOf(budgets, entries, result, key, estimateMicros, currency);
  return {
    ok: true,
    reservation: Object.freeze({
      id: result.reservationId,
      estimateMicros,
      key,
      budgetIds: Object.freeze(entries.map((e) => e.budgetId)),
      reservedAt: request.reservedAt,
      expiresAt: request.expiresAt,
    }),
  };
}

/**
 * Spend per budget in its current window at `now`, from the ledger's snapshot: every budget, and for
 * per-key budgets every key with spend recorded in the window.
 */
export function spendFromSnapshot(
  budgets: readonly Budget[],
  windows: BudgetWindows,
  snapshot: readonly LedgerWindow[],
  now: number,
): BudgetSpend[] {
  const out: BudgetSpend[] = [];
  for (let i = 0; i < budgets.length; i++) {
    const budget = budgets[i]!;
    const window = windows.at(i, now);
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
      // Per-key: list keys with something counted (a refused first call leaves an empty window).
      if (budget.perKey && w.spentMicros === 0 && w.reservedMicros === 0) continue;
      out.push(spendOf(budget, w));
    }
    if (!budget.perKey && matches.length === 0) {
      out.push(
        spendOf(budget, {
          budgetId: budget.name,
          windowStart: window.startMs,
          windowEnd: window.endMs,
          rollingMs,
          spentMicros: 0,
          reservedMicros: 0,
          limitMicros: budget.limitMicros,
          remainingMicros: budget.limitMicros,
          resetAt: rollingMs === undefined ? window.endMs : now,
        }),
      );
    }
  }
  return out;
}

function spendOf(budget: Budget, w: LedgerWindow): BudgetSpend {
  return {
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
  };
}

interface FiredState {
  windowStart: number;
  // Per threshold index: when it fired (rolling budgets fire again a full window later).
  firedAt: (number | undefined)[];
}

/** A threshold a change of spend crossed, due to be claimed from the ledger (see `Thresholds`). */
export interface ThresholdCrossing {
  readonly claim: ThresholdClaim;
  /** The event fired if the claim is this guard's. */
  readonly event: ThresholdEvent;
  readonly state: FiredState;
  readonly index: number;
  /** What `state` held for the threshold before the crossing marked it. */
  readonly previous: number | undefined;
}

const noCrossings: readonly ThresholdCrossing[] = Object.freeze([]);

/**
 * A guard's threshold events: its listeners, and what fired (or another guard on the ledger fired)
 * per budget id and window, so that a threshold is asked of the ledger once per window at most.
 * `crossed` finds the thresholds a change of spend crossed and marks them fired at once, so a second
 * crossing while the first one's claim is out asks nothing; `claimed` takes the ledger's answer and
 * fires the event when the claim was this guard's. Shared by `BudgetGuard` (claims answered at once)
 * and `AsyncBudgetGuard` (claims answered by Redis).
 */
export class Thresholds {
  private readonly events = new Emitter<ThresholdEvent>();
  // Per budget id: the current window's state and the previous one's (newest first).
  private readonly fired = new Map<string, FiredState[]>();

  constructor(
    private readonly budgets: readonly Budget[],
    private readonly windows: BudgetWindows,
  ) {}

  /** True when someone listens (no listener: nothing is checked, nothing claimed). */
  get listening(): boolean {
    return this.events.listeners !== undefined;
  }

  /** Subscribe; returns a function that unsubscribes. */
  on(listener: (event: ThresholdEvent) => void): () => void {
    return this.events.on(listener);
  }

  /** The thresholds a reservation of `estimateMicros` crossed (none when nobody listens). */
  reserved(result: LedgerReserveResult, estimateMicros: number, now: number): readonly ThresholdCrossing[] {
    // Every call through a budgeted gate comes here: nothing allocated when nothing is crossed.
    if (!result.ok || !this.listening || estimateMicros <= 0) return noCrossings;
    return this.crossed(result.totals, estimateMicros, now);
  }

  /**
   * The thresholds a settle above the reservation's estimate crossed: the extra lands in the window
   * the reservation was made in (a late settle: the previous one).
   */
  settled(
    result: LedgerSettleResult,
    reservation: BudgetReservation,
    actualMicros: number,
    now: number,
  ): readonly ThresholdCrossing[] {
    const extra = actualMicros - reservation.estimateMicros;
    if (!result.found || extra <= 0 || !this.listening) return noCrossings;
    return this.crossed(result.totals, extra, now, reservation.reservedAt);
  }

  /**
   * The thresholds crossed by a change of +deltaMicros in committed spend, `totals` being after it,
   * in the windows containing `datedAt` (when the spend was reserved), not known as fired here; each
   * is marked fired at `now` until its claim is answered (`claimed`).
   */
  private crossed(
    totals: readonly LedgerTotals[],
    deltaMicros: number,
    now: number,
    datedAt: number = now,
  ): ThresholdCrossing[] {
    const crossings: ThresholdCrossing[] = [];
    for (const t of totals) {
      const i = this.budgets.findIndex((b) => b.name === budgetNameOf(t.budgetId));
      const budget = this.budgets[i];
      if (budget === undefined) continue;
      const after = t.spentMicros + t.reservedMicros;
      const crossed = crossedThresholds(budget.thresholdMicros, after - deltaMicros, after);
      if (crossed.length === 0) continue;
      const rolling = budget.period.kind === 'rolling';
      const window = this.windows.at(i, rolling ? now : datedAt);
      const rollingMs = budget.period.kind === 'rolling' ? budget.period.rollingMs : undefined;
      const state = this.firedState(t.budgetId, rolling ? 0 : window.startMs, now);
      for (const index of crossed) {
        // Once per period; a rolling window has no period, so once per window length. What this
        // guard fired (or learned another had) is not asked of the ledger again.
        const previous = state.firedAt[index];
        if (!thresholdDue(previous, rollingMs, now)) continue;
        state.firedAt[index] = now;
        const threshold = budget.thresholds[index]!;
        crossings.push({
          claim: {
            budgetId: t.budgetId,
            windowStart: window.startMs,
            windowEnd: window.endMs,
            rollingMs,
            threshold,
          },
          event: {
            budget: budget.name,
            key: budget.perKey ? budgetKeyOf(t.budgetId) : undefined,
            budgetId: t.budgetId,
            currency: budget.currency,
            threshold,
            spentMicros: t.spentMicros,
            reservedMicros: t.reservedMicros,
            limitMicros: budget.limitMicros,
            resetAt: rolling ? undefined : window.endMs,
            at: now,
          },
          state,
          index,
          previous,
        });
      }
    }
    return crossings;
  }

  /**
   * The ledger's answer to a crossing's claim: the event fires when the claim was this guard's;
   * otherwise the guard remembers when another fired it (or, the window not in the ledger, what it
   * knew before).
   */
  claimed(crossing: ThresholdCrossing, result: ThresholdClaimResult): void {
    if (result.claimed) {
      // A listener's bug must not undo or block accounting: the emitter surfaces it asynchronously.
      this.events.emit(crossing.event);
      return;
    }
    crossing.state.firedAt[crossing.index] = result.firedAt ?? crossing.previous;
  }

  /** Forget what fired for budget `name` (with its keys; or one key as `name[key]`), or for all. */
  forget(name?: string): void {
    for (const id of this.fired.keys()) {
      if (name === undefined || id === name || id.startsWith(`${name}[`)) this.fired.delete(id);
    }
  }

  /**
   * What fired in one window of `budgetId`. The current window and the one before are kept: a call
   * reserved before a period ended may settle after, and its extra charge lands in the old window
   * (ledgers keep exactly those two), without resetting what fired in the new one.
   */
  private firedState(budgetId: string, windowStart: number, now: number): FiredState {
    let states = this.fired.get(budgetId);
    if (states === undefined) {
      if (this.fired.size >= 10_000) this.forgetOld(now);
      states = [];
      this.fired.set(budgetId, states);
    }
    let state = states.find((s) => s.windowStart === windowStart);
    if (state === undefined) {
      state = { windowStart, firedAt: [] };
      states.push(state);
      states.sort((a, b) => b.windowStart - a.windowStart);
      if (states.length > 2) states.length = 2;
    }
    return state;
  }

  private forgetOld(now: number): void {
    for (const [id, states] of this.fired) {
      const i = this.budgets.findIndex((b) => b.name === budgetNameOf(id));
      const budget = this.budgets[i];
      if (
        budget === undefined ||
        (budget.period.kind === 'calendar' &&
          !states.some((s) => s.windowStart === this.windows.at(i, now).startMs))
      ) {
        this.fired.delete(id);
      }
    }
  }
}

/** Validate options and build a guard. Throws `InvalidOptionError` naming the bad option. */
export function createBudgetGuard(options: BudgetGuardOptions): BudgetGuard {
  return new BudgetGuard(options);
}

/** The ledger id of a reservation `tryReserve` returned; throws naming `reservation` for anything else. */
export function reservationIdOf(reservation: BudgetReservation): string {
  const id = (reservation as { id?: unknown } | null | undefined)?.id;
  if (typeof id !== 'string')
    throw invalid('reservation', 'a reservation returned by tryReserve', reservation);
  return id;
}

export class BudgetGuard {
  readonly budgets: readonly Budget[];
  /** The currency every amount is counted in (shared by all budgets). */
  readonly currency: string;
  readonly onExceeded: 'refuse' | 'wait';
  readonly reservationTtlMs: number;
  readonly ledger: Ledger;
  private readonly ownsLedger: boolean;
  private readonly clock: Pick<Clock, 'now'>;
  private readonly windows: BudgetWindows;
  private readonly thresholds: Thresholds;

  constructor(options: BudgetGuardOptions) {
    const o: { [K in keyof BudgetGuardOptions]?: unknown } & Record<string, unknown> = plainObject(
      'options',
      options,
    );
    for (const key of Object.keys(o)) {
      if (!['budgets', 'ledger', 'clock', 'onExceeded', 'onThreshold', 'reservationTtlMs'].includes(key)) {
        throw invalid(
          key,
          'not set (known: budgets, ledger, clock, onExceeded, onThreshold, reservationTtlMs)',
          o[key],
        );
      }
    }
    this.budgets = normalizeBudgets(o.budgets);
    this.currency = this.budgets[0]!.currency;
    this.onExceeded = oneOf('onExceeded', o.onExceeded ?? 'refuse', ['refuse', 'wait']);
    this.reservationTtlMs = integer('reservationTtlMs', o.reservationTtlMs ?? 900_000, 1);
    const clock = o.clock ?? systemClock;
    if (typeof clock !== 'object' || clock === null || typeof (clock as Clock).now !== 'function') {
      throw invalid('clock', 'an object with a now() method', clock);
    }
    this.clock = clock as Pick<Clock, 'now'>;
    this.windows = new BudgetWindows(this.budgets);
    this.thresholds = new Thresholds(this.budgets, this.windows);
    if (o.onThreshold !== undefined)
      this.thresholds.on(fn('onThreshold', o.onThreshold) as (e: ThresholdEvent) => void);

    // Unset is the default file; null is not unset (it asked for no ledger, which a budget cannot do).
    const ledger = o.ledger === undefined ? 'file' : o.ledger;
    if (ledger === 'memory') {
      this.ledger = new MemoryLedger();
      this.ownsLedger = true;
    } else if (ledger === 'file') {
      this.ledger = new FileLedger();
      this.ownsLedger = true;
    } else if (typeof ledger === 'object' && ledger !== null && !Array.isArray(ledger)) {
      // A Ledger has every method; options have none. Something in between is a Ledger missing a
      // method, not file options: opening the default file instead would hide the mistake.
      const missing = missingMethods(ledger, ledgerMethods);
      if (missing.length === 0) {
        this.ledger = ledger as Ledger;
        this.ownsLedger = false;
      } else if (missing.length < ledgerMethods.length) {
        throw invalid('ledger', `a Ledger (missing method ${missing.join(', ')})`, ledger);
      } else if (isPlainObject(ledger)) {
        this.ledger = new FileLedger(ledger as FileLedgerOptions);
        this.ownsLedger = true;
      } else {
        // A Map, a Date...: neither a Ledger nor file options (read as such, it opened the default file).
        throw invalid('ledger', "'file', 'memory', { path } or a Ledger", ledger);
      }
    } else {
      throw invalid('ledger', "'file', 'memory', { path } or a Ledger", ledger);
    }
  }

  /** Subscribe to threshold events; returns a function that unsubscribes. */
  onThreshold(listener: (event: ThresholdEvent) => void): () => void {
    fn('listener', listener);
    return this.thresholds.on(listener);
  }

  /**
   * Reserve `estimateMicros` on every budget that applies to `key`, all or nothing. A refusal is a
   * value carrying the numbers and `retryAt`. Throws `InvalidCostError` for an estimate that is not
   * an integer >= 0.
   */
  tryReserve(estimateMicros: number, key?: string, now: number = this.clock.now()): BudgetDecision {
    const request = reservationRequest(
      this.budgets,
      this.windows,
      estimateMicros,
      key,
      now,
      this.reservationTtlMs,
    );
    const result = this.ledger.reserve(request.entries, now);
    this.claimAll(this.thresholds.reserved(result, estimateMicros, now), now);
    return decisionOf(this.budgets, this.currency, request, result);
  }

  /**
   * Like `tryReserve`, but a refusal throws `BudgetExceededError` (the call must not be sent).
   */
  reserve(estimateMicros: number, key?: string, now: number = this.clock.now()): BudgetReservation {
    const decision = this.tryReserve(estimateMicros, key, now);
    if (!decision.ok) throw new BudgetExceededError(decision);
    return decision.reservation;
  }

  /**
   * The call was sent and cost `actualMicros`: the estimate is refunded or the difference charged
   * (an extra charge may take spend past the limit; see `budget.ts`). If the actual cost is unknown,
   * settle at `reservation.estimateMicros`. Returns false if the reservation was already settled,
   * released, or reset, or its window was dropped (nothing is charged then). Throws
   * `InvalidCostError` for an amount that is not an integer >= 0, or one that would take a budget's
   * spend past the exact range (then nothing changes).
   */
  settle(reservation: BudgetReservation, actualMicros: number, now: number = this.clock.now()): boolean {
    checkMicros(actualMicros, 'actualMicros');
    const result = this.ledger.settle(reservationIdOf(reservation), actualMicros, now);
    this.claimAll(this.thresholds.settled(result, reservation, actualMicros, now), now);
    return result.found;
  }

  /** The call was not sent: give its reservation back. Returns false if already settled or released. */
  release(reservation: BudgetReservation, now: number = this.clock.now()): boolean {
    return this.ledger.release(reservationIdOf(reservation), now).found;
  }

  /**
   * Spend per budget in its current window: every budget, and for per-key budgets every key with
   * spend recorded in the window.
   */
  spend(now: number = this.clock.now()): BudgetSpend[] {
    return spendFromSnapshot(this.budgets, this.windows, this.ledger.snapshot(now), now);
  }

  /**
   * Forget recorded spend: of budget `name` (with all its keys; or one key as `name[key]`), or of
   * every budget of this guard. Reservations in flight are forgotten too.
   */
  reset(name?: string): void {
    if (name === undefined) for (const b of this.budgets) this.ledger.reset(b.name);
    else {
      if (typeof name !== 'string' || !this.budgets.some((b) => b.name === budgetNameOf(name))) {
        throw invalid(
          'name',
          `one of this guard's budgets (${this.budgets.map((b) => b.name).join(', ')})`,
          name,
        );
      }
      this.ledger.reset(name);
    }
    this.thresholds.forget(name);
  }

  /** Close the ledger if the guard opened it (not one passed in). */
  close(): void {
    if (this.ownsLedger) this.ledger.close();
  }

  /** Claim each threshold crossed, at once; those claimed here fire. */
  private claimAll(crossings: readonly ThresholdCrossing[], now: number): void {
    for (const crossing of crossings) this.thresholds.claimed(crossing, this.claim(crossing.claim, now));
  }

  /**
   * Whether this guard fires the threshold, from the ledger's record (see `Ledger.claimThreshold`):
   * not when another guard on the ledger fired it (or this one before a restart). A ledger without
   * claims, or one that fails to record this one, leaves it to this guard's memory: better an event
   * twice than none, and the call reserved or settled already must not fail for it.
   */
  private claim(claim: ThresholdClaim, now: number): ThresholdClaimResult {
    if (this.ledger.claimThreshold === undefined) return { claimed: true, firedAt: now };
    try {
      return this.ledger.claimThreshold(claim, now);
    } catch {
      return { claimed: true, firedAt: now };
    }
  }
}

/** An object literal (or one made with `Object.create(null)`), not an instance of some class. */
function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/** The methods of `Ledger`, all of which the guard calls. */
const ledgerMethods: readonly string[] = ['reserve', 'settle', 'release', 'snapshot', 'reset', 'close'];

/** Which of `methods` `value` lacks (as `name()`); a method may come from the prototype (a class). */
export function missingMethods(value: object, methods: readonly string[]): string[] {
  const v = value as Record<string, unknown>;
  return methods.filter((m) => typeof v[m] !== 'function').map((m) => `${m}()`);
}
