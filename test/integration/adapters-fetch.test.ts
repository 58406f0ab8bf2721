/**
 * wrapFetch against provider-shaped mocks (msw intercepts the global fetch; nothing leaves the
 * process). The gate runs on a manual clock: what waits for a reset or a Retry-After provably
 * does not start until the clock is moved, and no test sleeps. Tests about connections and what a
 * Response carries use a loopback server and the real fetch instead.
 */
import { inspect } from 'node:util';
import { HttpResponse, http } from 'msw';
import { setupServer } from 'msw/node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hashKey, type ResponseHead, withTollgate, wrapFetch } from '../../src/adapters/index.js';
import { AbortedError, InvalidOptionError, QueueTimeoutError, RateLimitedError } from '../../src/errors.js';
import { createGate, type Gate } from '../../src/gate/gate.js';
import type { GateOptions } from '../../src/gate/options.js';
import { nextPause, rejectionOf, T0, ticks } from '../helpers/adapter-gate.js';
import { type ScriptedServer, startScriptedServer } from '../helpers/adapter-server.js';
import { ManualClock } from '../helpers/manual-clock.js';

// msw replaces the global fetch when it starts listening (beforeAll): this is the real one.
const realFetch = globalThis.fetch;
const server = setupServer();
beforeAll(() => server.listen({ onUnhandledRequest: 'error' }));
afterEach(() => server.resetHandlers());
afterAll(() => server.close());

let clock: ManualClock;
function gateWith(options: GateOptions = {}): Gate {
  clock = new ManualClock(T0);
  // random 0.5: backoff without a server time is floor(0.5 * 500 * 2^(attempt-1)) ms, predictable.
  return createGate({ clock, random: () => 0.5, ...options });
}

/** Epoch seconds `ms` from the manual clock's now. */
const epochSecondsIn = (ms: number) => String(Math.ceil((clock.now() + ms) / 1000));

