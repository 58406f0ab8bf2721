import { request } from 'node:http';
import { parseList } from 'structured-headers';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidOptionError, isTollgateError } from '../../src/errors.js';
import {
  formatGoDuration,
  formatRfc3339,
  maxAcceptedInWindow,
  normalizePolicy,
  overLimitWindows,
  physicalMinimumMs,
  type SimulatedApi,
  type SimulatedApiOptions,
  type SimulatedHeaderStyle,
  SimulatedPolicy,
  type SimulatedPolicyOption,
  StormSchedule,
  simCostHeader,
  simTokensHeader,
  startSimulatedApi,
} from '../../src/testing/index.js';
import { normalizeStorms } from '../../src/testing/storm-schedule.js';

// A start time on a minute boundary (1.8e12 / 60 000 is whole), so fixed windows align with it.
const T0 = 1_800_000_000_000;

/** A clock for the server that moves only when told (requests are real; their arrival times are not). */
class StepClock {
  t: number;
  constructor(t = T0) {
    this.t = t;
  }
  readonly now = (): number => this.t;
}

const apis: SimulatedApi[] = [];
async function start(options: SimulatedApiOptions): Promise<SimulatedApi> {
  const api = await startSimulatedApi(options);
  apis.push(api);
  return api;
}
afterEach(async () => {
  await Promise.all(apis.splice(0).map((api) => api.close()));
});

