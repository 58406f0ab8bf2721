/**
 * Adaptation rules: what a provider's response means for the partition that sent it. Pure: the
 * gate passes the parsed observation, the call's attempt number, `now` and a jitter source, and
 * applies the verdict (pause, retry, refuse) itself.
 */
import { bindsBefore } from '../headers/quota-window.js';
import type { RateLimitObservation, RateLimitPolicy } from '../headers/rate-limit-observation.js';
import type { LimitCore, LimitSpec } from './limit.js';
import { minIntervalMs } from './normalize-limit-spec.js';

export interface AdaptOptions {
  /** `'burst'`: spend `remaining` as fast as the other limits allow, then wait for the reset. `'spread'`: spread it evenly until the reset. */
  readonly pacing: 'burst' | 'spread';
  /** Retries after the first attempt, for throttled (429) and retryable unavailable (503 + Retry-After) responses. */
  readonly maxRetries: number;
  /** A server-given wait longer than this refuses the call (RateLimitedError) and pauses the partition only this long. */
  readonly maxRetryAfterMs: number;
  /** Full-jitter exponential backoff when the server gives no time: random(0, min(maxMs, baseMs * 2^(attempt-1))). */
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  /** Retry POST/PATCH on a 503 with Retry-After too (they are always retried on 429: the server did not process them). */
  readonly retryUnsafeOn503: boolean;
  /** Limits learned from headers (limit + window) join the partition's limits (tightening only). */
  readonly learn: boolean;
  /** AIMD on the rate when throttled responses carry no rate-limit information; false turns it off. */
  readonly aimd: false | AimdOptions;
}

export interface AimdOptions {
  /** Multiplicative decrease on a throttled response. 0 < decrease < 1. */
  readonly decrease: number;
  /** Additive increase per quiet second while the gate is the bottleneck, as a fraction of the rate at the last decrease. */
  readonly increase: number;
  readonly minRatePerSec: number;
  readonly maxRatePerSec: number;
}

export const defaultAdaptOptions: AdaptOptions = Object.freeze({
  pacing: 'burst',
  maxRetries: 3,
  maxRetryAfterMs: 60_000,
  backoffBaseMs: 500,
  backoffMaxMs: 30_000,
  retryUnsafeOn503: false,
  learn: true,
  aimd: Object.freeze({ decrease: 0.7, increase: 0.05, minRatePerSec: 0.1, maxRatePerSec: Infinity }),
});

const idempotent = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

/** Sending the request twice has the effect of sending it once (RFC 9110 §9.2.2). `method` in capitals. */
export function isIdempotent(method: string): boolean {
  return idempotent.has(method);
}

export type Verdict =
  /** Keep the response: the call resolves with it. */
  | { readonly kind: 'done' }
  /** Pause the partition until `pauseUntil`, then send the call again from the head of its queue. */
  | { readonly kind: 'retry'; readonly pauseUntil: number; readonly delayMs: number }
  /** Give up on this call (RateLimitedError carrying retryAt); the partition pauses until `pauseUntil`. */
  | {
      readonly kind: 'refuse';
      readonly pauseUntil: number;
      readonly retryAt: number;
      readonly delayMs: number;
      readonly reason: 'retry-after-cap' | 'attempts';
    };

/**
 * The policy with the lowest remaining among those of `unit` that say remaining; ties go to the
 * later reset (P9): of two windows spent to 0, the one that resets later holds the calls.
 */
export function bindingFor(observation: RateLimitObservation, unit: string): RateLimitPolicy | undefined {
  let best: RateLimitPolicy | undefined;
  for (const policy of observation.policies) {
    if (policy.unit !== unit || policy.remaining === undefined) continue;
    if (best === undefined || bindsBefore(policy, best)) best = policy;
  }
  return best;
}

/**
 * Decide what a response means for its call. `attempt` counts attempts made so far (1 for the
 * first). `random` returns [0, 1) and is injected so tests are deterministic.
 */
