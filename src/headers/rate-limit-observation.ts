/**
 * What one response says about rate limits, normalized across header families. Produced by
 * `parseRateLimitHeaders`; consumed by adaptation (policy lives there, not here).
 */

/** One quota window a response described. */
export interface RateLimitPolicy {
  /**
   * What the window counts: `'requests'`, `'tokens'`, `'input-tokens'`, `'output-tokens'`,
   * `'points'`, `'complexity'`, `'content-bytes'`, ... Only `'requests'` windows compete for the
   * binding window while one exists (rule P9).
   */
  readonly unit: string;
  /** Quota size of the window. Non-negative safe integer. */
  readonly limit?: number;
  /** Units left in the window. Non-negative safe integer, never above `limit`. */
  readonly remaining?: number;
  /**
   * ms from the receive time until the window resets or refills, as the provider defines it (a
   * fixed-window end, a full refill, the next unit). Non-negative safe integer. Not a wait:
   * waits come from `retryAfterMs`.
   */
  readonly resetMs?: number;
  /** Length of the window in ms (`w=60`, `-minute`, `Interval-Milliseconds`). Never a reset. */
  readonly windowMs?: number;
  /** The provider's name for the window: a policy id, GitHub resource, Discord bucket, ... */
  readonly name?: string;
  /** Header family that described it: `'ietf-structured'`, `'x-ratelimit'`, `'openai'`, ... */
  readonly source: string;
}

export interface RateLimitObservation {
  /**
   * Minimum wait before retrying, from explicit retry directives only (Retry-After and its
   * cousins, body `retry_after`/`retryDelay`), the maximum when several are present. Never derived
   * from a reset. Non-negative safe integer ms; huge values are reported as sent.
   */
  readonly retryAfterMs?: number;
  /** Every window recognised, in family order. */
  readonly policies: readonly RateLimitPolicy[];
  /**
   * True when the response says the request was refused for rate or quota: status 429, or a
   * throttling marker in a header or the body (P13: Shopify `THROTTLED` on 200, Linear
   * `RATELIMITED` on 400, AWS throttling codes, ...). Absent otherwise; absence proves nothing.
   */
  readonly throttled?: boolean;
}

/** The four numbers the header vectors check: explicit wait, and the binding window (P9). */
export interface RateLimitSummary {
  readonly retryAfterMs: number | null;
  readonly remaining: number | null;
  readonly limit: number | null;
  readonly resetMs: number | null;
}
