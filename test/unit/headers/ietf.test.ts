import { describe, expect, it } from 'vitest';
import { parseRateLimitHeaders, summarize } from '../../../src/headers/index.js';

const now = Date.parse('2026-11-30T12:00:00.000Z');
const parse = (headers: Record<string, string>, status = 200) =>
  parseRateLimitHeaders(status, headers, { now });

describe('IETF draft-08+ structured lists (RateLimit + RateLimit-Policy)', () => {
  it('takes the limit from the policy with the same id', () => {
    expect(parse({ ratelimit: '"p";r=50;t=30', 'ratelimit-policy': '"p";q=100;w=60' }).policies).toEqual([
      {
        unit: 'requests',
        limit: 100,
        remaining: 50,
        resetMs: 30_000,
        windowMs: 60_000,
        name: 'p',
        source: 'ietf-structured',
      },
    ]);
  });

  it('never falls back to "the only policy" when ids differ', () => {
    const [policy] = parse({
      ratelimit: '"default";r=50;t=30',
      'ratelimit-policy': '"burst";q=100;w=60',
    }).policies;
    expect(policy?.limit).toBeUndefined();
    expect(policy?.remaining).toBe(50);
  });

  it('reports every item of a multi-policy list and binds the lowest r', () => {
    const observation = parse({
      'ratelimit-policy': '"permin";q=50;w=60,"perhr";q=1000;w=3600',
      ratelimit: '"permin";r=5;t=12, "perhr";r=300;t=1800',
    });
    expect(observation.policies).toHaveLength(2);
    expect(summarize(observation)).toEqual({ retryAfterMs: null, remaining: 5, limit: 50, resetMs: 12_000 });
  });

  it('joins split field lines before parsing the list', () => {
    const headers = new Headers();
    headers.append('RateLimit', '"a";r=9;t=1');
    headers.append('RateLimit', '"b";r=3;t=2');
    const observation = parseRateLimitHeaders(200, headers, { now });
    expect(observation.policies.map((p) => p.name)).toEqual(['a', 'b']);
  });

  it('tolerates spaces after ";", Token ids, a missing r and lenient base64 in pk', () => {
    const observation = parse({
      'ratelimit-policy': '"100-in-15min"; q=100; w=900; pk=:sdfjLJUOUH==:',
      ratelimit: '"100-in-15min"; r=99; t=600; pk=:sdfjLJUOUH==:',
    });
    expect(summarize(observation)).toEqual({
      retryAfterMs: null,
      remaining: 99,
      limit: 100,
      resetMs: 600_000,
    });
    const tokens = parse({ 'ratelimit-policy': 'quota;q=100;w=1', ratelimit: 'quota;t=1' });
    expect(tokens.policies).toEqual([
      {
        unit: 'requests',
        limit: 100,
        resetMs: 1000,
        windowMs: 1000,
        name: 'quota',
        source: 'ietf-structured',
      },
    ]);
  });

  it('reads the quota unit from qu, so content-bytes windows do not bind while a request window exists', () => {
    const observation = parse({
      'ratelimit-policy': '"bytes";q=1000;qu="content-bytes";w=60, "req";q=10;w=60',
      ratelimit: '"bytes";r=0;t=60, "req";r=7;t=60',
    });
    expect(observation.policies.map((p) => p.unit)).toEqual(['content-bytes', 'requests']);
    expect(summarize(observation).remaining).toBe(7);
  });

  it('treats unknown parameters as comments', () => {
    expect(summarize(parse({ ratelimit: '"p";r=5;t=10;acme-burst=3;x="y"' })).remaining).toBe(5);
  });

  it.each([
    ['"default";r=5;t=2.5', 'a Decimal t'],
    ['"default";r=-1;t=10', 'a negative r'],
    ['"default";r=fifty;t=30', 'a Token r'],
    ['"default";r="5"', 'a String r'],
    ['"default";r=?1', 'a Boolean r'],
    ['"default";t=-3', 'a negative t'],
    ['"default";r=5;pk="abc"', 'a String pk'],
    ['"default";r=5, ', 'a trailing comma'],
    ['"default";r=5;;t=1', 'an empty parameter'],
    ['("a" "b");r=5', 'an Inner List'],
    ['100;r=5', 'an Integer id'],
    ['"ok";r=1, "bad";r=x', 'one bad item among good ones'],
    ['"default";r=99999999999999999', 'an Integer beyond 15 digits'],
    ['"default";R=5', 'an upper-case key'],
  ])('ignores the whole field for %j (%s)', (value) => {
    expect(parse({ ratelimit: value, 'ratelimit-policy': '"default";q=100' }).policies).toEqual([]);
  });

  it('ignores a malformed RateLimit-Policy on its own: items stand, without limits', () => {
    for (const policy of ['"p";q=-1', '"p";q=1.5', '"p";w=0', '"p";qu=bytes', '"p";q=', 'garbage(']) {
      const [window] = parse({ ratelimit: '"p";r=4;t=9', 'ratelimit-policy': policy }).policies;
      expect(window).toEqual({
        unit: 'requests',
        remaining: 4,
        resetMs: 9000,
        name: 'p',
        source: 'ietf-structured',
      });
    }
  });

  it('drops an item with neither a remaining nor a matching quota', () => {
    expect(parse({ ratelimit: '"p";t=30' }).policies).toEqual([]);
  });

  it('reads Atlassian Beta-RateLimit like RateLimit; t beats X-Beta-RateLimit-Reset (P8)', () => {
    const observation = parseRateLimitHeaders(
      429,
      {
        'beta-ratelimit': '"tenant-app-quota";r=0;t=2788',
        'beta-ratelimit-policy': '"tenant-app-quota";q=100100;w=3600',
        'x-beta-ratelimit-reset': '2026-11-30T11:35Z',
      },
      { now },
    );
    expect(observation.policies).toEqual([
      {
        unit: 'requests',
        limit: 100100,
        remaining: 0,
        resetMs: 2_788_000,
        windowMs: 3_600_000,
        name: 'tenant-app-quota',
        source: 'atlassian-beta',
      },
    ]);
  });

  it('falls back to X-Beta-RateLimit-Reset when the item has no t', () => {
    const [policy] = parse({
      'beta-ratelimit': '"q";r=10',
      'x-beta-ratelimit-reset': '2026-11-30T13:00Z',
    }).policies;
    expect(policy?.resetMs).toBe(3_600_000);
  });
});

