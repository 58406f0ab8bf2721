import type { LimitCore } from './limit.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * Concurrency: at most `limit` units in flight at once. The state is one number, the units in flight.
 * `take` starts units, `refund` releases them when the call finishes (or is cancelled).
 *
 * Promise: units in flight never exceed `limit`, provided every finished call is refunded.
 *
 * Not timed: when full, the wait depends on other calls finishing, so `earliestAt` answers Infinity
 * and the caller waits for a release instead. `intervalMs` is ignored (normalized to 0).
 * `capacity = limit`. `take`/`refund` return the new number.
 */
export function createConcurrency(spec: SpecFor<'concurrency'>, path = 'limit'): LimitCore<number> {
  const normalized = normalizeLimitSpec(spec, path, 'concurrency');
  const { limit } = normalized;

  const core: LimitCore<number> = {
    algorithm: 'concurrency',
    unit: normalized.unit,
    capacity: limit,
    timed: false,
    creditsLateStart: false,
    spec: normalized,
    initial: () => 0,
    earliestAt: (inFlight, cost, now) => (inFlight + cost <= limit ? now : Infinity),
    take: (inFlight, cost) => inFlight + cost,
    // Never below 0: a double release must not open extra slots.
    refund: (inFlight, cost) => (inFlight > cost ? inFlight - cost : 0),
    available: (inFlight) => (inFlight < limit ? limit - inFlight : 0),
    isIdle: (inFlight) => inFlight <= 0,
    clone: (inFlight) => inFlight,
  };
  return Object.freeze(core);
}
