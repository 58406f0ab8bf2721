import { describe, expect, it } from 'vitest';
import { normalizePeriod, normalizeTimeZone, periodWindow } from '../../../src/budget/period.js';
import { InvalidOptionError } from '../../../src/errors.js';

const t = (iso: string) => Date.parse(iso);
const H = 3_600_000;

function win(unit: string, zone: string, at: string) {
  const w = periodWindow(normalizePeriod('period', unit, zone), t(at));
  return {
    start: new Date(w.startMs).toISOString(),
    end: new Date(w.endMs).toISOString(),
    hours: (w.endMs - w.startMs) / H,
  };
}

describe('calendar periods in UTC', () => {
  it.each([
    ['hour', '2026-05-10T13:59:59.999Z', '2026-05-10T13:00:00.000Z', '2026-05-10T14:00:00.000Z'],
    ['hour', '2026-05-10T14:00:00.000Z', '2026-05-10T14:00:00.000Z', '2026-05-10T15:00:00.000Z'],
    ['day', '2026-05-10T23:59:59.999Z', '2026-05-10T00:00:00.000Z', '2026-05-11T00:00:00.000Z'],
    ['day', '2026-05-11T00:00:00.000Z', '2026-05-11T00:00:00.000Z', '2026-05-12T00:00:00.000Z'],
    ['day', '2026-12-31T12:00:00.000Z', '2026-12-31T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
    // weeks start on Monday: 2026-05-10 is a Sunday, 2026-05-11 a Monday
    ['week', '2026-05-10T23:00:00.000Z', '2026-05-04T00:00:00.000Z', '2026-05-11T00:00:00.000Z'],
    ['week', '2026-05-11T00:00:00.000Z', '2026-05-11T00:00:00.000Z', '2026-05-18T00:00:00.000Z'],
    ['week', '2026-12-30T00:00:00.000Z', '2026-12-28T00:00:00.000Z', '2027-01-04T00:00:00.000Z'],
    ['month', '2026-01-31T23:59:59.999Z', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z'],
    ['month', '2026-02-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z', '2026-03-01T00:00:00.000Z'],
    ['month', '2028-02-29T12:00:00.000Z', '2028-02-01T00:00:00.000Z', '2028-03-01T00:00:00.000Z'],
    ['month', '2026-12-15T00:00:00.000Z', '2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
  ])('%s at %s is [%s, %s)', (unit, at, start, end) => {
    expect(win(unit, 'UTC', at)).toMatchObject({ start, end });
  });
});

describe('calendar periods in a time zone, across DST changes', () => {
  it.each([
    // America/New_York springs forward 2026-03-08 02:00 EST -> 03:00 EDT: a 23-hour day.
    [
      'day',
      'America/New_York',
      '2026-03-08T12:00:00Z',
      '2026-03-08T05:00:00.000Z',
      '2026-03-09T04:00:00.000Z',
      23,
    ],
    [
      'day',
      'America/New_York',
      '2026-03-07T12:00:00Z',
      '2026-03-07T05:00:00.000Z',
      '2026-03-08T05:00:00.000Z',
      24,
    ],
    [
      'day',
      'America/New_York',
      '2026-03-09T04:00:00Z',
      '2026-03-09T04:00:00.000Z',
      '2026-03-10T04:00:00.000Z',
      24,
    ],
    // ...and falls back 2026-11-01 02:00 EDT -> 01:00 EST: a 25-hour day.
    [
      'day',
      'America/New_York',
      '2026-11-01T12:00:00Z',
      '2026-11-01T04:00:00.000Z',
      '2026-11-02T05:00:00.000Z',
      25,
    ],
    // Europe/Berlin falls back 2026-10-25 03:00 CEST -> 02:00 CET: a 25-hour day...
    [
      'day',
      'Europe/Berlin',
      '2026-10-25T12:00:00Z',
      '2026-10-24T22:00:00.000Z',
      '2026-10-25T23:00:00.000Z',
      25,
    ],
    // ...whose last instant is still that day, and the next day is back to 24 hours.
    [
      'day',
      'Europe/Berlin',
      '2026-10-25T22:59:59.999Z',
      '2026-10-24T22:00:00.000Z',
      '2026-10-25T23:00:00.000Z',
      25,
    ],
    [
      'day',
      'Europe/Berlin',
      '2026-10-25T23:00:00Z',
      '2026-10-25T23:00:00.000Z',
      '2026-10-26T23:00:00.000Z',
      24,
    ],
    // and springs forward 2026-03-29: a 23-hour day.
    [
      'day',
      'Europe/Berlin',
      '2026-03-29T12:00:00Z',
      '2026-03-28T23:00:00.000Z',
      '2026-03-29T22:00:00.000Z',
      23,
    ],
    // a week containing the change is 169 hours, starting Monday local midnight
    [
      'week',
      'Europe/Berlin',
      '2026-10-25T12:00:00Z',
      '2026-10-18T22:00:00.000Z',
      '2026-10-25T23:00:00.000Z',
      169,
    ],
    [
      'week',
      'Europe/Berlin',
      '2026-10-28T12:00:00Z',
      '2026-10-25T23:00:00.000Z',
      '2026-11-01T23:00:00.000Z',
      168,
    ],
    // October in Berlin has 745 hours
    [
      'month',
      'Europe/Berlin',
      '2026-10-28T12:00:00Z',
      '2026-09-30T22:00:00.000Z',
      '2026-10-31T23:00:00.000Z',
      745,
    ],
    // a month rolls over at local midnight: 2026-10-31T23:30Z is already November in Berlin
    [
      'month',
      'Europe/Berlin',
      '2026-10-31T23:30:00Z',
      '2026-10-31T23:00:00.000Z',
      '2026-11-30T23:00:00.000Z',
      720,
    ],
    // half-hour offsets: India is UTC+5:30 all year
    [
      'day',
      'Asia/Kolkata',
      '2026-06-01T18:29:59Z',
      '2026-05-31T18:30:00.000Z',
      '2026-06-01T18:30:00.000Z',
      24,
    ],
    [
      'hour',
      'Asia/Kolkata',
      '2026-06-01T20:10:00Z',
      '2026-06-01T19:30:00.000Z',
      '2026-06-01T20:30:00.000Z',
      1,
    ],
    // Santiago springs forward at midnight (2026-09-06 00:00 -> 01:00): the day starts at 01:00 local.
    [
      'day',
      'America/Santiago',
      '2026-09-06T12:00:00Z',
      '2026-09-06T04:00:00.000Z',
      '2026-09-07T03:00:00.000Z',
      23,
    ],
    // Havana falls back 01:00 -> 00:00 (midnight occurs twice): the day starts at the first midnight.
    [
      'day',
      'America/Havana',
      '2026-11-01T12:00:00Z',
      '2026-11-01T04:00:00.000Z',
      '2026-11-02T05:00:00.000Z',
      25,
    ],
  ])('%s in %s at %s is [%s, %s), %s h', (unit, zone, at, start, end, hours) => {
    expect(win(unit, zone, at)).toEqual({ start, end, hours });
  });

  it('the repeated hour of a fall back is two periods of one real hour each (Berlin 02:00-03:00)', () => {
    expect(win('hour', 'Europe/Berlin', '2026-10-25T00:30:00Z')).toMatchObject({
      start: '2026-10-25T00:00:00.000Z',
      end: '2026-10-25T01:00:00.000Z',
    });
    expect(win('hour', 'Europe/Berlin', '2026-10-25T01:30:00Z')).toMatchObject({
      start: '2026-10-25T01:00:00.000Z',
      end: '2026-10-25T02:00:00.000Z',
    });
  });

  it('a skipped hour never occurs: 01:xx EST is followed directly by 03:00 EDT (New York)', () => {
    expect(win('hour', 'America/New_York', '2026-03-08T06:59:59Z')).toMatchObject({
      start: '2026-03-08T06:00:00.000Z',
      end: '2026-03-08T07:00:00.000Z',
    });
    expect(win('hour', 'America/New_York', '2026-03-08T07:00:00Z')).toMatchObject({
      start: '2026-03-08T07:00:00.000Z',
      end: '2026-03-08T08:00:00.000Z',
    });
  });

  it('an hour never spans an offset change (Lord Howe shifts by 30 minutes)', () => {
    expect(win('hour', 'Australia/Lord_Howe', '2026-10-03T15:10:00Z')).toEqual({
      start: '2026-10-03T14:30:00.000Z',
      end: '2026-10-03T15:30:00.000Z',
      hours: 1,
    });
    expect(win('hour', 'Australia/Lord_Howe', '2026-10-03T15:40:00Z')).toEqual({
      start: '2026-10-03T15:30:00.000Z',
      end: '2026-10-03T16:00:00.000Z',
      hours: 0.5,
    });
  });

  it('windows tile time with no gap or overlap across a year in a DST zone', () => {
    for (const unit of ['hour', 'day', 'week', 'month']) {
      const period = normalizePeriod('p', unit, 'America/New_York');
      let w = periodWindow(period, t('2026-01-01T00:00:00Z'));
      while (w.endMs < t('2027-01-01T00:00:00Z')) {
        const next = periodWindow(period, w.endMs);
        expect(next.startMs).toBe(w.endMs);
        expect(periodWindow(period, w.endMs - 1)).toEqual(w);
        w = next;
      }
    }
  });
});

describe('rolling periods', () => {
  it('are the rollingMs before now', () => {
    expect(periodWindow({ kind: 'rolling', rollingMs: 60_000 }, 1_000_000)).toEqual({
      startMs: 940_000,
      endMs: 1_000_000,
    });
  });
});

describe('period options', () => {
  it('accept calendar units, { rollingMs } and { calendar, timeZone }', () => {
    expect(normalizePeriod('p', 'day')).toEqual({ kind: 'calendar', unit: 'day', timeZone: 'UTC' });
    expect(normalizePeriod('p', { rollingMs: 5000 })).toEqual({ kind: 'rolling', rollingMs: 5000 });
    expect(normalizePeriod('p', { calendar: 'week', timeZone: 'Europe/Berlin' })).toEqual({
      kind: 'calendar',
      unit: 'week',
      timeZone: 'Europe/Berlin',
    });
  });
  it.each([
    ['fortnight', /Expected `budget.period` to be one of 'hour', 'day', 'week', 'month'/],
    [{ rollingMs: 0 }, /Expected `budget.period.rollingMs` to be an integer >= 1, got `0`/],
    [{ rollingMs: Number.NaN }, /budget.period.rollingMs/],
    [{ rollingMs: Infinity }, /budget.period.rollingMs/],
    [{ calendar: 'year' }, /budget.period.calendar/],
    [
      { calendar: 'day', timeZone: 'Mars/Olympus' },
      /Expected `budget.period.timeZone` to be an IANA time zone/,
    ],
    [42, /budget.period/],
    // A misspelt key would otherwise leave a UTC day; a second period kind, a rolling window.
    [
      { calendar: 'day', timezone: 'Europe/Berlin' },
      /Expected `budget.period.timezone` to be not set \(known: rollingMs, calendar, timeZone\), got `"Europe\/Berlin"`/,
    ],
    [{ rollingMs: 3_600_000, every: 'day' }, /`budget.period.every`.*`"day"`/],
    [
      { rollingMs: 3_600_000, calendar: 'day' },
      /Expected `budget.period.calendar` to be unset when `rollingMs` is set, got `"day"`/,
    ],
    [
      { rollingMs: 3_600_000, timeZone: 'UTC' },
      /Expected `budget.period.timeZone` to be unset when `rollingMs` is set, got `"UTC"`/,
    ],
  ])('reject %j', (value, message) => {
    expect(() => normalizePeriod('budget.period', value)).toThrow(InvalidOptionError);
    expect(() => normalizePeriod('budget.period', value)).toThrow(message);
  });
  it('reject an unknown time zone, naming the option', () => {
    expect(() => normalizeTimeZone('budget.timeZone', 'Europe/Atlantis')).toThrow(/`budget.timeZone`/);
    expect(normalizeTimeZone('tz', 'utc')).toBe('UTC');
  });
});
