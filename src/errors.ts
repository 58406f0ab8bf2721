/**
 * Every error tollgate throws or rejects with extends `TollgateError` and carries a stable `code`.
 * Data lives in fields (`retryAfterMs`, `predictedWaitMs`, ...) and the underlying error in `cause`.
 */

/** Stable, machine-readable error codes. Never reworded once released. */
export type TollgateErrorCode =
  | 'ERR_INVALID_OPTION'
  | 'ERR_INVALID_COST'
  | 'ERR_QUEUE_FULL'
  | 'ERR_QUEUE_TIMEOUT'
  | 'ERR_ABORTED'
  | 'ERR_GATE_CLOSED'
  | 'ERR_BUDGET_EXCEEDED'
  | 'ERR_RATE_LIMITED'
  | 'ERR_STORE_UNAVAILABLE'
  | 'ERR_LEDGER_CORRUPT';

// A registered symbol survives realms (vm contexts, workers' structured clones aside) and duplicate
// copies of the package in one node_modules tree, where `instanceof` does not.
const brand = Symbol.for('tollgate.error');

export class TollgateError extends Error {
  readonly code: TollgateErrorCode;

  constructor(code: TollgateErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, brand, { value: true });
  }
}

/** True for any tollgate error, across realms and duplicate copies of the package. */
export function isTollgateError(value: unknown): value is TollgateError {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as Record<symbol, unknown>)[brand] === true &&
    typeof (value as { code?: unknown }).code === 'string'
  );
}

/** Thrown at construction (or by `setLimits`) when an option is invalid. Names the option path. */
export class InvalidOptionError extends TollgateError {
  readonly option: string;
  constructor(option: string, message: string) {
    super('ERR_INVALID_OPTION', message);
    this.option = option;
  }
}

/** A call's cost is malformed or larger than a limit can ever admit. The call is never sent. */
export class InvalidCostError extends TollgateError {
  readonly unit: string | undefined;
  constructor(message: string, unit?: string) {
    super('ERR_INVALID_COST', message);
    this.unit = unit;
  }
}

/** The partition's queue already holds `maxQueue` calls. */
export class QueueFullError extends TollgateError {
  readonly maxQueue: number;
  readonly key: string | undefined;
  constructor(maxQueue: number, key: string | undefined) {
    super('ERR_QUEUE_FULL', `Queue is full (maxQueue ${maxQueue})`);
    this.maxQueue = maxQueue;
    this.key = key;
  }
}

/**
 * The call could not start within its `maxQueueTimeMs`. `predicted` is true when it was refused
 * before waiting (the predicted wait already exceeded the deadline), false when a later event (a
 * pause, a concurrency wait) made it miss the deadline while queued.
 */
export class QueueTimeoutError extends TollgateError {
  readonly predictedWaitMs: number;
  readonly maxQueueTimeMs: number;
  readonly predicted: boolean;
  constructor(predictedWaitMs: number, maxQueueTimeMs: number, predicted: boolean) {
    const wait = Number.isFinite(predictedWaitMs) ? `${Math.ceil(predictedWaitMs)} ms` : 'an unbounded time';
    super(
      'ERR_QUEUE_TIMEOUT',
      predicted
        ? `Call would wait ${wait}, more than maxQueueTimeMs ${maxQueueTimeMs}`
        : `Call could not start within maxQueueTimeMs ${maxQueueTimeMs} (would wait ${wait})`,
    );
    this.predictedWaitMs = predictedWaitMs;
    this.maxQueueTimeMs = maxQueueTimeMs;
    this.predicted = predicted;
  }
}

/** The call's `signal` aborted before it started. The signal's reason is the `cause`. */
export class AbortedError extends TollgateError {
  constructor(reason: unknown) {
    super('ERR_ABORTED', 'Call was aborted before it started', { cause: reason });
  }
}

/** The gate was closed: new calls are refused, and queued calls are rejected when closing with `reject`. */
export class GateClosedError extends TollgateError {
  constructor() {
    super('ERR_GATE_CLOSED', 'Gate is closed');
  }
}

/** The provider rate-limited the call and the gate will not retry it (Retry-After beyond the cap, or attempts exhausted). */
export class RateLimitedError extends TollgateError {
  /** Absolute time (gate clock, ms) at which the server said a retry may succeed, if it said. */
  readonly retryAt: number | undefined;
  readonly retryAfterMs: number | undefined;
  readonly attempts: number;
  readonly status: number | undefined;
  constructor(
    message: string,
    fields: { retryAt?: number; retryAfterMs?: number; attempts: number; status?: number },
    options?: { cause?: unknown },
  ) {
    super('ERR_RATE_LIMITED', message, options);
    this.retryAt = fields.retryAt;
    this.retryAfterMs = fields.retryAfterMs;
    this.attempts = fields.attempts;
    this.status = fields.status;
  }
}

/** The store (e.g. Redis) could not be reached and the failure policy is `fail-closed`. */
export class StoreUnavailableError extends TollgateError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_STORE_UNAVAILABLE', message, options);
  }
}
