import { decimalFrom, floorToInteger, scaleCeil, subtractDecimal } from './decimal.js';
import { parseDuration } from './duration.js';
import { secondsValueToMs } from './parse-retry-after.js';
import { type BodyThrottleMarker, bodyThrottleMarkers } from './profiles.js';
import type { RateLimitPolicy } from './rate-limit-observation.js';

/**
 * Body-borne rate-limit signals. A reader looks at the already-parsed body (JSON, or whatever the
 * caller passes) and returns what it found. Readers run in order; their results are merged like
 * header families: waits by maximum (P5), windows appended, `throttled` if any says so.
 * Every result is checked again by the parser (negative, non-finite, unsafe values are dropped),
 * and a reader that throws is skipped, so a user's reader cannot break parsing.
 */

export interface BodyReaderContext {
  /** HTTP status of the response. */
  readonly status: number;
  /** Receive time, ms on the Unix-epoch scale. */
  readonly now: number;
  /** The response `Date` (ms) when present and valid, else `now`: read absolute times against it. */
  readonly referenceMs: number;
  /** A response header by lower-case name, repeated lines joined with `", "`. */
  header(name: string): string | undefined;
}

export interface BodyReading {
  /** An explicit wait the body gives (ms). */
  readonly retryAfterMs?: number | undefined;
  /** Quota windows the body describes. */
  readonly policies?: readonly RateLimitPolicy[] | undefined;
  /** The body says the request was throttled. */
  readonly throttled?: boolean | undefined;
}

export type BodyReader = (body: unknown, context: BodyReaderContext) => BodyReading | undefined;

// Arrays in bodies (`errors`, `details`) are scanned no further than this.
const maxArrayScan = 32;

/** Discord: `{"retry_after": 64.57, "global": false}`, seconds as a float. */
export const discordRetryAfter: BodyReader = (body) => {
  const retryAfterMs = secondsValueToMs(field(body, 'retry_after'));
  return retryAfterMs === undefined ? undefined : { retryAfterMs, throttled: true };
};

/** Google APIs: `error.details[@type=…google.rpc.RetryInfo].retryDelay`, a protobuf Duration (`"4.07s"`). */
export const googleRetryInfo: BodyReader = (body) => {
  const details = field(field(body, 'error'), 'details');
  if (!Array.isArray(details)) return undefined;
  let retryAfterMs: number | undefined;
  for (const detail of details.slice(0, maxArrayScan)) {
    const type = field(detail, '@type');
    if (typeof type !== 'string' || !type.endsWith('google.rpc.RetryInfo')) continue;
    const ms = protobufDurationMs(field(detail, 'retryDelay'));
    if (ms !== undefined && (retryAfterMs === undefined || ms > retryAfterMs)) retryAfterMs = ms;
  }
  return retryAfterMs === undefined ? undefined : { retryAfterMs };
};

/** Salesforce Marketing Cloud 429: `{"errorcode": 50100, "retryAfter": 5}` (seconds). */
export const salesforceMarketingCloudRetryAfter: BodyReader = (body) => {
  // `retryAfter` alone is too common a key to trust; the numeric `errorcode` marks this shape.
  if (typeof field(body, 'errorcode') !== 'number') return undefined;
  const retryAfterMs = secondsValueToMs(field(body, 'retryAfter'));
  return retryAfterMs === undefined ? undefined : { retryAfterMs };
};

/**
 * Shopify GraphQL Admin: `extensions.cost.throttleStatus` is a leaky bucket of cost points
 * (`maximumAvailable`, `currentlyAvailable`, `restoreRate` points/s, floats allowed). The full
 * refill `(maximum - available) / restoreRate` s is its reset, computed exactly (P3).
 */
export const shopifyGraphqlCost: BodyReader = (body) => {
  const status = field(field(field(body, 'extensions'), 'cost'), 'throttleStatus');
  const maximum = decimalFrom(field(status, 'maximumAvailable'));
  const available = decimalFrom(field(status, 'currentlyAvailable'));
  const restoreRate = decimalFrom(field(status, 'restoreRate'));
  if (maximum === undefined || available === undefined) return undefined;
  const missing = subtractDecimal(maximum, available);
  let resetMs: number | undefined;
  // A zero or negative restore rate never refills: no reset rather than an infinite one.
  if (restoreRate !== undefined && restoreRate.units > 0n) {
    // (missing / rate) s in ms = missing.units / 10^ms * 1000 * 10^rs / rate.units, rounded up.
    resetMs =
      missing.units <= 0n
        ? 0
        : scaleCeil(missing, 1000n * 10n ** BigInt(restoreRate.scale), restoreRate.units);
  }
  const limit = maximum.units < 0n ? undefined : floorToInteger(maximum);
  const remaining = available.units < 0n ? undefined : floorToInteger(available);
  const policy: RateLimitPolicy = {
    unit: 'points',
    ...(limit === undefined ? {} : { limit }),
    ...(remaining === undefined ? {} : { remaining }),
    ...(resetMs === undefined ? {} : { resetMs }),
    name: 'graphql-cost',
    source: 'shopify-graphql',
  };
  return { policies: [policy] };
};

/** Throttling markers in the body, from the `bodyThrottleMarkers` table, on the statuses each allows. */
export const throttleMarkers: BodyReader = (body, context) =>
  bodyThrottleMarkers.some(
    (marker) =>
      (marker.statuses === undefined || marker.statuses.has(context.status)) &&
      valuesAt(body, marker.path).some((value) => matches(marker, value)),
  )
    ? { throttled: true }
    : undefined;

/** The readers `parseRateLimitHeaders` always runs, before any the caller adds. */
export const defaultBodyReaders: readonly BodyReader[] = Object.freeze([
  discordRetryAfter,
  googleRetryInfo,
  salesforceMarketingCloudRetryAfter,
  shopifyGraphqlCost,
  throttleMarkers,
]);

/** Protobuf Duration JSON (`"57.238747106s"`), or the `{seconds, nanos}` object some clients emit. */
function protobufDurationMs(value: unknown): number | undefined {
  if (typeof value === 'string') return parseDuration(value);
  const seconds = decimalFrom(field(value, 'seconds'));
  if (seconds === undefined || seconds.units < 0n || seconds.scale !== 0) return undefined;
  const nanos = decimalFrom(field(value, 'nanos') ?? 0);
  if (nanos === undefined || nanos.units < 0n || nanos.scale !== 0 || nanos.units > 999_999_999n)
    return undefined;
  // seconds * 1e9 + nanos, in ns -> ms rounded up.
  return scaleCeil({ units: seconds.units * 1_000_000_000n + nanos.units, scale: 0 }, 1n, 1_000_000n);
}

function field(value: unknown, key: string): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  // Own properties only: a body key must not reach Object.prototype (`constructor`, `__proto__`).
  return Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
}

function valuesAt(root: unknown, path: string): unknown[] {
  let current: unknown[] = [root];
  for (const step of path.split('.')) {
    const next: unknown[] = [];
    for (const value of current) {
      if (step === '*') {
        if (Array.isArray(value)) next.push(...value.slice(0, maxArrayScan));
      } else {
        const child = field(value, step);
        if (child !== undefined) next.push(child);
      }
    }
    if (next.length === 0) return next;
    current = next;
  }
  return current;
}

function matches(marker: BodyThrottleMarker, value: unknown): boolean {
  const expected = marker.value;
  if (typeof expected === 'number') return value === expected;
  if (typeof expected === 'function') return expected(value);
  // Long strings are prose, not codes; bounding them bounds the regex work.
  return typeof value === 'string' && value.length <= 1024 && expected.test(value);
}
