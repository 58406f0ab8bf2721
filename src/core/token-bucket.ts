import { integer } from '../validate.js';
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
 * `capacity = burst` by default: a call costing more can never start (`earliestAt` answers Infinity;
 * callers reject such a cost with `InvalidCostError` first). `take`/`refund` return the new number.
 *
 * A larger `capacity` (an integer >= burst) is for a bucket kept on the safe side of the provider's
 * (the gate's `arrivalMarginMs` builds one with a smaller `burst`, the tolerance, and the configured
 * burst as its capacity), so a cost the configured burst allows is never refused:
 * - a call costing `burst` or less is timed exactly as without it;
 * - a call costing `c` up to `capacity` starts `(c - burst)·T` after the bucket is full (after the
 *   TAT: `gcraEarliestAt` with a negative slack);
 * - a bucket full for `fullMs = (capacity - burst)·T` or longer admits any such call at once: its
 *   idle (and initial) TAT is `now - fullMs`, not `now`. A store drops an idle state and starts
 *   again from `initial(now)`, so the two must answer alike, and a call that waits for its time and
 *   then asks again (the shared gate's window calls) must find it has come.
 * The promise becomes `capacity + r·L`: never more than a bucket of size `capacity` would start.
 */
export function createTokenBucket(
  spec: SpecFor<'token-bucket'>,
  path = 'limit',
  capacity?: number,
): LimitCore<number> {
  const normalized = normalizeLimitSpec(spec, path, 'token-bucket');
  const { limit, intervalMs, burst } = normalized;
  const maxCost = capacity === undefined ? burst : integer(`${path}.capacity`, capacity, burst);
  const emissionMs = emissionIntervalMs(limit, intervalMs);
  // τ (ms) = burst (units) × T (ms/unit): how far the TAT may run ahead of now, i.e. a full bucket.
  const toleranceMs = burst * emissionMs;
  // fullMs = (capacity - burst) (units) × T (ms/unit): how long before now the TAT of a bucket that
  // admits its whole capacity lies (0 without a larger capacity).
  const fullMs = (maxCost - burst) * emissionMs;

  const core: LimitCore<number> = {
    algorithm: 'token-bucket',
    unit: normalized.unit,
    capacity: maxCost,
    timed: true,
    creditsLateStart: true,
    spec: normalized,
    // A TAT at (or before) now - fullMs: a full bucket.
    initial: (now) => now - fullMs,
    earliestAt(tatMs, cost, now) {
      // A NaN cost never fits either (written so that it fails the test).
      if (!(cost <= maxCost)) return Infinity;
      // Full for fullMs or longer (idle, as `initial`): any cost up to the capacity starts now. A test
      // rather than the formula's answer, which rounding could put an ulp after now.
      if (tatMs <= now - fullMs) return now;
      return gcraEarliestAt(tatMs, cost, emissionMs, toleranceMs, now);
    },
    take: (tatMs, cost, at) => gcraTake(tatMs, cost, emissionMs, at),
    refund: (tatMs, cost) => gcraRefund(tatMs, cost, emissionMs),
    // Fractional: a token half refilled counts as half a unit.
    available: (tatMs, now) => gcraAvailable(tatMs, emissionMs, toleranceMs, now),
    isIdle: (tatMs, now) => tatMs <= now - fullMs,
    clone: (tatMs) => tatMs,
  };
  return Object.freeze(core);
}
