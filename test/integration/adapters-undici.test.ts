/**
 * tollgateInterceptor with undici 7's Agent.compose, against real loopback servers. The gate runs on
 * a manual clock: sockets are real, waits are moved by hand.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import { inspect } from 'node:util';
import {
  Agent,
  type Dispatcher,
  getGlobalDispatcher,
  request,
  setGlobalDispatcher,
  Request as UndiciRequest,
  fetch as undiciFetch,
} from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { wrapFetch } from '../../src/adapters/fetch.js';
import type { ResponseHead } from '../../src/adapters/response-head.js';
import { tollgateInterceptor } from '../../src/adapters/undici.js';
import { InvalidOptionError, isTollgateError, RateLimitedError } from '../../src/errors.js';
import { createGate, type Gate } from '../../src/gate/gate.js';
import type { GateOptions } from '../../src/gate/options.js';
import { nextPause, rejectionOf, T0, ticks } from '../helpers/adapter-gate.js';
import {
  json,
  type RecordedRequest,
  type ScriptedServer,
  startScriptedServer,
} from '../helpers/adapter-server.js';
import { ManualClock } from '../helpers/manual-clock.js';

const servers: ScriptedServer[] = [];
const agents: Agent[] = [];
afterEach(async () => {
  await Promise.all(agents.splice(0).map((agent) => agent.close()));
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

async function serve(
  respond: Parameters<typeof startScriptedServer>[0],
): Promise<ScriptedServer & { requests: RecordedRequest[] }> {
  const server = await startScriptedServer(respond);
  servers.push(server);
  return server;
}

let clock: ManualClock;
function setup(
  gateOptions: GateOptions = {},
  options?: Parameters<typeof tollgateInterceptor>[1],
): { gate: Gate; dispatcher: Dispatcher } {
  clock = new ManualClock(T0);
  const gate = createGate({ clock, random: () => 0.5, ...gateOptions });
  const agent = new Agent();
  agents.push(agent);
  return { gate, dispatcher: agent.compose(tollgateInterceptor(gate, options)) };
}

/** `promise`, or a rejection after `ms` real ms: bounds what only a regression would leave pending. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still pending after ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** A new-API handler that records what it is told. */
function recorder() {
  const events: string[] = [];
  let body = '';
  let controller: Dispatcher.DispatchController | undefined;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c;
      events.push('start');
    },
    onResponseStart(_c, statusCode) {
      events.push(`head ${statusCode}`);
    },
    onResponseData(_c, chunk) {
      body += chunk.toString('utf8');
    },
    onResponseEnd() {
      events.push('end');
      finish();
    },
    onResponseError(_c, error) {
      events.push(`error ${isTollgateError(error) ? error.code : error.message}`);
      finish();
    },
  };
  return { handler, events, finished, body: () => body, controller: () => controller };
}

