import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type BodyReader,
  parseDuration,
  parseHttpDate,
  parseRateLimitHeaders,
  parseRetryAfter,
  parseRfc3339Date,
  type RateLimitObservation,
  secondsToMs,
  summarize,
} from '../../../src/headers/index.js';

const numRuns = 1000;

// Every header name the tables read (one representative per pattern), plus a few lookalikes.
const headerNames = [
  'date',
  'retry-after',
  'retry-after-ms',
  'x-ms-retry-after-ms',
  'x-amz-retry-after',
  'x-retry-in',
  'x-ratelimit-retry-after',
  'ratelimit',
  'ratelimit-policy',
  'beta-ratelimit',
  'beta-ratelimit-policy',
  'x-beta-ratelimit-reset',
  'ratelimit-limit',
  'ratelimit-remaining',
  'ratelimit-reset',
  'ratelimit-observed',
  'ratelimit-name',
  'ratelimit-resettime',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
  'x-ratelimit-used',
  'x-ratelimit-reset-after',
  'x-ratelimit-policy',
  'x-ratelimit-resource',
  'x-ratelimit-bucket',
  'x-ratelimit-scope',
  'x-ratelimit-global',
  'x-rate-limit',
  'x-rate-limit-limit',
  'x-rate-limit-remaining',
  'x-rate-limit-reset',
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
  'x-ratelimit-limit-minute',
  'x-ratelimit-remaining-minute',
  'x-ratelimit-remaining-hour',
  'anthropic-ratelimit-requests-limit',
  'anthropic-ratelimit-requests-remaining',
  'anthropic-ratelimit-requests-reset',
  'anthropic-ratelimit-input-tokens-reset',
  'x-user-limit-24hour-limit',
  'x-user-limit-24hour-remaining',
  'x-app-limit-24hour-reset',
  'x-ratelimit-requests-limit',
  'x-ratelimit-requests-remaining',
  'x-ratelimit-requests-reset',
  'x-ratelimit-endpoint-name',
  'x-ratelimit-endpoint-requests-remaining',
  'x-ratelimit-complexity-reset',
  'x-sib-ratelimit-remaining',
  'x-sib-ratelimit-reset',
  'x-hubspot-ratelimit-daily',
  'x-hubspot-ratelimit-daily-remaining',
  'x-hubspot-ratelimit-max',
  'x-hubspot-ratelimit-remaining',
  'x-hubspot-ratelimit-interval-milliseconds',
  'x-ms-ratelimit-remaining-subscription-reads',
  'x-ms-ratelimit-remaining-resource',
  'x-shopify-shop-api-call-limit',
  'sforce-limit-info',
  'zendesk-ratelimit-tickets-index',
  'x-amzn-errortype',
  'x-ratelimit-limit-tokens_usage_based',
  'x-ratelimit-x-ratelimit-limit',
];

const digits = fc.stringMatching(/^\d{1,25}$/);
const numberText = fc.oneof(
  fc.integer().map(String),
  fc.double().map(String),
  fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }).map(String),
  fc.tuple(digits, digits).map(([a, b]) => `${a}.${b}`),
  fc.constantFrom(
    '-1',
    '-0',
    '0',
    '1e9',
    '1e12',
    'NaN',
    'Infinity',
    '-Infinity',
    '0x10',
    '',
    ' ',
    '1.',
    '.5',
  ),
);
const dateText = fc
  .date({ noInvalidDate: true })
  .chain((d) =>
    fc.constantFrom(d.toUTCString(), d.toISOString(), d.toString(), `${d.toISOString().slice(0, 16)}Z`),
  );
const durationText = fc
  .array(
    fc.tuple(fc.oneof(digits, numberText), fc.constantFrom('ns', 'us', 'µs', 'ms', 's', 'm', 'h', '', 'd')),
    {
      minLength: 1,
      maxLength: 4,
    },
  )
  .map((terms) => terms.map(([n, unit]) => `${n}${unit}`).join(''));
