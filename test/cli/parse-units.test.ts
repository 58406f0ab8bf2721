import { describe, expect, it } from 'vitest';
import { CliError } from '../../src/cli/cli-error.js';
import {
  parseBudget,
  parseDuration,
  parseHeader,
  parseInteger,
  parseLimit,
  parseOnOff,
  parsePrice,
  parseRate,
} from '../../src/cli/parse-units.js';
import { cliErrorMessage } from './cli-helpers.js';

describe('--rate', () => {
  it.each([
    ['50/s', { algorithm: 'token-bucket', limit: 50, intervalMs: 1_000 }],
    ['3000/min', { algorithm: 'token-bucket', limit: 3_000, intervalMs: 60_000 }],
    ['10/100ms', { algorithm: 'token-bucket', limit: 10, intervalMs: 100 }],
    ['5/2s', { algorithm: 'token-bucket', limit: 5, intervalMs: 2_000 }],
    ['1000 requests / hour', { algorithm: 'token-bucket', limit: 1_000, intervalMs: 3_600_000 }],
    ['1_000/day', { algorithm: 'token-bucket', limit: 1_000, intervalMs: 86_400_000 }],
  ])('reads %s', (text, spec) => {
    expect(parseRate(text, undefined)).toEqual(spec);
  });

  it('takes the burst', () => {
    expect(parseRate('50/s', 10)).toEqual({
      algorithm: 'token-bucket',
      limit: 50,
      intervalMs: 1_000,
      burst: 10,
    });
  });

  it.each(['fast', '50', '50/', '/s', '50/fortnight', '1.5/s', '50/0s'])(
    'refuses %s naming the flag and the value',
    (text) => {
      expect(cliErrorMessage(() => parseRate(text, undefined))).toBe(
        `Expected --rate like 50/s or 3000/min, got \`${text}\``,
      );
    },
  );

  it.each(['0/s', '-5/s', '00/min'])('refuses %s saying a rate must be positive', (text) => {
    expect(cliErrorMessage(() => parseRate(text, undefined))).toBe(
      `Expected --rate to be a positive rate like 50/s or 3000/min, got \`${text}\`: a rate must be a positive number`,
    );
  });

  it('refuses other units and points to --limit', () => {
    expect(cliErrorMessage(() => parseRate('9000tokens/min', undefined))).toMatch(
      /count requests.*--limit 9000tokens\/min/,
    );
  });
});

describe('--limit', () => {
  it('is window-safe by default: never more than N in any window', () => {
    expect(parseLimit('500/min')).toEqual({
      algorithm: 'token-bucket',
      limit: 450,
      intervalMs: 60_000,
      burst: 50,
      unit: 'requests',
    });
  });

  it('refuses a window shorter than 1 ms, naming the flag', () => {
    expect(() => parseLimit('5/0.5ms')).toThrow(CliError);
    expect(() => parseLimit('5/0.5ms')).toThrow(
      'Expected --limit with a window of at least 1ms, got `5/0.5ms`',
    );
    expect(() => parseLimit('5/1ms')).not.toThrow();
  });

  it('counts other units in a sliding log: one request may use up to N (a bucket capped it at N/10)', () => {
    expect(parseLimit('90000tokens/min')).toEqual({
      algorithm: 'sliding-log',
      unit: 'tokens',
      limit: 90_000,
      intervalMs: 60_000,
    });
    expect(parseLimit('90,000 tok/min')).toMatchObject({ unit: 'tokens', limit: 90_000 });
    expect(parseLimit('40points/s')).toMatchObject({ algorithm: 'sliding-log', unit: 'points', limit: 40 });
  });

  it('turns 1 per window into a leaky bucket', () => {
    expect(parseLimit('1/s')).toEqual({
      algorithm: 'leaky-bucket',
      limit: 1,
      intervalMs: 1_000,
      unit: 'requests',
    });
  });

  it('takes an explicit algorithm', () => {
    expect(parseLimit('sliding-log:20/min')).toEqual({
      algorithm: 'sliding-log',
      limit: 20,
      intervalMs: 60_000,
      unit: 'requests',
    });
    expect(cliErrorMessage(() => parseLimit('sloppy:20/min'))).toMatch(
      /--limit's algorithm to be one of .*got `sloppy`/,
    );
  });

  it('refuses junk', () => {
    expect(cliErrorMessage(() => parseLimit('lots'))).toBe(
      'Expected --limit like 500/min, 90000tokens/min or sliding-log:20/min, got `lots`',
    );
  });
});

