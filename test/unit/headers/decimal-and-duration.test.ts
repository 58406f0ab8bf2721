import { describe, expect, it } from 'vitest';
import {
  decimalFromNumber,
  floorToInteger,
  parseDecimal,
  scaleCeil,
  secondsToMs,
} from '../../../src/headers/decimal.js';
import { parseDuration } from '../../../src/headers/index.js';

describe('exact decimals (P3)', () => {
  it.each([
    ['64.57', 64_570],
    ['4.07', 4_070],
    ['0.001', 1],
    ['0.0011', 2],
    ['1470173023.123', 1_470_173_023_123],
    ['57.238747106', 57_239],
    ['0', 0],
    ['000.000', 0],
  ])('%s s -> %d ms, rounded up exactly', (text, expected) => {
    expect(secondsToMs(text)).toBe(expected);
  });

  it('reads JSON numbers by the text the server wrote', () => {
    expect(secondsToMs(64.57)).toBe(64_570);
    expect(secondsToMs(4.07)).toBe(4_070);
    expect(secondsToMs(1e-7)).toBe(1);
    expect(decimalFromNumber(1e21)).toEqual({ units: 10n ** 21n, scale: 0 });
    expect(decimalFromNumber(1.5e-7)).toEqual({ units: 15n, scale: 8 });
  });

  it.each([['-1'], ['1e3'], ['.5'], ['1.'], ['+1'], ['1,5'], [''], ['1 2'], ['9'.repeat(60)]])(
    'rejects %j',
    (text) => {
      expect(secondsToMs(text)).toBeUndefined();
    },
  );

  it('rejects non-finite numbers and unsafe results', () => {
    expect(secondsToMs(Number.NaN)).toBeUndefined();
    expect(secondsToMs(Number.POSITIVE_INFINITY)).toBeUndefined();
    expect(secondsToMs(-0.5)).toBeUndefined();
    expect(secondsToMs(1e300)).toBeUndefined();
  });

  it('trims optional whitespace (SP, HTAB) around a header value', () => {
    expect(secondsToMs(' 1\t')).toBe(1000);
  });

  it('floors counts and ceils durations', () => {
    const value = parseDecimal('599.9');
    expect(value).toBeDefined();
    if (value === undefined) return;
    expect(floorToInteger(value)).toBe(599);
    expect(scaleCeil(value, 1n)).toBe(600);
  });
});

describe('parseDuration (Go and protobuf durations, P7)', () => {
  it.each([
    ['0', 0],
    ['0s', 0],
    ['1s', 1_000],
    ['6m0s', 360_000],
    ['12ms', 12], // one unit, not 12 minutes
    ['20ms', 20],
    ['2.196s', 2_196],
    ['1.5s', 1_500],
    ['1m30.5s', 90_500],
    ['1h2m3s', 3_723_000],
    ['1500us', 2],
    ['1500µs', 2],
    ['999999ns', 1],
    ['1ns', 1],
    ['57.238747106s', 57_239],
    ['4.07s', 4_070],
    ['  9ms  ', 9],
  ])('%j -> %d ms', (text, expected) => {
    expect(parseDuration(text)).toBe(expected);
  });

  it.each([
    ['6m0'],
    ['12'],
    [''],
    ['-1s'],
    ['+1s'],
    ['1.s'],
    ['.5s'],
    ['1d'],
    ['s'],
    ['1 s'],
    ['1sms'],
    ['1s '.repeat(40)],
  ])('rejects %j', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });
});