describe('provider headers through wrapFetch', () => {
  it('GitHub: remaining 0 with an epoch reset holds the next call until the reset', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let hits = 0;
    server.use(
      http.get('https://api.github.com/user', () => {
        hits++;
        return HttpResponse.json(
          { login: 'octocat' },
          {
            headers: {
              'x-ratelimit-limit': '60',
              'x-ratelimit-remaining': hits === 1 ? '0' : '59',
              'x-ratelimit-used': hits === 1 ? '60' : '1',
              'x-ratelimit-reset': epochSecondsIn(30_000),
              'x-ratelimit-resource': 'core',
            },
          },
        );
      }),
    );
    expect((await fetch('https://api.github.com/user')).status).toBe(200);
    const second = fetch('https://api.github.com/user');
    await ticks();
    expect(hits).toBe(1);
    expect(gate.stats('https://api.github.com').partition.queued).toBe(1);
    clock.advance(29_999);
    await ticks();
    expect(hits).toBe(1);
    clock.advance(1);
    const response = await second;
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ login: 'octocat' });
    expect(hits).toBe(2);
  });

  it('OpenAI: requests remaining 0 with a Go-duration reset waits that long; tokens are tracked too', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let hits = 0;
    server.use(
      http.post('https://api.openai.com/v1/chat/completions', () => {
        hits++;
        return HttpResponse.json(
          { id: `chatcmpl-${hits}`, usage: { total_tokens: 20 } },
          {
            headers: {
              'x-ratelimit-limit-requests': '3',
              'x-ratelimit-remaining-requests': '0',
              'x-ratelimit-reset-requests': '1.5s',
              'x-ratelimit-limit-tokens': '40000',
              'x-ratelimit-remaining-tokens': '39980',
              'x-ratelimit-reset-tokens': '6m0s',
            },
          },
        );
      }),
    );
    const init = { method: 'POST', body: JSON.stringify({ model: 'gpt', max_tokens: 20 }) };
    expect((await fetch('https://api.openai.com/v1/chat/completions', init)).status).toBe(200);
    const second = fetch('https://api.openai.com/v1/chat/completions', init);
    await ticks();
    expect(hits).toBe(1);
    // OpenAI's reset is "back to its initial state": a token bucket refilling 3 requests in 1.5 s,
    // so one request is available again after 500 ms (not after the full 1.5 s).
    clock.advance(499);
    await ticks();
    expect(hits).toBe(1);
    clock.advance(1);
    expect((await second).status).toBe(200);
    expect(hits).toBe(2);
  });

  it('Anthropic: remaining 0 with an RFC 3339 reset refills continuously until that instant', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let hits = 0;
    const resetAt = T0 + 5000;
    server.use(
      http.post('https://api.anthropic.com/v1/messages', () => {
        hits++;
        return HttpResponse.json(
          { id: `msg_${hits}` },
          {
            headers: {
              'anthropic-ratelimit-requests-limit': '50',
              'anthropic-ratelimit-requests-remaining': '0',
              'anthropic-ratelimit-requests-reset': new Date(resetAt).toISOString().replace('.000Z', 'Z'),
            },
          },
        );
      }),
    );
    expect(
      (await fetch('https://api.anthropic.com/v1/messages', { method: 'POST', body: '{}' })).status,
    ).toBe(200);
    const second = fetch('https://api.anthropic.com/v1/messages', { method: 'POST', body: '{}' });
    // Anthropic's bucket is "fully replenished" at the reset: 50 requests over 5 s, one per 100 ms.
    clock.advance(99);
    await ticks();
    expect(hits).toBe(1);
    clock.advance(1);
    expect((await second).status).toBe(200);
    expect(hits).toBe(2);
  });

  it('Shopify: after 39/40, a 429 with Retry-After: 2.0 is retried after the pause and resolves with the 200', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    const statuses: number[] = [];
    server.use(
      http.get('https://shop.myshopify.com/admin/api/2024-01/products.json', () => {
        const n = statuses.length + 1;
        const response =
          n === 2
            ? new HttpResponse(JSON.stringify({ errors: 'Exceeded 2 calls per second for api client.' }), {
                status: 429,
                headers: { 'content-type': 'application/json', 'retry-after': '2.0' },
              })
            : HttpResponse.json(
                { products: [] },
                { headers: { 'x-shopify-shop-api-call-limit': n === 1 ? '39/40' : '1/40' } },
              );
        statuses.push(response.status);
        return response;
      }),
    );
    const url = 'https://shop.myshopify.com/admin/api/2024-01/products.json';
    expect((await fetch(url)).status).toBe(200);
    const paused = nextPause(gate);
    const second = fetch(url);
    const pause = await paused;
    expect(pause).toMatchObject({ key: 'https://shop.myshopify.com', untilMs: T0 + 2000 });
    clock.advance(1999);
    await ticks();
    expect(statuses).toEqual([200, 429]);
    clock.advance(1);
    const response = await second;
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ products: [] });
    expect(statuses).toEqual([200, 429, 200]);
  });

  it('IETF structured fields: r=0 with t holds the next call; a 429 with Retry-After is retried after it', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    const statuses: number[] = [];
    server.use(
      http.get('https://api.example.com/v1/items', () => {
        const n = statuses.length + 1;
        const status = n === 2 ? 429 : 200;
        statuses.push(status);
        return HttpResponse.json(
          { n },
          {
            status,
            headers: {
              'RateLimit-Policy': '"default";q=2;w=10',
              RateLimit: n === 3 ? '"default";r=1;t=10' : `"default";r=0;t=${n === 1 ? 10 : 3}`,
              ...(status === 429 ? { 'Retry-After': '3' } : {}),
            },
          },
        );
      }),
    );
    const url = 'https://api.example.com/v1/items';
    expect((await fetch(url)).status).toBe(200);
    const second = fetch(url);
    clock.advance(9999);
    await ticks();
    expect(statuses).toEqual([200]);
    const paused = nextPause(gate);
    clock.advance(1);
    // The second call is sent at the reset, draws a 429, and waits out its Retry-After.
    expect((await paused).untilMs).toBe(T0 + 10_000 + 3000);
    expect(statuses).toEqual([200, 429]);
    clock.advance(3000);
    const response = await second;
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ n: 3 });
  });

  it('a JSON error body is read (on a clone) for body-borne limits: Google RetryInfo sets the pause', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let hits = 0;
    const body = {
      error: {
        code: 429,
        status: 'RESOURCE_EXHAUSTED',
        details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '4s' }],
      },
    };
    server.use(
      http.get('https://generativelanguage.googleapis.com/v1/models', () => {
        hits++;
        return hits === 1 ? HttpResponse.json(body, { status: 429 }) : HttpResponse.json({ models: [] });
      }),
    );
    const paused = nextPause(gate);
    const call = fetch('https://generativelanguage.googleapis.com/v1/models');
    expect((await paused).untilMs).toBe(T0 + 4000);
    clock.advance(4000);
    expect(await (await call).json()).toEqual({ models: [] });
    expect(hits).toBe(2);
  });

  it('with errorBody: false the body is not read and the gate falls back to backoff', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate, { errorBody: false });
    let hits = 0;
    server.use(
      http.get('https://generativelanguage.googleapis.com/v1/models', () => {
        hits++;
        return hits === 1
          ? HttpResponse.json({ error: { details: [] } }, { status: 429 })
          : HttpResponse.json({ models: [] });
      }),
    );
    const paused = nextPause(gate);
    const call = fetch('https://generativelanguage.googleapis.com/v1/models');
    // Full jitter with random 0.5: floor(0.5 * 500) ms.
    expect((await paused).untilMs).toBe(T0 + 250);
    clock.advance(250);
    expect((await call).status).toBe(200);
  });
});

