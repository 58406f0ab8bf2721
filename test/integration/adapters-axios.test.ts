import { inspect } from 'node:util';
/**
 * throttleAxios against real loopback servers with axios' http adapter. The gate runs on a manual
 * clock: sockets are real, waits are moved by hand.
 */
import axios, { AxiosError, type AxiosInstance } from 'axios';
import { afterEach, describe, expect, it } from 'vitest';
import { throttleAxios } from '../../src/adapters/axios.js';
import { InvalidOptionError, QueueTimeoutError, RateLimitedError } from '../../src/errors.js';
import { createGate, type Gate } from '../../src/gate/gate.js';
import type { GateOptions } from '../../src/gate/options.js';
import { nextPause, rejectionOf, T0, ticks } from '../helpers/adapter-gate.js';
import { json, type ScriptedServer, startScriptedServer } from '../helpers/adapter-server.js';
import { ManualClock } from '../helpers/manual-clock.js';

const servers: ScriptedServer[] = [];
const disposers: (() => void)[] = [];
afterEach(async () => {
  for (const dispose of disposers.splice(0)) dispose();
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

async function serve(respond: Parameters<typeof startScriptedServer>[0]): Promise<ScriptedServer> {
  const server = await startScriptedServer(respond);
  servers.push(server);
  return server;
}

let clock: ManualClock;
function setup(
  instance: AxiosInstance,
  gateOptions: GateOptions = {},
  options?: Parameters<typeof throttleAxios>[2],
): Gate {
  clock = new ManualClock(T0);
  const gate = createGate({ clock, random: () => 0.5, ...gateOptions });
  disposers.push(throttleAxios(instance, gate, { axios, ...options }));
  return gate;
}

describe('throttleAxios', () => {
  it('keeps the config: baseURL, params, headers, auth, and transforms the response as usual', async () => {
    const server = await serve((req, _n, res) =>
      json(res, 200, { url: req.url, key: req.headers['x-api-key'] }),
    );
    const instance = axios.create({ baseURL: `${server.url}/v1`, headers: { 'x-api-key': 'k-1' } });
    setup(instance);
    const response = await instance.get('/items', {
      params: { page: 2 },
      auth: { username: 'u', password: 'p' },
    });
    expect(response.status).toBe(200);
    expect(response.data).toEqual({ url: '/v1/items?page=2', key: 'k-1' });
    expect(server.requests[0]!.headers.authorization).toBe(`Basic ${Buffer.from('u:p').toString('base64')}`);
    expect(response.config.baseURL).toBe(`${server.url}/v1`);
  });

  it('a 429 with Retry-After is retried after the pause; the caller gets the 200, its JSON body sent twice', async () => {
    const server = await serve((_req, n, res) =>
      n === 1 ? json(res, 429, { error: 'rate' }, { 'retry-after': '2' }) : json(res, 201, { id: 7 }),
    );
    const instance = axios.create();
    const gate = setup(instance);
    const paused = nextPause(gate);
    const call = instance.post(`${server.url}/v1/orders`, { sku: 'a' });
    expect((await paused).untilMs).toBe(T0 + 2000);
    clock.advance(2000);
    const response = await call;
    expect(response.status).toBe(201);
    expect(response.data).toEqual({ id: 7 });
    expect(server.requests.map((r) => r.body)).toEqual(['{"sku":"a"}', '{"sku":"a"}']);
  });

  it('errors of other statuses are axios errors, unchanged and not retried', async () => {
    const server = await serve((req, _n, res) =>
      json(res, req.url === '/missing' ? 404 : 500, { error: req.url }, { 'retry-after': '1' }),
    );
    const instance = axios.create({ baseURL: server.url });
    setup(instance);
    for (const [path, status] of [
      ['/missing', 404],
      ['/broken', 500],
    ] as const) {
      const error = await rejectionOf(instance.post(path, {}));
      expect(axios.isAxiosError(error)).toBe(true);
      expect(error).toBeInstanceOf(AxiosError);
      expect((error as AxiosError).response?.status).toBe(status);
      expect((error as AxiosError).response?.data).toEqual({ error: path });
      expect((error as AxiosError).code).toBe(status === 404 ? 'ERR_BAD_REQUEST' : 'ERR_BAD_RESPONSE');
    }
    expect(server.requests).toHaveLength(2);
  });

  it('a 429 the gate gives up on is the AxiosError of the last attempt, with RateLimitedError as its cause', async () => {
    const server = await serve((_req, _n, res) => json(res, 429, { error: 'rate' }, { 'retry-after': '1' }));
    const instance = axios.create({ baseURL: server.url });
    const gate = setup(instance, { adapt: { maxRetries: 1 } });
    const paused = nextPause(gate);
    const call = rejectionOf(instance.get('/x'));
    await paused;
    clock.advance(1000);
    const error = (await call) as AxiosError;
    expect(axios.isAxiosError(error)).toBe(true);
    expect(error.response?.status).toBe(429);
    expect(error.response?.data).toEqual({ error: 'rate' });
    expect(error.cause).toBeInstanceOf(RateLimitedError);
    expect(error.cause).toMatchObject({ attempts: 2, retryAt: T0 + 2000 });
    expect(server.requests).toHaveLength(2);
  });

  it('a Retry-After of a day rejects at once, the response attached and retryAt in the cause', async () => {
    const server = await serve((_req, _n, res) => json(res, 429, {}, { 'retry-after': '86400' }));
    const instance = axios.create({ baseURL: server.url });
    setup(instance);
    const error = (await rejectionOf(instance.get('/x'))) as AxiosError;
    expect(error.response?.status).toBe(429);
    expect((error.cause as RateLimitedError).retryAt).toBe(T0 + 86_400_000);
  });

  it("RateLimitedError's cause is the last response's head: status and headers, nothing of the request", async () => {
    const server = await serve((_req, _n, res) => json(res, 429, {}, { 'retry-after': '86400' }));
    const instance = axios.create({ baseURL: server.url });
    setup(instance);
    const error = (await rejectionOf(
      instance.get('/x?api_key=SECRET_QUERY', {
        headers: { authorization: 'Bearer SECRET_AUTH', 'x-api-key': 'SECRET_XKEY' },
      }),
    )) as AxiosError;
    const cause = error.cause as RateLimitedError;
    expect(cause.cause).toMatchObject({ status: 429 });
    expect(Object.keys(cause.cause as object).sort()).toEqual(['headers', 'status', 'statusText']);
    const printed = inspect(cause, { depth: 10, showHidden: true });
    for (const secret of ['SECRET_QUERY', 'SECRET_AUTH', 'SECRET_XKEY'])
      expect(printed).not.toContain(secret);
  });

  it('with a validateStatus that accepts 429, the gate still retries; a final 429 resolves as axios would', async () => {
    const server = await serve((_req, n, res) => json(res, 429, { n }, { 'retry-after': '1' }));
    const instance = axios.create({ baseURL: server.url, validateStatus: () => true });
    const gate = setup(instance, { adapt: { maxRetries: 1 } });
    const paused = nextPause(gate);
    const call = instance.get('/x');
    await paused;
    clock.advance(1000);
    const response = await call;
    expect(response.status).toBe(429);
    expect(response.data).toEqual({ n: 2 });
  });

  it('cancellation while queued (signal or CancelToken) rejects with CanceledError; nothing is sent', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, {}));
    const instance = axios.create({ baseURL: server.url });
    const gate = setup(instance, { limits: [{ algorithm: 'token-bucket', limit: 1, intervalMs: 60_000 }] });
    await instance.get('/first');
    const controller = new AbortController();
    const bySignal = rejectionOf(instance.get('/second', { signal: controller.signal }));
    const source = axios.CancelToken.source();
    const byToken = rejectionOf(instance.get('/third', { cancelToken: source.token }));
    await ticks();
    expect(gate.stats().queued).toBe(2);
    controller.abort();
    source.cancel('changed my mind');
    for (const error of [await bySignal, await byToken]) {
      expect(axios.isCancel(error)).toBe(true);
      expect((error as AxiosError).code).toBe('ERR_CANCELED');
    }
    expect(((await byToken) as Error).message).toBe('changed my mind');
    expect(gate.stats().queued).toBe(0);
    clock.advance(120_000);
    await ticks();
    expect(server.requests.map((r) => r.url)).toEqual(['/first']);
  });

  it('config.tollgate is honoured; the default key is the origin; dispose removes the throttling', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, {}));
    const instance = axios.create({ baseURL: server.url });
    const gate = createGate({
      clock: new ManualClock(T0),
      perKey: [{ algorithm: 'token-bucket', limit: 5, intervalMs: 60_000 }],
    });
    const dispose = throttleAxios(instance, gate, { axios });
    await instance.get('/a', { tollgate: { cost: 5 } });
    expect(gate.stats(server.url).partition.limits[0]!.available).toBe(0);
    expect(await rejectionOf(instance.get('/b', { tollgate: { maxQueueTimeMs: 0 } }))).toBeInstanceOf(
      QueueTimeoutError,
    );
    const typo = await rejectionOf(instance.get('/c', { tollgate: { coast: 1 } as never }));
    expect((typo as InvalidOptionError).option).toBe('config.tollgate.coast');
    dispose();
    expect((await instance.get('/d', { tollgate: { maxQueueTimeMs: 0 } })).status).toBe(200);
    expect(server.requests.map((r) => r.url)).toEqual(['/a', '/d']);
  });

  it('a config sent again (as axios-retry does) goes through the gate once, not twice', async () => {
    const server = await serve((_req, n, res) => json(res, n === 1 ? 500 : 200, {}));
    const instance = axios.create({ baseURL: server.url });
    const gate = setup(instance);
    const error = (await rejectionOf(instance.get('/x'))) as AxiosError;
    const before = gate.stats().started;
    expect((await instance.request(error.config!)).status).toBe(200);
    expect(gate.stats().started).toBe(before + 1);
  });

  it('the actualCost hook sees parsed JSON and settles tokens', async () => {
    const server = await serve((_req, _n, res) => json(res, 200, { usage: { total_tokens: 42 } }));
    const instance = axios.create({ baseURL: server.url });
    const gate = setup(
      instance,
      { limits: [{ algorithm: 'token-bucket', limit: 1000, intervalMs: 60_000, unit: 'tokens' }] },
      {
        requestOptions: () => ({ cost: { tokens: 500 } }),
        actualCost: (response) => ({
          tokens: (response.data as { usage: { total_tokens: number } }).usage.total_tokens,
        }),
      },
    );
    const response = await instance.post('/v1/chat', {});
    expect(response.data).toEqual({ usage: { total_tokens: 42 } });
    expect(gate.stats().limits[0]!.available).toBe(1000 - 42);
  });

  it('validates at creation: an axios.create() instance needs the axios option to resolve adapter names', () => {
    const gate = createGate();
    const cases: [unknown, unknown, string][] = [
      [axios.create(), undefined, 'axios'],
      [axios.create(), { axios: {} }, 'axios'],
      [{}, undefined, 'instance'],
      [axios.create(), { axios, limit: 1 }, 'limit'],
    ];
    for (const [instance, options, option] of cases) {
      let error: unknown;
      try {
        throttleAxios(instance as AxiosInstance, gate, options as never);
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(InvalidOptionError);
      expect((error as InvalidOptionError).option).toBe(option);
    }
    // The default export resolves its own adapters; a function adapter needs nothing.
    throttleAxios(axios, gate)();
    throttleAxios(
      axios.create({
        adapter: async (config) => ({ data: 1, status: 200, statusText: 'OK', headers: {}, config }),
      }),
      gate,
    )();
  });
});
