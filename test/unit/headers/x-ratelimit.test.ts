import { describe, expect, it } from 'vitest';
import { parseRateLimitHeaders, summarize } from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z'); // 1796040000 s
const date = 'Mon, 30 Nov 2026 12:00:00 GMT';
const parse = (headers: Record<string, string>, options: { now?: number; status?: number } = {}) =>
  parseRateLimitHeaders(options.status ?? 200, headers, { now: options.now ?? now });
const reset = (value: string, extra: Record<string, string> = {}) =>
  summarize(
    parse({ 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '5', 'x-ratelimit-reset': value, ...extra }),
  ).resetMs;

describe('X-RateLimit-* resets (P6 magnitude, P2 clock)', () => {
  it.each([
    ['58', 58_000, 'delta seconds'],
    ['0', 0, 'delta zero'],
    ['2.5', 2_500, 'fractional delta seconds'],
    ['999999', 999_999_000, 'just under the epoch threshold (11.6 days)'],
    ['1796040060', 60_000, 'epoch seconds'],
    ['1796040060.5', 60_500, 'epoch seconds with a fraction'],
    ['1796040030000', 30_000, 'epoch milliseconds'],
    ['2026-11-30T13:00:00Z', 3_600_000, 'RFC 3339'],
    ['2026-11-30T13:00Z', 3_600_000, 'RFC 3339 minute precision'],
    ['2026-11-30T14:00:00+01:00', 3_600_000, 'RFC 3339 with an offset'],
    ['Mon, 30 Nov 2026 12:00:31 GMT', 31_000, 'IMF-fixdate'],
  ])('%j -> %d (%s)', (value, expected) => {
    expect(reset(value)).toBe(expected);
  });

  it('epoch-second reset is decided by magnitude against the Date header', () => {
    // The client clock is 10 s ahead of the server's; the server's Date is the reference.
    expect(reset('1796040060', { date })).toBe(60_000);
    const ahead = parse(
      { date, 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '5', 'x-ratelimit-reset': '1796040060' },
      { now: now + 10_000 },
    );
    expect(summarize(ahead).resetMs).toBe(60_000);
  });

  it('uses the receive time when the Date header is invalid', () => {
    expect(reset('1796040060', { date: 'not a date' })).toBe(60_000);
  });

  it('clamps a reset shortly in the past to 0 (minute-precision truncation)', () => {
    expect(reset('2026-11-30T11:59Z')).toBe(0);
    expect(reset('1796039990')).toBe(0);
  });

  it('drops a reset more than an hour before the reference clock as contradictory', () => {
    expect(reset('1796030000')).toBeNull();
    expect(reset('2026-11-29T12:00:00Z')).toBeNull();
  });

  it('drops an absurdly distant reset (over 400 days)', () => {
    expect(reset('999999999')).toBeNull(); // 31.7 years as delta seconds
    expect(reset('99999999999')).toBeNull(); // epoch seconds in year 5138
    expect(reset('9999999999999999')).toBeNull();
  });

  it.each([
    ['-30'],
    ['soon'],
    ['Tue Feb 16 2021 09:02:42 GMT+0100 (Central European Standard Time)'],
    ['1e9'],
    ['NaN'],
    [''],
  ])('drops the reset %j but keeps limit and remaining', (value) => {
    const summary = summarize(
      parse({ 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '10', 'x-ratelimit-reset': value }),
    );
    expect(summary).toEqual({ retryAfterMs: null, remaining: 10, limit: 100, resetMs: null });
  });

  it('honours a documented reset format over the magnitude rule (Prisjakt sends delta ms)', () => {
    const observation = parseRateLimitHeaders(
      200,
      { 'x-rate-limit-limit': '100', 'x-rate-limit-remaining': '1', 'x-rate-limit-reset': '600000' },
      { now, resetFormats: { 'x-rate-limit-reset': 'delta-ms' } },
    );
    expect(summarize(observation).resetMs).toBe(600_000);
  });
});

