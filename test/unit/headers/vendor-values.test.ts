import { describe, expect, it } from 'vitest';
import { parseRateLimitHeaders, summarize } from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');
const parse = (headers: Record<string, string>, status = 200) =>
  parseRateLimitHeaders(status, headers, { now });

describe('Shopify X-Shopify-Shop-Api-Call-Limit (used/limit)', () => {
  it('derives remaining = limit - used', () => {
    expect(parse({ 'x-shopify-shop-api-call-limit': '32/40' }).policies).toEqual([
      { unit: 'requests', limit: 40, remaining: 8, source: 'shopify' },
    ]);
  });

  it.each([['32'], ['32/'], ['/40'], ['-1/40'], ['32/40/50'], ['a/b'], ['32 / 40x']])(
    'ignores %j',
    (value) => {
      expect(parse({ 'x-shopify-shop-api-call-limit': value }).policies).toEqual([]);
    },
  );
});

describe('Salesforce Sforce-Limit-Info', () => {
  it('reads every name=used/limit entry, app names included', () => {
    const observation = parse({
      'sforce-limit-info': 'api-usage=25/5000; per-app-api-usage=17/250(appName=sample-connected-app)',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 5000, remaining: 4975, name: 'api-usage', source: 'salesforce' },
      {
        unit: 'requests',
        limit: 250,
        remaining: 233,
        name: 'per-app-api-usage(appName=sample-connected-app)',
        source: 'salesforce',
      },
    ]);
  });

  it('clamps remaining at 0 when usage exceeds the soft limit', () => {
    expect(summarize(parse({ 'sforce-limit-info': 'api-usage=5012/5000' }))).toEqual({
      retryAfterMs: null,
      remaining: 0,
      limit: 5000,
      resetMs: null,
    });
  });

  it('keeps the good entries of a partly garbled header', () => {
    expect(
      parse({ 'sforce-limit-info': 'junk; api-bursts=1/750; =3/4' }).policies.map((p) => p.name),
    ).toEqual(['api-bursts']);
  });
});

describe('Zendesk endpoint budgets (Zendesk-RateLimit-<endpoint>)', () => {
  it('reads total/remaining/resets and names the window after the endpoint', () => {
    expect(
      parse({ 'zendesk-ratelimit-tickets-index': 'total=100; remaining=99; resets=41' }).policies,
    ).toEqual([
      {
        unit: 'requests',
        limit: 100,
        remaining: 99,
        resetMs: 41_000,
        name: 'tickets-index',
        source: 'zendesk',
      },
    ]);
  });

  it('ignores a value without total or remaining', () => {
    expect(parse({ 'zendesk-ratelimit-tickets-index': 'resets=41' }).policies).toEqual([]);
  });
});

describe('Azure Resource Manager', () => {
  it('reads name;remaining lists and per-scope remaining headers', () => {
    const observation = parse({
      'x-ms-ratelimit-remaining-resource':
        'Microsoft.Compute/GetVMScaleSet3Min;197,Microsoft.Compute/GetVMScaleSet30Min;1297',
      'x-ms-ratelimit-remaining-subscription-reads': '11999',
    });
    expect(observation.policies.map((p) => [p.name, p.remaining, p.source])).toEqual([
      ['subscription-reads', 11999, 'azure'],
      ['Microsoft.Compute/GetVMScaleSet3Min', 197, 'azure'],
      ['Microsoft.Compute/GetVMScaleSet30Min', 1297, 'azure'],
    ]);
    expect(summarize(observation).remaining).toBe(197);
  });
});

describe('HubSpot', () => {
  it('reads the rolling window: Interval-Milliseconds is its length, never a reset', () => {
    expect(
      parse({
        'x-hubspot-ratelimit-interval-milliseconds': '10000',
        'x-hubspot-ratelimit-max': '100',
        'x-hubspot-ratelimit-remaining': '0',
      }).policies,
    ).toEqual([{ unit: 'requests', limit: 100, remaining: 0, windowMs: 10_000, source: 'hubspot' }]);
  });

  it('reads the daily and secondly pairs as named windows', () => {
    const observation = parse({
      'x-hubspot-ratelimit-daily': '250000',
      'x-hubspot-ratelimit-daily-remaining': '249000',
      'x-hubspot-ratelimit-secondly': '10',
      'x-hubspot-ratelimit-secondly-remaining': '9',
    });
    expect(observation.policies.map((p) => [p.name, p.limit, p.remaining, p.windowMs])).toEqual([
      ['daily', 250000, 249000, 86_400_000],
      ['secondly', 10, 9, 1000],
    ]);
  });
});
