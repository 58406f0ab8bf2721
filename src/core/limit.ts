/**
 * The contract every limit algorithm implements. Pure: no timers, no I/O, no clock reads; every
 * function takes `now` (ms) or `at` (ms) explicitly.
 *
 * A limit's state is a plain JSON value (a number, or a small object/array of numbers) so it can be
 * persisted and mirrored by the Redis store. Functions that change the state return it: callers
 * always write `state = core.take(state, cost, at)`, which lets single-number states (GCRA) avoid an
 * allocation per partition.
 */

export type Algorithm =
  | 'token-bucket'
  | 'leaky-bucket'
  | 'fixed-window'
  | 'sliding-log'
  | 'sliding-window'
  | 'concurrency';

export const algorithms: readonly Algorithm[] = [
  'token-bucket',
  'leaky-bucket',
  'fixed-window',
  'sliding-log',
  'sliding-window',
  'concurrency',
];

/** One rule: `limit` units per `intervalMs` (or `limit` at once, for `concurrency`). */
export interface LimitSpec {
  /** Which algorithm enforces the rule. */
  algorithm: Algorithm;
  /** Units admitted per `intervalMs` (for `concurrency`: units in flight at once). Integer >= 1. */
  limit: number;
  /** Length of the interval in ms. Finite, >= 1. Ignored by `concurrency`. */
  intervalMs?: number;
  /**
   * Token bucket only: the bucket size, i.e. the most units admitted at once after an idle period.
   * @default limit
   */
  burst?: number;
  /**
   * What the limit counts. A call's cost is a record of units; a limit reads its own unit.
   * @default 'requests'
   */
  unit?: string;
}

/** A refusal is a value: `retryAfterMs` is how long until the cost fits (Infinity: not predictable). */
export type Decision = { readonly ok: true } | { readonly ok: false; readonly retryAfterMs: number };

/** Levels the gate creates itself from provider responses (not configurable as a LimitSpec). */
export type AdaptiveAlgorithm = 'server-quota' | 'aimd';

export interface LimitCore<S = unknown> {
  readonly algorithm: Algorithm | AdaptiveAlgorithm;
  readonly unit: string;
  /** The largest cost one call may have; a larger cost is misuse (InvalidCostError), never a wait. */
  readonly capacity: number;
  /** False for `concurrency`, whose waits depend on other calls finishing and cannot be predicted. */
  readonly timed: boolean;
  /**
   * True when a start may be recorded at the time it was *scheduled* although the timer fired a
   * little later (GCRA: otherwise each timer's lateness would be carried forward and the long-run
   * rate would fall below the configured one). Window algorithms record the actual start.
   */
  readonly creditsLateStart: boolean;
  /** The normalized spec this core was built from. */
  readonly spec: Readonly<Required<LimitSpec>>;

  /** A full (idle) state. */
  initial(now: number): S;
  /**
   * Earliest time >= `now` at which `cost` fits behind everything already taken in `state`
   * (including takes recorded at future times). Returns `now` when it fits now, `Infinity` when it
   * cannot be predicted (concurrency at capacity). Does not change `state`.
   */
  earliestAt(state: S, cost: number, now: number): number;
  /**
   * Record `cost` as started at `at`. Callers ensure `at >= earliestAt(state, cost, at)` (or that
   * `at` is a scheduled start the limit itself produced). `at` may lie in the future: that is a
   * reservation, and later calls queue behind it.
   */
  take(state: S, cost: number, at: number): S;
  /**
   * Give back `cost` taken at `at` (a cancelled reservation, or units the call did not use).
   * Exact for the most recent take; for an older one it returns the units to the pool.
   * For `concurrency` this is the release when a call finishes.
   */
  refund(state: S, cost: number, at: number, now: number): S;
  /** Units that could be taken at `now` (for stats). */
  available(state: S, now: number): number;
  /** True when the state at `now` is indistinguishable from `initial(now)`: it may be dropped. */
  isIdle(state: S, now: number): boolean;
  /** A deep copy (states that are numbers are returned as is). */
  clone(state: S): S;
}

/** "Try now": a refusal is a value, never an exception. */
export function tryAcquireAt<S>(core: LimitCore<S>, state: S, cost: number, now: number): Decision {
  const at = core.earliestAt(state, cost, now);
  return at <= now ? { ok: true } : { ok: false, retryAfterMs: at - now };
}

/** Reserve `cost` at the earliest time it fits; the returned `startAt` may be in the future. */
export function reserveAt<S>(
  core: LimitCore<S>,
  state: S,
  cost: number,
  now: number,
): { state: S; startAt: number } {
  const startAt = core.earliestAt(state, cost, now);
  if (startAt === Infinity) return { state, startAt };
  return { state: core.take(state, cost, startAt), startAt };
}