describe('IETF draft-07 dictionary (RateLimit: limit=, remaining=, reset=)', () => {
  it('reads the expiring limit from the dictionary, not the policy quota', () => {
    const observation = parse({
      ratelimit: 'limit=15, remaining=15, reset=40',
      'ratelimit-policy': '100;w=60',
    });
    expect(observation.policies).toEqual([
      { unit: 'requests', limit: 15, remaining: 15, resetMs: 40_000, source: 'ietf-dictionary' },
    ]);
  });

  it('takes the window length from the policy item with the same quota', () => {
    const [policy] = parse({
      ratelimit: 'limit=100, remaining=50, reset=5',
      'ratelimit-policy': '100;w=10',
    }).policies;
    expect(policy?.windowMs).toBe(10_000);
  });

  it.each([
    ['limit=100, remaining=fifty, reset=5'],
    ['limit=100, remaining=-1'],
    ['limit=1.5'],
    ['limit=(1 2)'],
  ])('ignores the malformed dictionary %j', (value) => {
    expect(parse({ ratelimit: value }).policies).toEqual([]);
  });

  it('ignores a dictionary without any of its keys', () => {
    expect(parse({ ratelimit: 'foo=1, bar=2' }).policies).toEqual([]);
  });
});

describe('IETF drafts -00..-06 separate fields (RateLimit-Limit/-Remaining/-Reset)', () => {
  it('reads a small reset as delta seconds', () => {
    expect(
      summarize(parse({ 'ratelimit-limit': '100', 'ratelimit-remaining': '60', 'ratelimit-reset': '58' })),
    ).toEqual({ retryAfterMs: null, remaining: 60, limit: 100, resetMs: 58_000 });
  });

  it('takes the first member of a Limit list as the expiring limit (drafts <= 03)', () => {
    const [policy] = parse({
      'ratelimit-limit': '10, 10;w=1, 50;w=60, 1000;w=3600',
      'ratelimit-remaining': '1',
      'ratelimit-reset': '7',
    }).policies;
    expect(policy).toEqual({
      unit: 'requests',
      limit: 10,
      remaining: 1,
      resetMs: 7000,
      windowMs: 1000,
      source: 'ietf-fields',
    });
  });

  it('reads GitLab epoch-second resets by magnitude against the Date header', () => {
    const observation = parseRateLimitHeaders(
      429,
      {
        date: 'Tue, 05 Jan 2021 10:59:30 GMT',
        'ratelimit-limit': '60',
        'ratelimit-observed': '67',
        'ratelimit-remaining': '0',
        'ratelimit-reset': '1609844400',
        'ratelimit-resettime': 'Tue, 05 Jan 2021 11:00:00 GMT',
        'ratelimit-name': 'throttle_authenticated_web',
      },
      { now: Date.parse('2021-01-05T10:59:31.500Z') },
    );
    expect(observation.policies).toEqual([
      {
        unit: 'requests',
        limit: 60,
        remaining: 0,
        resetMs: 30_000,
        name: 'throttle_authenticated_web',
        source: 'gitlab',
      },
    ]);
  });

  it('falls back to RateLimit-ResetTime when RateLimit-Reset is garbage', () => {
    const [policy] = parseRateLimitHeaders(
      429,
      {
        date: 'Tue, 05 Jan 2021 10:59:30 GMT',
        'ratelimit-remaining': '0',
        'ratelimit-reset': 'soon',
        'ratelimit-resettime': 'Tue, 05 Jan 2021 11:00:00 GMT',
      },
      { now: Date.parse('2021-01-05T10:59:30Z') },
    ).policies;
    expect(policy?.resetMs).toBe(30_000);
  });

  it('derives remaining from Limit - Observed when Remaining is missing', () => {
    const [policy] = parse({ 'ratelimit-limit': '60', 'ratelimit-observed': '67' }).policies;
    expect(policy?.remaining).toBe(0);
  });

  it('reports a Heroku-style lone RateLimit-Remaining', () => {
    expect(summarize(parse({ 'ratelimit-remaining': '2400' })).remaining).toBe(2400);
  });
});
