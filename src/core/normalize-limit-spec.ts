import { finiteNumber, integer, invalid, nonEmptyString, oneOf, plainObject } from '../validate.js';
import { type Algorithm, algorithms, type LimitSpec } from './limit.js';

/** A validated spec with every default filled in, frozen. It is what `LimitCore.spec` holds. */
export type NormalizedLimitSpec = Readonly<Required<LimitSpec>>;

/** The spec one algorithm's factory takes: as `LimitSpec`, with `algorithm` optional. */
export type SpecFor<A extends Algorithm> = Omit<LimitSpec, 'algorithm'> & { algorithm?: A };

const knownKeys: readonly string[] = ['algorithm', 'limit', 'intervalMs', 'burst', 'unit'];

/**
 * The shortest `intervalMs` of a timed limit. The gate's clock counts ms and its timers fire in
 * whole ms, so a shorter interval buys no precision; and with epoch-scale times (~1.7e12 ms) an
 * interval of 1e-4 ms puts window indexes past 2^53, where `index + 1 === index`.
 */
export const minIntervalMs = 1;

/**
 * Validates a limit spec and returns a frozen, normalized copy. Throws `InvalidOptionError` naming
 * the option path (``Expected `limits[0].burst` to be an integer >= 1, got `0` (number)``).
 *
 * Rules and defaults:
 * - `algorithm`: one of `algorithms` (required, unless `expected` supplies it).
 * - `limit`: an integer >= 1.
 * - `intervalMs`: a finite number >= `minIntervalMs` (1 ms), required by every algorithm but
 *   `concurrency`, which ignores it (if given it must be a finite number >= 0) and whose normalized
 *   `intervalMs` is `0`.
 * - `burst`: `token-bucket` only, an integer >= 1, default `limit`. Every other algorithm has no
 *   burst: `burst` must be omitted (or `0`, the normalized value, so a normalized spec can be fed
 *   back in), and the normalized `burst` is `0`.
 * - `unit`: a non-empty string, default `'requests'`.
 * - Any other key is rejected (a misspelt `intervalMS` would otherwise silently vanish).
 * An own property whose value is `undefined` counts as omitted.
 *
 * @param expected When given, the algorithm the caller builds: `spec.algorithm` may be omitted and
 *   must otherwise equal it.
 */
export function normalizeLimitSpec(
  spec: unknown,
  path = 'limits[0]',
  expected?: Algorithm,
): NormalizedLimitSpec {
  const input = plainObject(path, spec);
  for (const key of Object.keys(input)) {
    if (!knownKeys.includes(key) && input[key] !== undefined) {
      throw invalid(
        `${path}.${key}`,
        `omitted (not a limit option; known: ${knownKeys.join(', ')})`,
        input[key],
      );
    }
  }

  const {
    algorithm: rawAlgorithm,
    limit: rawLimit,
    intervalMs: rawInterval,
    burst: rawBurst,
    unit: rawUnit,
  } = input;
  const algorithm =
    expected === undefined
      ? oneOf(`${path}.algorithm`, rawAlgorithm, algorithms)
      : rawAlgorithm === undefined
        ? expected
        : oneOf(`${path}.algorithm`, rawAlgorithm, [expected]);

  const limit = integer(`${path}.limit`, rawLimit, 1);

  let intervalMs: number;
  if (algorithm === 'concurrency') {
    // Ignored, but a negative or NaN value is still a mistake worth reporting.
    if (rawInterval !== undefined) finiteNumber(`${path}.intervalMs`, rawInterval, { min: 0 });
    intervalMs = 0;
  } else {
    intervalMs = finiteNumber(`${path}.intervalMs`, rawInterval, { min: minIntervalMs });
  }

  let burst: number;
  if (algorithm === 'token-bucket') {
    burst = rawBurst === undefined ? limit : integer(`${path}.burst`, rawBurst, 1);
  } else {
    if (rawBurst !== undefined && rawBurst !== 0) {
      throw invalid(
        `${path}.burst`,
        `omitted (only 'token-bucket' has a burst; '${algorithm}' does not)`,
        rawBurst,
      );
    }
    burst = 0;
  }

  const unit = rawUnit === undefined ? 'requests' : nonEmptyString(`${path}.unit`, rawUnit);

  return Object.freeze({ algorithm, limit, intervalMs, burst, unit });
}