describe('X-RateLimit-* counts', () => {
  it('floors decimal counts (Reddit 599.0) and derives the limit from used + remaining', () => {
    expect(
      summarize(
        parse({ 'x-ratelimit-used': '1', 'x-ratelimit-remaining': '599.0', 'x-ratelimit-reset': '245' }),
      ),
    ).toEqual({
      retryAfterMs: null,
      remaining: 599,
      limit: 600,
      resetMs: 245_000,
    });
  });

  it('drops a window whose limit and remaining are both -1 sentinels, reset included', () => {
    expect(
      parse({ 'x-ratelimit-limit': '-1', 'x-ratelimit-remaining': '-1', 'x-ratelimit-reset': '10' }).policies,
    ).toEqual([]);
  });

  it('keeps the valid half of a window with one sentinel', () => {
    expect(parse({ 'x-ratelimit-limit': '-1', 'x-ratelimit-remaining': '7' }).policies).toEqual([
      { unit: 'requests', remaining: 7, source: 'x-ratelimit' },
    ]);
  });

  it('clamps a remaining above its limit to the limit (contradiction: trust the smaller)', () => {
    expect(parse({ 'x-ratelimit-limit': '10', 'x-ratelimit-remaining': '50' }).policies[0]?.remaining).toBe(
      10,
    );
  });

  it.each([['1e3'], ['+5'], ['5 requests'], ['0x10'], ['Infinity'], ['9007199254740993']])(
    'drops the count %j',
    (value) => {
      expect(parse({ 'x-ratelimit-remaining': value }).policies).toEqual([]);
    },
  );

  it('zips parallel lists of the same length (Brave), window lengths from X-RateLimit-Policy', () => {
    const observation = parse({
      'x-ratelimit-limit': '1, 15000',
      'x-ratelimit-remaining': '1, 0',
      'x-ratelimit-reset': '1, 1419704',
      'x-ratelimit-policy': '1;w=1, 15000;w=2592000',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 1, remaining: 1, resetMs: 1000, windowMs: 1000, source: 'x-ratelimit' },
      {
        unit: 'requests',
        limit: 15000,
        remaining: 0,
        resetMs: 1_419_704_000,
        windowMs: 2_592_000_000,
        source: 'x-ratelimit',
      },
    ]);
    expect(summarize(observation).limit).toBe(15000);
  });

  it('drops resets of zipped lists when their count does not match', () => {
    const observation = parse({
      'x-ratelimit-limit': '1, 15000',
      'x-ratelimit-remaining': '1, 0',
      'x-ratelimit-reset': '5',
    });
    expect(observation.policies.map((p) => p.resetMs)).toEqual([undefined, undefined]);
  });

  it('binds the lowest of duplicated Remaining lines beside one Limit, with its own reset (P9)', () => {
    // Two field lines each, comma-joined as `Headers#get()` joins them; one Limit cannot be zipped.
    const summary = (remaining: string, resetValue: string) =>
      summarize(
        parse({
          'x-ratelimit-limit': '10',
          'x-ratelimit-remaining': remaining,
          'x-ratelimit-reset': resetValue,
        }),
      );
    expect(summary('5, 0', '30, 60')).toEqual({
      retryAfterMs: null,
      remaining: 0,
      limit: 10,
      resetMs: 60_000,
    });
    expect(summary('0, 5', '30, 60')).toEqual({
      retryAfterMs: null,
      remaining: 0,
      limit: 10,
      resetMs: 30_000,
    });
    // A tie binds the later reset, as between windows.
    expect(summary('0, 0', '30, 60').resetMs).toBe(60_000);
  });

  it('takes the latest reset when the resets do not pair with the Remaining members (the safe side)', () => {
    const summary = (remaining: string, resetValue: string) =>
      summarize(
        parse({
          'x-ratelimit-limit': '10',
          'x-ratelimit-remaining': remaining,
          'x-ratelimit-reset': resetValue,
        }),
      );
    expect(summary('5, 0', '30')).toEqual({ retryAfterMs: null, remaining: 0, limit: 10, resetMs: 30_000 });
    expect(summary('5, 0, 7', '60, 30')).toEqual({
      retryAfterMs: null,
      remaining: 0,
      limit: 10,
      resetMs: 60_000,
    });
    expect(summary('3', '30, 60, soon')).toEqual({
      retryAfterMs: null,
      remaining: 3,
      limit: 10,
      resetMs: 60_000,
    });
  });

  it('takes the first bare item of an expiring-limit + policies list (WHOOP, polli-00 window=)', () => {
    const [policy] = parse({
      'x-ratelimit-limit': '100, 100;window=60, 10000;window=86400',
      'x-ratelimit-remaining': '98',
      'x-ratelimit-reset': '3',
    }).policies;
    expect(policy).toEqual({
      unit: 'requests',
      limit: 100,
      remaining: 98,
      resetMs: 3000,
      windowMs: 60_000,
      source: 'x-ratelimit',
    });
  });
});

