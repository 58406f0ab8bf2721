import { describe, expect, it } from 'vitest';
import { type BodyReader, parseRateLimitHeaders, summarize } from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');
const parse = (body: unknown, status = 429, options: { bodyReaders?: readonly BodyReader[] } = {}) =>
  parseRateLimitHeaders(status, {}, { now, body, ...options });

describe('Discord body retry_after', () => {
  it('reads float seconds exactly (64.57 s = 64570 ms, not 64569)', () => {
    expect(
      parse({ message: 'You are being rate limited.', retry_after: 64.57, global: false }).retryAfterMs,
    ).toBe(64_570);
  });

  it.each([[-1], [Number.NaN], ['soon'], [null], [{}], [1e300]])('ignores retry_after %j', (value) => {
    expect(parse({ retry_after: value }).retryAfterMs).toBeUndefined();
  });

  it('does not read retry_after from a nested object or an inherited property', () => {
    expect(parse({ data: { retry_after: 5 } }).retryAfterMs).toBeUndefined();
    expect(parse(Object.create({ retry_after: 5 })).retryAfterMs).toBeUndefined();
  });
});

describe('Google RetryInfo.retryDelay', () => {
  const google = (retryDelay: unknown) => ({
    error: {
      code: 429,
      status: 'RESOURCE_EXHAUSTED',
      details: [
        { '@type': 'type.googleapis.com/google.rpc.QuotaFailure', violations: [] },
        { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay },
      ],
    },
  });

  it.each([
    ['4.07s', 4_070],
    ['57.238747106s', 57_239],
    ['42s', 42_000],
    ['0s', 0],
  ])('reads the Duration %j exactly', (value, expected) => {
    expect(parse(google(value)).retryAfterMs).toBe(expected);
  });

  it('reads the {seconds, nanos} object form', () => {
    expect(parse(google({ seconds: '57', nanos: 238747106 })).retryAfterMs).toBe(57_239);
    expect(parse(google({ seconds: 4 })).retryAfterMs).toBe(4_000);
  });

  it.each([['-4s'], ['4'], ['4.07'], [4.07], [{ seconds: -1 }], [{ seconds: 1, nanos: 1e9 }]])(
    'ignores the malformed retryDelay %j',
    (value) => {
      expect(parse(google(value)).retryAfterMs).toBeUndefined();
    },
  );

  it('has no wait when only a Help detail is given, but is still throttled', () => {
    const observation = parse(
      { error: { code: 429, status: 'RESOURCE_EXHAUSTED', details: [{ '@type': 'x.Help' }] } },
      200,
    );
    expect(observation).toEqual({ policies: [], throttled: true });
  });
});

describe('Salesforce Marketing Cloud body retryAfter', () => {
  it('reads retryAfter seconds when the numeric errorcode marks the shape', () => {
    expect(parse({ errorcode: 50100, retryAfter: 5, message: 'Too many requests' }).retryAfterMs).toBe(5000);
  });

  it('ignores a bare retryAfter key from another API', () => {
    expect(parse({ retryAfter: 5 }).retryAfterMs).toBeUndefined();
  });
});

describe('Shopify GraphQL cost bucket', () => {
  it('reports cost points, reset = full refill (maximum - available) / restoreRate, computed exactly', () => {
    const observation = parse(
      {
        errors: [{ message: 'Throttled' }],
        extensions: {
          cost: {
            requestedQueryCost: 202,
            actualQueryCost: null,
            throttleStatus: { maximumAvailable: 1000.0, currentlyAvailable: 118, restoreRate: 50.0 },
          },
        },
      },
      200,
    );
    expect(observation).toEqual({
      policies: [
        {
          unit: 'points',
          limit: 1000,
          remaining: 118,
          resetMs: 17_640,
          name: 'graphql-cost',
          source: 'shopify-graphql',
        },
      ],
      throttled: true,
    });
  });

  it('rounds a fractional refill up and survives float-unfriendly rates', () => {
    const [policy] = parse(
      {
        extensions: {
          cost: { throttleStatus: { maximumAvailable: 100, currentlyAvailable: 99.9, restoreRate: 0.3 } },
        },
      },
      200,
    ).policies;
    // 0.1 / 0.3 s = 333.33... ms -> 334
    expect(policy?.resetMs).toBe(334);
    expect(policy?.remaining).toBe(99);
  });

  it('gives no reset for a zero or negative restore rate, rather than an infinite one', () => {
    for (const restoreRate of [0, -50, 'fast']) {
      const [policy] = parse(
        {
          extensions: {
            cost: { throttleStatus: { maximumAvailable: 100, currentlyAvailable: 0, restoreRate } },
          },
        },
        200,
      ).policies;
      expect(policy?.resetMs).toBeUndefined();
      expect(policy?.remaining).toBe(0);
    }
  });

  it('is a request window only when no request window exists (P9)', () => {
    const observation = parseRateLimitHeaders(
      200,
      { 'x-shopify-shop-api-call-limit': '10/40' },
      {
        now,
        body: {
          extensions: {
            cost: { throttleStatus: { maximumAvailable: 1000, currentlyAvailable: 0, restoreRate: 50 } },
          },
        },
      },
    );
    expect(summarize(observation).remaining).toBe(30);
  });
});