const sfToken = fc.oneof(
  fc.stringMatching(/^"[a-z0-9-]{0,8}"$/),
  fc.stringMatching(/^[a-z][a-z0-9]{0,6}$/),
  numberText,
);
const sfParam = fc.tuple(
  fc.constantFrom('r', 't', 'q', 'w', 'qu', 'pk', 'x', 'R'),
  fc.oneof(numberText, sfToken, fc.constant(':YWJj:')),
);
const sfText = fc
  .array(fc.tuple(sfToken, fc.array(sfParam, { maxLength: 4 })), { maxLength: 4 })
  .map((items) => items.map(([id, params]) => id + params.map(([k, v]) => `;${k}=${v}`).join('')).join(', '));
const listText = fc
  .array(
    fc.oneof(
      numberText,
      fc.tuple(numberText, numberText).map(([a, w]) => `${a};w=${w}`),
    ),
    {
      maxLength: 5,
    },
  )
  .map((members) => members.join(', '));
const headerValue = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary' }),
  numberText,
  dateText,
  durationText,
  sfText,
  listText,
  fc.tuple(numberText, numberText).map(([a, b]) => `${a}/${b}`),
  fc
    .tuple(fc.stringMatching(/^[a-z-]{1,10}$/), numberText, numberText)
    .map(([k, a, b]) => `${k}=${a}/${b}; total=${a}`),
);
const headerRecord = fc.dictionary(
  fc.constantFrom(...headerNames),
  fc.oneof(headerValue, fc.array(headerValue, { maxLength: 3 })),
);
// Whole windows of one family with plausible-or-broken values, so resets and lists are exercised.
const triplets: ReadonlyArray<readonly [string, string, string]> = [
  ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'],
  ['x-rate-limit-limit', 'x-rate-limit-remaining', 'x-rate-limit-reset'],
  ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'],
  ['x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-ratelimit-reset-requests'],
  [
    'anthropic-ratelimit-requests-limit',
    'anthropic-ratelimit-requests-remaining',
    'anthropic-ratelimit-requests-reset',
  ],
  ['x-ratelimit-requests-limit', 'x-ratelimit-requests-remaining', 'x-ratelimit-requests-reset'],
  ['x-user-limit-24hour-limit', 'x-user-limit-24hour-remaining', 'x-user-limit-24hour-reset'],
  ['x-sib-ratelimit-limit', 'x-sib-ratelimit-remaining', 'x-sib-ratelimit-reset'],
];
const plausibleCount = fc.oneof(fc.nat({ max: 100_000 }).map(String), listText, numberText);
const plausibleReset = fc.oneof(
  fc.nat({ max: 100_000 }).map(String),
  fc.integer({ min: 1_700_000_000, max: 1_900_000_000 }).map(String),
  fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 }).map(String),
  durationText,
  dateText,
  numberText,
  listText,
);
const coherentHeaders = fc
  .tuple(
    fc.constantFrom(...triplets),
    plausibleCount,
    plausibleCount,
    plausibleReset,
    fc.option(dateText, { nil: undefined }),
    fc.option(fc.oneof(numberText, dateText), { nil: undefined }),
    fc.option(sfText, { nil: undefined }),
    fc.option(sfText, { nil: undefined }),
  )
  .map(
    ([
      [limitName, remainingName, resetName],
      limit,
      remaining,
      reset,
      date,
      retryAfter,
      rateLimit,
      policy,
    ]) => {
      const optional = (name: string, value: string | undefined) =>
        value === undefined ? {} : { [name]: value };
      return {
        [limitName]: limit,
        [remainingName]: remaining,
        [resetName]: reset,
        ...optional('date', date),
        ...optional('retry-after', retryAfter),
        ...optional('ratelimit', rateLimit),
        ...optional('ratelimit-policy', policy),
      };
    },
  );