export function verdictFor(
  input: {
    readonly status: number;
    readonly method: string | undefined;
    readonly observation: RateLimitObservation;
    readonly attempt: number;
    readonly retryable: boolean;
  },
  options: AdaptOptions,
  now: number,
  random: () => number,
): Verdict {
  const { status, observation } = input;
  // A throttling marker counts on any status: Shopify GraphQL answers THROTTLED with a 200, and
  // such a request was not executed, so it is retried like a 429.
  const throttled = status === 429 || status === 529 || observation.throttled === true;
  // A method that is not text (an inspect hook's garbage) is not known to be idempotent.
  const method =
    input.method === undefined ? 'GET' : typeof input.method === 'string' ? input.method.toUpperCase() : '';
  const unavailable =
    status === 503 &&
    observation.retryAfterMs !== undefined &&
    (idempotent.has(method) || options.retryUnsafeOn503);
  if (!throttled && !unavailable) return { kind: 'done' };
  // The server's own time wins: Retry-After, else a request window at zero with a reset, else
  // full-jitter exponential backoff (AWS architecture blog's "full jitter": spreads retries of
  // many clients evenly instead of synchronising them).
  let delayMs = observation.retryAfterMs;
  if (delayMs === undefined) {
    const binding = bindingFor(observation, 'requests');
    if (binding?.remaining === 0 && binding.resetMs !== undefined) delayMs = binding.resetMs;
  }
  delayMs ??= Math.floor(
    random() * Math.min(options.backoffMaxMs, options.backoffBaseMs * 2 ** (input.attempt - 1)),
  );
  if (delayMs > options.maxRetryAfterMs) {
    return {
      kind: 'refuse',
      pauseUntil: now + options.maxRetryAfterMs,
      retryAt: now + delayMs,
      delayMs,
      reason: 'retry-after-cap',
    };
  }
  if (input.attempt > options.maxRetries || !input.retryable) {
    return { kind: 'refuse', pauseUntil: now + delayMs, retryAt: now + delayMs, delayMs, reason: 'attempts' };
  }
  return { kind: 'retry', pauseUntil: now + delayMs, delayMs };
}

/**
 * The longest window a limit is learned over: a day (daily quotas are stated so). A longer one is
 * a quota a budget should hold, or garbage (`w=9007199254740`, 285,000 years): learned, it would
 * hold every call after the first `limit` for that long.
 */
export const maxLearnedWindowMs = 86_400_000;

/** A limit learned from a policy that states both its size and its window. */
export function learnedSpec(policy: RateLimitPolicy): LimitSpec | undefined {
  if (policy.limit === undefined || policy.windowMs === undefined) return undefined;
  // A window shorter than the shortest interval a limit accepts is not a limit we can keep.
  if (policy.limit < 1 || policy.windowMs < minIntervalMs) return undefined;
  if (policy.windowMs > maxLearnedWindowMs) return undefined;
  // A sliding log: "never more than limit in any window", exactly what the provider states.
  return { algorithm: 'sliding-log', limit: policy.limit, intervalMs: policy.windowMs, unit: policy.unit };
}

/**
 * The limits a response teaches: one per unit and window, the tightest stated (a response may list
 * a per-user and a per-organisation policy over the same window; the lower limit binds).
 */
export function learnedPolicies(
  observation: RateLimitObservation,
): { readonly policy: RateLimitPolicy; readonly spec: LimitSpec }[] {
  const byWindow = new Map<string, { policy: RateLimitPolicy; spec: LimitSpec }>();
  for (const policy of observation.policies) {
    const spec = learnedSpec(policy);
    if (spec === undefined) continue;
    const id = `${spec.unit}|${spec.intervalMs}`;
    const seen = byWindow.get(id);
    const tighter =
      seen === undefined ||
      spec.limit < seen.spec.limit ||
      (spec.limit === seen.spec.limit &&
        (policy.remaining ?? spec.limit) < (seen.policy.remaining ?? seen.spec.limit));
    if (tighter) byWindow.set(id, { policy, spec });
  }
  return [...byWindow.values()];
}

/**
 * How long ago the provider's current window of `policy` began, when its reset says so (a window
 * of `intervalMs` that resets in `resetMs` began `intervalMs - resetMs` ago); 0 when unknown. The
 * units the provider says are used are seeded that far back, so they leave the learned limit at
 * the provider's reset rather than a whole window after the response.
 */
export function seedAgeMs(policy: RateLimitPolicy, spec: LimitSpec): number {
  const intervalMs = spec.intervalMs ?? 0;
  const resetMs = policy.resetMs;
  if (resetMs === undefined || !(resetMs >= 0) || !(resetMs < intervalMs)) return 0;
  return intervalMs - resetMs;
}