describe('retry rules', () => {
  it('a POST is retried on 429 (the server did not process it)', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    const bodies: string[] = [];
    server.use(
      http.post('https://api.example.com/v1/orders', async ({ request }) => {
        bodies.push(await request.text());
        return bodies.length === 1
          ? new HttpResponse(null, { status: 429, headers: { 'retry-after': '1' } })
          : HttpResponse.json({ created: true }, { status: 201 });
      }),
    );
    const paused = nextPause(gate);
    const call = fetch('https://api.example.com/v1/orders', { method: 'POST', body: '{"sku":1}' });
    await paused;
    clock.advance(1000);
    expect((await call).status).toBe(201);
    // The body was sent again, whole.
    expect(bodies).toEqual(['{"sku":1}', '{"sku":1}']);
  });

  it('a POST is not retried on 503 + Retry-After without retryUnsafeOn503: the 503 is returned', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let hits = 0;
    server.use(
      http.post('https://api.example.com/v1/orders', () => {
        hits++;
        return new HttpResponse('busy', { status: 503, headers: { 'retry-after': '1' } });
      }),
    );
    const response = await fetch('https://api.example.com/v1/orders', { method: 'POST', body: '{}' });
    expect(response.status).toBe(503);
    expect(await response.text()).toBe('busy');
    expect(hits).toBe(1);
  });

  it('a GET is retried on 503 + Retry-After; with retryUnsafeOn503 a POST is too', async () => {
    for (const [method, options] of [
      ['GET', {}],
      ['POST', { adapt: { retryUnsafeOn503: true } }],
    ] as const) {
      const gate = gateWith(options);
      const fetch = wrapFetch(gate);
      let hits = 0;
      server.use(
        http.all('https://api.example.com/v1/status', () => {
          hits++;
          return hits === 1
            ? new HttpResponse(null, { status: 503, headers: { 'retry-after': '2' } })
            : HttpResponse.json({ up: true });
        }),
      );
      const paused = nextPause(gate);
      const call = fetch('https://api.example.com/v1/status', { method });
      expect((await paused).untilMs).toBe(T0 + 2000);
      clock.advance(2000);
      expect((await call).status, method).toBe(200);
      expect(hits, method).toBe(2);
    }
  });

  it('a streamed request body is not retryable: a 429 on it rejects with RateLimitedError, sent once', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let hits = 0;
    server.use(
      http.post('https://api.example.com/v1/upload', () => {
        hits++;
        return new HttpResponse(null, { status: 429, headers: { 'retry-after': '1' } });
      }),
    );
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('chunk'));
        controller.close();
      },
    });
    const error = await rejectionOf(
      fetch('https://api.example.com/v1/upload', {
        method: 'POST',
        body: stream,
        duplex: 'half',
      } as RequestInit),
    );
    expect(error).toBeInstanceOf(RateLimitedError);
    expect(error).toMatchObject({ status: 429, attempts: 1, retryAt: T0 + 1000 });
    expect(hits).toBe(1);
  });

  it('a Request input with a body is cloned per attempt, so a retry sends the body again', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    const bodies: string[] = [];
    server.use(
      http.put('https://api.example.com/v1/doc', async ({ request }) => {
        bodies.push(await request.text());
        return bodies.length === 1
          ? new HttpResponse(null, { status: 429, headers: { 'retry-after': '1' } })
          : new HttpResponse(null, { status: 204 });
      }),
    );
    const request = new Request('https://api.example.com/v1/doc', { method: 'PUT', body: 'v2' });
    const paused = nextPause(gate);
    const call = fetch(request);
    await paused;
    clock.advance(1000);
    expect((await call).status).toBe(204);
    expect(bodies).toEqual(['v2', 'v2']);
    expect(request.bodyUsed).toBe(false);
  });
});