const anyHeaders = fc.oneof(headerRecord, coherentHeaders);
const anyNow = fc.oneof(
  fc.integer({ min: 0, max: 4_102_444_800_000 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

function expectSane(observation: RateLimitObservation): void {
  const isCount = (value: unknown) => Number.isSafeInteger(value) && (value as number) >= 0;
  if (observation.retryAfterMs !== undefined) expect(isCount(observation.retryAfterMs)).toBe(true);
  for (const policy of observation.policies) {
    for (const key of ['limit', 'remaining', 'resetMs', 'windowMs'] as const) {
      const value = policy[key];
      if (value !== undefined) expect(isCount(value), `${key} = ${value}`).toBe(true);
    }
    expect(policy.limit !== undefined || policy.remaining !== undefined).toBe(true);
    if (policy.limit !== undefined && policy.remaining !== undefined) {
      expect(policy.remaining).toBeLessThanOrEqual(policy.limit);
    }
    expect(typeof policy.unit === 'string' && policy.unit !== '').toBe(true);
    expect(typeof policy.source === 'string' && policy.source !== '').toBe(true);
  }
  for (const value of Object.values(summarize(observation))) {
    expect(value === null || isCount(value)).toBe(true);
  }
}

describe('fuzz: parseRateLimitHeaders', () => {
  it('never throws and never yields a negative, fractional, NaN or infinite number (known header names)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -1, max: 1000 }), anyHeaders, anyNow, (status, headers, now) => {
        expectSane(parseRateLimitHeaders(status, headers, { now }));
      }),
      { numRuns },
    );
  });

  it('is the same for any casing and container of the same fields', () => {
    fc.assert(
      fc.property(anyHeaders, (headers) => {
        const now = Date.parse('2026-11-30T12:00:00Z');
        const fromRecord = parseRateLimitHeaders(429, headers, { now });
        const pairs = Object.entries(headers).flatMap(([name, value]) =>
          (Array.isArray(value) ? value : [value]).map((line): [string, string] => [
            name.toUpperCase(),
            line,
          ]),
        );
        expect(parseRateLimitHeaders(429, pairs, { now })).toEqual(fromRecord);
      }),
      { numRuns },
    );
  });

  it('survives arbitrary names, values and containers', () => {
    const container = fc.oneof(
      fc.dictionary(fc.string(), fc.anything()),
      fc.array(fc.tuple(fc.string(), fc.anything())),
      fc.array(fc.anything()),
      fc.anything(),
    );
    fc.assert(
      fc.property(container, anyNow, (headers, now) => {
        expectSane(parseRateLimitHeaders(429, headers as never, { now }));
      }),
      { numRuns },
    );
  });

  it('survives arbitrary bodies, with and without headers', () => {
    const bodyValue = fc.oneof(
      fc.anything(),
      fc.jsonValue(),
      fc.record({ retry_after: fc.anything() }),
      fc.record({
        extensions: fc.record({
          cost: fc.record({
            throttleStatus: fc.record({
              maximumAvailable: fc.oneof(fc.double(), fc.integer(), fc.string()),
              currentlyAvailable: fc.oneof(fc.double(), fc.integer(), fc.string()),
              restoreRate: fc.oneof(fc.double(), fc.integer(), fc.string()),
            }),
          }),
        }),
      }),
      fc.record({
        error: fc.record({
          details: fc.array(
            fc.record({
              '@type': fc.constant('type.googleapis.com/google.rpc.RetryInfo'),
              retryDelay: fc.anything(),
            }),
          ),
        }),
      }),
      fc.record({ errorcode: fc.integer(), retryAfter: fc.anything() }),
    );
    fc.assert(
      fc.property(bodyValue, anyHeaders, anyNow, (body, headers, now) => {
        expectSane(parseRateLimitHeaders(200, headers, { now, body }));
      }),
      { numRuns },
    );
  });

  it('sanitises whatever a custom body reader returns', () => {
    fc.assert(
      fc.property(fc.anything(), (reading) => {
        const reader: BodyReader = () => reading as never;
        const readerOfPolicies: BodyReader = () => ({
          policies: [reading, reading] as never,
          retryAfterMs: reading as never,
        });
        expectSane(
          parseRateLimitHeaders(200, {}, { now: 0, body: {}, bodyReaders: [reader, readerOfPolicies] }),
        );
      }),
      { numRuns },
    );
  });
});

