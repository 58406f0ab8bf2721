import { trimOws } from './decimal.js';

/**
 * Absolute timestamps in headers: RFC 9110 HTTP-date (three forms) and RFC 3339. Both return ms on
 * the Unix epoch scale, or undefined. No free-form guessing: `Date.parse` accepts JavaScript's
 * `Date#toString()` output and ISO strings in Retry-After, which rules P4 and P6 reject.
 */

const months = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];

// Every well-formed date is under 40 characters; a longer value is refused before any regex runs.
const maxDateChars = 64;

// RFC 9110 §5.6.7. Matched case-insensitively: the RFC calls HTTP-date case-sensitive, but a
// lower-cased `gmt` from a sloppy server still names one unambiguous instant.
const imfFixdate =
  /^(?:mon|tue|wed|thu|fri|sat|sun), (\d{1,2}) ([a-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) gmt$/i;
const rfc850Date =
  /^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday), (\d{2})-([a-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) gmt$/i;
// asctime pads a one-digit day with a space (`Nov  6`); a single space is tolerated too.
const asctimeDate =
  /^(?:mon|tue|wed|thu|fri|sat|sun) ([a-z]{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/i;

/** The weekday names an HTTP-date may start with; used to re-join `Mon, 30 Nov ...` split at its comma. */
export const httpDateWeekdayPattern =
  /^(?:mon|tue|wed|thu|fri|sat|sun|monday|tuesday|wednesday|thursday|friday|saturday|sunday)$/i;

/**
 * An HTTP-date (IMF-fixdate, RFC 850, or asctime) -> epoch ms, or undefined.
 * `nowMs` resolves RFC 850's two-digit year: a date more than 50 years after `nowMs` is read in
 * the previous century (RFC 9110 §5.6.7).
 */
export function parseHttpDate(value: string, nowMs: number): number | undefined {
  // A non-string (null from untyped callers) is no date, like garbage text.
  if (typeof value !== 'string') return undefined;
  const text = trimOws(value);
  if (text.length > maxDateChars) return undefined;
  let match = imfFixdate.exec(text);
  if (match !== null) {
    const [, day, month, year, hour, minute, second] = match;
    return utc(Number(year), month, Number(day), Number(hour), Number(minute), Number(second), 0);
  }
  match = rfc850Date.exec(text);
  if (match !== null) {
    const [, day, month, year2, hour, minute, second] = match;
    const at = (year: number) =>
      utc(year, month, Number(day), Number(hour), Number(minute), Number(second), 0);
    // RFC 9110 §5.6.7 compares instants, not years: on 2026-11-30, `31-Dec-76` read as 2076 is 50
    // years and a month ahead, so it is 1976, though 2076 - 2026 is only 50.
    const now = new Date(Number.isFinite(nowMs) ? nowMs : 0);
    const year = Math.floor(now.getUTCFullYear() / 100) * 100 + Number(year2);
    const candidate = at(year);
    return candidate !== undefined && candidate > fiftyYearsAfter(now) ? at(year - 100) : candidate;
  }
  match = asctimeDate.exec(text);
  if (match !== null) {
    const [, month, day, hour, minute, second, year] = match;
    return utc(Number(year), month, Number(day), Number(hour), Number(minute), Number(second), 0);
  }
  return undefined;
}

const rfc3339 =
  /^(\d{4})-(\d{2})-(\d{2})[t ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:(z)|([+-])(\d{2}):(\d{2}))$/i;

/**
 * An RFC 3339 timestamp -> epoch ms (a fraction finer than 1 ms rounds up), or undefined. Seconds
 * may be omitted: Jira sends minute precision (`2026-11-30T12:00Z`). A zone is required: a local
 * time names no instant.
 */
export function parseRfc3339Date(value: string): number | undefined {
  if (typeof value !== 'string') return undefined;
  const text = trimOws(value);
  if (text.length > maxDateChars) return undefined;
  const match = rfc3339.exec(text);
  if (match === null) return undefined;
  const [, year, month, day, hour, minute, second = '0', fraction = '', zulu, sign, offH, offM] = match;
  // Fraction of a second -> whole ms, rounded up: a reset is never reported earlier than sent.
  const fractionMs = fraction === '' ? 0 : Math.ceil(Number(fraction.padEnd(9, '0')) / 1_000_000);
  const monthName = months[Number(month) - 1];
  const base = utc(
    Number(year),
    monthName,
    Number(day),
    Number(hour),
    Number(minute),
    Number(second),
    fractionMs,
  );
  if (base === undefined) return undefined;
  if (zulu !== undefined) return base;
  const offsetH = Number(offH);
  const offsetM = Number(offM);
  if (offsetH > 23 || offsetM > 59) return undefined;
  // Local time = UTC + offset, so UTC = local - offset.
  const offsetMs = (offsetH * 60 + offsetM) * 60_000;
  return sign === '-' ? base + offsetMs : base - offsetMs;
}

/** An absolute reset: HTTP-date or RFC 3339 (rule P6), or undefined. */
export function parseAbsoluteDate(value: string, nowMs: number): number | undefined {
  return parseHttpDate(value, nowMs) ?? parseRfc3339Date(value);
}

/** The same calendar instant 50 years later (29 Feb rolls to 1 Mar in a common year). */
function fiftyYearsAfter(date: Date): number {
  const later = new Date(date.getTime());
  later.setUTCFullYear(later.getUTCFullYear() + 50);
  return later.getTime();
}

/** Validated UTC fields -> epoch ms. Rejects `31 Feb`, hour 24, minute 60; a leap second (60) is kept. */
function utc(
  year: number,
  monthName: string | undefined,
  day: number,
  hour: number,
  minute: number,
  second: number,
  ms: number,
): number | undefined {
  const month = months.indexOf((monthName ?? '').toLowerCase());
  // Years below 100 never appear in the 4-digit forms (and Date.UTC would map them to 19xx).
  if (month === -1 || year < 100 || day < 1 || hour > 23 || minute > 59 || second > 60) return undefined;
  const minuteStart = Date.UTC(year, month, day, hour, minute);
  // Date.UTC rolls 31 Feb over into March; a day that does not survive the round trip is invalid.
  const check = new Date(minuteStart);
  if (check.getUTCDate() !== day || check.getUTCMonth() !== month) return undefined;
  // Seconds are added after the check so a leap second (23:59:60) reads as the next instant.
  const at = minuteStart + second * 1000 + ms;
  return Number.isFinite(at) ? at : undefined;
}
