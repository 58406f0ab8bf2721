import {
  compareDecimal,
  floorToInteger,
  parseDecimal,
  parseNonNegativeDecimal,
  scaleCeil,
  trimOws,
} from './decimal.js';
import { parseDuration } from './duration.js';
import { parseAbsoluteDate } from './http-date.js';
import { type ListMember, parseListMembers, splitFieldMembers } from './list-members.js';
import type { ResetFormat } from './profiles.js';
import type { RateLimitPolicy } from './rate-limit-observation.js';

/**
 * One window as the headers spelled it (text, not yet numbers), gathered from every header of a
 * family, then turned into `RateLimitPolicy` values by one set of rules for all families.
 */
export interface RawWindow {
  source: string;
  /** The window's id within its family (`x-ratelimit`, `requests`, `minute`, a policy id). */
  readonly key: string;
  readonly unit: string;
  name?: string;
  /** Lower-priority name (Discord/SCAYLE `X-RateLimit-Scope`). */
  scope?: string;
  windowMs?: number;
  windowMsText?: string;
  limit?: string;
  remaining?: string;
  used?: string;
  /** Delta seconds (Discord `Reset-After`, IETF `t`): beats `reset` and `resetAt` (P8). */
  resetAfter?: string;
  reset?: { readonly text: string; readonly format: ResetFormat };
  /** An absolute reset for the same window, used when neither of the above gives one. */
  resetAt?: { readonly text: string; readonly format: ResetFormat };
  /** `X-RateLimit-Policy` / `RateLimit-Policy` integer items (`15000;w=2592000`): window lengths. */
  policy?: string;
}

/** The clocks a reset is measured against (P2). */
export interface TimeReference {
  /** The receive time. */
  readonly now: number;
  /** The response `Date` when present and valid, else `now`: absolute times are read against it. */
  readonly referenceMs: number;
}

// Rule: a reset further away than this is absurd (a unit mistake, garbage) and is dropped. The
// longest real windows are monthly quotas (Brave ~16 days left, RapidAPI ~25 days); 400 days
// leaves room for yearly plans.
const maxResetMs = 400 * 24 * 60 * 60 * 1000;
// Rule: an absolute reset up to this far in the past clamps to 0 (Jira truncates to the minute,
// Anthropic's reset can trail `Date` by a second). Further back it contradicts the server's own
// clock and is dropped rather than read as "already reset".
const maxPastResetMs = 60 * 60 * 1000;

/**
 * The windows one raw window stands for: usually one, several for parallel lists (rule P10).
 *
 * P10: if Limit and Remaining have the same number of members (or only Remaining is a list), zip
 * them (Brave `1, 15000` / `1, 0`); resets and policies are zipped only when their counts match
 * too (a single reset beside a list is ambiguous and is dropped). Otherwise the first bare member of
 * the Limit list is the limit (drafts <= 03, WHOOP `100, 100;window=60, 10000;window=86400`) and
 * the lowest Remaining member binds (P9).
 */
export function assembleWindows(raw: RawWindow, time: TimeReference): RateLimitPolicy[] {
  const limits = parseListMembers(raw.limit);
  const remainings = parseListMembers(raw.remaining);
  const useds = parseListMembers(raw.used);
  const count = remainings.length;
  if (count > 1 && (limits.length === count || limits.length === 0)) {
    const resets = raw.reset === undefined ? [] : splitFieldMembers(raw.reset.text);
    const resetAfters = raw.resetAfter === undefined ? [] : splitFieldMembers(raw.resetAfter);
    const policies = parseListMembers(raw.policy);
    const windows: RateLimitPolicy[] = [];
    for (let i = 0; i < count; i++) {
      const limit = limits[i];
      const resetText = resets.length === count ? resets[i] : undefined;
      const window = buildWindow(raw, time, {
        limit: limit?.value,
        remaining: remainings[i]?.value,
        used: useds.length === count ? useds[i]?.value : undefined,
        windowSeconds:
          limit?.windowSeconds ?? (policies.length === count ? policies[i]?.windowSeconds : undefined),
        reset:
          resetText === undefined || raw.reset === undefined ? undefined : { ...raw.reset, text: resetText },
        resetAfter: resetAfters.length === count ? resetAfters[i] : undefined,
      });
      if (window !== undefined) windows.push(window);
    }
    return windows;
  }
  // P9: members that cannot be zipped one-to-one are one window reported several times (duplicated
  // Remaining lines `5, 0` beside a single Limit): the lowest remaining binds, ties to the later
  // reset, as between windows.
  const limit = limits[0];
  const windowSeconds =
    limit === undefined ? undefined : windowSecondsFor(limit, limits, parseListMembers(raw.policy));
  const resetFor = resetMemberPicker(raw.reset?.text, raw.reset?.format, count, time);
  const resetAfterFor = resetMemberPicker(raw.resetAfter, 'delta-seconds', count, time);
  let binding: RateLimitPolicy | undefined;
  for (let i = 0; i < Math.max(count, 1); i++) {
    const resetText = resetFor(i);
    const window = buildWindow(raw, time, {
      limit: limit?.value,
      remaining: remainings[i]?.value,
      used: useds[0]?.value,
      windowSeconds,
      reset:
        resetText === undefined || raw.reset === undefined ? undefined : { ...raw.reset, text: resetText },
      resetAfter: resetAfterFor(i),
    });
    if (window !== undefined && (binding === undefined || bindsBefore(window, binding))) binding = window;
  }
  return binding === undefined ? [] : [binding];
}

