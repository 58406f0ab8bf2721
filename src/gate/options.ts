import { BudgetGuard, type BudgetGuardOptions, createBudgetGuard } from '../budget/budget-guard.js';
import type { Clock } from '../clock.js';
import { systemClock } from '../clock.js';
import { type AdaptOptions, defaultAdaptOptions } from '../core/adaptation.js';
import { createLimit } from '../core/create-limit.js';
import type { LimitCore, LimitSpec } from '../core/limit.js';
import { createTokenBucket } from '../core/token-bucket.js';
import {
  finiteNumber,
  integer,
  integerOrInfinity,
  invalid,
  oneOf,
  onlyKnownKeys,
  plainObject,
} from '../validate.js';

export interface GateOptions {
  /**
   * Limits shared by every call through the gate, each in its own unit. A call must fit all of
   * them, all-or-nothing.
   * @default []
   * @example [{ algorithm: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 }]
   */
  limits?: readonly LimitSpec[];
  /**
   * Limits applied separately to each partition key (the `key` of a call: a host, an API key's
   * hash, an endpoint, a tenant). Calls without a key share the default partition, which has these
   * limits too.
   * @default []
   */
  perKey?: readonly LimitSpec[];
  /**
   * Most calls waiting in one partition's queue; one more is refused at once with `QueueFullError`.
   * @default 10_000
   */
  maxQueue?: number;
  /**
   * Default deadline for a call to start, in ms. A call whose predicted wait is longer is refused at
   * once with `QueueTimeoutError` and never sent.
   * @default Infinity
   */
  maxQueueTimeMs?: number;
  /** Time source. Tests inject a manual clock. @default systemClock */
  clock?: Clock;
  /**
   * How the gate listens to providers on calls that carry an `inspect` (every HTTP adapter does):
   * pauses on 429/503, retries, pacing of `remaining`, limits learned from headers, AIMD.
   * `false` turns adaptation off (responses are returned as they are).
   */
  adapt?: Partial<AdaptOptionsInput> | false;
  /**
   * Money budgets: a guard, or the options to build one (its clock defaults to the gate's).
   * A call's estimate is its `priceMicros` (or `defaultPriceMicros`); it is reserved before the
   * call is queued and settled with the actual price after the response.
   */
  budget?: BudgetGuard | (Omit<BudgetGuardOptions, 'clock'> & { defaultPriceMicros?: number });
  /**
   * Randomness for backoff jitter, in [0, 1). Tests inject a fixed one. A draw outside [0, 1) (or
   * one that throws) is replaced by `Math.random()`. @default Math.random
   */
  random?: () => number;
  /**
   * Safety margin, in ms, between the client's clock and the provider's: providers count a
   * request when it arrives, and the first one of a run can arrive tens of ms after it was sent.
   * When it is above 0:
   * - token buckets leave `rate × margin` of their burst unused (rounded up to whole units); a call
   *   may still cost up to the whole burst, and starts once the bucket has been full for as long as
   *   the units it costs beyond what is left take to refill;
   * - fixed, sliding-log and sliding windows count each call from the moment it settles (its
   *   response came back, so the provider had counted it by then) rather than from its start, but
   *   never later than `max(margin, intervalMs / 10)` after its start, so slow responses cost at
   *   most a tenth of a window's throughput.
   *
   * 0 keeps every limit exact on the gate's clock at dispatch.
   * @default 50 with the system clock; 0 with an injected clock (tests reason in exact times)
   */
  arrivalMarginMs?: number;
}

export interface AdaptOptionsInput extends Omit<AdaptOptions, 'aimd'> {
  aimd: false | Partial<Exclude<AdaptOptions['aimd'], false>>;
}

export interface NormalizedGateOptions {
  readonly globalCores: readonly LimitCore[];
  readonly keyCores: readonly LimitCore[];
  readonly maxQueue: number;
  readonly maxQueueTimeMs: number;
  readonly clock: Clock;
  readonly adapt: AdaptOptions | false;
  readonly budget: BudgetGuard | undefined;
  /** True when the gate built the guard (and so closes it). */
  readonly ownsBudget: boolean;
  readonly defaultPriceMicros: number;
  readonly random: () => number;
  readonly arrivalMarginMs: number;
}