/** True when `core` already admits no more than `spec` over its window (so `spec` would not tighten it). */
export function isAtLeastAsTight(core: LimitCore, spec: LimitSpec): boolean {
  if (core.unit !== (spec.unit ?? 'requests') || !core.timed) return false;
  const coreRate = core.spec.limit / core.spec.intervalMs;
  const specRate = spec.limit / (spec.intervalMs ?? Infinity);
  const coreBurst = core.algorithm === 'token-bucket' ? core.spec.burst : core.spec.limit;
  return coreRate <= specRate && coreBurst <= spec.limit;
}

export interface AimdState {
  readonly ratePerSec: number;
  readonly rateAtDecrease: number;
  readonly changedAt: number;
  /** Starts numbered at or below this were sent before the last decrease: their 429s are not news. */
  readonly decreaseSeq: number;
}

/** Multiplicative decrease, at most once per round trip (ignores 429s of calls sent before the last decrease). */
export function aimdOnThrottle(
  state: AimdState | undefined,
  observedRatePerSec: number,
  callSeq: number,
  latestSeq: number,
  now: number,
  options: AimdOptions,
): AimdState | undefined {
  if (state !== undefined && callSeq <= state.decreaseSeq) return state;
  const base = state?.ratePerSec ?? observedRatePerSec;
  const ratePerSec = clamp(base * options.decrease, options.minRatePerSec, options.maxRatePerSec);
  return { ratePerSec, rateAtDecrease: ratePerSec, changedAt: now, decreaseSeq: latestSeq };
}

/**
 * The rate a provider showed between two Retry-After pauses, when it says nothing else: `accepted`
 * calls started in the round (since the last pause ended, `roundAt`) before the first one it
 * refused, then "nothing until `pauseUntil`". It admits about that many over the round and the pause
 * together: accepted / (pauseUntil - roundAt), per second. Undefined when nothing was accepted
 * (no measure: the usual decrease applies).
 */
export function roundRatePerSec(accepted: number, roundAt: number, pauseUntil: number): number | undefined {
  if (!(accepted > 0)) return undefined;
  // ms -> s: accepted calls over the span, in calls per second; a span under 1 ms counts as 1 ms.
  return (accepted * 1000) / Math.max(1, pauseUntil - roundAt);
}

/**
 * A throttled response with a Retry-After and no quota. With nothing accepted in the round
 * (`roundRate` undefined) nothing changes: a Retry-After alone says when, not how fast. Otherwise
 * the rate becomes the round's rate, or less: news (a call sent after the last decrease) also takes
 * the usual decrease (×`decrease`); a refusal of a call sent before it may still lower the rate to
 * its round's (the first refusal answered is not always the first one the provider made).
 */
export function aimdOnRetryAfter(
  state: AimdState | undefined,
  roundRate: number | undefined,
  callSeq: number,
  latestSeq: number,
  now: number,
  options: AimdOptions,
): AimdState | undefined {
  if (roundRate === undefined) return state;
  const news = state === undefined || callSeq > state.decreaseSeq;
  const current =
    state === undefined ? Infinity : news ? state.ratePerSec * options.decrease : state.ratePerSec;
  const ratePerSec = clamp(Math.min(current, roundRate), options.minRatePerSec, options.maxRatePerSec);
  if (!news && ratePerSec >= state!.ratePerSec) return state;
  return {
    ratePerSec,
    rateAtDecrease: ratePerSec,
    changedAt: now,
    decreaseSeq: news ? latestSeq : state!.decreaseSeq,
  };
}

/** Additive increase: once per quiet second (no decrease for a second), only while the gate is the bottleneck. */
export function aimdOnTick(
  state: AimdState,
  bottleneck: boolean,
  now: number,
  options: AimdOptions,
): AimdState {
  if (!bottleneck || now - state.changedAt < 1000) return state;
  const step = Math.max(options.minRatePerSec, state.rateAtDecrease * options.increase);
  const ratePerSec = clamp(state.ratePerSec + step, options.minRatePerSec, options.maxRatePerSec);
  return { ...state, ratePerSec, changedAt: now };
}

function clamp(value: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, value));
}