/**
 * The reset member that goes with Remaining member `index`: the one at the same position when the
 * counts match, else the latest valid one (the safe side: never act before any of them says the
 * window resets). A single reset is its own latest.
 */
function resetMemberPicker(
  text: string | undefined,
  format: ResetFormat | undefined,
  count: number,
  time: TimeReference,
): (index: number) => string | undefined {
  if (text === undefined || format === undefined) return () => undefined;
  const members = splitFieldMembers(text);
  if (members.length === count) return (index) => members[index];
  let latest: { readonly text: string; readonly ms: number } | undefined;
  for (const member of members) {
    const ms = resetToMs(member, format, time);
    if (ms !== undefined && (latest === undefined || ms > latest.ms)) latest = { text: member, ms };
  }
  return () => latest?.text;
}

/**
 * Rule P9 between two windows: the lower remaining binds, a known remaining beating an unknown one.
 * A tie goes to the later reset, which binds longer; a known reset beats an unknown one.
 */
export function bindsBefore(a: RateLimitPolicy, b: RateLimitPolicy): boolean {
  if (a.remaining !== undefined && b.remaining === undefined) return true;
  if (a.remaining === undefined && b.remaining !== undefined) return false;
  if (a.remaining !== undefined && b.remaining !== undefined && a.remaining !== b.remaining) {
    return a.remaining < b.remaining;
  }
  return a.resetMs !== undefined && (b.resetMs === undefined || a.resetMs > b.resetMs);
}

interface WindowParts {
  readonly limit: string | undefined;
  readonly remaining: string | undefined;
  readonly used: string | undefined;
  readonly windowSeconds: string | undefined;
  readonly reset: RawWindow['reset'];
  readonly resetAfter: string | undefined;
}

function buildWindow(raw: RawWindow, time: TimeReference, parts: WindowParts): RateLimitPolicy | undefined {
  let limit = readCount(parts.limit);
  let remaining = readCount(parts.remaining);
  const used = readCount(parts.used);
  // P12: derive what the provider left out. limit = used + remaining (Reddit, as prawcore does);
  // remaining = limit - used, clamped at 0 (Shopify `32/40`, Salesforce usage above its soft limit).
  if (limit === undefined && used !== undefined && remaining !== undefined)
    limit = safeOrUndefined(used + remaining);
  if (remaining === undefined && used !== undefined && limit !== undefined)
    remaining = Math.max(0, limit - used);
  // P9: a window with neither a valid limit nor a valid remaining (`-1` sentinels, garbage) says
  // nothing about the quota and is dropped, reset included.
  if (limit === undefined && remaining === undefined) return undefined;
  // Rule (corpus silent): remaining above limit is contradictory; trust the smaller number so the
  // client never spends more than the server could have meant.
  if (limit !== undefined && remaining !== undefined && remaining > limit) remaining = limit;

  // P8: a delta for the window beats an absolute time for the same window (no clock involved).
  const resetMs =
    (parts.resetAfter === undefined ? undefined : resetToMs(parts.resetAfter, 'delta-seconds', time)) ??
    (parts.reset === undefined ? undefined : resetToMs(parts.reset.text, parts.reset.format, time)) ??
    (raw.resetAt === undefined ? undefined : resetToMs(raw.resetAt.text, raw.resetAt.format, time));

  const windowMs =
    (parts.windowSeconds === undefined ? undefined : secondsToWholeMs(parts.windowSeconds)) ??
    (raw.windowMsText === undefined ? undefined : readCount(raw.windowMsText)) ??
    raw.windowMs;

  const name = raw.name ?? raw.scope;
  return {
    unit: raw.unit,
    ...(limit === undefined ? {} : { limit }),
    ...(remaining === undefined ? {} : { remaining }),
    ...(resetMs === undefined ? {} : { resetMs }),
    // A zero-length window is meaningless (draft-09: w must be non-zero).
    ...(windowMs === undefined || windowMs <= 0 ? {} : { windowMs }),
    ...(name === undefined || name === '' ? {} : { name }),
    source: raw.source,
  };
}

