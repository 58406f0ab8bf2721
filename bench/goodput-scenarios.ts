// The goodput scenarios: what the simulated API hides, what each contender is told, how big the batch
// is. Plain data, shared by the parent (bench/goodput.ts, which runs the server) and the child
// (bench/goodput-child.ts, which runs one contender against it in its own process).
import type { GateOptions } from '../src/index.js';
import type { SimulatedApiOptions } from '../src/testing/index.js';

/**
 * The limit as a user configures their client: what they know (or guess) of the provider.
 * - `bucket`: `limit` per `intervalMs` with a burst of `burst` (a token bucket);
 * - `window`: at most `limit` in any `intervalMs` (a sliding window);
 * - `guess`: the provider publishes nothing; the user guesses `limit` per `intervalMs`;
 * - `requests-tokens`: OpenAI-style per-minute request and token limits, `tokensPerRequest` each call.
 */
export type KnownLimit =
  | { readonly kind: 'bucket'; readonly limit: number; readonly intervalMs: number; readonly burst: number }
  | { readonly kind: 'window'; readonly limit: number; readonly intervalMs: number }
  | { readonly kind: 'guess'; readonly limit: number; readonly intervalMs: number }
  | {
      readonly kind: 'requests-tokens';
      readonly requestsPerMinute: number;
      readonly tokensPerMinute: number;
      readonly tokensPerRequest: number;
    };

export interface Scenario {
  readonly id: string;
  readonly title: string;
  /** One line for the report: what the server hides and what each side is told. */
  readonly description: string;
  /** The simulated API (host and port are the server's defaults: 127.0.0.1, any free port). */
  readonly server: SimulatedApiOptions;
  /** Calls in the batch, all scheduled at once. */
  readonly requests: number;
  /** `x-sim-tokens` on each request (0: none sent). */
  readonly tokensPerRequest: number;
  /** What the peers are configured with. */
  readonly known: KnownLimit;
  /** tollgate's gate options (limits go per key: the key is the origin, as the fetch adapter does). */
  readonly gate: GateOptions;
  /** tollgate's per-call cost. */
  readonly cost?: Readonly<Record<string, number>>;
  /**
   * The longest server-given wait a contender is expected to honour (tollgate's adapt.maxRetryAfterMs);
   * the bench adds up the waits, capped at this, as the time the server forbade.
   * @default 60_000 (the gate's default)
   */
  readonly maxRetryAfterMs?: number;
  /**
   * A contender still busy after this long is stopped and reported as timed out ("hung" when calls
   * are stuck behind a Retry-After): the bench never waits for a day.
   */
  readonly timeoutMs: number;
}

// Every accepted request takes 5-20 ms to answer, as a real API would; refusals answer at once.
const latencyMs = { min: 5, max: 20 };

// The hostile scenario's deadline for a call to start (maxQueueTimeMs): the batch needs ~6 s.
export const hostileDeadlineMs = 12_000;
// Cap on a server-given wait in the hostile scenario (adapt.maxRetryAfterMs).
export const hostileMaxRetryAfterMs = 2_000;