describe('cancellation, per-request options, keys', () => {
  const oneAMinute = { algorithm: 'token-bucket', limit: 1, intervalMs: 60_000 } as const;

  it('abort while queued rejects with AbortedError (the reason as cause) and fetch is never called', async () => {
    const gate = gateWith({ limits: [oneAMinute] });
    const sent: string[] = [];
    const fetch = wrapFetch(gate, {
      fetch: (input, init) => {
        sent.push(String(input));
        return globalThis.fetch(input, init);
      },
    });
    server.use(http.get('https://api.example.com/*', () => HttpResponse.json({})));
    await fetch('https://api.example.com/first');
    const controller = new AbortController();
    const queued = fetch('https://api.example.com/second', { signal: controller.signal });
    await ticks();
    expect(gate.stats().queued).toBe(1);
    const reason = new Error('user navigated away');
    controller.abort(reason);
    const error = await rejectionOf(queued);
    expect(error).toBeInstanceOf(AbortedError);
    expect((error as AbortedError).cause).toBe(reason);
    expect(gate.stats().queued).toBe(0);
    // An already-aborted signal is refused at once.
    expect(
      await rejectionOf(fetch('https://api.example.com/third', { signal: AbortSignal.abort() })),
    ).toBeInstanceOf(AbortedError);
    clock.advance(120_000);
    await ticks();
    expect(sent).toEqual(['https://api.example.com/first']);
  });

  it('the signal of a Request input aborts a queued call too', async () => {
    const gate = gateWith({ limits: [oneAMinute] });
    const fetch = wrapFetch(gate);
    server.use(http.get('https://api.example.com/*', () => HttpResponse.json({})));
    await fetch('https://api.example.com/first');
    const controller = new AbortController();
    const queued = fetch(new Request('https://api.example.com/second', { signal: controller.signal }));
    controller.abort();
    expect(await rejectionOf(queued)).toBeInstanceOf(AbortedError);
  });

  it('init.tollgate is honoured (cost, key, maxQueueTimeMs, priority) and removed before the real fetch', async () => {
    const gate = gateWith({ perKey: [{ algorithm: 'token-bucket', limit: 5, intervalMs: 60_000 }] });
    const seen: (RequestInit | undefined)[] = [];
    const fetch = wrapFetch(gate, {
      fetch: (input, init) => {
        seen.push(init);
        return globalThis.fetch(input, init);
      },
    });
    const order: string[] = [];
    server.use(
      http.get('https://api.example.com/v1/:name', ({ params }) => {
        order.push(String(params['name']));
        return HttpResponse.json({});
      }),
    );
    // cost 5 empties tenant-a's bucket; tenant-b has its own.
    await fetch('https://api.example.com/v1/a1', {
      headers: { 'x-trace': '1' },
      tollgate: { key: 'tenant-a', cost: 5 },
    });
    expect(seen[0]).toEqual({ headers: { 'x-trace': '1' } });
    expect(gate.stats('tenant-a').partition.limits[0]!.available).toBe(0);
    await fetch('https://api.example.com/v1/b1', withTollgate({}, { key: 'tenant-b' }));
    expect(gate.stats('tenant-b').partition.limits[0]!.available).toBe(4);
    // tenant-a waits 12 s for one token: beyond a 1 s deadline, refused at once and never sent.
    const late = await rejectionOf(
      fetch('https://api.example.com/v1/a2', { tollgate: { key: 'tenant-a', maxQueueTimeMs: 1000 } }),
    );
    expect(late).toBeInstanceOf(QueueTimeoutError);
    expect((late as QueueTimeoutError).predictedWaitMs).toBe(12_000);
    // Priority: queued low first, high second; high starts first.
    const low = fetch('https://api.example.com/v1/low', { tollgate: { key: 'tenant-a' } });
    const high = fetch('https://api.example.com/v1/high', { tollgate: { key: 'tenant-a', priority: 5 } });
    clock.advance(12_000);
    await high;
    clock.advance(12_000);
    await low;
    expect(order).toEqual(['a1', 'b1', 'high', 'low']);
    // Unknown per-request options are a mistake reported at once.
    const typo = await rejectionOf(
      fetch('https://api.example.com/v1/x', { tollgate: { prority: 1 } as unknown as { priority: number } }),
    );
    expect(typo).toBeInstanceOf(InvalidOptionError);
    expect((typo as InvalidOptionError).option).toBe('init.tollgate.prority');
  });

  it('requestOptions() supplies defaults, init.tollgate overrides them; actualCost settles tokens from a clone', async () => {
    const gate = gateWith({
      limits: [{ algorithm: 'token-bucket', limit: 10_000, intervalMs: 60_000, unit: 'tokens' }],
    });
    const fetch = wrapFetch(gate, {
      requestOptions: (_request, init) => ({
        cost: { requests: 1, tokens: (JSON.parse(String(init?.body)) as { max_tokens: number }).max_tokens },
      }),
      actualCost: async (response) => ({
        tokens: ((await response.json()) as { usage: { total_tokens: number } }).usage.total_tokens,
      }),
    });
    server.use(
      http.post('https://api.openai.com/v1/chat/completions', () =>
        HttpResponse.json({ usage: { total_tokens: 120 } }),
      ),
    );
    const tokens = () => gate.stats().limits[0]!.available;
    const response = await fetch('https://api.openai.com/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ max_tokens: 1000 }),
    });
    // Reserved 1000, used 120: 880 refunded. The caller's body is still unread.
    expect(tokens()).toBe(10_000 - 120);
    expect(await response.json()).toEqual({ usage: { total_tokens: 120 } });
    await fetch('https://api.openai.com/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ max_tokens: 1000 }),
      tollgate: { cost: { tokens: 3000 } },
    });
    expect(tokens()).toBe(10_000 - 240);
  });

  it('price.estimate is reserved on the budget and price.actual settles it', async () => {
    const gate = gateWith({ budget: { budgets: { limit: '$1', period: 'day' }, ledger: 'memory' } });
    const fetch = wrapFetch(gate, {
      price: {
        estimate: () => 50_000,
        actual: (response) => Number(response.headers.get('x-price-micros')),
      },
    });
    server.use(
      http.get('https://api.example.com/v1/paid', () =>
        HttpResponse.json({}, { headers: { 'x-price-micros': '1234' } }),
      ),
    );
    await fetch('https://api.example.com/v1/paid');
    expect(gate.spend()[0]).toMatchObject({ spentMicros: 1234, reservedMicros: 0 });
  });

  it('the default key is the origin: two origins (or ports) never block each other', async () => {
    const gate = gateWith({ perKey: [oneAMinute] });
    const fetch = wrapFetch(gate);
    server.use(http.get('https://*/v1/ping', () => HttpResponse.json({})));
    await fetch('https://a.example.com/v1/ping');
    await fetch('https://b.example.com/v1/ping');
    await fetch('https://a.example.com:8443/v1/ping');
    expect(
      await rejectionOf(fetch('https://a.example.com/v1/ping', { tollgate: { maxQueueTimeMs: 0 } })),
    ).toBeInstanceOf(QueueTimeoutError);
  });

  it('a 429 pauses only its own origin', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    let aHits = 0;
    server.use(
      http.get('https://a.example.com/v1/ping', () => {
        aHits++;
        return aHits === 1
          ? new HttpResponse(null, { status: 429, headers: { 'retry-after': '30' } })
          : HttpResponse.json({});
      }),
      http.get('https://b.example.com/v1/ping', () => HttpResponse.json({ b: true })),
    );
    const paused = nextPause(gate);
    const a = fetch('https://a.example.com/v1/ping');
    expect((await paused).key).toBe('https://a.example.com');
    expect(await (await fetch('https://b.example.com/v1/ping')).json()).toEqual({ b: true });
    clock.advance(30_000);
    expect((await a).status).toBe(200);
  });

  it('a key function partitions by a hashed API key, never the secret itself', async () => {
    const gate = gateWith({ perKey: [oneAMinute] });
    const fetch = wrapFetch(gate, {
      key: (request) => hashKey(request.headers.get('authorization') ?? ''),
    });
    server.use(http.get('https://api.example.com/v1/me', () => HttpResponse.json({})));
    await fetch('https://api.example.com/v1/me', { headers: { authorization: 'Bearer sk-one' } });
    await fetch('https://api.example.com/v1/me', { headers: { authorization: 'Bearer sk-two' } });
    const key = hashKey('Bearer sk-one');
    expect(key).toMatch(/^[0-9a-f]{16}$/);
    expect(gate.stats(key).partition.limits[0]!.available).toBe(0);
  });
});