/** The window length of the first Limit member: its own `w`, a later member with the same quota, or a policy item. */
function windowSecondsFor(
  first: ListMember,
  limits: ListMember[],
  policies: ListMember[],
): string | undefined {
  if (first.windowSeconds !== undefined) return first.windowSeconds;
  const sameQuota = (member: ListMember) =>
    member.value === first.value && member.windowSeconds !== undefined;
  return (limits.find(sameQuota) ?? policies.find(sameQuota))?.windowSeconds;
}

/**
 * A count (limit, remaining, used): a non-negative decimal, floored (`599.0` -> 599, P12), safe.
 * Signs (`-1` sentinels), units, garbage -> undefined.
 */
export function readCount(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const value = parseNonNegativeDecimal(trimOws(text));
  return value === undefined ? undefined : floorToInteger(value);
}

function secondsToWholeMs(text: string): number | undefined {
  const value = parseNonNegativeDecimal(trimOws(text));
  return value === undefined ? undefined : scaleCeil(value, 1000n);
}

const oneBillion = 1_000_000_000n;
const oneTrillion = 1_000_000_000_000n;

/** ms from the receive time until the reset, read as `format` says; undefined when invalid or absurd. */
export function resetToMs(value: string, format: ResetFormat, time: TimeReference): number | undefined {
  const text = trimOws(value);
  const ms = resetToMsUnbounded(text, format, time);
  return ms === undefined || ms > maxResetMs ? undefined : ms;
}

function resetToMsUnbounded(text: string, format: ResetFormat, time: TimeReference): number | undefined {
  switch (format) {
    case 'duration':
      return parseDuration(text);
    case 'date':
      return untilInstant(parseAbsoluteDate(text, time.now), time);
    case 'delta-seconds':
    case 'delta-ms':
    case 'epoch-seconds':
    case 'epoch-ms':
    case 'auto': {
      const number = parseDecimal(text);
      if (number === undefined)
        return format === 'auto' ? untilInstant(parseAbsoluteDate(text, time.now), time) : undefined;
      // P6: a negative reset is invalid, not "already reset".
      if (number.units < 0n) return undefined;
      if (format === 'delta-ms') return scaleCeil(number, 1n);
      if (format === 'epoch-ms') return untilInstant(scaleCeil(number, 1n), time);
      if (format === 'epoch-seconds') return untilInstant(scaleCeil(number, 1000n), time);
      // P6 magnitude: below 1e9 no plausible epoch (2001-09-09) -> delta seconds; from 1e12 the
      // value is too large for epoch seconds (year 33658) -> epoch ms; between -> epoch seconds.
      if (format === 'delta-seconds' || compareDecimal(number, oneBillion) < 0)
        return scaleCeil(number, 1000n);
      if (compareDecimal(number, oneTrillion) < 0) return untilInstant(scaleCeil(number, 1000n), time);
      return untilInstant(scaleCeil(number, 1n), time);
    }
  }
}

/** An absolute instant -> ms after the reference clock (P2), rounded up; recent past -> 0. */
function untilInstant(atMs: number | undefined, time: TimeReference): number | undefined {
  if (atMs === undefined) return undefined;
  // Both are ms on the epoch scale; the difference is how far ahead of the server's "now" it is.
  const differenceMs = atMs - time.referenceMs;
  if (!Number.isFinite(differenceMs)) return undefined;
  if (differenceMs >= 0) return Math.ceil(differenceMs);
  return differenceMs >= -maxPastResetMs ? 0 : undefined;
}

function safeOrUndefined(value: number): number | undefined {
  return Number.isSafeInteger(value) ? value : undefined;
}
