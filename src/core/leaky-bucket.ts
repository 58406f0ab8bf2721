import { emissionIntervalMs, gcraEarliestAt, gcraRefund, gcraTake } from './gcra.js';
import type { LimitCore } from './limit.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * Leaky bucket as a meter (steady spacing): `limit` units per `intervalMs`, drained evenly, with no
 * burst. GCRA (see `gcra.ts`) with a tolerance equal to the call's own cost (`τ = cost·T`), which
 * reduces the test to `t >= TAT`: a call starts only once everything before it has drained. The
 * state is one number, the theoretical arrival time (ms).
 *
 * Promise: consecutive starts are at least `cost_prev · intervalMs / limit` ms apart, where
 * `cost_prev` is the cost of the earlier of the two (burst 0). With cost 1 per call, at most `limit`
 * calls start in any half-open interval of length `intervalMs`. (The spacing follows the earlier
 * call's cost, so a cheap call followed by a costly one may put more than `limit` units in one such
 * interval; a costly call is then followed by a long gap.)
 *
 * `burst` is rejected at construction: a leaky bucket that allowed bursts would be a token bucket.
 * `capacity = limit`: one call may cost up to a whole interval's worth, after which the next waits
 * `intervalMs`. `take`/`refund` return the new number.
 */
export function createLeakyBucket(spec: SpecFor<'leaky-bucket'>, path = 'limit'): LimitCore<number> {
  const normalized = normalizeLimitSpec(spec, path, 'leaky-bucket');
  const { limit, intervalMs } = normalized;
  const emissionMs = emissionIntervalMs(limit, intervalMs);

  const core: LimitCore<number> = {
    algorithm: 'leaky-bucket',
    unit: normalized.unit,
    capacity: limit,
    timed: true,
    creditsLateStart: true,
    spec: normalized,
    // A TAT at (or before) now: drained.
    initial: (now) => now,
    earliestAt(tatMs, cost, now) {
      // A NaN cost never fits either (written so that it fails the test).
      if (!(cost <= limit)) return Infinity;
      // τ (ms) = cost (units) × T (ms/unit): the slack τ - cost·T is exactly 0, so this is max(now, TAT).
      return gcraEarliestAt(tatMs, cost, emissionMs, cost * emissionMs, now);
    },
    take: (tatMs, cost, at) => gcraTake(tatMs, cost, emissionMs, at),
    refund: (tatMs, cost) => gcraRefund(tatMs, cost, emissionMs),
    // Any single call up to `capacity` may start once drained; none before.
    available: (tatMs, now) => (tatMs <= now ? limit : 0),
    isIdle: (tatMs, now) => tatMs <= now,
    clone: (tatMs) => tatMs,
  };
  return Object.freeze(core);
}
