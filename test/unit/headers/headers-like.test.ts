import type { IncomingHttpHeaders } from 'node:http';
import { AxiosHeaders } from 'axios';
import { describe, expect, it } from 'vitest';
import { normalizeHeaders } from '../../../src/headers/headers-like.js';
import { parseRateLimitHeaders } from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');
const waitOf = (headers: Parameters<typeof parseRateLimitHeaders>[1]) =>
  parseRateLimitHeaders(429, headers, { now }).retryAfterMs;

describe('header containers', () => {
  it('accepts a WHATWG Headers, a Map, a record, and [name, value] pairs, case-insensitively', () => {
    expect(waitOf(new Headers({ 'Retry-After': '5' }))).toBe(5000);
    expect(waitOf(new Map([['RETRY-AFTER', '5']]))).toBe(5000);
    expect(waitOf({ 'Retry-After': '5' })).toBe(5000);
    expect(waitOf([['retry-after', '5']])).toBe(5000);
    expect(waitOf(new Map([['retry-after', ['5', '9']]]))).toBe(9000);
  });

  it("accepts Node's IncomingHttpHeaders and axios' AxiosHeaders as they come", () => {
    const node: IncomingHttpHeaders = { 'retry-after': '5', 'set-cookie': ['a=1', 'b=2'] };
    expect(waitOf(node)).toBe(5000);
    const axios = new AxiosHeaders({ 'Retry-After': '6', 'X-RateLimit-Remaining': 3 });
    expect(waitOf(axios)).toBe(6000);
    expect(parseRateLimitHeaders(200, axios, { now }).policies).toEqual([
      { unit: 'requests', remaining: 3, source: 'x-ratelimit' },
    ]);
  });

  it('joins repeated lines with ", " like Headers#get()', () => {
    expect(
      normalizeHeaders([
        ['A', '1'],
        ['a', '2'],
      ]).get('a'),
    ).toBe('1, 2');
    expect(normalizeHeaders({ 'retry-after': ['30', '60'] }).get('retry-after')).toBe('30, 60');
    expect(normalizeHeaders({ A: '1', a: '2' }).get('a')).toBe('1, 2');
  });

  it('reads numbers (axios) and skips undefined, null, objects and functions', () => {
    const fields = normalizeHeaders({
      'x-ratelimit-remaining': 5,
      a: undefined,
      b: null,
      c: { toString: () => '1' } as never,
      d: (() => '1') as never,
      e: Number.NaN,
    });
    expect([...fields]).toEqual([['x-ratelimit-remaining', '5']]);
  });

  it('drops a field whose value exceeds the cap instead of truncating it', () => {
    expect(normalizeHeaders({ big: 'x'.repeat(1_000_000), ok: '1' })).toEqual(new Map([['ok', '1']]));
    const lines = Array.from({ length: 3000 }, () => '30');
    expect(normalizeHeaders({ 'retry-after': lines }).has('retry-after')).toBe(false);
  });

  it('keeps what was read from a container that throws', () => {
    function* pairs(): Generator<[string, string]> {
      yield ['retry-after', '3'];
      throw new Error('broken iterator');
    }
    expect(waitOf(pairs())).toBe(3000);
    const hostile = Object.defineProperty({ 'retry-after': '4' }, 'x', {
      enumerable: true,
      get() {
        throw new Error('getter');
      },
    });
    expect(waitOf(hostile)).toBe(4000);
  });

  it('stops reading an endless iterator', () => {
    function* endless(): Generator<[string, string]> {
      for (;;) yield ['x-junk', '1'];
    }
    const started = performance.now();
    expect(waitOf(endless())).toBeUndefined();
    expect(performance.now() - started).toBeLessThan(500);
  });

  it('ignores non-containers and malformed entries', () => {
    expect(waitOf(null as never)).toBeUndefined();
    expect(waitOf('retry-after: 5' as never)).toBeUndefined();
    expect(waitOf([['retry-after'], 'x', null, [5, '5']] as never)).toBeUndefined();
  });
});