describe('fuzz: value parsers', () => {
  const saneOrUndefined = (value: number | undefined) =>
    value === undefined || (Number.isSafeInteger(value) && value >= 0);

  it('parseRetryAfter, parseDuration and secondsToMs return a safe non-negative integer or undefined', () => {
    fc.assert(
      fc.property(
        fc.oneof(headerValue, fc.string()),
        anyNow,
        fc.option(dateText, { nil: undefined }),
        (value, now, date) => {
          expect(saneOrUndefined(parseRetryAfter(value, now, date))).toBe(true);
          expect(saneOrUndefined(parseDuration(value))).toBe(true);
          expect(saneOrUndefined(secondsToMs(value))).toBe(true);
          const httpDate = parseHttpDate(value, now);
          expect(httpDate === undefined || Number.isFinite(httpDate)).toBe(true);
          const rfc3339 = parseRfc3339Date(value);
          expect(rfc3339 === undefined || Number.isFinite(rfc3339)).toBe(true);
        },
      ),
      { numRuns },
    );
  });

  it('converts decimal seconds exactly, rounding up (P3)', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 10n ** 12n }),
        fc.stringMatching(/^\d{0,12}$/),
        (whole, fraction) => {
          const text = fraction === '' ? `${whole}` : `${whole}.${fraction}`;
          // Independent reference: ms = ceil(whole * 1000 + fraction / 10^(len - 3)) with integers only.
          const scale = 10n ** BigInt(fraction.length);
          const numerator = (whole * scale + BigInt(fraction === '' ? '0' : fraction)) * 1000n;
          const expected = numerator / scale + (numerator % scale === 0n ? 0n : 1n);
          expect(secondsToMs(text)).toBe(Number(expected));
          expect(parseRetryAfter(text, 0)).toBe(Number(expected));
        },
      ),
      { numRuns },
    );
  });

  it('reads a Go duration built from whole ms as exactly those ms', () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 10_000 }),
        fc.nat({ max: 59 }),
        fc.nat({ max: 59 }),
        fc.nat({ max: 999 }),
        (h, m, s, ms) => {
          expect(parseDuration(`${h}h${m}m${s}s${ms}ms`)).toBe(((h * 60 + m) * 60 + s) * 1000 + ms);
        },
      ),
      { numRuns },
    );
  });

  it('round-trips every valid instant through IMF-fixdate and RFC 3339', () => {
    fc.assert(
      fc.property(
        fc.date({ min: new Date('1900-01-01'), max: new Date('9999-12-31'), noInvalidDate: true }),
        (date) => {
          const seconds = Math.floor(date.getTime() / 1000) * 1000;
          expect(parseHttpDate(date.toUTCString(), 0)).toBe(seconds);
          expect(parseRfc3339Date(date.toISOString())).toBe(date.getTime());
        },
      ),
      { numRuns },
    );
  });
});

describe('bounded work on hostile values', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');
  const shapes = (size: number) => [
    '9'.repeat(size),
    ','.repeat(size),
    ';'.repeat(size),
    '"a";r=1, '.repeat(size / 9).slice(0, size),
    'a=1/2; '.repeat(size / 7).slice(0, size),
    'Mon, '.repeat(size / 5).slice(0, size),
    '1h'.repeat(size / 2),
    `"${'x'.repeat(size - 2)}"`,
    'x'.repeat(size),
  ];

  for (const size of [100_000, 8_000]) {
    it(`parses a ${size / 1000} kB garbage value under any known name in < 50 ms`, () => {
      for (const name of headerNames) {
        for (const value of shapes(size)) {
          const started = performance.now();
          const observation = parseRateLimitHeaders(
            429,
            { [name]: value, 'x-ratelimit-remaining': '1' },
            { now },
          );
          const elapsedMs = performance.now() - started;
          expect(elapsedMs, `${name}: ${value.slice(0, 20)}...`).toBeLessThan(50);
          expectSane(observation);
        }
      }
    });
  }

  it('parses a 100 kB random value in < 50 ms (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...headerNames),
        fc.string({ minLength: 200, maxLength: 400 }),
        (name, seed) => {
          const value = seed.repeat(Math.ceil(100_000 / Math.max(seed.length, 1))).slice(0, 100_000);
          const started = performance.now();
          parseRateLimitHeaders(429, { [name]: value }, { now });
          expect(performance.now() - started).toBeLessThan(50);
        },
      ),
      { numRuns },
    );
  });
});
