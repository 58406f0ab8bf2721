import type { BudgetDecision, BudgetReservation } from '../budget/budget-guard.js';
import type { Clock } from '../clock.js';
import type { AdaptOptions } from '../core/adaptation.js';
import type { LimitCore, LimitSpec } from '../core/limit.js';
import type { AdaptOptionsInput } from '../gate/options.js';
import { validateGateOptions } from '../gate/options.js';
import { fn, integer, invalid, oneOf, onlyKnownKeys, plainObject } from '../validate.js';
import type { RedisClient } from './redis-client.js';
import { RedisStore } from './redis-store.js';
import type { MaybePromise, Store } from './store.js';

/** What happens to calls while the store is unreachable or slower than `commandTimeoutMs`. */
export type FailurePolicy = 'fail-closed' | 'fail-open' | 'local';

/**
 * The money side of a shared gate: a `BudgetGuard` (memory or file ledger, synchronous) or an
 * `AsyncBudgetGuard` over a `RedisLedger` (shared by machines). Reserved before the call's limit
 * reservation, settled after its response.
 */
export interface SharedBudget {
  tryReserve(estimateMicros: number, key?: string): MaybePromise<BudgetDecision>;
  settle(reservation: BudgetReservation, actualMicros: number): MaybePromise<boolean>;
  release(reservation: BudgetReservation): MaybePromise<boolean>;
}

export interface SharedGateOptions {
  /**
   * The Redis server holding the shared quota: an `ioredis` client (`Redis` or `Cluster`; the gate
   * never closes a client it did not create) or a URL (`redis://127.0.0.1:6379`). Exactly one of
   * `redis` and `store` is required.
   */
  redis?: RedisClient | string;
  /** Any `Store` instead of `redis` (a `MemoryStore` for tests, a `RedisStore` built with more options). */
  store?: Store;
  /** Limits shared by every call through every gate on the same store and `keyPrefix`. @default [] */
  limits?: readonly LimitSpec[];
  /** Limits per partition key, shared across processes per key. @default [] */
  perKey?: readonly LimitSpec[];
  /** Most calls of one key waiting in this process; one more is refused with `QueueFullError`. @default 10_000 */
  maxQueue?: number;
  /** Default deadline for a call to start, in ms. @default Infinity */
  maxQueueTimeMs?: number;
  /**
   * While the store is down: `'fail-closed'` rejects calls with `StoreUnavailableError`;
   * `'fail-open'` admits them unthrottled; `'local'` sends them through an in-memory gate holding
   * `localShare` of every limit. Budgets on a Redis ledger never fail open: their calls are refused.
   * The policy applies to new calls and, as soon as the failure is seen, to calls waiting to ask the
   * store; calls already holding a reservation start at their reserved time.
   * @default 'local'
   */
  failure?: FailurePolicy;
  /**
   * The share of each limit (`limit` and `burst`, rounded down, at least 1) this process keeps while
   * it falls back to local limiting. With N processes sharing the quota, 1/N keeps the total under it.
   * In (0, 1].
   * @default 0.25
   */
  localShare?: number;
  /** `redis` only: a command slower than this counts as a failure (the store is down). Integer >= 1. @default 250 */
  commandTimeoutMs?: number;
  /** `redis` only: prefix of every key and of the pause channel; gates sharing a quota share it. @default 'tollgate' */
  keyPrefix?: string;
  /**
   * `redis` only: a concurrency permit held longer than this (ms) is given back, for a process that
   * died holding it (kill -9). Longer than the slowest call: a permit given back while its call
   * still runs lets one call too many start. Integer >= 1.
   * @default 300_000
   */
  concurrencyLeaseMs?: number;
  /** While the store is down, probe it this often (ms) and come back when it answers. Integer >= 1. @default 500 */
  recoveryProbeMs?: number;
  /** A call refused by a full concurrency limit (held by other processes) asks again after this many ms. Integer >= 1. @default 20 */
  concurrencyRetryMs?: number;
  /**
   * A call that reaches its reserved start later than this (ms; an answer or a timer delayed by a
   * busy event loop) gives the slot back and reserves a new one, at most 3 times: late starts would
   * bunch up behind the slots of other processes and reach the provider closer together than the
   * limit. Keep it below the margin your limits leave under the provider's. Number >= 0.
   * @default 10
   */
  lateToleranceMs?: number;
  /**
   * As the in-memory gate's: token buckets leave `rate × margin` of their burst unused (a call may
   * still cost up to the whole burst: it waits a little longer), and a call charged on a window limit
   * (fixed window, sliding window, sliding log) is counted there from its response (one more store
   * command when it finishes), at most `max(margin, intervalMs / 10)` after its start. The local
   * fallback keeps the same margin. 0 turns both off. Number >= 0.
   * @default 50 (0 when `clock` is given)
   */
  arrivalMarginMs?: number;
  /** As the in-memory gate's `adapt`; pauses and learned limits are written to the store for all processes. */
  adapt?: Partial<AdaptOptionsInput> | false;
  /** Money budgets, reserved before the limit reservation. */
  budget?: SharedBudget;
  /** Local time source (timers and deadlines). @default systemClock */
  clock?: Clock;
  /** Backoff jitter in [0, 1); a draw outside it (or a throw) is replaced by `Math.random()`. @default Math.random */
  random?: () => number;
}

export interface NormalizedSharedGateOptions {
  readonly store: Store;
  readonly ownsStore: boolean;
  readonly globalCores: readonly LimitCore[];
  readonly keyCores: readonly LimitCore[];
  readonly maxQueue: number;
  readonly maxQueueTimeMs: number;
  readonly failure: FailurePolicy;
  readonly localShare: number;
  readonly recoveryProbeMs: number;
  readonly concurrencyRetryMs: number;
  readonly lateToleranceMs: number;
  readonly arrivalMarginMs: number;
  readonly adapt: AdaptOptions | false;
  readonly adaptInput: Partial<AdaptOptionsInput> | false | undefined;
  readonly budget: SharedBudget | undefined;
  readonly clock: Clock;
  readonly random: () => number;
}