describe('hostile servers and deadlines', () => {
  it('Retry-After of a day rejects that call quickly with RateLimitedError carrying retryAt; the pause is capped', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    server.use(
      http.get('https://evil.example.com/v1/x', () =>
        HttpResponse.json({}, { status: 429, headers: { 'retry-after': '86400' } }),
      ),
    );
    const error = await rejectionOf(fetch('https://evil.example.com/v1/x'));
    expect(error).toBeInstanceOf(RateLimitedError);
    expect(error).toMatchObject({ retryAt: T0 + 86_400_000, retryAfterMs: 86_400_000, status: 429 });
    // The partition pauses for maxRetryAfterMs (60 s) at most, not a day.
    expect(gate.stats('https://evil.example.com').partition.pausedUntil).toBe(T0 + 60_000);
  });

  it('garbage rate-limit headers are ignored: calls pass, nothing pauses or waits', async () => {
    const gate = gateWith();
    const fetch = wrapFetch(gate);
    server.use(
      http.get('https://junk.example.com/v1/x', () =>
        HttpResponse.json(
          {},
          {
            headers: {
              'x-ratelimit-limit': 'NaN',
              'x-ratelimit-remaining': '-1',
              'x-ratelimit-reset': '1e999',
              ratelimit: '"requests";r=fifty;t=2.5',
              'retry-after': 'soon',
            },
          },
        ),
      ),
    );
    for (let i = 0; i < 5; i++) expect((await fetch('https://junk.example.com/v1/x')).status).toBe(200);
    expect(gate.stats('https://junk.example.com').partition).toMatchObject({ queued: 0, pausedUntil: 0 });
  });

  it('maxQueueTimeMs: a retry that cannot restart in time is refused; a call behind a long pause is refused at once', async () => {
    const gate = gateWith({ maxQueueTimeMs: 1000 });
    const fetch = wrapFetch(gate);
    let hits = 0;
    server.use(
      http.get('https://slow.example.com/v1/x', () => {
        hits++;
        return new HttpResponse(null, { status: 429, headers: { 'retry-after': '5' } });
      }),
    );
    const error = await rejectionOf(fetch('https://slow.example.com/v1/x'));
    expect(error).toBeInstanceOf(RateLimitedError);
    expect((error as RateLimitedError).retryAt).toBe(T0 + 5000);
    const queued = await rejectionOf(fetch('https://slow.example.com/v1/x'));
    expect(queued).toBeInstanceOf(QueueTimeoutError);
    expect((queued as QueueTimeoutError).predicted).toBe(true);
    expect(hits).toBe(1);
  });
});

