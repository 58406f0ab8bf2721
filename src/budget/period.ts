/**
 * Budget periods: a rolling window, or a calendar hour/day/week/month in UTC or an IANA time zone.
 * Pure: every function takes `now` (ms on the Unix-epoch scale).
 *
 * Calendar periods follow the zone's wall clock. A local day is [first instant of date D, first
 * instant of date D+1): 23 hours on a spring-forward day, 25 on a fall-back day. When midnight does
 * not exist (a zone that springs forward at 00:00), the day starts at the transition instant; when it
 * occurs twice, the day starts at its first occurrence. A local hour is measured from the local
 * hh:00 and never spans an offset change, so a repeated hour (fall back) is two periods of one real
 * hour each, and a skipped hour simply does not occur. Weeks start on Monday (ISO 8601).
 */

import { invalid } from '../validate.js';

export type CalendarUnit = 'hour' | 'day' | 'week' | 'month';

export const calendarUnits: readonly CalendarUnit[] = ['hour', 'day', 'week', 'month'];

/** A period as users write it: `'day'`, `{ rollingMs: 3_600_000 }` or `{ calendar: 'day', timeZone }`. */
export type PeriodSpec =
  | CalendarUnit
  | { readonly rollingMs: number }
  | { readonly calendar: CalendarUnit; readonly timeZone?: string };

/** A validated period. */
export type Period =
  | { readonly kind: 'rolling'; readonly rollingMs: number }
  | { readonly kind: 'calendar'; readonly unit: CalendarUnit; readonly timeZone: string };

/** `[startMs, endMs)`; for a calendar period `endMs` is when it resets. */
export interface PeriodWindow {
  readonly startMs: number;
  readonly endMs: number;
}

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** Validate a time zone name; returns the canonical name (`'utc'` -> `'UTC'`). */
export function normalizeTimeZone(option: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw invalid(option, 'an IANA time zone name', value);
  try {
    return new Intl.DateTimeFormat('en-US', { timeZone: value }).resolvedOptions().timeZone;
  } catch {
    throw invalid(option, 'an IANA time zone name such as `UTC` or `Europe/Berlin`', value);
  }
}

const periodKeys: readonly string[] = ['rollingMs', 'calendar', 'timeZone'];

/**
 * Validate a period option (`option` names it in errors, e.g. `budgets[0].period`). An object
 * period takes only `rollingMs`, or `calendar` with an optional `timeZone`; any other key, or
 * `rollingMs` with either of the others, is an `InvalidOptionError`.
 */
export function normalizePeriod(
  option: string,
  value: unknown,
  timeZone: unknown = 'UTC',
  timeZoneOption = 'timeZone',
): Period {
  if (typeof value === 'string') {
    if (!(calendarUnits as readonly string[]).includes(value)) {
      throw invalid(
        option,
        `one of ${calendarUnits.map((u) => `'${u}'`).join(', ')} or { rollingMs }`,
        value,
      );
    }
    return {
      kind: 'calendar',
      unit: value as CalendarUnit,
      timeZone: normalizeTimeZone(timeZoneOption, timeZone),
    };
  }
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const v = value as { rollingMs?: unknown; calendar?: unknown; timeZone?: unknown } & Record<
      string,
      unknown
    >;
    // A misspelt key (`timezone`) would otherwise be ignored and the period silently run in UTC.
    for (const key of Object.keys(v)) {
      if (!periodKeys.includes(key)) {
        throw invalid(`${option}.${key}`, `not set (known: ${periodKeys.join(', ')})`, v[key]);
      }
    }
    if (v.rollingMs !== undefined) {
      // A rolling window has no calendar and no zone: either key means the spec is two periods.
      if (v.calendar !== undefined) {
        throw invalid(`${option}.calendar`, 'unset when `rollingMs` is set', v.calendar);
      }
      if (v.timeZone !== undefined) {
        throw invalid(`${option}.timeZone`, 'unset when `rollingMs` is set', v.timeZone);
      }
      const ms = v.rollingMs;
      if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 1) {
        throw invalid(`${option}.rollingMs`, 'an integer >= 1', ms);
      }
      return { kind: 'rolling', rollingMs: ms };
    }
    if (v.calendar !== undefined) {
      const unit = v.calendar;
      if (typeof unit !== 'string' || !(calendarUnits as readonly string[]).includes(unit)) {
        throw invalid(`${option}.calendar`, `one of ${calendarUnits.map((u) => `'${u}'`).join(', ')}`, unit);
      }
      const own = v.timeZone !== undefined;
      return {
        kind: 'calendar',
        unit: unit as CalendarUnit,
        timeZone: normalizeTimeZone(own ? `${option}.timeZone` : timeZoneOption, own ? v.timeZone : timeZone),
      };
    }
  }
  throw invalid(option, "'hour', 'day', 'week', 'month', { rollingMs } or { calendar, timeZone }", value);
}

