/**
 * The store port: where shared limit decisions are made. Two implementations pass one contract
 * suite (`test/contract/store-contract.ts`): `MemoryStore` (this process; answers with values, so the
 * hot path stays synchronous) and `RedisStore` (shared by processes and machines; answers with
 * promises, one round trip per decision, on Redis server time).
 *
 * Times a store returns (`startAt`, `serverNow`, pause ends) are on the *store's* clock. A caller
 * converts them with the `serverNow` of the same answer: `localStart = localNow + (startAt - serverNow)`.
 */
import type { LimitSpec } from '../core/limit.js';
import type { NormalizedLimitSpec } from '../core/normalize-limit-spec.js';
import { invalid } from '../validate.js';

/** A value now, or a promise of it: memory answers synchronously, Redis asynchronously. */
export type MaybePromise<T> = T | Promise<T>;

/** One limit a call must pass in a partition. */
export interface StoreLevel {
  /**
   * Names the level's state inside its partition (e.g. `g0` for the first gate-wide limit). Calls
   * naming the same id share the state. Never a secret: it is part of a key name.
   */
  readonly id: string;
  /** The limit, normalized (`createLimit(spec).spec`). */
  readonly spec: NormalizedLimitSpec;
  /**
   * Token bucket only: the largest cost one call may have, when it exceeds `spec.burst` (the
   * core's `capacity`; a bucket kept on the safe side of the provider's by `arrivalMarginMs` has
   * the configured burst here and a smaller one in `spec`). `spec.burst` stays the tolerance: a
   * call costing `c` above it starts `(c - spec.burst)·T` after the bucket is full, or at once when
   * it has been full that long (see `createTokenBucket`). An integer >= `spec.burst`.
   * @default spec.burst
   */
  readonly capacity?: number;
}

/** Options of one reservation. */
export interface ReserveOptions {
  /**
   * Sub-partition for pauses and learned limits (the shared gate uses the hash of a call's key when
   * several keys share one partition). A call honours the pause of `''` and of its scope.
   * @default ''
   */
  readonly scope?: string;
  /**
   * The call's cost per unit, for limits learned from headers (a learned `tokens` limit charges
   * `units.tokens`). Missing units cost 0, except `requests`, which costs 1.
   */
  readonly units?: Readonly<Record<string, number>>;
  /**
   * The levels from this index on are the call's own (its key's); those before it are shared with
   * other keys' calls (gate-wide limits). When the call's own levels alone put its start more than
   * `ownWaitMs` after now and after the start the shared levels allow, the call is refused
   * (`'wait'`, `retryAfterMs` until its own levels allow it) rather than reserved: a reservation
   * would take the shared levels' slot at that far start, and every other key's calls would queue
   * behind it. Learned limits and the scope's pause count as the call's own. Unset: no such
   * refusal. A `'wait'` refusal then says which held the call (`StoreRefusal.shared`).
   */
  readonly ownFrom?: number;
  /** See `ownFrom`. @default 0 */
  readonly ownWaitMs?: number;
}

/** A granted reservation: the call may start at `startAt` (store time). Pass it back to refund. */
export interface StoreReservation {
  readonly ok: true;
  /** When the call may start (store clock, ms); `>= serverNow`. */
  readonly startAt: number;
  /** The store's clock when it decided (ms). */
  readonly serverNow: number;
  /** Unique id (concurrency permits are leased under it). */
  readonly id: string;
  readonly partition: string;
  readonly scope: string;
  readonly levels: readonly StoreLevel[];
  readonly costs: readonly number[];
  /**
   * Per level, what a refund checks (GCRA: the TAT after this take, as a number or its decimal
   * text; '' when there is nothing to check). Opaque.
   */
  readonly marks: readonly (string | number)[];
  /**
   * Learned levels in force for this reservation: their id, cost and mark (cost 0 where the call
   * has none of a level's unit; what it used there is settled by `adjust`).
   */
  readonly learned: readonly { readonly id: string; readonly cost: number; readonly mark: string }[];
}

/**
 * A refusal, as a value. `reason`:
 * - `'wait'`: the call would start `retryAfterMs` from now, later than `maxWaitMs` allows;
 * - `'concurrency'`: a concurrency limit is full (`retryAfterMs` Infinity: depends on releases);
 * - `'capacity'`: a level can never admit this cost (`retryAfterMs` Infinity).
 * Nothing was committed.
 */
export interface StoreRefusal {
  readonly ok: false;
  readonly retryAfterMs: number;
  readonly reason: 'wait' | 'concurrency' | 'capacity';
  readonly serverNow: number;
  /**
   * A `'wait'` refusal of a call with `ReserveOptions.ownFrom`: true when the shared levels (or the
   * partition's pause) alone put its start `retryAfterMs` away, false when its own levels (or its
   * scope's pause) do. Absent without `ownFrom`.
   */
  readonly shared?: boolean;
}