const knownKeys = new Set([
  'limits',
  'perKey',
  'maxQueue',
  'maxQueueTimeMs',
  'clock',
  'adapt',
  'budget',
  'random',
  'arrivalMarginMs',
]);
const adaptKeys = new Set(Object.keys(defaultAdaptOptions));
const aimdKeys = ['decrease', 'increase', 'minRatePerSec', 'maxRatePerSec'];

function validateAdapt(value: unknown): AdaptOptions | false {
  if (value === false) return false;
  if (value === undefined) return defaultAdaptOptions;
  const o = plainObject('adapt', value);
  onlyKnownKeys('adapt', o, adaptKeys);
  const d = defaultAdaptOptions;
  let aimd: AdaptOptions['aimd'] = d.aimd;
  if (o['aimd'] === false) aimd = false;
  else if (o['aimd'] !== undefined) {
    const a = plainObject('adapt.aimd', o['aimd']);
    onlyKnownKeys('adapt.aimd', a, aimdKeys);
    const base = d.aimd as Exclude<AdaptOptions['aimd'], false>;
    const decrease = finiteNumber('adapt.aimd.decrease', a['decrease'] ?? base.decrease, {
      min: 0,
      minExclusive: true,
    });
    if (decrease >= 1) throw invalid('adapt.aimd.decrease', 'a number > 0 and < 1', decrease);
    const minRatePerSec = finiteNumber('adapt.aimd.minRatePerSec', a['minRatePerSec'] ?? base.minRatePerSec, {
      min: 0,
      minExclusive: true,
    });
    const maxRatePerSec = a['maxRatePerSec'] ?? base.maxRatePerSec;
    if (typeof maxRatePerSec !== 'number' || Number.isNaN(maxRatePerSec) || maxRatePerSec < minRatePerSec) {
      throw invalid(
        'adapt.aimd.maxRatePerSec',
        `a number >= minRatePerSec (${minRatePerSec})`,
        maxRatePerSec,
      );
    }
    aimd = Object.freeze({
      decrease,
      increase: finiteNumber('adapt.aimd.increase', a['increase'] ?? base.increase, {
        min: 0,
        minExclusive: true,
      }),
      minRatePerSec,
      maxRatePerSec,
    });
  }
  const backoffBaseMs = finiteNumber('adapt.backoffBaseMs', o['backoffBaseMs'] ?? d.backoffBaseMs, {
    min: 0,
  });
  const backoffMaxMs = finiteNumber('adapt.backoffMaxMs', o['backoffMaxMs'] ?? d.backoffMaxMs, { min: 0 });
  const retryUnsafeOn503 = o['retryUnsafeOn503'] ?? d.retryUnsafeOn503;
  if (typeof retryUnsafeOn503 !== 'boolean')
    throw invalid('adapt.retryUnsafeOn503', 'a boolean', retryUnsafeOn503);
  const learn = o['learn'] ?? d.learn;
  if (typeof learn !== 'boolean') throw invalid('adapt.learn', 'a boolean', learn);
  return Object.freeze({
    pacing: oneOf('adapt.pacing', o['pacing'] ?? d.pacing, ['burst', 'spread'] as const),
    maxRetries: integer('adapt.maxRetries', o['maxRetries'] ?? d.maxRetries, 0),
    maxRetryAfterMs: finiteNumber('adapt.maxRetryAfterMs', o['maxRetryAfterMs'] ?? d.maxRetryAfterMs, {
      min: 0,
    }),
    backoffBaseMs,
    backoffMaxMs,
    retryUnsafeOn503,
    learn,
    aimd,
  });
}

export function buildCores(value: unknown, path: string, arrivalMarginMs = 0): LimitCore[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw invalid(path, 'an array of limits', value);
  return value.map((spec, i) => {
    const core = createLimit(spec, `${path}[${i}]`);
    return arrivalMarginMs > 0 ? withArrivalMargin(core, arrivalMarginMs, `${path}[${i}]`) : core;
  });
}