/** A short stable description: `'day'`, `'day Europe/Berlin'`, `'rolling 3600000ms'`. */
export function describePeriod(period: Period): string {
  if (period.kind === 'rolling') return `rolling ${period.rollingMs}ms`;
  return period.timeZone === 'UTC' ? period.unit : `${period.unit} ${period.timeZone}`;
}

/**
 * The window containing `now`. Calendar: the period's bounds (`endMs` = reset time). Rolling: the
 * window `(now - rollingMs, now]`, returned as `startMs = now - rollingMs`, `endMs = now`; spend at
 * time `at` counts while `now - at < rollingMs`.
 */
export function periodWindow(period: Period, now: number): PeriodWindow {
  if (period.kind === 'rolling') return { startMs: now - period.rollingMs, endMs: now };
  if (period.timeZone === 'UTC') return utcWindow(period.unit, now);
  return zonedWindow(period.unit, period.timeZone, now);
}

function utcWindow(unit: CalendarUnit, now: number): PeriodWindow {
  const d = new Date(Math.floor(now));
  const y = d.getUTCFullYear();
  const mo = d.getUTCMonth();
  const day = d.getUTCDate();
  switch (unit) {
    case 'hour': {
      const startMs = Math.floor(now / HOUR_MS) * HOUR_MS;
      return { startMs, endMs: startMs + HOUR_MS };
    }
    case 'day': {
      const startMs = Date.UTC(y, mo, day);
      return { startMs, endMs: startMs + DAY_MS };
    }
    case 'week': {
      // getUTCDay: 0 = Sunday. Days since Monday = (dow + 6) % 7.
      const startMs = Date.UTC(y, mo, day - ((d.getUTCDay() + 6) % 7));
      return { startMs, endMs: startMs + 7 * DAY_MS };
    }
    case 'month':
      return { startMs: Date.UTC(y, mo, 1), endMs: Date.UTC(y, mo + 1, 1) };
  }
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
      era: 'short',
    });
    formatters.set(timeZone, f);
  }
  return f;
}

/**
 * The zone's wall-clock time at instant `t`, as ms on a UTC scale ("what a local clock reads, written
 * as if it were UTC"). The zone's offset at `t` is `wallMs(t) - t`.
 */
