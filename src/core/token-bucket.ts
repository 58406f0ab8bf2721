import { emissionIntervalMs, gcraAvailable, gcraEarliestAt, gcraRefund, gcraTake } from './gcra.js';
import type { LimitCore } from './limit.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * Token bucket: refills at `r = limit / intervalMs` units per ms up to `burst` units (default
 * `limit`), and a call of `cost` units takes `cost` tokens. Implemented as GCRA (see `gcra.ts`) with
 * tolerance `τ = burst·T`, so the state is one number, the theoretical arrival time (ms).
 *
 * Promise: in any interval of length `L` ms (closed or half-open), the units started are at most
 * `burst + r·L`. After a long idle period the bucket holds `burst` units, never more.
 *
 * The trap: with `burst = b`, one window of length `intervalMs` can see `b + limit` units (a full
 * bucket, then the refill). To stay under a provider's "N per window", use `windowSafe`.
 *
 * `capacity = burst`: a call costing more can never start (`earliestAt` answers Infinity; callers
 * reject such a cost with `InvalidCostError` first). `take`/`refund` return the new number.
 */
export function createTokenBucket(spec: SpecFor<'token-bucket'>, path = 'limit'): LimitCore<number> {
  const normalized = normalizeLimitSpec(spec, path, 'token-bucket');
  const { limit, intervalMs, burst } = normalized;
  const emissionMs = emissionIntervalMs(limit, intervalMs);
  // τ (ms) = burst (units) × T (ms/unit): how far the TAT may run ahead of now, i.e. a full bucket.
  const toleranceMs = burst * emissionMs;

  const core: LimitCore<number> = {
    algorithm: 'token-bucket',
    unit: normalized.unit,
    capacity: burst,
    timed: true,
    creditsLateStart: true,
    spec: normalized,
    // A TAT at (or before) now: a full bucket.
    initial: (now) => now,
    earliestAt(tatMs, cost, now) {
      // A NaN cost never fits either (written so that it fails the test).
      if (!(cost <= burst)) return Infinity;
      return gcraEarliestAt(tatMs, cost, emissionMs, toleranceMs, now);
    },
    take: (tatMs, cost, at) => gcraTake(tatMs, cost, emissionMs, at),
    refund: (tatMs, cost) => gcraRefund(tatMs, cost, emissionMs),
    // Fractional: a token half refilled counts as half a unit.
    available: (tatMs, now) => gcraAvailable(tatMs, emissionMs, toleranceMs, now),
    isIdle: (tatMs, now) => tatMs <= now,
    clone: (tatMs) => tatMs,
  };
  return Object.freeze(core);
}
