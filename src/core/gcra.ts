/**
 * The Generic Cell Rate Algorithm (GCRA), shared by the token bucket and the leaky bucket.
 *
 * The whole state is one number, the theoretical arrival time `tatMs` (TAT): the time at which
 * everything taken so far would have drained at the configured rate. With the emission interval
 * `T = intervalMs / limit` (ms per unit) and a tolerance `τ` (ms):
 *
 * - a take of `cost` at `t` conforms when `max(TAT, t) + cost·T - t <= τ`;
 * - after it, `TAT' = max(TAT, t) + cost·T`.
 *
 * `τ = burst·T` gives a token bucket of size `burst`; `τ = cost·T` (the call's own cost) gives the
 * leaky bucket, whose calls start only once the earlier ones have drained (`t >= TAT`).
 *
 * All functions are pure arithmetic on numbers: no allocation, so a partition's state can stay a
 * plain number on the hot path.
 */

/**
 * Emission interval `T` (ms per unit) for `limit` units per `intervalMs`.
 */
export function emissionIntervalMs(limit: number, intervalMs: number): number {
  // T (ms/unit) = intervalMs (ms) / limit (units)
  return intervalMs / limit;
}

/**
 * Earliest `t >= now` at which `cost` conforms: `max(TAT - (τ - cost·T), now)`. A cost with
 * `cost·T > τ` never conforms in the strict sense; callers turn it into Infinity first, except a
 * token bucket whose capacity exceeds its burst (see `createTokenBucket`): there the slack is
 * negative and the answer is `(cost·T - τ)` after the TAT, i.e. that long beyond a full bucket.
 */
export function gcraEarliestAt(
  tatMs: number,
  cost: number,
  emissionIntervalMs: number,
  toleranceMs: number,
  now: number,
): number {
  // For t >= TAT the test reads cost·T <= τ, true by assumption. For t < TAT it reads
  // TAT + cost·T - t <= τ, i.e. t >= TAT - slackMs with slackMs = τ - cost·T (ms = ms - units × ms/unit).
  // Computing the slack first keeps it exactly 0 when τ was computed as cost·T (leaky bucket).
  // A negative slack (cost·T > τ) puts the start after the TAT, by the units the bucket cannot hold.
  const slackMs = toleranceMs - cost * emissionIntervalMs;
  const atMs = tatMs - slackMs;
  return Math.max(atMs, now);
}

/** The TAT after taking `cost` at `at`: `max(TAT, at) + cost·T`. */
export function gcraTake(tatMs: number, cost: number, emissionIntervalMs: number, at: number): number {
  // A TAT in the past means "drained": the new units queue from `at`, not from the old TAT.
  // cost·T (ms) = cost (units) × T (ms/unit): how long the units take to drain.
  return Math.max(tatMs, at) + cost * emissionIntervalMs;
}

/**
 * The TAT after giving back `cost`: `TAT - cost·T`. For the most recent take this is
 * `max(TAT_before, at)`, which behaves exactly like `TAT_before` from `at` on; a reservation made
 * by `earliestAt` in the future always satisfies `at <= TAT_before`, so cancelling it is exact.
 * (Except a cost above the tolerance, which starts after `TAT_before`: its refund leaves the TAT at
 * its start, later than before, so it never gives back more than was taken.)
 * A TAT pushed below `now` is harmless: `max(TAT, t)` never lets a bucket fill beyond full.
 */
export function gcraRefund(tatMs: number, cost: number, emissionIntervalMs: number): number {
  // cost·T (ms) = cost (units) × T (ms/unit)
  return tatMs - cost * emissionIntervalMs;
}

/**
 * Units that conform at `now` under tolerance `toleranceMs`: the largest `c` with
 * `max(TAT, now) + c·T - now <= τ` (fractional: a unit half refilled counts as half), never below 0.
 */
export function gcraAvailable(
  tatMs: number,
  emissionIntervalMs: number,
  toleranceMs: number,
  now: number,
): number {
  // backlogMs = how far the TAT runs ahead of now (0 when drained).
  const backlogMs = tatMs > now ? tatMs - now : 0;
  // units = (τ - backlog) (ms) / T (ms/unit)
  const units = (toleranceMs - backlogMs) / emissionIntervalMs;
  return Math.max(units, 0);
}
