import type { Clock } from '../clock.js';
import { systemClock } from '../clock.js';
import { createLimit } from '../core/create-limit.js';
import type { LimitCore, LimitSpec } from '../core/limit.js';
import { integerOrInfinity, invalid, plainObject } from '../validate.js';

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
}

export interface NormalizedGateOptions {
  readonly globalCores: readonly LimitCore[];
  readonly keyCores: readonly LimitCore[];
  readonly maxQueue: number;
  readonly maxQueueTimeMs: number;
  readonly clock: Clock;
}

const knownKeys = new Set(['limits', 'perKey', 'maxQueue', 'maxQueueTimeMs', 'clock']);

export function buildCores(value: unknown, path: string): LimitCore[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw invalid(path, 'an array of limits', value);
  return value.map((spec, i) => createLimit(spec, `${path}[${i}]`));
}

/** Validate once, at construction, and freeze a normalized copy. Nothing is re-checked per call. */
export function validateGateOptions(options: unknown): NormalizedGateOptions {
  const o = options === undefined ? {} : plainObject('options', options);
  for (const key of Object.keys(o)) {
    if (!knownKeys.has(key))
      throw invalid(`options.${key}`, `one of the known options (${[...knownKeys].join(', ')})`, o[key]);
  }
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
  return Object.freeze({
    globalCores: Object.freeze(buildCores(o['limits'], 'limits')),
    keyCores: Object.freeze(buildCores(o['perKey'], 'perKey')),
    maxQueue: integerOrInfinity('maxQueue', o['maxQueue'] ?? 10_000, 1),
    maxQueueTimeMs,
    clock: clock as Clock,
  });
}
