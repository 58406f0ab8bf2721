import { describe, expect, it } from 'vitest';
import { parseRateLimitHeaders, summarize } from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');
const parse = (headers: Record<string, string>, status = 200) =>
  parseRateLimitHeaders(status, headers, { now });

describe('OpenAI x-ratelimit-{limit,remaining,reset}-{requests,tokens}', () => {
  it('reads resets as Go durations and reports requests and tokens as separate units', () => {
    const observation = parse({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-limit-tokens': '150000',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-remaining-tokens': '149984',
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-reset-tokens': '6m0s',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 60, remaining: 59, resetMs: 1000, source: 'openai' },
      { unit: 'tokens', limit: 150000, remaining: 149984, resetMs: 360_000, source: 'openai' },
    ]);
  });

  it('binds the requests window even when tokens are nearly exhausted', () => {
    const observation = parse({
      'x-ratelimit-limit-requests': '500',
      'x-ratelimit-remaining-requests': '499',
      'x-ratelimit-reset-requests': '120ms',
      'x-ratelimit-limit-tokens': '30000',
      'x-ratelimit-remaining-tokens': '123',
      'x-ratelimit-reset-tokens': '2.196s',
    });
    expect(summarize(observation)).toEqual({ retryAfterMs: null, remaining: 499, limit: 500, resetMs: 120 });
  });

  it('reads 12ms as twelve milliseconds, never twelve minutes', () => {
    expect(
      summarize(parse({ 'x-ratelimit-remaining-requests': '1', 'x-ratelimit-reset-requests': '12ms' }))
        .resetMs,
    ).toBe(12);
  });

  it.each([['6m0'], ['12'], ['-1s'], ['1d'], ['soon']])(
    'drops the malformed duration %j, keeping the counts',
    (value) => {
      expect(
        summarize(
          parse({
            'x-ratelimit-limit-requests': '60',
            'x-ratelimit-remaining-requests': '59',
            'x-ratelimit-reset-requests': value,
          }),
        ),
      ).toEqual({ retryAfterMs: null, remaining: 59, limit: 60, resetMs: null });
    },
  );

  it('drops Azure OpenAI -1 sentinels with their reset', () => {
    expect(
      parse({
        'x-ratelimit-limit-requests': '-1',
        'x-ratelimit-remaining-requests': '-1',
        'x-ratelimit-reset-requests': '0s',
      }).policies,
    ).toEqual([]);
  });
});

describe('Anthropic anthropic-ratelimit-*', () => {
  const date = 'Mon, 30 Nov 2026 12:00:00 GMT';

  it('reads RFC 3339 resets against the Date header, for each of the four units', () => {
    const observation = parseRateLimitHeaders(
      200,
      {
        date,
        'anthropic-ratelimit-requests-limit': '50',
        'anthropic-ratelimit-requests-remaining': '49',
        'anthropic-ratelimit-requests-reset': '2026-11-30T12:00:01Z',
        'anthropic-ratelimit-tokens-limit': '38000',
        'anthropic-ratelimit-tokens-remaining': '37000',
        'anthropic-ratelimit-tokens-reset': '2026-11-30T12:00:02.5Z',
        'anthropic-ratelimit-input-tokens-limit': '30000',
        'anthropic-ratelimit-input-tokens-remaining': '29000',
        'anthropic-ratelimit-input-tokens-reset': '2026-11-30T12:00:03Z',
        'anthropic-ratelimit-output-tokens-limit': '8000',
        'anthropic-ratelimit-output-tokens-remaining': '8000',
        'anthropic-ratelimit-output-tokens-reset': '2026-11-30T12:00:04Z',
      },
      { now: now + 700 },
    );
    expect(observation.policies.map((p) => [p.unit, p.resetMs])).toEqual([
      ['requests', 1000],
      ['tokens', 2500],
      ['input-tokens', 3000],
      ['output-tokens', 4000],
    ]);
  });

  it('clamps a reset one second before Date to 0', () => {
    const [policy] = parseRateLimitHeaders(
      200,
      {
        date,
        'anthropic-ratelimit-requests-remaining': '0',
        'anthropic-ratelimit-requests-reset': '2026-11-30T11:59:59Z',
      },
      { now },
    ).policies;
    expect(policy?.resetMs).toBe(0);
  });

  it.each([
    ['2026-11-30T12:01:00Z', 60_000],
    ['Mon, 30 Nov 2026 12:01:00 GMT', 60_000], // an HTTP-date is a date too
    ['2026-11-30T12:00:60Z', 60_000], // a leap second is the next instant
    ['1796040060', undefined], // a number is not a date
    ['2026-02-30T12:00:00Z', undefined],
    ['2026-11-30 12:00', undefined], // no zone names no instant
    ['2026-11-30T12:00:00+24:00', undefined],
  ])('reads only dates as resets: %j -> %s', (value, expected) => {
    const [policy] = parse({
      'anthropic-ratelimit-requests-remaining': '3',
      'anthropic-ratelimit-requests-reset': value,
    }).policies;
    expect(policy?.resetMs).toBe(expected);
  });
});