describe('X-RateLimit-* vendors', () => {
  it('names GitHub windows by resource and derives remaining from limit - used', () => {
    const observation = parse({
      'x-ratelimit-limit': '30',
      'x-ratelimit-used': '16',
      'x-ratelimit-reset': '1796040031',
      'x-ratelimit-resource': 'search',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 30, remaining: 14, resetMs: 31_000, name: 'search', source: 'github' },
    ]);
  });

  it('prefers Discord Reset-After (delta) over Reset (absolute) for the same bucket (P8)', () => {
    const observation = parse({
      'x-ratelimit-limit': '10',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': '1796040999',
      'x-ratelimit-reset-after': '64.57',
      'x-ratelimit-bucket': 'abcd1234',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 10, remaining: 0, resetMs: 64_570, name: 'abcd1234', source: 'discord' },
    ]);
  });

  it('falls back to the absolute reset when Reset-After is garbage', () => {
    const [policy] = parse({
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': '1796040010',
      'x-ratelimit-reset-after': 'x',
    }).policies;
    expect(policy?.resetMs).toBe(10_000);
  });

  it('marks a Discord global limit as throttled', () => {
    expect(parse({ 'x-ratelimit-global': 'true' }).throttled).toBe(true);
    expect(parse({ 'x-ratelimit-global': 'false' }).throttled).toBeUndefined();
  });

  it('uses X-RateLimit-Scope as the name when nothing better names the window (SCAYLE)', () => {
    const [policy] = parse({
      'x-ratelimit-scope': 'ordersRead',
      'x-ratelimit-limit': '300',
      'x-ratelimit-remaining': '299',
    }).policies;
    expect(policy?.name).toBe('ordersRead');
  });

  it('reads the X-Rate-Limit-* spelling (Okta, X) and Zendesk bare X-Rate-Limit as the limit', () => {
    expect(
      summarize(
        parse({
          'x-rate-limit-limit': '600',
          'x-rate-limit-remaining': '0',
          'x-rate-limit-reset': '1796040042',
        }),
      ),
    ).toEqual({ retryAfterMs: null, remaining: 0, limit: 600, resetMs: 42_000 });
    expect(summarize(parse({ 'x-rate-limit': '700', 'x-rate-limit-remaining': '699' }))).toEqual({
      retryAfterMs: null,
      remaining: 699,
      limit: 700,
      resetMs: null,
    });
  });

  it('reads X per-user and per-app 24-hour windows beside the 15-minute one', () => {
    const observation = parse({
      'x-rate-limit-limit': '100',
      'x-rate-limit-remaining': '99',
      'x-rate-limit-reset': '1796040900',
      'x-user-limit-24hour-limit': '17',
      'x-user-limit-24hour-remaining': '0',
      'x-user-limit-24hour-reset': '1796083200',
    });
    expect(observation.policies[1]).toEqual({
      unit: 'requests',
      limit: 17,
      remaining: 0,
      resetMs: 43_200_000,
      windowMs: 86_400_000,
      name: 'user',
      source: 'x',
    });
  });

  it('reads Kong window suffixes as windows, not units', () => {
    const observation = parse({
      'x-ratelimit-limit-minute': '5',
      'x-ratelimit-remaining-minute': '4',
      'x-ratelimit-limit-hour': '100',
      'x-ratelimit-remaining-hour': '40',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 5, remaining: 4, windowMs: 60_000, name: 'minute', source: 'kong' },
      { unit: 'requests', limit: 100, remaining: 40, windowMs: 3_600_000, name: 'hour', source: 'kong' },
    ]);
  });

  it('reads Linear unit infixes: requests windows bind, complexity is another unit', () => {
    const observation = parse({
      'x-ratelimit-requests-limit': '2500',
      'x-ratelimit-requests-remaining': '2400',
      'x-ratelimit-requests-reset': '1796041800000',
      'x-ratelimit-endpoint-name': 'issueCreate',
      'x-ratelimit-endpoint-requests-limit': '20',
      'x-ratelimit-endpoint-requests-remaining': '0',
      'x-ratelimit-endpoint-requests-reset': '1796040045000',
      'x-ratelimit-complexity-limit': '3000000',
      'x-ratelimit-complexity-remaining': '0',
    });
    expect(observation.policies.map((p) => [p.unit, p.name, p.remaining])).toEqual([
      ['requests', undefined, 2400],
      ['requests', 'issueCreate', 0],
      ['complexity', undefined, 0],
    ]);
    expect(summarize(observation)).toEqual({ retryAfterMs: null, remaining: 0, limit: 20, resetMs: 45_000 });
  });

  it('reads Brevo x-sib-ratelimit-reset as seconds', () => {
    expect(
      summarize(
        parse({
          'x-sib-ratelimit-limit': '10',
          'x-sib-ratelimit-remaining': '2',
          'x-sib-ratelimit-reset': '3',
        }),
      ),
    ).toEqual({ retryAfterMs: null, remaining: 2, limit: 10, resetMs: 3000 });
  });

  it('reads a unit infix named like an Object.prototype key as that unit', () => {
    // `constructor` must not resolve to Object.prototype.constructor through the alias table.
    expect(
      parse({ 'x-ratelimit-constructor-remaining': '0', 'x-ratelimit-constructor-reset': '3600' }).policies,
    ).toEqual([{ unit: 'constructor', remaining: 0, resetMs: 3_600_000, source: 'x-ratelimit' }]);
  });

  it('ignores OpenAI *_usage_based variants', () => {
    expect(
      parse({ 'x-ratelimit-limit-tokens_usage_based': '1', 'x-ratelimit-remaining-tokens_usage_based': '0' })
        .policies,
    ).toEqual([]);
  });
});