interface Reply {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

async function call(api: SimulatedApi, init: RequestInit = {}, path = '/v1/things'): Promise<Reply> {
  const res = await fetch(`${api.url}${path}`, init);
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

function withTokens(tokens: number, extra: Record<string, string> = {}): RequestInit {
  return { method: 'POST', headers: { [simTokensHeader]: String(tokens), ...extra } };
}

describe('SimulatedPolicy (pure core, explicit times)', () => {
  type Row = { at: number; tokens?: number; ok: boolean; retryAfterMs?: number };
  function run(policy: SimulatedPolicyOption, rows: Row[]): void {
    const p = new SimulatedPolicy(policy);
    rows.forEach((row, i) => {
      const d = p.admitAt({ tokens: row.tokens ?? 0 }, row.at);
      const got = d.ok ? { at: row.at, ok: true } : { at: row.at, ok: false, retryAfterMs: d.retryAfterMs };
      const want = row.ok
        ? { at: row.at, ok: true }
        : { at: row.at, ok: false, retryAfterMs: row.retryAfterMs };
      expect(got, `row ${i}`).toEqual(want);
    });
  }

  it('token bucket admits the burst, then one request per 1/rate, and refills no higher than burst', () => {
    // 10 per 1000 ms = one per 100 ms; burst 5.
    run({ kind: 'token-bucket', limit: 10, intervalMs: 1000, burst: 5 }, [
      ...[0, 0, 0, 0, 0].map((at) => ({ at, ok: true })),
      { at: 0, ok: false, retryAfterMs: 100 },
      { at: 50, ok: false, retryAfterMs: 50 },
      { at: 100, ok: true },
      { at: 100, ok: false, retryAfterMs: 100 },
      ...[10_000, 10_000, 10_000, 10_000, 10_000].map((at) => ({ at, ok: true })),
      { at: 10_000, ok: false, retryAfterMs: 100 },
    ]);
  });

  it('fixed window counts per epoch-aligned window and admits 2x across an edge', () => {
    run({ kind: 'fixed-window', limit: 3, intervalMs: 1000 }, [
      { at: 1500, ok: true },
      { at: 1600, ok: true },
      { at: 1999, ok: true },
      { at: 1999, ok: false, retryAfterMs: 1 },
      { at: 2000, ok: true },
      { at: 2000, ok: true },
      { at: 2001, ok: true },
      { at: 2500, ok: false, retryAfterMs: 500 },
    ]);
  });

  it('sliding window is an exact log: an entry stops counting exactly intervalMs after it', () => {
    run({ kind: 'sliding-window', limit: 3, intervalMs: 1000 }, [
      { at: 0, ok: true },
      { at: 400, ok: true },
      { at: 800, ok: true },
      { at: 999.5, ok: false, retryAfterMs: 0.5 },
      { at: 1000, ok: true },
      { at: 1000, ok: false, retryAfterMs: 400 },
    ]);
  });

  it('a refused request consumes no quota', () => {
    const p = new SimulatedPolicy({ kind: 'sliding-window', limit: 2, intervalMs: 1000 });
    expect(p.admitAt({}, 0).ok).toBe(true);
    expect(p.admitAt({}, 500).ok).toBe(true);
    for (let at = 600; at < 1000; at += 50) expect(p.admitAt({}, at).ok).toBe(false);
    expect(p.admitAt({}, 1000)).toEqual({ ok: true });
    expect(p.admitAt({}, 1500)).toEqual({ ok: true });
  });

  it('requests and tokens must both admit; the refusal names the binding rule', () => {
    const p = new SimulatedPolicy({ kind: 'requests-tokens', requestsPerMinute: 100, tokensPerMinute: 1000 });
    expect(p.admitAt({ tokens: 600 }, 0)).toEqual({ ok: true });
    // 400 tokens left, 500 wanted: 100 tokens at 1000/60 000 per ms take 6000 ms.
    expect(p.admitAt({ tokens: 500 }, 0)).toEqual({ ok: false, retryAfterMs: 6000, rule: 'tokens' });
    const [requests, tokens] = p.snapshotAt(0);
    expect(requests).toMatchObject({ name: 'requests', remaining: 99 });
    expect(tokens).toMatchObject({ name: 'tokens', remaining: 400 });
  });

  it('a cost above a rule capacity can never be admitted', () => {
    const p = new SimulatedPolicy({ kind: 'requests-tokens', tokensPerMinute: 1000 });
    expect(p.tooLargeFor({ tokens: 1001 })).toBe('tokens');
    expect(p.earliestAt({ tokens: 1001 }, 0)).toBe(Infinity);
    expect(p.admitAt({ tokens: 1001 }, 0)).toEqual({ ok: false, retryAfterMs: Infinity, rule: 'tokens' });
    expect(p.tooLargeFor({ tokens: 1000 })).toBeUndefined();
  });

  it('snapshots report remaining, full reset and next-unit times per kind', () => {
    const p = new SimulatedPolicy([
      { kind: 'token-bucket', limit: 10, intervalMs: 1000, name: 'tb' },
      { kind: 'fixed-window', limit: 5, intervalMs: 1000, name: 'fw' },
      { kind: 'sliding-window', limit: 5, intervalMs: 1000, name: 'sw' },
    ]);
    p.takeAt({}, 100);
    p.takeAt({}, 300);
    p.takeAt({}, 300);
    const byName = Object.fromEntries(p.snapshotAt(350).map((s) => [s.name, s]));
    // Bucket (0.01 per ms): 9 after the take at 100; refilled to the cap of 10 by 300, then 8; 8.5 at 350.
    // Full (10) in 1.5 / 0.01 = 150 ms; the 9th whole token in 0.5 / 0.01 = 50 ms.
    expect(byName['tb']!.remaining).toBe(8);
    expect(byName['tb']!.resetMs).toBeCloseTo(150, 6);
    expect(byName['tb']!.nextMs).toBeCloseTo(50, 6);
    expect(byName['fw']).toMatchObject({ remaining: 2, resetMs: 650, nextMs: 650, limit: 5, windowMs: 1000 });
    // Log: the oldest entry (100) frees a unit at 1100, the newest (300) empties the log at 1300.
    expect(byName['sw']).toMatchObject({ remaining: 2, resetMs: 950, nextMs: 750 });
  });

  it('names rules by unit and refuses duplicate names', () => {
    const rules = normalizePolicy([
      { kind: 'sliding-window', limit: 1, intervalMs: 1000 },
      { kind: 'fixed-window', limit: 60, intervalMs: 60_000 },
      { kind: 'token-bucket', limit: 1000, intervalMs: 60_000, unit: 'tokens' },
    ]);
    expect(rules.map((r) => r.name)).toEqual(['requests', 'requests-2', 'tokens']);
    expect(() =>
      normalizePolicy([
        { kind: 'sliding-window', limit: 1, intervalMs: 1000, name: 'x' },
        { kind: 'fixed-window', limit: 1, intervalMs: 1000, name: 'x' },
      ]),
    ).toThrow(/distinct names/);
  });
});

describe('physicalMinimumMs', () => {
  const rows: Array<{
    name: string;
    policy: SimulatedPolicyOption;
    n: number;
    tokens?: number;
    startAt?: number;
    ms: number;
  }> = [
    // (N - b) / r = (25 - 5) / 0.01 per ms
    {
      name: 'token bucket',
      policy: { kind: 'token-bucket', limit: 10, intervalMs: 1000, burst: 5 },
      n: 25,
      ms: 2000,
    },
    {
      name: 'token bucket within burst',
      policy: { kind: 'token-bucket', limit: 10, intervalMs: 1000, burst: 5 },
      n: 5,
      ms: 0,
    },
    // (ceil(N / L) - 1) * I
    { name: 'sliding log', policy: { kind: 'sliding-window', limit: 3, intervalMs: 1000 }, n: 10, ms: 3000 },
    {
      name: 'sliding log, N = L + 1',
      policy: { kind: 'sliding-window', limit: 3, intervalMs: 1000 },
      n: 4,
      ms: 1000,
    },
    // floor(10 / 4) = 2 requests of 4 tokens per window: (ceil(5 / 2) - 1) * 1000
    {
      name: 'sliding log in tokens',
      policy: { kind: 'sliding-window', limit: 10, intervalMs: 1000, unit: 'tokens' },
      n: 5,
      tokens: 4,
      ms: 2000,
    },
    {
      name: 'fixed window from a boundary',
      policy: { kind: 'fixed-window', limit: 3, intervalMs: 1000 },
      n: 10,
      ms: 3000,
    },
    // 3 in [900, 1000), 3 at 1000, 3 at 2000, the 10th at 3000: 3000 - 900
    {
      name: 'fixed window from mid-window',
      policy: { kind: 'fixed-window', limit: 3, intervalMs: 1000 },
      n: 10,
      startAt: 900,
      ms: 2100,
    },
    // tokens bind: (10 * 1000 - 6000) / (6000 / 60 000 per ms)
    {
      name: 'requests and tokens',
      policy: { kind: 'requests-tokens', requestsPerMinute: 1000, tokensPerMinute: 6000 },
      n: 10,
      tokens: 1000,
      ms: 40_000,
    },
    // bucket spaces 300 ms apart, the log allows 2 per second: 0, 300, 1000, 1300, 2000
    {
      name: 'two rules on one unit',
      policy: [
        { kind: 'token-bucket', limit: 1, intervalMs: 300, burst: 1 },
        { kind: 'sliding-window', limit: 2, intervalMs: 1000 },
      ],
      n: 5,
      ms: 2000,
    },
    { name: 'none', policy: { kind: 'none' }, n: 1000, ms: 0 },
    { name: 'no requests', policy: { kind: 'sliding-window', limit: 1, intervalMs: 1000 }, n: 0, ms: 0 },
  ];
  it.each(rows)('$name: $ms ms', ({ policy, n, tokens, startAt, ms }) => {
    const workload = {
      requests: n,
      ...(tokens === undefined ? {} : { tokensPerRequest: tokens }),
      ...(startAt === undefined ? {} : { startAt }),
    };
    expect(physicalMinimumMs(policy, workload)).toBeCloseTo(ms, 6);
  });

  it('refuses a per-request cost no rule can admit', () => {
    expect(() =>
      physicalMinimumMs(
        { kind: 'requests-tokens', tokensPerMinute: 100 },
        { requests: 1, tokensPerRequest: 101 },
      ),
    ).toThrow(/workload\.tokensPerRequest/);
  });
});

describe('arrival statistics', () => {
  const at = [0, 100, 999, 1000, 1001, 2500];
  const tokens = [1, 2, 3, 4, 5, 6];

  it('maxAcceptedInWindow slides over arrivals with half-open windows', () => {
    // [100, 1100) holds 100, 999, 1000, 1001: 4 requests, 14 tokens. 0 and 1000 never share a
    // window: they are exactly 1000 ms apart.
    expect(maxAcceptedInWindow(at, tokens, 1000)).toEqual({ requests: 4, tokens: 14 });
    expect(maxAcceptedInWindow(at, tokens, 1)).toEqual({ requests: 1, tokens: 6 });
    expect(maxAcceptedInWindow(at, tokens, 10_000)).toEqual({ requests: 6, tokens: 21 });
    expect(maxAcceptedInWindow([], [], 1000)).toEqual({ requests: 0, tokens: 0 });
  });

  it('overLimitWindows counts windows over each kind of limit', () => {
    const rules = (policy: SimulatedPolicyOption) => normalizePolicy(policy);
    // Trailing (1, 1001] holds 4 > 3.
    expect(overLimitWindows(rules({ kind: 'sliding-window', limit: 3, intervalMs: 1000 }), at, tokens)).toBe(
      1,
    );
    expect(overLimitWindows(rules({ kind: 'sliding-window', limit: 4, intervalMs: 1000 }), at, tokens)).toBe(
      0,
    );
    // Aligned windows hold 3, 2, 1.
    expect(overLimitWindows(rules({ kind: 'fixed-window', limit: 3, intervalMs: 1000 }), at, tokens)).toBe(0);
    expect(overLimitWindows(rules({ kind: 'fixed-window', limit: 2, intervalMs: 1000 }), at, tokens)).toBe(1);
    // Bucket 0.003 per ms: the deficit peaks at 2.994 at t = 1001.
    expect(overLimitWindows(rules({ kind: 'token-bucket', limit: 3, intervalMs: 1000 }), at, tokens)).toBe(0);
    expect(
      overLimitWindows(rules({ kind: 'token-bucket', limit: 3, intervalMs: 1000, burst: 2 }), at, tokens),
    ).toBe(1);
    // Tokens: [100, 1100) holds 14 tokens.
    const tokenRule = rules({ kind: 'sliding-window', limit: 13, intervalMs: 1000, unit: 'tokens' });
    expect(overLimitWindows(tokenRule, at, tokens)).toBeGreaterThan(0);
    expect(overLimitWindows(rules({ kind: 'none' }), at, tokens)).toBe(0);
  });

  it('traffic admitted by a server policy never exceeds it', () => {
    for (const policy of [
      { kind: 'token-bucket', limit: 5, intervalMs: 1000, burst: 3 },
      { kind: 'fixed-window', limit: 5, intervalMs: 1000 },
      { kind: 'sliding-window', limit: 5, intervalMs: 1000 },
    ] as const) {
      const p = new SimulatedPolicy(policy);
      const accepted: number[] = [];
      // A request every 37 ms for 10 s.
      for (let t = 0; t < 10_000; t += 37) if (p.admitAt({}, t).ok) accepted.push(t);
      const none = accepted.map(() => 0);
      expect(overLimitWindows(normalizePolicy(policy), accepted, none), policy.kind).toBe(0);
      if (policy.kind === 'sliding-window')
        expect(maxAcceptedInWindow(accepted, none, 1000).requests).toBe(5);
    }
  });
});

describe('header value formats', () => {
  it.each([
    [0, '0s'],
    [20, '20ms'],
    [0.4, '1ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [2196, '2.196s'],
    [60_000, '1m0s'],
    [360_000, '6m0s'],
    [3_723_004, '1h2m3.004s'],
  ])('Go duration of %s ms is %s', (ms, text) => {
    expect(formatGoDuration(ms)).toBe(text);
  });

  it('RFC 3339 at whole seconds, rounded up', () => {
    expect(formatRfc3339(Date.UTC(2025, 7, 21, 12, 40, 58, 1))).toBe('2025-08-21T12:40:59Z');
    expect(formatRfc3339(Date.UTC(2025, 7, 21, 12, 40, 59))).toBe('2025-08-21T12:40:59Z');
  });
});

describe('StormSchedule (pure)', () => {
  it('starts an outage at every Nth request outside one, with Retry-After of the time left', () => {
    const s = new StormSchedule(normalizeStorms({ every: 3, durationMs: 2000 }), 0);
    expect(s.arriveAt(0)).toBeUndefined();
    expect(s.arriveAt(10)).toBeUndefined();
    expect(s.arriveAt(20)).toEqual({ status: 503, retryAfterSec: 2 });
    // Inside the outage (until 2020): not counted.
    expect(s.arriveAt(1000)).toEqual({ status: 503, retryAfterSec: 2 });
    expect(s.arriveAt(2019)).toEqual({ status: 503, retryAfterSec: 1 });
    expect(s.arriveAt(2020)).toBeUndefined();
    expect(s.arriveAt(2021)).toBeUndefined();
    expect(s.arriveAt(2022)).toEqual({ status: 503, retryAfterSec: 2 });
  });

  it('follows a schedule relative to start, with a fixed Retry-After when given', () => {
    const s = new StormSchedule(
      normalizeStorms({ schedule: [{ startMs: 5000, durationMs: 1500 }], status: 529, retryAfterSec: 7 }),
      T0,
    );
    expect(s.arriveAt(T0 + 4999)).toBeUndefined();
    expect(s.arriveAt(T0 + 5000)).toEqual({ status: 529, retryAfterSec: 7 });
    expect(s.arriveAt(T0 + 6499)).toEqual({ status: 529, retryAfterSec: 7 });
    expect(s.arriveAt(T0 + 6500)).toBeUndefined();
  });
});

describe('startSimulatedApi over real sockets', () => {
  it('listens on 127.0.0.1 only, with a free port', async () => {
    const api = await start({ policy: { kind: 'none' } });
    expect(api.url).toBe(`http://127.0.0.1:${api.port}`);
    expect(api.port).toBeGreaterThan(0);
    const r = await call(api, { headers: { 'x-request-id': 'abc' } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, id: 'abc' });
    expect(r.headers.get('x-request-id')).toBe('abc');
    expect(r.headers.get('ratelimit')).toBeNull();
  });

  it('can listen on ::1 instead (skipped where IPv6 loopback is absent)', async (ctx) => {
    let api: SimulatedApi;
    try {
      api = await start({ policy: { kind: 'none' }, host: '::1' });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EADDRNOTAVAIL') return ctx.skip();
      throw error;
    }
    expect(api.url).toBe(`http://[::1]:${api.port}`);
    expect((await call(api)).status).toBe(200);
  });

  it('token bucket: the burst passes, then 429 with Retry-After rounded up to the refill time', async () => {
    const clock = new StepClock();
    const api = await start({
      policy: { kind: 'token-bucket', limit: 2, intervalMs: 1000, burst: 3 },
      now: clock.now,
    });
    for (let i = 0; i < 3; i++) expect((await call(api)).status).toBe(200);
    const refused = await call(api);
    expect(refused.status).toBe(429);
    // One token at 2 per 1000 ms: 500 ms, sent as 1 s.
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.body).toMatchObject({
      ok: false,
      error: { type: 'rate_limit_exceeded', retryAfterMs: 500 },
    });
    clock.t += 499;
    expect((await call(api)).status).toBe(429);
    clock.t += 1;
    expect((await call(api)).status).toBe(200);
    const s = api.stats();
    expect(s).toMatchObject({ received: 6, accepted: 4, rejected: 2, byStatus: { 200: 4, 429: 2 } });
    expect(s.acceptedAt).toEqual([T0, T0, T0, T0 + 500]);
    expect(s.overLimitWindows()).toBe(0);
  });

  it('sliding window: a parallel burst gets exactly the limit, and nothing exceeds it', async () => {
    const api = await start({ policy: { kind: 'sliding-window', limit: 10, intervalMs: 60_000 } });
    const replies = await Promise.all(Array.from({ length: 30 }, () => call(api)));
    const ok = replies.filter((r) => r.status === 200);
    const refused = replies.filter((r) => r.status === 429);
    expect(ok).toHaveLength(10);
    expect(refused).toHaveLength(20);
    for (const r of refused) {
      const sec = Number(r.headers.get('retry-after'));
      expect(sec).toBeGreaterThanOrEqual(59);
      expect(sec).toBeLessThanOrEqual(60);
    }
    const s = api.stats();
    expect(s.maxAcceptedInWindow(60_000).requests).toBe(10);
    expect(s.overLimitWindows()).toBe(0);
    // Against a tighter promise of 5 per minute, arrivals 6..10 each broke it.
    expect(s.overLimitWindows({ kind: 'sliding-window', limit: 5, intervalMs: 60_000 })).toBe(5);
    expect(s.physicalMinimumMs({ requests: 30 })).toBe(120_000);
  });

  it('fixed window: windows align to the epoch, Retry-After points at the next one', async () => {
    const clock = new StepClock(T0 + 59_500);
    const api = await start({
      policy: { kind: 'fixed-window', limit: 2, intervalMs: 60_000 },
      now: clock.now,
    });
    expect((await call(api)).status).toBe(200);
    expect((await call(api)).status).toBe(200);
    const refused = await call(api);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    clock.t = T0 + 60_000;
    expect((await call(api)).status).toBe(200);
    // The run started 500 ms before a window edge: 4 requests fit in 500 ms.
    expect(api.stats().physicalMinimumMs({ requests: 4 })).toBe(500);
    expect(api.stats().physicalMinimumMs({ requests: 4, startAt: T0 })).toBe(60_000);
  });

  it('tokens come from x-sim-tokens or the JSON max_tokens; a refusal leaves them unspent', async () => {
    const clock = new StepClock();
    const api = await start({
      policy: { kind: 'sliding-window', limit: 1000, intervalMs: 60_000, unit: 'tokens' },
      now: clock.now,
      usage: true,
    });
    const json = (body: unknown): RequestInit => ({
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect((await call(api, json({ max_tokens: 600 }))).body).toMatchObject({ usage: { total_tokens: 600 } });
    expect((await call(api, withTokens(500))).status).toBe(429);
    expect((await call(api, withTokens(400))).status).toBe(200);
    expect((await call(api, json({ prompt: 'no max_tokens' }))).body).toMatchObject({
      usage: { total_tokens: 0 },
    });
    expect((await call(api, withTokens(1001))).body).toMatchObject({ error: { type: 'request_too_large' } });
    expect((await call(api, withTokens(-1))).status).toBe(400);
    expect((await call(api, json({ max_tokens: 'many' }))).status).toBe(400);
    const s = api.stats();
    expect(s.acceptedTokens).toBe(1000);
    expect(s.acceptedTokensAt).toEqual([600, 400, 0]);
    expect(s.maxAcceptedInWindow(60_000)).toEqual({ requests: 3, tokens: 1000 });
    expect(s.byStatus).toEqual({ 200: 3, 400: 3, 429: 1 });
  });

  it('price is charged for accepted requests only and sent on every response', async () => {
    const clock = new StepClock();
    const api = await start({
      policy: { kind: 'fixed-window', limit: 3, intervalMs: 1000 },
      now: clock.now,
      price: (request) => 10 + 2 * request.tokens,
    });
    const replies = [];
    for (const tokens of [1, 2, 3, 4, 5]) replies.push(await call(api, withTokens(tokens)));
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 429, 429]);
    expect(replies.map((r) => r.headers.get(simCostHeader))).toEqual(['12', '14', '16', '0', '0']);
    expect(api.stats().totalChargedMicros).toBe(42);
  });

  it('a faulty price function answers 500 and admits nothing', async () => {
    const api = await start({
      policy: { kind: 'sliding-window', limit: 1, intervalMs: 60_000 },
      price: () => -1,
    });
    const r = await call(api);
    expect(r.status).toBe(500);
    expect(api.stats()).toMatchObject({ accepted: 0, totalChargedMicros: 0, byStatus: { 500: 1 } });
  });

  describe('rate-limit header styles', () => {
    // One request 15 s into a minute, against 5 requests per fixed minute.
    async function after15s(headers: SimulatedHeaderStyle) {
      const clock = new StepClock(T0 + 15_000);
      const api = await start({
        policy: { kind: 'fixed-window', limit: 5, intervalMs: 60_000 },
        headers,
        now: clock.now,
      });
      return call(api);
    }

    it('ietf-old: RateLimit-Limit/-Remaining/-Reset in delta seconds', async () => {
      const r = await after15s('ietf-old');
      expect(r.headers.get('ratelimit-limit')).toBe('5');
      expect(r.headers.get('ratelimit-remaining')).toBe('4');
      expect(r.headers.get('ratelimit-reset')).toBe('45');
    });

    it('x-ratelimit-epoch: reset in epoch seconds, consistent with Date', async () => {
      const r = await after15s('x-ratelimit-epoch');
      expect(r.headers.get('x-ratelimit-limit')).toBe('5');
      expect(r.headers.get('x-ratelimit-remaining')).toBe('4');
      expect(r.headers.get('x-ratelimit-reset')).toBe(String((T0 + 60_000) / 1000));
      expect(r.headers.get('date')).toBe(new Date(T0 + 15_000).toUTCString());
    });

    it('ietf-structured: RateLimit-Policy and RateLimit are valid structured-field lists, one item per rule', async () => {
      const clock = new StepClock(T0 + 15_000);
      const api = await start({
        policy: [
          { kind: 'token-bucket', limit: 10, intervalMs: 1000 },
          { kind: 'fixed-window', limit: 1000, intervalMs: 60_000, unit: 'tokens', name: 'tpm' },
        ],
        headers: 'ietf-structured',
        now: clock.now,
      });
      const r = await call(api, withTokens(100));
      const policyField = r.headers.get('ratelimit-policy')!;
      const limitField = r.headers.get('ratelimit')!;
      expect(policyField).toBe('"requests";q=10;w=1, "tpm";q=1000;w=60;qu="tokens"');
      expect(limitField).toBe('"requests";r=9;t=1, "tpm";r=900;t=45');
      const policies = parseList(policyField);
      const limits = parseList(limitField);
      expect(policies.map(([id, params]) => [id, params.get('q'), params.get('w')])).toEqual([
        ['requests', 10, 1],
        ['tpm', 1000, 60],
      ]);
      expect(limits.map(([id, params]) => [id, params.get('r'), params.get('t')])).toEqual([
        ['requests', 9, 1],
        ['tpm', 900, 45],
      ]);
    });

    it('openai: requests and tokens triplets with Go-duration resets, retry-after-ms on 429', async () => {
      const clock = new StepClock();
      const api = await start({
        policy: { kind: 'requests-tokens', requestsPerMinute: 60, tokensPerMinute: 6000 },
        headers: 'openai',
        now: clock.now,
      });
      const r = await call(api, withTokens(600));
      expect(r.headers.get('x-ratelimit-limit-requests')).toBe('60');
      expect(r.headers.get('x-ratelimit-remaining-requests')).toBe('59');
      // One request refills at 1 per second; 600 tokens at 100 per second.
      expect(r.headers.get('x-ratelimit-reset-requests')).toBe('1s');
      expect(r.headers.get('x-ratelimit-limit-tokens')).toBe('6000');
      expect(r.headers.get('x-ratelimit-remaining-tokens')).toBe('5400');
      expect(r.headers.get('x-ratelimit-reset-tokens')).toBe('6s');
      const refused = await call(api, withTokens(5500));
      expect(refused.status).toBe(429);
      // 100 tokens short at 0.1 per ms: 1000 ms.
      expect(refused.headers.get('retry-after-ms')).toBe('1000');
      expect(refused.headers.get('retry-after')).toBe('1');
      for (const name of ['x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens']) {
        expect(refused.headers.get(name)).toMatch(/^(\d+h)?(\d+m)?\d+(\.\d+)?(ms|s)$/);
      }
    });

    it('anthropic: requests and tokens triplets with RFC 3339 resets', async () => {
      const clock = new StepClock(T0 + 250);
      const api = await start({
        policy: { kind: 'requests-tokens', requestsPerMinute: 60, tokensPerMinute: 6000 },
        headers: 'anthropic',
        now: clock.now,
      });
      const r = await call(api, withTokens(600));
      expect(r.headers.get('anthropic-ratelimit-requests-limit')).toBe('60');
      expect(r.headers.get('anthropic-ratelimit-requests-remaining')).toBe('59');
      // Full again 1 s after arrival (T0 + 1250), rounded up to T0 + 2 s.
      expect(r.headers.get('anthropic-ratelimit-requests-reset')).toBe(formatRfc3339(T0 + 2000));
      expect(r.headers.get('anthropic-ratelimit-tokens-remaining')).toBe('5400');
      expect(r.headers.get('anthropic-ratelimit-tokens-reset')).toBe(
        new Date(T0 + 7000).toISOString().replace('.000', ''),
      );
      expect(r.headers.get('anthropic-ratelimit-tokens-reset')).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    });

    it('retryAfter: false sends no Retry-After on 429', async () => {
      const api = await start({
        policy: { kind: 'sliding-window', limit: 1, intervalMs: 60_000 },
        retryAfter: false,
      });
      await call(api);
      const r = await call(api);
      expect(r.status).toBe(429);
      expect(r.headers.get('retry-after')).toBeNull();
    });
  });

  it('storms: every Nth request opens an outage answered 503 with Retry-After; quota is untouched', async () => {
    const clock = new StepClock();
    const api = await start({
      policy: { kind: 'sliding-window', limit: 10, intervalMs: 60_000 },
      storms: { every: 3, durationMs: 1500 },
      now: clock.now,
    });
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push(await call(api));
    expect(statuses.map((r) => r.status)).toEqual([200, 200, 503, 503]);
    expect(statuses[2]!.headers.get('retry-after')).toBe('2');
    clock.t += 1500;
    expect((await call(api)).status).toBe(200);
    expect(api.stats()).toMatchObject({ accepted: 3, unavailable: 2, rejected: 0 });
  });

  it('storms: a schedule of outages with a fixed Retry-After', async () => {
    const clock = new StepClock();
    const api = await start({
      policy: { kind: 'none' },
      storms: { schedule: [{ startMs: 1000, durationMs: 1000 }], retryAfterSec: 3 },
      now: clock.now,
    });
    expect((await call(api)).status).toBe(200);
    clock.t += 1000;
    const r = await call(api);
    expect(r.status).toBe(503);
    expect(r.headers.get('retry-after')).toBe('3');
    clock.t += 1000;
    expect((await call(api)).status).toBe(200);
  });

  it('hostile: a day-long Retry-After every Nth response, garbage rate-limit headers', async () => {
    const api = await start({
      policy: { kind: 'requests-tokens', requestsPerMinute: 100 },
      headers: 'openai',
      hostile: { retryAfterDayEvery: 2, garbageHeaders: true },
    });
    const first = await call(api);
    const second = await call(api);
    expect(first.status).toBe(200);
    expect(first.headers.get('retry-after')).toBeNull();
    expect(second.headers.get('retry-after')).toBe('86400');
    for (const r of [first, second]) {
      const remaining = r.headers.get('x-ratelimit-remaining-requests');
      expect(remaining).not.toBeNull();
      expect(remaining).not.toMatch(/^\d+$/);
    }
  });

  it('latency delays accepted responses only', async () => {
    // A latency long beside a loopback round trip: the 429 must come sooner than it, which a
    // loaded machine's round trip (tens of ms) cannot spoil as it could a 40 ms latency.
    const api = await start({
      policy: { kind: 'sliding-window', limit: 1, intervalMs: 60_000 },
      latencyMs: { min: 250, max: 250 },
    });
    let t = performance.now();
    expect((await call(api)).status).toBe(200);
    expect(performance.now() - t).toBeGreaterThanOrEqual(245);
    t = performance.now();
    expect((await call(api)).status).toBe(429);
    expect(performance.now() - t).toBeLessThan(200);
  });

  it('a client that disconnects mid-body does not stall the requests behind it', async () => {
    const api = await start({ policy: { kind: 'none' } });
    const aborted = request(`${api.url}/upload`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': '100' },
    });
    aborted.on('error', () => {});
    aborted.write('{"max_tok');
    await new Promise((resolve) => setTimeout(resolve, 10));
    aborted.destroy();
    expect((await call(api)).status).toBe(200);
    expect(api.stats()).toMatchObject({ received: 2, accepted: 1, byStatus: { 200: 1 } });
  });

  it('reset() restores fresh limits and zeroes the counters', async () => {
    const api = await start({ policy: { kind: 'sliding-window', limit: 1, intervalMs: 60_000 }, price: 7 });
    await call(api);
    expect((await call(api)).status).toBe(429);
    api.reset();
    expect(api.stats()).toMatchObject({
      received: 0,
      accepted: 0,
      rejected: 0,
      totalChargedMicros: 0,
      byStatus: {},
    });
    expect((await call(api)).status).toBe(200);
    expect(api.stats().totalChargedMicros).toBe(7);
  });

  it('close() is idempotent and stops listening', async () => {
    const api = await startSimulatedApi({ policy: { kind: 'none' } });
    await call(api);
    await Promise.all([api.close(), api.close()]);
    await expect(fetch(api.url)).rejects.toThrow();
  });
});

describe('invalid options throw naming the option and value', () => {
  const none = { kind: 'none' } as const;
  const rows: Array<[string, unknown, RegExp]> = [
    ['missing policy', {}, /`policy`/],
    [
      'limit 0',
      { policy: { kind: 'token-bucket', limit: 0, intervalMs: 1000 } },
      /`policy\.limit`.*`0` \(number\)/,
    ],
    [
      'negative interval',
      { policy: [{ kind: 'sliding-window', limit: 1, intervalMs: -5 }] },
      /`policy\[0\]\.intervalMs`.*`-5`/,
    ],
    ['unknown kind', { policy: { kind: 'leaky' } }, /`policy\.kind`.*"leaky"/],
    [
      'burst on a window',
      { policy: { kind: 'fixed-window', limit: 1, intervalMs: 1, burst: 2 } },
      /`policy\.burst`/,
    ],
    ['empty requests-tokens', { policy: { kind: 'requests-tokens' } }, /`policy\.requestsPerMinute`/],
    [
      'bad unit',
      { policy: { kind: 'fixed-window', limit: 1, intervalMs: 1, unit: 'bytes' } },
      /`policy\.unit`.*"bytes"/,
    ],
    ['empty policy list', { policy: [] }, /`policy`/],
    ['header style', { policy: none, headers: 'github' }, /`headers`.*"github"/],
    ['retryAfter', { policy: none, retryAfter: 'no' }, /`retryAfter`/],
    ['storms.every', { policy: none, storms: { every: 0, durationMs: 10 } }, /`storms\.every`.*`0`/],
    ['storms.durationMs', { policy: none, storms: { every: 3 } }, /`storms\.durationMs`/],
    ['empty storms', { policy: none, storms: {} }, /`storms\.every`/],
    [
      'storms.status',
      { policy: none, storms: { every: 1, durationMs: 1, status: 404 } },
      /`storms\.status`.*`404`/,
    ],
    [
      'storms.schedule',
      { policy: none, storms: { schedule: [{ startMs: 0, durationMs: 0 }] } },
      /`storms\.schedule\[0\]\.durationMs`/,
    ],
    ['hostile', { policy: none, hostile: { retryAfterDayEvery: 0 } }, /`hostile\.retryAfterDayEvery`/],
    ['price', { policy: none, price: 1.5 }, /`price`.*`1\.5`/],
    ['usage', { policy: none, usage: 'yes' }, /`usage`/],
    ['latency', { policy: none, latencyMs: { min: 10, max: 5 } }, /`latencyMs\.max`.*`5`/],
    ['host', { policy: none, host: '0.0.0.0' }, /`host`.*"0\.0\.0\.0"/],
    ['port', { policy: none, port: 70_000 }, /`port`.*`70000`/],
    ['unknown option', { policy: none, hedaers: 'openai' }, /`hedaers`/],
  ];
  it.each(rows)('%s', async (_name, options, message) => {
    const attempt = startSimulatedApi(options as SimulatedApiOptions);
    await expect(attempt).rejects.toThrow(message);
    const error = await attempt.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(isTollgateError(error) && error.code).toBe('ERR_INVALID_OPTION');
  });
});