describe('tollgateInterceptor', () => {
  it("a 429 retried by the gate never reaches the caller's handler; the 200 does, body intact", async () => {
    const server = await serve((_req, n, res) =>
      n === 1
        ? json(res, 429, { error: 'slow down' }, { 'retry-after': '2' })
        : json(res, 200, { ok: true, n }),
    );
    const { gate, dispatcher } = setup();
    const rec = recorder();
    const paused = nextPause(gate);
    dispatcher.dispatch({ origin: server.url, path: '/v1/x', method: 'GET' }, rec.handler);
    expect((await paused).untilMs).toBe(T0 + 2000);
    expect(rec.events).toEqual(['start']);
    clock.advance(2000);
    await rec.finished;
    expect(rec.events).toEqual(['start', 'head 200', 'end']);
    expect(JSON.parse(rec.body())).toEqual({ ok: true, n: 2 });
    expect(server.requests).toHaveLength(2);
  });

  it('undici.request resolves with the retried response', async () => {
    const server = await serve((_req, n, res) =>
      n === 1 ? json(res, 429, {}, { 'retry-after': '1' }) : json(res, 200, { n }),
    );
    const { gate, dispatcher } = setup();
    const paused = nextPause(gate);
    const call = request(`${server.url}/v1/x`, { dispatcher });
    await paused;
    clock.advance(1000);
    const response = await call;
    expect(response.statusCode).toBe(200);
    expect(await response.body.json()).toEqual({ n: 2 });
  });

  it('a POST body (string, or a stream buffered for replay) is sent again whole on retry', async () => {
    const server = await serve((_req, n, res) =>
      n % 2 === 1 ? json(res, 429, {}, { 'retry-after': '1' }) : json(res, 201, {}),
    );
    const { gate, dispatcher } = setup();
    for (const body of ['{"a":1}', Readable.from([Buffer.from('{"b":'), Buffer.from('2}')])]) {
      const paused = nextPause(gate);
      const call = request(`${server.url}/v1/orders`, { dispatcher, method: 'POST', body });
      await paused;
      clock.advance(1000);
      expect((await call).statusCode).toBe(201);
    }
    expect(server.requests.map((r) => r.body)).toEqual(['{"a":1}', '{"a":1}', '{"b":2}', '{"b":2}']);
  });

  it('a stream body longer than replayBodyMaxBytes streams on and is not retried', async () => {
    const server = await serve((_req, _n, res) => json(res, 429, {}, { 'retry-after': '1' }));
    const { dispatcher } = setup({}, { replayBodyMaxBytes: 4 });
    const error = await rejectionOf(
      request(`${server.url}/v1/upload`, {
        dispatcher,
        method: 'POST',
        body: Readable.from([Buffer.from('abc'), Buffer.from('def'), Buffer.from('ghi')]),
      }),
    );
    expect(error).toBeInstanceOf(RateLimitedError);
    expect(server.requests.map((r) => r.body)).toEqual(['abcdefghi']);
  });

  it('abort while queued: the handler gets the abort reason, nothing is sent', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, {}));
    const { gate, dispatcher } = setup({
      limits: [{ algorithm: 'token-bucket', limit: 1, intervalMs: 60_000 }],
    });
    await (await request(`${server.url}/first`, { dispatcher })).body.text();
    const controller = new AbortController();
    const reason = new Error('not needed any more');
    const queued = request(`${server.url}/second`, { dispatcher, signal: controller.signal });
    await ticks();
    expect(gate.stats().queued).toBe(1);
    controller.abort(reason);
    expect(await rejectionOf(queued)).toBe(reason);
    expect(gate.stats().queued).toBe(0);
    clock.advance(60_000);
    await ticks();
    expect(server.requests.map((r) => r.url)).toEqual(['/first']);
  });

  it('abort while an unended upload is read for replay: the handler gets the reason once, the body is destroyed, the slot is freed', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, {}));
    const { gate, dispatcher } = setup({ limits: [{ algorithm: 'concurrency', limit: 1 }] });
    const body = new Readable({ read() {} });
    body.push('partial'); // the upload goes on: no end yet
    const rec = recorder();
    dispatcher.dispatch({ origin: server.url, path: '/v1/upload', method: 'POST', body }, rec.handler);
    await ticks();
    expect(gate.stats().inFlight).toBe(1);
    rec.controller()!.abort(new Error('caller gave up'));
    await within(rec.finished, 2000);
    await ticks();
    expect(rec.events).toEqual(['start', 'error caller gave up']);
    expect(body.destroyed).toBe(true);
    expect(gate.stats().inFlight).toBe(0);
    // The gate's only slot is free: the next request goes out.
    const next = await within(request(`${server.url}/v1/next`, { dispatcher }), 2000);
    expect(next.statusCode).toBe(200);
    await next.body.text();
    expect(server.requests.map((r) => r.url)).toEqual(['/v1/next']);
  });

  it('abort while the caller has paused the response body: its handler hears the abort', async () => {
    const server = await serve((_req, _n, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      // A body longer than one chunk, and unended: the caller pauses after the first chunk.
      res.write(Buffer.alloc(64 * 1024, 97));
    });
    const { gate, dispatcher } = setup({ limits: [{ algorithm: 'concurrency', limit: 1 }] });
    const rec = recorder();
    let paused = false;
    const handler: Dispatcher.DispatchHandler = {
      ...rec.handler,
      onResponseData(c, chunk) {
        rec.handler.onResponseData?.(c, chunk);
        if (!paused) {
          paused = true;
          c.pause();
          setImmediate(() => c.abort(new Error('caller gave up')));
        }
      },
    };
    dispatcher.dispatch({ origin: server.url, path: '/v1/big', method: 'GET' }, handler);
    await within(rec.finished, 2000);
    expect(rec.events).toEqual(['start', 'head 200', 'error caller gave up']);
    await ticks();
    expect(gate.stats().inFlight).toBe(0);
  });

  it('a JSON error body is read for body-borne limits and replayed whole to the caller when kept', async () => {
    const retryInfo = {
      error: { details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '3s' }] },
    };
    const server = await serve((_req, n, res) =>
      n === 1 ? json(res, 429, retryInfo) : json(res, 404, { error: 'not found', n }),
    );
    const { gate, dispatcher } = setup();
    const paused = nextPause(gate);
    const call = request(`${server.url}/v1/models`, { dispatcher });
    expect((await paused).untilMs).toBe(T0 + 3000);
    clock.advance(3000);
    const response = await call;
    expect(response.statusCode).toBe(404);
    expect(await response.body.json()).toEqual({ error: 'not found', n: 2 });
  });

  it('a large body streams through with backpressure, unbuffered', async () => {
    const size = 4 * 1024 * 1024;
    const server = await serve((_req, _n, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(size) });
      res.end(Buffer.alloc(size, 7));
    });
    const { dispatcher } = setup();
    const response = await request(`${server.url}/blob`, { dispatcher });
    let received = 0;
    for await (const chunk of response.body) received += (chunk as Buffer).length;
    expect(received).toBe(size);
  });

  it('pause and resume from the caller reach the live response', async () => {
    const server = await serve((_req, _n, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('one,');
      setTimeout(() => res.end('two'), 20);
    });
    const { dispatcher } = setup();
    const rec = recorder();
    const handler: Dispatcher.DispatchHandler = {
      ...rec.handler,
      onResponseStart(controller, statusCode, headers, statusMessage) {
        rec.handler.onResponseStart?.(controller, statusCode, headers, statusMessage);
        controller.pause();
        setTimeout(() => controller.resume(), 30);
      },
    };
    dispatcher.dispatch({ origin: server.url, path: '/', method: 'GET' }, handler);
    await rec.finished;
    expect(rec.events).toEqual(['start', 'head 200', 'end']);
    expect(rec.body()).toBe('one,two');
  });

  it('a handler that throws in onResponseStart gets onResponseError with its error, once', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, { big: 'x'.repeat(100_000) }));
    const { dispatcher } = setup();
    const rec = recorder();
    const boom = new Error('handler bug');
    dispatcher.dispatch(
      { origin: server.url, path: '/', method: 'GET' },
      {
        ...rec.handler,
        onResponseStart() {
          throw boom;
        },
      },
    );
    await rec.finished;
    await ticks();
    expect(rec.events).toEqual(['start', 'error handler bug']);
  });

  it('closing the gate rejects queued requests with GateClosedError', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, {}));
    const { gate, dispatcher } = setup({
      limits: [{ algorithm: 'token-bucket', limit: 1, intervalMs: 60_000 }],
    });
    await (await request(`${server.url}/first`, { dispatcher })).body.text();
    const rec = recorder();
    dispatcher.dispatch({ origin: server.url, path: '/second', method: 'GET' }, rec.handler);
    await gate.close({ queued: 'reject' });
    await rec.finished;
    expect(rec.events).toEqual(['start', 'error ERR_GATE_CLOSED']);
    expect(server.requests).toHaveLength(1);
  });

  it('a Retry-After of a day rejects with RateLimitedError at once', async () => {
    const server = await serve((_req, _n, res) => json(res, 429, {}, { 'retry-after': '86400' }));
    const { dispatcher } = setup();
    const error = await rejectionOf(request(`${server.url}/x`, { dispatcher }));
    expect(error).toBeInstanceOf(RateLimitedError);
    expect((error as RateLimitedError).retryAt).toBe(T0 + 86_400_000);
  });

  it("RateLimitedError's cause is the last response's head: no request path query or headers, also through fetch", async () => {
    const server = await serve((_req, _n, res) =>
      json(res, 429, {}, { 'retry-after': '86400', 'x-ratelimit-remaining': '0' }),
    );
    const { dispatcher } = setup();
    const url = `${server.url}/v1/x?api_key=SECRET-QUERY`;
    const headers = { authorization: 'Bearer SECRET-TOKEN', 'x-api-key': 'SECRET-KEY' };
    const error = await rejectionOf(request(url, { dispatcher, headers }));
    expect(error).toBeInstanceOf(RateLimitedError);
    const cause = (error as RateLimitedError).cause as ResponseHead<IncomingHttpHeaders>;
    expect(cause.status).toBe(429);
    expect(cause.headers).toMatchObject({ 'retry-after': '86400', 'x-ratelimit-remaining': '0' });
    expect(inspect(error, { depth: 10 })).not.toContain('SECRET');
    expect(inspect(error, { depth: 10, showHidden: true })).not.toContain('SECRET');
    // Through Node's fetch (a fresh gate: this one pauses the origin): TypeError('fetch failed')
    // whose cause is that RateLimitedError.
    const previous = getGlobalDispatcher();
    setGlobalDispatcher(setup().dispatcher);
    try {
      const failed = await rejectionOf(fetch(url, { headers }));
      expect((failed as Error).cause).toBeInstanceOf(RateLimitedError);
      expect(inspect(failed, { depth: 10 })).not.toContain('SECRET');
    } finally {
      setGlobalDispatcher(previous);
    }
  });

  it('the default key is the origin; opts.tollgate and requestOptions are honoured', async () => {
    const a = await serve((_req, _n, res) => json(res, 200, {}));
    const b = await serve((_req, _n, res) => json(res, 200, {}));
    const { gate, dispatcher } = setup(
      { perKey: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 60_000 }] },
      { requestOptions: (opts) => (opts.method === 'POST' ? { cost: 4 } : undefined) },
    );
    await (await request(`${a.url}/x`, { dispatcher, method: 'POST', body: '{}' })).body.text();
    await (await request(`${b.url}/x`, { dispatcher })).body.text();
    await (
      await request(`${b.url}/x`, { dispatcher, tollgate: { cost: 3 } } as Parameters<typeof request>[1])
    ).body.text();
    expect(gate.stats(a.url).partition.limits[0]!.available).toBe(6);
    expect(gate.stats(b.url).partition.limits[0]!.available).toBe(6);
  });

  it("Node's global fetch is throttled through setGlobalDispatcher (and the dispatcher restored)", async () => {
    const server = await serve((req, n, res) =>
      n === 1 ? json(res, 429, {}, { 'retry-after': '1' }) : json(res, 200, { echo: req.body }),
    );
    const { gate, dispatcher } = setup();
    const previous = getGlobalDispatcher();
    setGlobalDispatcher(dispatcher);
    try {
      const paused = nextPause(gate);
      const call = fetch(`${server.url}/v1/chat`, { method: 'POST', body: '{"q":1}' });
      await paused;
      clock.advance(1000);
      const response = await call;
      expect(response.status).toBe(200);
      // Node's fetch hands the body over as an async iterable: buffered, it was sent again whole.
      expect(await response.json()).toEqual({ echo: '{"q":1}' });
      expect(server.requests.map((r) => r.body)).toEqual(['{"q":1}', '{"q":1}']);

      // Abort while queued behind a pause: fetch rejects with its AbortError, nothing is sent.
      gate.pauseFor(10_000, server.url);
      const controller = new AbortController();
      const queued = fetch(`${server.url}/v1/later`, { signal: controller.signal });
      await ticks();
      controller.abort();
      expect(((await rejectionOf(queued)) as Error).name).toBe('AbortError');
      clock.advance(10_000);
      await ticks();
      expect(server.requests).toHaveLength(2);
    } finally {
      setGlobalDispatcher(previous);
    }
  });

  it("Node's global fetch: aborting a streamed upload before it ends frees the gate's slot", async () => {
    const server = await serve((_req, _n, res) => json(res, 200, {}));
    const { gate, dispatcher } = setup({ limits: [{ algorithm: 'concurrency', limit: 1 }] });
    const previous = getGlobalDispatcher();
    setGlobalDispatcher(dispatcher);
    try {
      // Not closed: the interceptor is still buffering it (for a replay) when the caller aborts.
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('part'));
        },
      });
      const controller = new AbortController();
      const call = fetch(`${server.url}/v1/upload`, {
        method: 'POST',
        body,
        duplex: 'half',
        signal: controller.signal,
      } as RequestInit);
      await ticks();
      expect(gate.stats().inFlight).toBe(1);
      controller.abort();
      expect(((await rejectionOf(call)) as Error).name).toBe('AbortError');
      const next = await within(fetch(`${server.url}/v1/next`), 2000);
      expect(next.status).toBe(200);
      await next.text();
      expect(gate.stats().inFlight).toBe(0);
      expect(server.requests.map((r) => r.url)).toEqual(['/v1/next']);
    } finally {
      setGlobalDispatcher(previous);
    }
  });

  it("wrapFetch accepts undici's own fetch and Request classes (cloned per attempt)", async () => {
    const server = await serve((req, n, res) =>
      n === 1 ? json(res, 429, {}, { 'retry-after': '1' }) : json(res, 200, { echo: req.body }),
    );
    clock = new ManualClock(T0);
    const gate = createGate({ clock });
    const throttled = wrapFetch(gate, { fetch: undiciFetch });
    const input = new UndiciRequest(`${server.url}/v1/x`, { method: 'POST', body: 'payload' });
    const paused = nextPause(gate);
    const call = throttled(input as unknown as Request);
    await paused;
    clock.advance(1000);
    const response = await call;
    expect(await response.json()).toEqual({ echo: 'payload' });
    expect(server.requests.map((r) => r.body)).toEqual(['payload', 'payload']);
  });

  it('validates its options at creation, naming the option', () => {
    const gate = createGate();
    for (const [options, option] of [
      [{ replayBodyMaxBytes: -1 }, 'replayBodyMaxBytes'],
      [{ key: 'origin' }, 'key'],
      [{ errorBody: { timeoutMs: 1.5 } }, 'errorBody.timeoutMs'],
      [{ cost: 1 }, 'cost'],
    ] as const) {
      let error: unknown;
      try {
        tollgateInterceptor(gate, options as never);
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(InvalidOptionError);
      expect((error as InvalidOptionError).option).toBe(option);
    }
  });
});