/**
 * The same limit, kept `marginMs` on the safe side of the provider's clock. The provider counts a
 * request when it arrives, the client when it sends; the first request of a run can take tens of
 * ms longer to arrive (a new connection), which shifts the provider's bucket later than the
 * client's. A token bucket starts calls about `marginMs` later than its own arithmetic says: its
 * spec gets the smaller burst `burst′ = max(1, floor(burst - rate·margin))` (the tolerance:
 * `rate·margin` units, rounded up, are left unused), and its capacity stays the configured `burst`,
 * so no cost the configured bucket admits is refused (see `createTokenBucket`):
 * - a call costing `c <= burst′` is timed exactly as by a bucket of `burst′`;
 * - one costing `burst′ < c <= burst` starts `(c - burst′)·T` after that bucket is full, or at once
 *   when it has been full that long already (after a quiet spell, or on a fresh bucket).
 * Window limits keep their interval: the gate moves each call's entry to the time its response
 * came back instead (see `Gate.recount`). Leaky buckets and concurrency are unchanged.
 */
function withArrivalMargin(core: LimitCore, marginMs: number, path: string): LimitCore {
  const spec = core.spec;
  switch (spec.algorithm) {
    case 'token-bucket': {
      // units = units/ms * ms; keep at least one unit of burst.
      const burst = Math.max(1, Math.floor(spec.burst - (spec.limit / spec.intervalMs) * marginMs));
      return burst === spec.burst
        ? core
        : createTokenBucket({ ...spec, algorithm: 'token-bucket', burst }, path, spec.burst);
    }
    default:
      return core;
  }
}

/** Validate once, at construction, and freeze a normalized copy. Nothing is re-checked per call. */
export function validateGateOptions(options: unknown): NormalizedGateOptions {
  const o = options === undefined ? {} : plainObject('options', options);
  onlyKnownKeys('options', o, knownKeys);
  const clock = o['clock'] ?? systemClock;
  if (
    typeof clock !== 'object' ||
    clock === null ||
    typeof (clock as Clock).now !== 'function' ||
    typeof (clock as Clock).setTimeout !== 'function' ||
    typeof (clock as Clock).clearTimeout !== 'function'
  ) {
    throw invalid('clock', 'an object with now(), setTimeout() and clearTimeout()', clock);
  }
  const maxQueueTimeMs = o['maxQueueTimeMs'] ?? Infinity;
  if (typeof maxQueueTimeMs !== 'number' || Number.isNaN(maxQueueTimeMs) || maxQueueTimeMs < 0) {
    throw invalid('maxQueueTimeMs', 'a number >= 0 (Infinity for no deadline)', maxQueueTimeMs);
  }
  const arrivalMarginMs = finiteNumber(
    'arrivalMarginMs',
    o['arrivalMarginMs'] ?? (o['clock'] === undefined ? 50 : 0),
    {
      min: 0,
    },
  );
  const random = o['random'] ?? Math.random;
  if (typeof random !== 'function') throw invalid('random', 'a function returning [0, 1)', random);
  // A draw outside [0, 1) (NaN, 1, a throw) must not pause a partition for NaN or forever: that
  // draw falls back to Math.random.
  const draw =
    random === Math.random
      ? Math.random
      : () => {
          try {
            const r = (random as () => unknown)();
            if (typeof r === 'number' && r >= 0 && r < 1) return r;
          } catch {}
          return Math.random();
        };
  let budget: BudgetGuard | undefined;
  let ownsBudget = false;
  let defaultPriceMicros = 0;
  if (o['budget'] instanceof BudgetGuard) budget = o['budget'];
  else if (o['budget'] !== undefined) {
    const { defaultPriceMicros: price, ...rest } = plainObject('budget', o['budget']);
    if (price !== undefined) defaultPriceMicros = integer('budget.defaultPriceMicros', price, 0);
    budget = createBudgetGuard({ ...(rest as unknown as BudgetGuardOptions), clock: clock as Clock });
    ownsBudget = true;
  }
  return Object.freeze({
    adapt: validateAdapt(o['adapt']),
    budget,
    ownsBudget,
    defaultPriceMicros,
    random: draw,
    arrivalMarginMs,
    globalCores: Object.freeze(buildCores(o['limits'], 'limits', arrivalMarginMs)),
    keyCores: Object.freeze(buildCores(o['perKey'], 'perKey', arrivalMarginMs)),
    maxQueue: integerOrInfinity('maxQueue', o['maxQueue'] ?? 10_000, 1),
    maxQueueTimeMs,
    clock: clock as Clock,
  });
}