describe('wrapFetch options', () => {
  it('is a drop-in fetch and validates its options at creation, naming the option', () => {
    const gate = gateWith();
    const typed: typeof fetch = wrapFetch(gate);
    expect(typeof typed).toBe('function');
    const cases: [unknown, unknown, string][] = [
      [gate, { fetch: 'no' }, 'fetch'],
      [gate, { retries: 3 }, 'retries'],
      [gate, { key: 1 }, 'key'],
      [gate, { price: { estimate: 5 } }, 'price.estimate'],
      [gate, { price: { guess: () => 1 } }, 'price.guess'],
      [gate, { errorBody: { maxBytes: -1 } }, 'errorBody.maxBytes'],
      // Longer than a Node timer keeps: it would fire at once and the body would go unread.
      [gate, { errorBody: { timeoutMs: 2 ** 31 } }, 'errorBody.timeoutMs'],
      [gate, 'options', 'options'],
      [{}, undefined, 'gate'],
    ];
    for (const [g, options, option] of cases) {
      let error: unknown;
      try {
        wrapFetch(g as Gate, options as never);
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(InvalidOptionError);
      expect((error as InvalidOptionError).option).toBe(option);
    }
  });

  it('hashKey is a SHA-256 hex prefix', () => {
    expect(hashKey('abc')).toBe('ba7816bf8f01cfea');
    expect(hashKey('abc', 64)).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(() => hashKey('abc', 0)).toThrow(InvalidOptionError);
  });
});

describe('on a loopback server (real fetch, real sockets)', () => {
  const loopbacks: ScriptedServer[] = [];
  afterEach(async () => {
    await Promise.all(loopbacks.splice(0).map((loopback) => loopback.close()));
  });

  /** `promise`, or a rejection after `ms` real ms: bounds what only a regression would leave pending. */
  function within<T>(promise: Promise<T>, ms: number): Promise<T> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`still pending after ${ms} ms`)), ms);
    });
    return Promise.race([promise, late]).finally(() => clearTimeout(timer));
  }

  it('a price hook reading a header holds no connection: a retried 429 and a cancelled body close their sockets', async () => {
    const socketsClosed: Promise<void>[] = [];
    const loopback = await startScriptedServer((_request, n, res) => {
      socketsClosed.push(new Promise((resolve) => res.on('close', () => resolve())));
      // A long body that never ends (a big error page, a stream): only a cancel releases the socket.
      res.writeHead(n === 1 ? 429 : 200, { 'retry-after': '0', 'x-price-micros': '5' });
      res.write('x'.repeat(200_000));
    });
    loopbacks.push(loopback);
    const gate = gateWith();
    const prices: number[] = [];
    const fetch = wrapFetch(gate, {
      fetch: realFetch,
      price: {
        actual: (response) => {
          prices.push(Number(response.headers.get('x-price-micros')));
          return 5;
        },
      },
    });
    const response = await fetch(`${loopback.url}/v1/page`);
    expect(response.status).toBe(200);
    expect(prices).toEqual([5, 5]);
    // The gate cancelled the 429's body; the caller drops the 200's. No clone keeps either open (a
    // cancel of one branch of a tee settles only when the other branch is cancelled too).
    const cancelled = response.body!.cancel();
    await within(Promise.all([cancelled, ...socketsClosed]), 2000);
    expect(socketsClosed).toHaveLength(2);
  });

  it("RateLimitedError's cause is the last response's head: status and headers, not the URL's api_key", async () => {
    const loopback = await startScriptedServer((_request, _n, res) => {
      res.writeHead(429, { 'retry-after': '86400', 'x-ratelimit-remaining': '0' });
      res.end('slow down');
    });
    loopbacks.push(loopback);
    const fetch = wrapFetch(gateWith(), { fetch: realFetch });
    const error = await rejectionOf(
      fetch(`${loopback.url}/v1/x?api_key=SECRET-QUERY`, {
        headers: { authorization: 'Bearer SECRET-TOKEN' },
      }),
    );
    expect(error).toBeInstanceOf(RateLimitedError);
    const cause = (error as RateLimitedError).cause as ResponseHead;
    expect(cause.status).toBe(429);
    expect(cause.headers.get('retry-after')).toBe('86400');
    expect(cause.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(inspect(error, { depth: 10 })).not.toContain('SECRET');
    expect(inspect(error, { depth: 10, showHidden: true })).not.toContain('SECRET');
  });
});