export type StoreDecision = StoreReservation | StoreRefusal;

/** A pause as stored: nothing in the partition (scope) starts before `untilMs` (store time). */
export interface StorePause {
  readonly untilMs: number;
  readonly serverNow: number;
}

/** Published to every store instance sharing the backend when a pause is set or extended. */
export interface StorePauseEvent {
  readonly partition: string | undefined;
  /** The pause key's identity (partition tag and scope); compare with `pauseId(partition, scope)`. */
  readonly pauseId: string;
  readonly untilMs: number;
  readonly serverNow: number;
}

export interface LearnOptions {
  readonly scope?: string;
  /**
   * Units already used in the provider's window (the provider's `limit - remaining`): taken at once
   * when the limit is first learned, so the first window is not over-filled; when it is known
   * already, a sliding log is topped up to them (counting its takes up to now), never down.
   * @default 0
   */
  readonly seedUnits?: number;
  /**
   * How long before now the seed is taken: the age of the provider's current window (its length
   * minus its reset), so the seeded units leave the learned limit at the provider's reset.
   * @default 0
   */
  readonly seedAgeMs?: number;
}

export interface Store {
  /**
   * Reserve `costs[i]` on every `levels[i]`, atomically and all or nothing, at the earliest time all
   * admit it behind everything already reserved (and after any pause). A start more than `maxWaitMs`
   * after now commits nothing and answers a refusal (`Infinity`: no bound).
   */
  reserve(
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    options?: ReserveOptions,
  ): MaybePromise<StoreDecision>;
  /** `reserve` at an explicit store time `now` (tests and parity checks). */
  reserveAt(
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    now: number,
    options?: ReserveOptions,
  ): MaybePromise<StoreDecision>;
  /**
   * Give a reservation back: all of it (a cancelled wait), or with `'untimed'` only its concurrency
   * permits (the call finished). A bucket gives back a take when it is its latest; an older take
   * of its chain waits, and goes back once every take above it has (never over-admits: until then
   * it stays counted; the takes above may belong to other processes, which give theirs back at a
   * pause, in any order). Windows and logs give back from the window the take was counted in.
   */
  refund(reservation: StoreReservation, which?: 'all' | 'untimed'): MaybePromise<void>;
  refundAt(reservation: StoreReservation, now: number, which?: 'all' | 'untimed'): MaybePromise<void>;
  /**
   * The call of `reservation` ran and its response came back now: count it in its window limits
   * (fixed window, sliding window, sliding log) from now instead of from `startAt`, moving it at
   * most `max(marginMs, intervalMs / 10)` after `startAt` (the in-memory gate's `recount`). The
   * provider counted the request when it arrived, which is no later than its response, so a window
   * counted from the response never ends before the provider's. The learned limits it was charged
   * on (sliding logs) move too; buckets and concurrency are unchanged. A reservation is recounted
   * once; its timed levels are never refunded after. `startedAt` (store time): when the call really
   * started, if later than `startAt` (a shared gate starts a window call late rather than reserve
   * again); the move is then capped from there.
   */
  recount(reservation: StoreReservation, marginMs: number, startedAt?: number): MaybePromise<void>;
  recountAt(
    reservation: StoreReservation,
    marginMs: number,
    now: number,
    startedAt?: number,
  ): MaybePromise<void>;
  /**
   * The call of `reservation` ran and its response says how many units it used (the gate's
   * `Inspection.actualCost`): each timed level counted in a unit of `units` (learned levels too,
   * those the call cost nothing on included) is charged the difference from what it reserved, as
   * the in-memory gate settles a call. More is taken at once (capped at what the level can ever
   * admit), at the reservation's start; with `recountMarginMs` (the call's windows are counted from
   * its response, as `recount` does), a window level is taken where a recount puts the call:
   * `min(now, startAt + max(recountMarginMs, intervalMs / 10))`, and a reservation not recounted yet
   * is recounted first. Less is given back only where that is exact: a bucket as a refund gives
   * back (the latest take, or an older one once the takes above it are given back), a window or
   * log without `recountMarginMs` (with it, the estimate was moved and stays counted: never
   * under-counted). A unit that is missing, negative or not finite changes nothing, and
   * concurrency is untouched. Once per reservation; nothing once its timed levels were refunded.
   * Optional: with a store that has none, the estimate stays counted.
   */
  adjust?(
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs?: number,
    startedAt?: number,
  ): MaybePromise<void>;
  /** `adjust` at an explicit store time `now` (tests and parity checks). */
  adjustAt?(
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs: number | undefined,
    now: number,
    startedAt?: number,
  ): MaybePromise<void>;
  /** Nothing in `partition` (and `scope`) starts before `untilMs` (store time); pauses only extend. */
  pause(partition: string, untilMs: number, scope?: string): MaybePromise<StorePause>;
  /** Pause for `durationMs` from the store's now (no clock conversion needed). */
  pauseFor(partition: string, durationMs: number, scope?: string): MaybePromise<StorePause>;
  /** The pause in force (`untilMs` 0 when none). */
  pausedUntil(partition: string, scope?: string): MaybePromise<StorePause>;
  /** The identity of a pause, as `StorePauseEvent.pauseId` reports it. */
  pauseId(partition: string, scope?: string): string;
  /** Subscribe to pauses set through any instance sharing this store's backend. */
  onPause(listener: (event: StorePauseEvent) => void): () => void;
  /**
   * Share a limit learned from a provider: later reservations in `partition` (and scope) check it
   * too. Answers true when it was new or changed.
   */
  learn(partition: string, spec: LimitSpec, options?: LearnOptions): MaybePromise<boolean>;
  /**
   * Claim the probe of `partition` (and scope) for `ttlMs`: true when no other holder has it, and
   * `holder` has it now (claiming again extends it). Gates that know nothing of a provider send one
   * probe among them: the others wait for its answer, learned into the store, instead of sending
   * theirs unseen by each other. Optional: with a store that has none, each gate probes for itself.
   */
  claimProbe?(partition: string, holder: string, ttlMs: number, scope?: string): MaybePromise<boolean>;
  /** Give the probe back, if `holder` still has it. */
  releaseProbe?(partition: string, holder: string, scope?: string): MaybePromise<void>;
  /** How long a learned limit lasts unless learned again (ms); a gate re-learns well within it. */
  readonly learnedTtlMs?: number;
  /** The store's clock (ms); for Redis one round trip. */
  time(): MaybePromise<number>;
  /**
   * Answers once the store can record decisions again (a shared gate's recovery probe): for Redis
   * a write, so a server that answers but refuses writes (out of memory, a read-only replica) stays
   * down. Optional: without it the gate probes with `time()`.
   */
  writable?(): MaybePromise<void>;
  /** Release connections the store opened (not a client passed in). */
  close(): MaybePromise<void>;
}

