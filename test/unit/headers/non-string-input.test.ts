import { describe, expect, it } from 'vitest';
import {
  parseDuration,
  parseHttpDate,
  parseRetryAfter,
  parseRfc3339Date,
  secondsToMs,
} from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');

// Callers in plain JavaScript (or with a loosely typed header bag) pass whatever they hold.
const nonStrings: ReadonlyArray<readonly [string, unknown]> = [
  ['null', null],
  ['undefined', undefined],
  ['a number', 5],
  ['zero', 0],
  ['an object whose toString is a duration', { toString: () => '5s' }],
  ['an array', ['5']],
];

describe('exported value parsers given a non-string', () => {
  it.each(nonStrings)(
    'return "not understood" (undefined) for %s, never a value or a throw',
    (_name, value) => {
      expect(parseDuration(value as string)).toBeUndefined();
      expect(parseHttpDate(value as string, now)).toBeUndefined();
      expect(parseRfc3339Date(value as string)).toBeUndefined();
      expect(parseRetryAfter(value as string, now)).toBeUndefined();
    },
  );

  it.each(nonStrings)('parseRetryAfter ignores a Date header that is %s', (_name, value) => {
    expect(parseRetryAfter('5', now, value as string)).toBe(5000);
  });

  it('secondsToMs reads JSON numbers (its documented input) and nothing else that is not text', () => {
    expect(secondsToMs(5)).toBe(5000);
    expect(secondsToMs(null as never)).toBeUndefined();
    expect(secondsToMs({ toString: () => '5' } as never)).toBeUndefined();
  });
});
