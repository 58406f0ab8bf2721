import { describe, expect, it } from 'vitest';
import {
  parseHttpDate,
  parseRateLimitHeaders,
  parseRetryAfter,
  summarize,
} from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');
const date = 'Mon, 30 Nov 2026 12:00:00 GMT';

describe('parseRetryAfter', () => {
  it.each([
    ['120', 120_000],
    ['0', 0],
    ['  120  ', 120_000],
    ['\t7\t', 7_000],
    ['2.0', 2_000],
    ['1.5', 1_500],
    ['64.57', 64_570], // 64.57 * 1000 is 64569.99999999999 in floats
    ['4.07', 4_070], // 4.07 * 1000 is 4070.0000000000005 in floats
    ['0.0001', 1], // rounds up to a whole ms, never down to "now"
    ['1796040060', 1_796_040_060_000], // a numeric Retry-After is never an epoch
    ['9007199254740', 9_007_199_254_740_000], // the largest whole-second wait that is a safe ms integer
  ])('delay-seconds %j -> %d ms', (value, expected) => {
    expect(parseRetryAfter(value, now)).toBe(expected);
  });

  it.each([
    [''],
    ['   '],
    ['-5'],
    ['+5'],
    ['-0'],
    ['120s'],
    ['1e3'],
    ['.5'],
    ['5.'],
    ['0x10'],
    ['soon'],
    ['NaN'],
    ['Infinity'],
    ['2026-11-30T12:01:00Z'], // ISO 8601 is not an HTTP-date
    ['Tue Feb 16 2021 09:02:42 GMT+0100 (Central European Standard Time)'],
    ['9007199254741'], // ms would exceed 2^53 - 1
    ['99999999999999999999999999999999'],
  ])('rejects %j', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined();
  });

  it('reads an IMF-fixdate against the Date header', () => {
    expect(parseRetryAfter('Mon, 30 Nov 2026 12:02:00 GMT', now, date)).toBe(120_000);
  });

  it('reads the obsolete RFC 850 form, with the 50-year rule for its 2-digit year', () => {
    expect(parseRetryAfter('Monday, 30-Nov-26 12:00:30 GMT', now, date)).toBe(30_000);
    // 94 is more than 50 years after 2026's century start + 26 -> 1994, long past -> 0.
    expect(parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', now, date)).toBe(0);
  });

  it('applies the RFC 850 50-year rule to the full date, not the year alone', () => {
    // now is 2026-11-30T12:00Z. 2076-12-31 is more than 50 years ahead (though 2076 - 2026 = 50):
    // it is 1976, long past.
    expect(parseRetryAfter('Thursday, 31-Dec-76 00:00:00 GMT', now)).toBe(0);
    expect(parseHttpDate('Monday, 30-Nov-76 12:00:01 GMT', now)).toBe(Date.UTC(1976, 10, 30, 12, 0, 1));
    // Exactly 50 years ahead is not more than 50: it stays in 2076.
    expect(parseHttpDate('Monday, 30-Nov-76 12:00:00 GMT', now)).toBe(Date.UTC(2076, 10, 30, 12));
    expect(parseHttpDate('Sunday, 29-Nov-76 12:00:00 GMT', now)).toBe(Date.UTC(2076, 10, 29, 12));
  });

  it('reads the asctime form with its space-padded day', () => {
    const early = Date.parse('2026-11-06T08:49:00Z');
    expect(parseRetryAfter('Fri Nov  6 08:49:37 2026', early)).toBe(37_000);
    expect(parseRetryAfter('Fri Nov 6 08:49:37 2026', early)).toBe(37_000);
  });

  it('measures an HTTP-date against the server clock, so skew cancels out', () => {
    // The server is five minutes behind the client.
    expect(parseRetryAfter('Mon, 30 Nov 2026 11:56:00 GMT', now, 'Mon, 30 Nov 2026 11:55:00 GMT')).toBe(
      60_000,
    );
  });

  it('falls back to the receive time when the Date header is not a valid HTTP-date', () => {
    expect(parseRetryAfter('Mon, 30 Nov 2026 12:00:10 GMT', now, 'yesterday')).toBe(10_000);
    expect(parseRetryAfter('Mon, 30 Nov 2026 12:00:10 GMT', now, 'Mon, 31 Nov 2026 12:00:00 GMT')).toBe(
      10_000,
    );
  });

  it('reads a date in the past as 0, not a negative wait', () => {
    expect(parseRetryAfter('Sun, 29 Nov 2026 12:00:00 GMT', now, date)).toBe(0);
  });

  it.each([
    ['Mon, 31 Feb 2026 12:00:00 GMT'],
    ['Mon, 30 Nov 2026 24:00:00 GMT'],
    ['Mon, 30 Nov 2026 12:60:00 GMT'],
    ['Mon, 30 Nov 2026 12:00:00 UTC'],
    ['Mon, 30 Foo 2026 12:00:00 GMT'],
    ['Xyz, 30 Nov 2026 12:00:00 GMT'],
    ['Mon, 30 Nov 0026 12:00:00 GMT'],
  ])('rejects the impossible date %j', (value) => {
    expect(parseRetryAfter(value, now, date)).toBeUndefined();
  });

  it('takes the maximum of comma-joined duplicates', () => {
    expect(parseRetryAfter('30, 60', now)).toBe(60_000);
    expect(parseRetryAfter('60, 30', now)).toBe(60_000);
  });

  it('does not split an HTTP-date at its own comma', () => {
    expect(parseRetryAfter('Mon, 30 Nov 2026 12:00:30 GMT, Mon, 30 Nov 2026 12:00:45 GMT', now, date)).toBe(
      45_000,
    );
    expect(parseRetryAfter('10, Mon, 30 Nov 2026 12:00:30 GMT', now, date)).toBe(30_000);
  });

  it('keeps the valid members when some duplicates are garbage', () => {
    expect(parseRetryAfter('soon, 20, -5', now)).toBe(20_000);
    expect(parseRetryAfter(', ,', now)).toBeUndefined();
  });

  it('refuses an oversized value without scanning it', () => {
    const started = performance.now();
    expect(parseRetryAfter(`${'9'.repeat(1_000_000)}`, now)).toBeUndefined();
    expect(performance.now() - started).toBeLessThan(50);
  });
});