describe('--budget', () => {
  it.each([
    ['5usd/day', { limit: { micros: 5_000_000 }, period: 'day', currency: 'usd' }],
    ['$20/month', { limit: { micros: 20_000_000 }, period: 'month', currency: 'usd' }],
    ['5/day', { limit: { micros: 5_000_000 }, period: 'day' }],
    ['0.5 EUR/week', { limit: { micros: 500_000 }, period: 'week', currency: 'eur' }],
    ['2usd/24h', { limit: { micros: 2_000_000 }, period: { rollingMs: 86_400_000 }, currency: 'usd' }],
    ['nightly=2usd/day', { limit: { micros: 2_000_000 }, period: 'day', currency: 'usd', name: 'nightly' }],
    [
      '5usd/day@Europe/Berlin',
      { limit: { micros: 5_000_000 }, period: 'day', currency: 'usd', timeZone: 'Europe/Berlin' },
    ],
  ])('reads %s', (text, spec) => {
    expect(parseBudget(text)).toEqual(spec);
  });

  it.each(['5usd', 'five/day', '5usd/fortnight', '5xyz/day', '-1usd/day', '5usd/day/extra'])(
    'refuses %s',
    (text) => {
      expect(cliErrorMessage(() => parseBudget(text))).toBe(
        `Expected --budget like 5usd/day, $20/month or daily=2usd/24h, got \`${text}\``,
      );
    },
  );

  it('refuses a time zone on a rolling window', () => {
    expect(cliErrorMessage(() => parseBudget('5usd/24h@UTC'))).toMatch(
      /time zone only with a calendar period/,
    );
  });
});

describe('other values', () => {
  it('reads durations with a unit, and inf where allowed', () => {
    expect(parseDuration('--timeout', '30s')).toBe(30_000);
    expect(parseDuration('--timeout', '500ms')).toBe(500);
    expect(parseDuration('--timeout', '1.5m')).toBe(90_000);
    expect(parseDuration('--timeout', '0')).toBe(0);
    expect(parseDuration('--max-queue-time', 'inf', { allowInfinity: true })).toBe(Number.POSITIVE_INFINITY);
    expect(cliErrorMessage(() => parseDuration('--timeout', '30'))).toBe(
      'Expected --timeout like 500ms, 30s or 2m, got `30`',
    );
    expect(cliErrorMessage(() => parseDuration('--timeout', 'inf'))).toMatch(/got `inf`/);
  });

  it.each([
    ['1.005s', 1_005],
    ['1.1s', 1_100],
    ['0.0001s', 1],
    ['1.0005s', 1_001],
    ['2.5ms', 3],
    ['0.1h', 360_000],
  ])('reads %s as whole milliseconds, a fraction rounded up', (text, ms) => {
    expect(parseDuration('--timeout', text)).toBe(ms);
  });

  it('reads on/off, integers, prices and headers', () => {
    expect(parseOnOff('--header-adapt', 'off')).toBe(false);
    expect(parseOnOff('--header-adapt', 'ON')).toBe(true);
    expect(cliErrorMessage(() => parseOnOff('--header-adapt', 'maybe'))).toBe(
      'Expected --header-adapt to be on or off, got `maybe`',
    );
    expect(parseInteger('--concurrency', '8', 1)).toBe(8);
    expect(cliErrorMessage(() => parseInteger('--concurrency', '0', 1))).toBe(
      'Expected --concurrency to be an integer >= 1, got `0`',
    );
    expect(cliErrorMessage(() => parseInteger('--concurrency', 'eight', 1))).toMatch(/got `eight`/);
    expect(parsePrice('--price', '0.002usd')).toEqual({ micros: 2_000, currency: 'usd' });
    expect(parsePrice('--price', '$0.0000001').micros).toBe(1);
    expect(cliErrorMessage(() => parsePrice('--price', 'cheap'))).toMatch(/Expected --price to be an amount/);
    expect(parseHeader('Authorization: Bearer abc:def')).toEqual(['Authorization', 'Bearer abc:def']);
    expect(cliErrorMessage(() => parseHeader('no colon'))).toMatch(/Expected --header like/);
  });
});
