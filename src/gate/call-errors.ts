import type { Verdict } from '../core/adaptation.js';
import { QueueTimeoutError, RateLimitedError } from '../errors.js';

// Refusals of a call, built the same way by the in-memory gate and the shared gate.
// Not exported from index.ts: internal to the gates.

/** What a refusal reports of the call. */
interface RefusedCall {
  /** Starts so far (0 until the call first started; a retry has started before). */
  readonly attempt: number;
  readonly enqueuedAt: number;
  readonly maxQueueTimeMs: number;
}

/** A call that cannot start in time: a queue timeout, or for a retry, the provider's refusal. */
export function deadlineError(
  call: RefusedCall,
  startAt: number,
  predicted: boolean,
): Error & { code: string } {
  if (call.attempt > 0) {
    return new RateLimitedError(
      `Call was rate limited and cannot be retried within maxQueueTimeMs ${call.maxQueueTimeMs}`,
      { retryAt: startAt, attempts: call.attempt },
    );
  }
  return new QueueTimeoutError(startAt - call.enqueuedAt, call.maxQueueTimeMs, predicted);
}

/**
 * A throttled response the gate gives up on: refused by the adaptation verdict (too many attempts,
 * a Retry-After above `maxRetryAfterMs`), or a retry that could not start within the call's deadline.
 */
export function throttledError(
  verdict: Exclude<Verdict, { kind: 'done' }>,
  call: RefusedCall,
  maxRetryAfterMs: number,
  status: number,
  options?: { cause?: unknown },
): RateLimitedError {
  const retryAt = verdict.kind === 'refuse' ? verdict.retryAt : verdict.pauseUntil;
  return new RateLimitedError(
    verdict.kind === 'refuse' && verdict.reason === 'retry-after-cap'
      ? `Provider asked to wait ${verdict.delayMs} ms, more than maxRetryAfterMs ${maxRetryAfterMs}`
      : verdict.kind === 'refuse'
        ? `Rate limited after ${call.attempt} attempt(s)`
        : `Rate limited; the retry could not start within maxQueueTimeMs ${call.maxQueueTimeMs}`,
    { retryAt, retryAfterMs: verdict.delayMs, attempts: call.attempt, status },
    options,
  );
}