describe('explicit retry directives in a response', () => {
  const wait = (headers: Record<string, string>, body?: unknown) =>
    parseRateLimitHeaders(429, headers, { now, body }).retryAfterMs;

  it('reads retry-after-ms, x-ms-retry-after-ms and x-amz-retry-after as milliseconds', () => {
    expect(wait({ 'retry-after-ms': '4821' })).toBe(4821);
    expect(wait({ 'x-ms-retry-after-ms': '8' })).toBe(8);
    expect(wait({ 'x-amz-retry-after': '1500' })).toBe(1500);
    expect(wait({ 'retry-after-ms': '2.5' })).toBe(3); // fractional ms round up
  });

  it('reads X-Retry-In as a Go duration', () => {
    expect(wait({ 'x-retry-in': '30s' })).toBe(30_000);
    expect(wait({ 'x-retry-in': '1m30.5s' })).toBe(90_500);
    expect(wait({ 'x-retry-in': '30' })).toBeUndefined();
  });

  it('reads X-RateLimit-Retry-After as seconds', () => {
    expect(wait({ 'x-ratelimit-retry-after': '12' })).toBe(12_000);
  });

  it('takes the maximum of several directives: never retry before any of them', () => {
    expect(wait({ 'retry-after': '5', 'retry-after-ms': '4821' })).toBe(5000);
    expect(wait({ 'retry-after': '3', 'retry-after-ms': '4821' })).toBe(4821);
    expect(wait({ 'retry-after': '65' }, { retry_after: 64.57 })).toBe(65_000);
    expect(wait({ 'retry-after': '1' }, { retry_after: 64.57 })).toBe(64_570);
  });

  it('ignores an invalid directive beside a valid one', () => {
    expect(wait({ 'retry-after': 'soon', 'retry-after-ms': '250' })).toBe(250);
    expect(wait({ 'retry-after': '10', 'retry-after-ms': '-1' })).toBe(10_000);
  });

  it('Retry-After wins over RateLimit-Reset, and both are reported', () => {
    const summary = summarize(
      parseRateLimitHeaders(
        429,
        { 'retry-after': '60', 'ratelimit-remaining': '0', 'ratelimit-reset': '30' },
        { now },
      ),
    );
    expect(summary).toEqual({ retryAfterMs: 60_000, remaining: 0, limit: null, resetMs: 30_000 });
  });

  it('never synthesises a wait from a reset', () => {
    const observation = parseRateLimitHeaders(
      403,
      { 'x-ratelimit-limit': '60', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1796040042' },
      { now },
    );
    expect(observation.retryAfterMs).toBeUndefined();
  });

  it('reads Retry-After on any status, a redirect included', () => {
    expect(parseRateLimitHeaders(301, { location: '/x', 'retry-after': '10' }, { now }).retryAfterMs).toBe(
      10_000,
    );
    expect(parseRateLimitHeaders(200, { 'retry-after': '2' }, { now }).retryAfterMs).toBe(2000);
  });

  it('reports a huge but valid Retry-After faithfully: capping is policy', () => {
    expect(wait({ 'retry-after': '31536000' })).toBe(31_536_000_000);
  });
});

describe("preferReceiveTime: a clock inside the Date header's second is the finer reference", () => {
  it('measures an epoch reset from now when now falls within the Date second, else from Date', async () => {
    const { parseRateLimitHeaders } = await import('../../../src/headers/parse-ratelimit.js');
    const headers = {
      date: 'Mon, 30 Nov 2026 12:00:00 GMT',
      'x-ratelimit-limit': '10',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': String(Date.parse('2026-11-30T12:00:01Z') / 1000),
    };
    const now = Date.parse('2026-11-30T12:00:00.600Z');
    const byDate = parseRateLimitHeaders(200, headers, { now });
    const byNow = parseRateLimitHeaders(200, headers, { now, preferReceiveTime: true });
    expect(byDate.policies[0]!.resetMs).toBe(1000);
    expect(byNow.policies[0]!.resetMs).toBe(400);
    // A clock outside the Date's second disagrees with the server: Date wins (rule P2).
    const skewed = parseRateLimitHeaders(200, headers, { now: now + 5000, preferReceiveTime: true });
    expect(skewed.policies[0]!.resetMs).toBe(1000);
  });
});
