import { finiteNumber, integer, invalid, nonEmptyString, plainObject } from '../validate.js';
import type { LimitSpec } from './limit.js';
import { minIntervalMs } from './normalize-limit-spec.js';

/** Options of `windowSafe`. */
export interface WindowSafeOptions {
  /**
   * Units that may start at once after an idle period (the bucket size), which is also the largest
   * cost one call may have. Integer from 1 to `limit - 1`.
   * @default Math.max(1, Math.floor(limit / 10))
   */
  burst?: number;
  /**
   * What the limit counts.
   * @default 'requests'
   */
  unit?: string;
}

const knownOptions: readonly string[] = ['burst', 'unit'];

/**
 * A token bucket that never starts more than `limit` units in any window of length `intervalMs`
 * (closed or half-open, at any offset), for a provider that enforces "`limit` per `intervalMs`".
 *
 * The trap it avoids: a token bucket of rate N/W and burst b admits up to `b + N` units in one window
 * of length W (a full bucket at the window's start, then a window's worth of refill). Its promise is
 * `units(L) <= b + r·L`; solving `b + r·intervalMs <= limit` gives the refill `r = (limit - b) / intervalMs`,
 * i.e. the spec `{ algorithm: 'token-bucket', limit: limit - burst, intervalMs, burst }`.
 *
 * The price: the sustained rate is `limit - burst` per window instead of `limit`, and no single call
 * may cost more than `burst`. The default burst, a tenth of the limit (at least 1), keeps 90% of the
 * rate while still letting a short burst through; pass `burst` to trade one for the other.
 *
 * `limit` must be at least 2: with `limit` 1 there is no room for both a burst of 1 and a refill
 * (use a `leaky-bucket` of 1 per `intervalMs`, which spaces starts `intervalMs` apart).
 *
 * Arguments are validated (``Expected `burst` to be an integer from 1 to 9 ..., got `10` (number)``).
 * Returns a frozen spec, ready for `createLimit` or a gate's `limits`.
 */
export function windowSafe(limit: number, intervalMs: number, options: WindowSafeOptions = {}): LimitSpec {
  const max = integer('limit', limit, 2);
  finiteNumber('intervalMs', intervalMs, { min: minIntervalMs });
  const input = plainObject('options', options);
  for (const key of Object.keys(input)) {
    if (!knownOptions.includes(key) && input[key] !== undefined) {
      throw invalid(
        `options.${key}`,
        `omitted (not a windowSafe option; known: ${knownOptions.join(', ')})`,
        input[key],
      );
    }
  }
  const { burst: rawBurst, unit: rawUnit } = input;
  let burst = Math.max(1, Math.floor(max / 10));
  if (rawBurst !== undefined) {
    if (typeof rawBurst !== 'number' || !Number.isSafeInteger(rawBurst) || rawBurst < 1 || rawBurst >= max) {
      throw invalid(
        'burst',
        `an integer from 1 to ${max - 1} (limit - 1: the rest of the window's quota is the refill)`,
        rawBurst,
      );
    }
    burst = rawBurst;
  }
  const unit = rawUnit === undefined ? 'requests' : nonEmptyString('unit', rawUnit);
  // b + r·W = burst + (limit - burst) = limit: the refill per window is what the burst leaves over.
  return Object.freeze({ algorithm: 'token-bucket', limit: max - burst, intervalMs, burst, unit });
}