/** True when `value` is a promise-like (the store answered asynchronously). */
export function isPromise<T>(value: MaybePromise<T>): value is Promise<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

/** `options.seedAgeMs`, checked: a finite number of ms >= 0 (0 when omitted). */
export function seedAge(options: LearnOptions | undefined): number {
  const age = options?.seedAgeMs ?? 0;
  if (typeof age !== 'number' || !(age >= 0) || !Number.isFinite(age))
    throw invalid('seedAgeMs', 'a finite number of ms >= 0', age);
  return age;
}

/**
 * When the call of `reservation` really started, for a recount (see `Store.recount`): `startedAt`
 * when given and later than the reserved start, else the reserved start. Throws naming `startedAt`
 * when it is given and not a finite number.
 */
export function startedAtOf(reservation: StoreReservation, startedAt: number | undefined): number {
  if (startedAt === undefined) return reservation.startAt;
  if (typeof startedAt !== 'number' || !Number.isFinite(startedAt))
    throw invalid('startedAt', 'a finite number of ms (store time), or undefined', startedAt);
  return startedAt > reservation.startAt ? startedAt : reservation.startAt;
}

/**
 * The longest wait `maxWaitMs` allows: Infinity for no bound, 0 for a deadline already past (any
 * negative number, -Infinity included). Throws naming it when it is not a number (NaN included).
 */
export function waitBoundOf(maxWaitMs: number): number {
  if (typeof maxWaitMs !== 'number' || Number.isNaN(maxWaitMs))
    throw invalid(
      'maxWaitMs',
      'a number of ms (Infinity for no bound; a negative one is a bound of 0)',
      maxWaitMs,
    );
  return Math.max(maxWaitMs, 0);
}

/**
 * The wait `options` allow a call's own levels (`ReserveOptions.ownFrom`): Infinity without
 * `ownFrom`. Throws naming the option when `ownFrom` is not an integer >= 0 or `ownWaitMs` not a
 * number >= 0.
 */
export function ownWaitOf(options: ReserveOptions | undefined): number {
  const ownFrom = options?.ownFrom;
  const ownWaitMs = options?.ownWaitMs;
  if (ownFrom === undefined) {
    if (ownWaitMs !== undefined) throw invalid('ownWaitMs', 'given only with ownFrom', ownWaitMs);
    return Infinity;
  }
  if (typeof ownFrom !== 'number' || !Number.isInteger(ownFrom) || ownFrom < 0)
    throw invalid('ownFrom', 'an integer >= 0', ownFrom);
  if (ownWaitMs === undefined) return 0;
  if (typeof ownWaitMs !== 'number' || !(ownWaitMs >= 0))
    throw invalid('ownWaitMs', 'a number >= 0', ownWaitMs);
  return ownWaitMs;
}
