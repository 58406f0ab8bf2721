import { describe, expect, it } from 'vitest';
import { bindingPolicy, type RateLimitPolicy, summarize } from '../../../src/headers/index.js';

const window = (fields: Partial<RateLimitPolicy>): RateLimitPolicy => ({
  unit: 'requests',
  source: 'test',
  ...fields,
});

describe('bindingPolicy (P9)', () => {
  it('picks the lowest remaining among request windows', () => {
    const policies = [
      window({ remaining: 10, name: 'a' }),
      window({ remaining: 2, name: 'b' }),
      window({ remaining: 5, name: 'c' }),
    ];
    expect(bindingPolicy({ policies })?.name).toBe('b');
  });

  it('ignores other units while a request window exists', () => {
    const policies = [window({ unit: 'tokens', remaining: 0 }), window({ remaining: 45, name: 'requests' })];
    expect(bindingPolicy({ policies })?.name).toBe('requests');
  });

  it('falls back to other units when there is no request window', () => {
    const policies = [
      window({ unit: 'points', remaining: 118, name: 'cost' }),
      window({ unit: 'tokens', remaining: 900 }),
    ];
    expect(bindingPolicy({ policies })?.name).toBe('cost');
  });

  it('breaks ties by the later known reset', () => {
    const policies = [
      window({ remaining: 0, resetMs: 1000, name: 'short' }),
      window({ remaining: 0, name: 'unknown' }),
      window({ remaining: 0, resetMs: 60_000, name: 'long' }),
    ];
    expect(bindingPolicy({ policies })?.name).toBe('long');
  });

  it('prefers a window that states its remaining over one that does not', () => {
    const policies = [
      window({ limit: 100, resetMs: 1000, name: 'no-remaining' }),
      window({ remaining: 99, name: 'stated' }),
    ];
    expect(bindingPolicy({ policies })?.name).toBe('stated');
  });

  it('returns undefined and an all-null summary for no windows', () => {
    expect(bindingPolicy({ policies: [] })).toBeUndefined();
    expect(summarize({ policies: [] })).toEqual({
      retryAfterMs: null,
      remaining: null,
      limit: null,
      resetMs: null,
    });
  });

  it('takes limit and reset from the binding window only', () => {
    const policies = [
      window({ remaining: 5, limit: 10 }),
      window({ remaining: 50, limit: 100, resetMs: 3000 }),
    ];
    expect(summarize({ retryAfterMs: 0, policies })).toEqual({
      retryAfterMs: 0,
      remaining: 5,
      limit: 10,
      resetMs: null,
    });
  });
});
