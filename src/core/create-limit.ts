import { oneOf, plainObject } from '../validate.js';
import { createConcurrency } from './concurrency.js';
import { createFixedWindow } from './fixed-window.js';
import { createLeakyBucket } from './leaky-bucket.js';
import { type Algorithm, algorithms, type LimitCore } from './limit.js';
import { createSlidingLog } from './sliding-log.js';
import { createSlidingWindow } from './sliding-window.js';
import { createTokenBucket } from './token-bucket.js';

// Each factory validates the whole spec itself (unknown keys, bounds, defaults); the table only picks
// the factory, so a spec is validated once.
const factories: Readonly<Record<Algorithm, (spec: never, path: string) => LimitCore>> = {
  'token-bucket': createTokenBucket,
  'leaky-bucket': createLeakyBucket,
  'fixed-window': createFixedWindow,
  'sliding-log': createSlidingLog,
  'sliding-window': createSlidingWindow,
  concurrency: createConcurrency,
};

/**
 * Builds the core of one limit from an untrusted spec. Validation follows `normalizeLimitSpec`:
 * bad input throws `InvalidOptionError` naming `path` (``Expected `limits[0].burst` to be an integer
 * >= 1, got `0` (number)``). The returned core is frozen, and its `spec` is the normalized, frozen
 * spec (defaults filled in: `unit: 'requests'`, `burst: limit` for a token bucket and `0` for the
 * other algorithms, `intervalMs: 0` for `concurrency`). A normalized spec is accepted again as is.
 *
 * @param path The option path named in error messages, e.g. `limits[2]` or `perKey.limits[0]`.
 */
export function createLimit(spec: unknown, path = 'limits[0]'): LimitCore {
  const { algorithm: rawAlgorithm } = plainObject(path, spec);
  const algorithm = oneOf(`${path}.algorithm`, rawAlgorithm, algorithms);
  return factories[algorithm](spec as never, path);
}
