import { decimalFrom, parseNonNegativeDecimal, scaleCeil } from './decimal.js';
import { parseDuration } from './duration.js';
import { parseHttpDate } from './http-date.js';
import { splitFieldMembers } from './list-members.js';

/**
 * Explicit retry directives: `Retry-After` (RFC 9110 §10.2.3) and its millisecond and duration
 * cousins. Each returns a wait in whole ms (>= 0, safe integer) or undefined; never throws.
 */

// A directive longer than this is not one (a real value is < 40 characters, even duplicated a few
// times); refusing it bounds the work on hostile input.
const maxDirectiveChars = 1024;

const delaySecondsPattern = /^\d+(?:\.\d+)?$/;

/**
 * `Retry-After` -> ms to wait, or undefined (rule P4).
 *
 * - delay-seconds `120` -> 120000; decimals `2.0`, `1.5` are accepted leniently (Shopify sends
 *   `2.0`) and converted exactly, rounded up (P3). A numeric value is never an epoch.
 * - HTTP-date in any of the three forms, measured against the response `Date` header when it is a
 *   valid HTTP-date, else against `now` (P2, so server clock skew cancels out). A past date -> 0.
 * - Rejected (undefined): sign, unit suffix (`120s`), ISO 8601, empty, garbage, or a wait whose ms
 *   exceed 2^53-1. A huge but representable wait is returned as is: capping it is policy.
 * - Several comma-joined values (duplicated field lines) -> the maximum of the valid members (P5):
 *   never retry earlier than any directive. A member that is an HTTP-date keeps its own comma.
 */
export function parseRetryAfter(value: string, now: number, dateHeader?: string): number | undefined {
  const referenceMs = (dateHeader === undefined ? undefined : parseHttpDate(dateHeader, now)) ?? now;
  return maxOfMembers(value, (member) => {
    if (delaySecondsPattern.test(member)) {
      const seconds = parseNonNegativeDecimal(member);
      return seconds === undefined ? undefined : scaleCeil(seconds, 1000n);
    }
    const at = parseHttpDate(member, now);
    // Absolute -> duration against the server's clock (P2); a date in the past means "now".
    return at === undefined ? undefined : clampWait(at - referenceMs);
  });
}

/** Non-negative decimal seconds only (`X-RateLimit-Retry-After`): no dates. */
export function parseDelaySeconds(value: string): number | undefined {
  return maxOfMembers(value, (member) => {
    const seconds = parseNonNegativeDecimal(member);
    return seconds === undefined ? undefined : scaleCeil(seconds, 1000n);
  });
}

/**
 * Non-negative decimal milliseconds (`retry-after-ms`, `x-ms-retry-after-ms`, `x-amz-retry-after`)
 * -> whole ms rounded up. A sign or unit makes it invalid.
 */
export function parseDelayMs(value: string): number | undefined {
  return maxOfMembers(value, (member) => {
    const ms = parseNonNegativeDecimal(member);
    return ms === undefined ? undefined : scaleCeil(ms, 1n);
  });
}

/** A Go duration used as a retry directive (oxy/Traefik `X-Retry-In: 30s`). */
export function parseDelayDuration(value: string): number | undefined {
  return maxOfMembers(value, parseDuration);
}

/**
 * A wait carried as JSON: a number of seconds (Discord `retry_after: 64.57`) or a numeric string.
 * Returns whole ms rounded up, or undefined for negatives, non-finite numbers and other types.
 */
export function secondsValueToMs(value: unknown): number | undefined {
  const seconds = decimalFrom(value);
  return seconds === undefined || seconds.units < 0n ? undefined : scaleCeil(seconds, 1000n);
}

function maxOfMembers(
  value: string,
  parseMember: (member: string) => number | undefined,
): number | undefined {
  if (typeof value !== 'string' || value.length > maxDirectiveChars) return undefined;
  let max: number | undefined;
  for (const member of splitFieldMembers(value)) {
    if (member === '') continue;
    const ms = parseMember(member);
    if (ms !== undefined && (max === undefined || ms > max)) max = ms;
  }
  return max;
}

/** A difference of two instants as a wait: rounded up to whole ms, past -> 0, unsafe -> undefined. */
function clampWait(differenceMs: number): number | undefined {
  if (differenceMs <= 0) return 0;
  const wait = Math.ceil(differenceMs);
  return Number.isSafeInteger(wait) ? wait : undefined;
}