export const scenarios: readonly Scenario[] = [
  {
    id: 'token-bucket',
    title: 'Limit known, token bucket (50/s, burst 10), no headers',
    description:
      'Server: token bucket 50/s, burst 10, no rate-limit headers (Retry-After on 429). Every contender is configured with 50/s.',
    server: { policy: { kind: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 }, latencyMs },
    requests: 400,
    tokensPerRequest: 0,
    known: { kind: 'bucket', limit: 50, intervalMs: 1000, burst: 10 },
    gate: { perKey: [{ algorithm: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 }] },
    timeoutMs: 20_000,
  },
  {
    id: 'sliding-window',
    title: 'Limit known, sliding window (100 per 2 s), no headers',
    description:
      'Server: exact sliding log, at most 100 in any 2 s, no rate-limit headers (Retry-After on 429). Every contender is configured with 100 per 2 s.',
    server: { policy: { kind: 'sliding-window', limit: 100, intervalMs: 2000 }, latencyMs },
    requests: 400,
    tokensPerRequest: 0,
    known: { kind: 'window', limit: 100, intervalMs: 2000 },
    gate: { perKey: [{ algorithm: 'sliding-log', limit: 100, intervalMs: 2000 }] },
    timeoutMs: 20_000,
  },
  {
    id: 'headers-only',
    title: 'Limit unknown, fixed window (100 per 2 s) announced in X-RateLimit headers',
    description:
      'Server: fixed window of 100 per 2 s (aligned on the epoch), X-RateLimit-Limit/Remaining/Reset (epoch seconds) on every response. ' +
      'tollgate has no configured limit (headers only); the peers guess 100/s (twice the real rate) and retry.',
    server: {
      policy: { kind: 'fixed-window', limit: 100, intervalMs: 2000 },
      headers: 'x-ratelimit-epoch',
      latencyMs,
    },
    requests: 500,
    tokensPerRequest: 0,
    known: { kind: 'guess', limit: 100, intervalMs: 1000 },
    gate: {},
    timeoutMs: 20_000,
  },
  {
    id: 'requests-tokens',
    title: 'Limit known, requests + tokens per minute (OpenAI headers)',
    description:
      'Server: OpenAI-style token buckets, 400 requests/min and 600,000 tokens/min (full at start), x-ratelimit-*-requests/tokens headers; ' +
      'each call costs 2,000 tokens (`x-sim-tokens`). Every contender is configured with both limits (peers without weights count tokens as 300 calls/min).',
    server: {
      policy: { kind: 'requests-tokens', requestsPerMinute: 400, tokensPerMinute: 600_000 },
      headers: 'openai',
      latencyMs,
    },
    requests: 340,
    tokensPerRequest: 2000,
    known: {
      kind: 'requests-tokens',
      requestsPerMinute: 400,
      tokensPerMinute: 600_000,
      tokensPerRequest: 2000,
    },
    gate: {
      perKey: [
        { algorithm: 'token-bucket', limit: 400, intervalMs: 60_000 },
        { algorithm: 'token-bucket', limit: 600_000, intervalMs: 60_000, unit: 'tokens' },
      ],
    },
    cost: { requests: 1, tokens: 2000 },
    timeoutMs: 20_000,
  },
  {
    id: '503-storms',
    title: '503 storms with Retry-After (token bucket 50/s, burst 10)',
    description:
      'Server: token bucket 50/s, burst 10; every 100th request (outside a storm) starts a 1 s outage answered 503 + Retry-After (seconds left, rounded up). ' +
      'Every contender is configured with 50/s; tollgate with its default adaptation, peers with their retry.',
    server: {
      policy: { kind: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 },
      // A cooldown of whole seconds, as the server announces it: honouring Retry-After then costs
      // only what was in flight. (A 600 ms outage announced as 1 s costs an honouring client the
      // 400 ms of rounding per storm, which clients that ignore Retry-After do not pay.)
      storms: { every: 100, durationMs: 1000 },
      latencyMs,
    },
    requests: 400,
    tokensPerRequest: 0,
    known: { kind: 'bucket', limit: 50, intervalMs: 1000, burst: 10 },
    gate: { perKey: [{ algorithm: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 }] },
    timeoutMs: 25_000,
  },
  {
    id: 'hostile',
    title: 'Hostile server: Retry-After of a day on some calls, garbage headers',
    description:
      'Server: token bucket 50/s, burst 10; every 120th request (outside a storm) starts a 300 ms outage whose 503s all carry ' +
      '`Retry-After: 86400` (a day); besides, every 7th response (any status) carries `Retry-After: 86400` and every 3rd has garbage ' +
      'X-RateLimit headers (`NaN`, `-1`, `1e999`, ...). Every contender is configured with 50/s; tollgate also with ' +
      `maxQueueTimeMs ${hostileDeadlineMs} and adapt.maxRetryAfterMs ${hostileMaxRetryAfterMs}.`,
    server: {
      policy: { kind: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 },
      storms: { every: 120, durationMs: 300, retryAfterSec: 86_400 },
      hostile: { retryAfterDayEvery: 7, garbageHeaders: 3 },
      latencyMs,
    },
    requests: 300,
    tokensPerRequest: 0,
    known: { kind: 'bucket', limit: 50, intervalMs: 1000, burst: 10 },
    gate: {
      perKey: [{ algorithm: 'token-bucket', limit: 50, intervalMs: 1000, burst: 10 }],
      maxQueueTimeMs: hostileDeadlineMs,
      adapt: { maxRetryAfterMs: hostileMaxRetryAfterMs },
    },
    maxRetryAfterMs: hostileMaxRetryAfterMs,
    timeoutMs: 20_000,
  },
];

/**
 * The gate with its arrival margin turned off (`arrivalMarginMs: 0`): the provider's exact numbers,
 * to show what the margin buys. The default gate keeps 50 ms (see GateOptions.arrivalMarginMs).
 */
export function withoutMargin(options: GateOptions): GateOptions {
  return { ...options, arrivalMarginMs: 0 };
}

export const contenders = [
  'tollgate',
  'tollgate (no margin)',
  'bottleneck',
  'p-queue',
  'p-throttle',
  'axios-rate-limit',
] as const;
export type ContenderName = (typeof contenders)[number];