const knownKeys = [
  'redis',
  'store',
  'limits',
  'perKey',
  'maxQueue',
  'maxQueueTimeMs',
  'failure',
  'localShare',
  'commandTimeoutMs',
  'concurrencyLeaseMs',
  'keyPrefix',
  'recoveryProbeMs',
  'concurrencyRetryMs',
  'lateToleranceMs',
  'arrivalMarginMs',
  'adapt',
  'budget',
  'clock',
  'random',
];

/** Validate once, at construction (one message shape, option paths named), and freeze. */
export function validateSharedGateOptions(options: unknown): NormalizedSharedGateOptions {
  const o = plainObject('options', options);
  onlyKnownKeys('options', o, knownKeys);
  // Limits, queue bounds, clock, adaptation and randomness follow the in-memory gate's rules.
  const base = validateGateOptions({
    limits: o['limits'],
    perKey: o['perKey'],
    maxQueue: o['maxQueue'],
    maxQueueTimeMs: o['maxQueueTimeMs'],
    clock: o['clock'],
    adapt: o['adapt'],
    random: o['random'],
    arrivalMarginMs: o['arrivalMarginMs'],
  });
  const failure = oneOf('failure', o['failure'] ?? 'local', ['fail-closed', 'fail-open', 'local'] as const);
  const localShare = o['localShare'] ?? 0.25;
  if (typeof localShare !== 'number' || !(localShare > 0 && localShare <= 1))
    throw invalid('localShare', 'a number in (0, 1]', localShare);
  const recoveryProbeMs = integer('recoveryProbeMs', o['recoveryProbeMs'] ?? 500, 1);
  const concurrencyRetryMs = integer('concurrencyRetryMs', o['concurrencyRetryMs'] ?? 20, 1);
  const lateToleranceMs = o['lateToleranceMs'] ?? 10;
  if (typeof lateToleranceMs !== 'number' || !(lateToleranceMs >= 0))
    throw invalid('lateToleranceMs', 'a number >= 0 (Infinity to never reserve again)', lateToleranceMs);

  // Every option is checked before the store opens a connection: a refused option must not leave
  // a socket that keeps the process alive.
  let budget: SharedBudget | undefined;
  if (o['budget'] !== undefined) {
    const b = plainObject('budget', o['budget']) as Partial<SharedBudget>;
    fn('budget.tryReserve', b.tryReserve);
    fn('budget.settle', b.settle);
    fn('budget.release', b.release);
    budget = b as SharedBudget;
  }

  let store: Store;
  let ownsStore: boolean;
  if (o['redis'] !== undefined && o['store'] !== undefined)
    throw invalid('store', 'omitted when `redis` is given (pass one of them)', o['store']);
  if (o['redis'] !== undefined) {
    const redisOptions: Record<string, unknown> = { redis: o['redis'] };
    if (o['keyPrefix'] !== undefined) redisOptions['keyPrefix'] = o['keyPrefix'];
    if (o['commandTimeoutMs'] !== undefined) redisOptions['commandTimeoutMs'] = o['commandTimeoutMs'];
    if (o['concurrencyLeaseMs'] !== undefined) redisOptions['concurrencyLeaseMs'] = o['concurrencyLeaseMs'];
    store = new RedisStore(redisOptions as never);
    ownsStore = true;
  } else if (o['store'] !== undefined) {
    const s = o['store'] as Partial<Store> | null;
    if (typeof s?.reserve !== 'function' || typeof s.refund !== 'function' || typeof s.onPause !== 'function')
      throw invalid('store', 'a Store (reserve, refund, pause, learn, onPause...)', s);
    for (const key of ['keyPrefix', 'commandTimeoutMs', 'concurrencyLeaseMs']) {
      if (o[key] !== undefined)
        throw invalid(key, 'omitted with `store` (set it on the store itself)', o[key]);
    }
    store = s as Store;
    ownsStore = false;
  } else {
    throw invalid('redis', 'an ioredis client or a redis:// URL (or pass `store`)', undefined);
  }

  return Object.freeze({
    store,
    ownsStore,
    globalCores: base.globalCores,
    keyCores: base.keyCores,
    maxQueue: base.maxQueue,
    maxQueueTimeMs: base.maxQueueTimeMs,
    failure,
    localShare,
    recoveryProbeMs,
    concurrencyRetryMs,
    lateToleranceMs,
    arrivalMarginMs: base.arrivalMarginMs,
    adapt: base.adapt,
    adaptInput: o['adapt'] as Partial<AdaptOptionsInput> | false | undefined,
    budget,
    clock: base.clock,
    random: base.random,
  });
}

/**
 * The limit of `core` scaled to `share` of its quota, for the local fallback (never below 1). A
 * token bucket is scaled from its configured burst, its capacity: one kept on the safe side by an
 * arrival margin carries a smaller burst in its spec, and the fallback gate applies the same margin
 * to the share again.
 */
export function shareOf(core: LimitCore, share: number): LimitSpec {
  const spec = core.spec;
  const limit = Math.max(1, Math.floor(spec.limit * share));
  if (spec.algorithm === 'token-bucket') {
    return { ...spec, limit, burst: Math.max(1, Math.floor(core.capacity * share)) };
  }
  if (spec.algorithm === 'concurrency') return { algorithm: 'concurrency', limit, unit: spec.unit };
  return { algorithm: spec.algorithm, limit, intervalMs: spec.intervalMs, unit: spec.unit };
}