function wallMs(timeZone: string, t: number): number {
  // Intl formats whole seconds; keep the sub-second part of t so offset = wall - t is exact.
  const seconds = Math.floor(t / 1000) * 1000;
  let year = 0;
  let month = 1;
  let day = 1;
  let hour = 0;
  let minute = 0;
  let second = 0;
  let bc = false;
  for (const part of formatterFor(timeZone).formatToParts(seconds)) {
    switch (part.type) {
      case 'year':
        year = Number(part.value);
        break;
      case 'month':
        month = Number(part.value);
        break;
      case 'day':
        day = Number(part.value);
        break;
      case 'hour':
        hour = Number(part.value);
        break;
      case 'minute':
        minute = Number(part.value);
        break;
      case 'second':
        second = Number(part.value);
        break;
      case 'era':
        bc = part.value.startsWith('B');
        break;
    }
  }
  // Date.UTC maps years 0..99 to 1900..1999; setUTCFullYear does not.
  const date = new Date(0);
  date.setUTCFullYear(bc ? 1 - year : year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  return date.getTime() + (t - seconds);
}

function offsetMs(timeZone: string, t: number): number {
  return wallMs(timeZone, t) - t;
}

/** The first instant in (lo, hi] whose offset differs from the offset at `lo` (ms resolution). */
function transitionIn(timeZone: string, lo: number, hi: number): number {
  const before = offsetMs(timeZone, lo);
  // Invariant: offset(lo) == before, offset(hi) != before.
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetMs(timeZone, mid) === before) lo = mid;
    else hi = mid;
  }
  return hi;
}

/**
 * The first instant at which the zone's wall clock reads at least `wall`. Usually the one instant
 * whose wall time is `wall`; the earlier one when the wall time occurs twice (fall back); the
 * transition instant when it does not occur (spring forward skips it).
 * Assumes at most one offset change within a day of `wall`, true of every real zone.
 */
function firstInstantAtWall(timeZone: string, wall: number): number {
  const before = offsetMs(timeZone, wall - DAY_MS);
  const after = offsetMs(timeZone, wall + DAY_MS);
  // Candidate instants: the wall time read with the earlier and the later offset.
  const early = wall - before;
  const late = wall - after;
  const earlyOk = wallMs(timeZone, early) === wall;
  const lateOk = wallMs(timeZone, late) === wall;
  if (earlyOk && lateOk) return Math.min(early, late);
  if (earlyOk) return early;
  if (lateOk) return late;
  // A gap: the wall clock jumps over `wall` at the transition between the two candidates.
  return transitionIn(timeZone, Math.min(early, late), Math.max(early, late));
}

function zonedWindow(unit: CalendarUnit, timeZone: string, now: number): PeriodWindow {
  const wall = wallMs(timeZone, now);
  if (unit === 'hour') {
    // From local hh:00 to the next, clamped to any offset change inside (a 30-minute DST shift, or
    // the repeated hour of a fall back, which thus counts as its own period).
    const intoHourMs = ((wall % HOUR_MS) + HOUR_MS) % HOUR_MS;
    let startMs = now - intoHourMs;
    let endMs = now + (HOUR_MS - intoHourMs);
    const offsetNow = offsetMs(timeZone, now);
    if (offsetMs(timeZone, startMs) !== offsetNow) {
      // The offset changed between startMs and now: the period began at that change.
      startMs = transitionIn(timeZone, startMs, now);
      // transitionIn finds the first instant differing from startMs's offset; walk again if two.
      if (offsetMs(timeZone, startMs) !== offsetNow) startMs = transitionIn(timeZone, startMs, now);
    }
    if (offsetMs(timeZone, endMs - 1) !== offsetNow) endMs = transitionIn(timeZone, now, endMs - 1);
    return { startMs, endMs };
  }
  const d = new Date(wall);
  const y = d.getUTCFullYear();
  const mo = d.getUTCMonth();
  const day = d.getUTCDate();
  let startWall: number;
  let endWall: number;
  if (unit === 'day') {
    startWall = Date.UTC(y, mo, day);
    endWall = Date.UTC(y, mo, day + 1);
  } else if (unit === 'week') {
    startWall = Date.UTC(y, mo, day - ((d.getUTCDay() + 6) % 7));
    endWall = Date.UTC(y, mo, day - ((d.getUTCDay() + 6) % 7) + 7);
  } else {
    startWall = Date.UTC(y, mo, 1);
    endWall = Date.UTC(y, mo + 1, 1);
  }
  return { startMs: firstInstantAtWall(timeZone, startWall), endMs: firstInstantAtWall(timeZone, endWall) };
}