describe('throttling markers in bodies (P13)', () => {
  it.each([
    [
      'Linear RATELIMITED on 400',
      400,
      { errors: [{ message: 'x', extensions: { code: 'RATELIMITED', statusCode: 429 } }] },
    ],
    ['Shopify THROTTLED on 200', 200, { errors: [{ message: 'x', extensions: { code: 'THROTTLED' } }] }],
    ['GitHub GraphQL RATE_LIMITED', 200, { errors: [{ type: 'RATE_LIMITED', message: 'x' }] }],
    ['GitHub secondary limit on 403', 403, { message: 'You have exceeded a secondary rate limit.' }],
    [
      'Salesforce REQUEST_LIMIT_EXCEEDED on 403',
      403,
      [{ message: 'x', errorCode: 'REQUEST_LIMIT_EXCEEDED' }],
    ],
    [
      'AWS DynamoDB on 400',
      400,
      { __type: 'com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException' },
    ],
    ['Notion on 529', 529, { object: 'error', status: 429, code: 'rate_limited' }],
    ['Anthropic', 200, { type: 'error', error: { type: 'rate_limit_error', message: 'x' } }],
  ])('marks %s as throttled', (_name, status, body) => {
    expect(parse(body, status).throttled).toBe(true);
  });

  it.each([
    ['a normal GraphQL response', { data: { ok: true } }],
    ['another AWS error', { __type: 'com.amazonaws#ValidationException' }],
    ['a string body', 'max rate reached: retry-in 30s'],
    ['null', null],
    ['a number', 42],
  ])('does not mark %s', (_name, body) => {
    expect(parse(body, 200).throttled).toBeUndefined();
  });

  it.each([[422], [400], [200], [500]])(
    'does not read a message that merely mentions a rate limit as throttling on %d',
    (status) => {
      expect(parse({ message: 'rate limit must be a positive integer' }, status).throttled).toBeUndefined();
    },
  );

  it('reads the GitHub rate-limit message on the statuses GitHub throttles with', () => {
    expect(parse({ message: 'API rate limit exceeded for 203.0.113.7.' }, 403).throttled).toBe(true);
    expect(parse({ message: 'You have exceeded a secondary rate limit.' }, 429).throttled).toBe(true);
  });

  it('marks status 429 and AWS x-amzn-ErrorType throttling codes', () => {
    expect(parseRateLimitHeaders(429, {}, { now }).throttled).toBe(true);
    expect(
      parseRateLimitHeaders(
        400,
        { 'x-amzn-errortype': 'ThrottlingException:http://internal.amazon.com/' },
        { now },
      ).throttled,
    ).toBe(true);
    expect(
      parseRateLimitHeaders(400, { 'x-amzn-errortype': 'ValidationException' }, { now }).throttled,
    ).toBeUndefined();
  });
});

describe('custom body readers', () => {
  it('runs after the defaults and merges like the built-ins: max wait, appended windows', () => {
    const telegram: BodyReader = (body) => {
      const seconds = (body as { parameters?: { retry_after?: unknown } })?.parameters?.retry_after;
      return typeof seconds === 'number' ? { retryAfterMs: seconds * 1000, throttled: true } : undefined;
    };
    const quota: BodyReader = (_body, context) => ({
      policies: [
        { unit: 'requests', limit: 10, remaining: 3, resetMs: context.referenceMs - now, source: 'acme' },
      ],
    });
    const observation = parseRateLimitHeaders(
      400,
      { 'retry-after': '2', date: 'Mon, 30 Nov 2026 12:00:05 GMT' },
      { now, body: { ok: false, parameters: { retry_after: 7 } }, bodyReaders: [telegram, quota] },
    );
    expect(observation).toEqual({
      retryAfterMs: 7000,
      policies: [{ unit: 'requests', limit: 10, remaining: 3, resetMs: 5000, source: 'acme' }],
      throttled: true,
    });
  });

  it('sanitises what a reader returns and survives a reader that throws', () => {
    const broken: BodyReader = () => {
      throw new Error('boom');
    };
    const wild: BodyReader = () =>
      ({
        retryAfterMs: Number.NaN,
        policies: [
          { unit: 'requests', remaining: -1, limit: Number.POSITIVE_INFINITY, source: 'wild' },
          { unit: '', remaining: 5.2, limit: 3, resetMs: -10, windowMs: 1e300, source: 7 },
          null,
          'nope',
        ],
      }) as never;
    const observation = parseRateLimitHeaders(429, {}, { now, body: {}, bodyReaders: [broken, wild] });
    expect(observation).toEqual({
      policies: [{ unit: 'requests', limit: 3, remaining: 3, source: 'custom' }],
      throttled: true,
    });
  });

  it('floors counts and rounds durations up, as for headers', () => {
    const fractional: BodyReader = () => ({
      retryAfterMs: 1.2,
      policies: [{ unit: 'requests', limit: 10.9, remaining: 5.9, resetMs: 0.1, source: 'acme' }],
    });
    expect(parseRateLimitHeaders(200, {}, { now, body: {}, bodyReaders: [fractional] })).toEqual({
      retryAfterMs: 2,
      policies: [{ unit: 'requests', limit: 10, remaining: 5, resetMs: 1, source: 'acme' }],
    });
  });

  it('is misuse to pass readers that are not functions', () => {
    expect(() => parseRateLimitHeaders(200, {}, { now, bodyReaders: ['x' as never] })).toThrow(/bodyReaders/);
  });

  it('does not run body readers when there is no body', () => {
    let calls = 0;
    const counting: BodyReader = () => {
      calls++;
      return undefined;
    };
    parseRateLimitHeaders(200, {}, { now, bodyReaders: [counting] });
    expect(calls).toBe(0);
  });
});
