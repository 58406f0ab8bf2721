/**
 * Redirects and throttling. A POST answered by a 303 was acted on (an order created); when the
 * page it leads to answers 429, sending the POST again would repeat it. Found by a review
 * (session 15): fetch and axios sent `POST, GET, POST, GET`. Now a redirected request whose
 * method is not idempotent is never sent again: the 429 is returned, and its pause holds the next
 * calls. An idempotent request is still retried, redirect and all. Real loopback servers, the
 * gate on a manual clock.
 */
import type { ServerResponse } from 'node:http';
import axios, { AxiosError } from 'axios';
import { afterEach, describe, expect, it } from 'vitest';
import { throttleAxios } from '../../src/adapters/axios.js';
import { wrapFetch } from '../../src/adapters/fetch.js';
import { createGate, type Gate, type Inspection } from '../../src/gate/gate.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';
import { T0, ticks } from '../helpers/adapter-gate.js';
import { type RecordedRequest, type ScriptedServer, startScriptedServer } from '../helpers/adapter-server.js';
import { ManualClock } from '../helpers/manual-clock.js';

const servers: ScriptedServer[] = [];
const disposers: (() => void)[] = [];
afterEach(async () => {
  for (const dispose of disposers.splice(0)) dispose();
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

/** POST /orders answers 303 to /orders/1; GETs answer 429 (Retry-After 2) `throttledGets` times, then 200. */
async function ordersServer(throttledGets: number, redirect = 303): Promise<ScriptedServer> {
  let gets = 0;
  const server = await startScriptedServer((req: RecordedRequest, _n: number, res: ServerResponse) => {
    if (req.url === '/orders') {
      res.writeHead(redirect, { location: '/orders/1' });
      res.end();
      return;
    }
    gets++;
    res.writeHead(gets <= throttledGets ? 429 : 200, { 'retry-after': '2', 'content-type': 'text/plain' });
    res.end(gets <= throttledGets ? 'slow down' : 'order 1');
  });
  servers.push(server);
  return server;
}

type Send = (url: string, method: string) => Promise<number>;

/** The same request through each adapter: answers the status the caller sees. */
const adapters: Record<string, (gate: Gate) => Send> = {
  fetch: (gate) => {
    const throttled = wrapFetch(gate);
    return async (url, method) => {
      const response = await throttled(url, { method, body: method === 'GET' ? null : '{"item":1}' });
      await response.arrayBuffer();
      return response.status;
    };
  },
  axios: (gate) => axiosSend(gate, undefined),
  // Found by a review (session 17): axios's fetch adapter says nothing of redirects (its response
  // carries the Request, not fetch's Response), and the POST was sent 4 times.
  'axios (fetch adapter)': (gate) => axiosSend(gate, 'fetch'),
};

function axiosSend(gate: Gate, adapter: 'fetch' | undefined): Send {
  {
    const instance = axios.create(adapter === undefined ? {} : { adapter });
    disposers.push(throttleAxios(instance, gate, { axios }));
    return async (url, method) => {
      try {
        return (await instance.request({ url, method, data: method === 'GET' ? undefined : { item: 1 } }))
          .status;
      } catch (error) {
        if (error instanceof AxiosError && error.response !== undefined) return error.response.status;
        throw error;
      }
    };
  }
}

describe.each(Object.entries(adapters))('%s: a redirected request and a throttled target', (_name, make) => {
  it('a POST redirected (303) to a page that answers 429 is sent once; the 429 is returned and pauses the key', async () => {
    const server = await ordersServer(1);
    const clock = new ManualClock(T0);
    const gate = createGate({ clock });
    const send = make(gate);
    expect(await send(`${server.url}/orders`, 'POST')).toBe(429);
    expect(server.requests.map((r) => r.method)).toEqual(['POST', 'GET']);
    // The 429's pause holds the next call to the same origin for its Retry-After.
    let status: number | undefined;
    const next = send(`${server.url}/orders/1`, 'GET').then((s) => {
      status = s;
    });
    await ticks();
    expect(status).toBeUndefined();
    clock.advance(2_000);
    await next;
    expect(status).toBe(200);
    expect(server.requests.map((r) => r.method)).toEqual(['POST', 'GET', 'GET']);
    await gate.close();
  });

  it('a GET redirected to a page that answers 429 is retried after the pause, redirect and all', async () => {
    const server = await ordersServer(1, 302);
    const clock = new ManualClock(T0);
    const gate = createGate({ clock });
    const send = make(gate);
    let status: number | undefined;
    const call = send(`${server.url}/orders`, 'GET').then((s) => {
      status = s;
    });
    await ticks();
    expect(status).toBeUndefined();
    clock.advance(2_000);
    await call;
    expect(status).toBe(200);
    expect(server.requests.map((r) => `${r.method} ${r.url}`)).toEqual([
      'GET /orders',
      'GET /orders/1',
      'GET /orders',
      'GET /orders/1',
    ]);
    await gate.close();
  });

  it('a POST that is not redirected is still retried after its 429', async () => {
    let posts = 0;
    const server = await startScriptedServer((_req, _n, res) => {
      posts++;
      res.writeHead(posts === 1 ? 429 : 201, { 'retry-after': '1' });
      res.end();
    });
    servers.push(server);
    const clock = new ManualClock(T0);
    const gate = createGate({ clock });
    const call = make(gate)(`${server.url}/orders`, 'POST');
    await ticks();
    clock.advance(1_000);
    expect(await call).toBe(201);
    expect(posts).toBe(2);
    await gate.close();
  });
});

describe('Inspection.processed, in both gates', () => {
  const gates = {
    'in-memory': (clock: ManualClock) => createGate({ clock }),
    shared: (clock: ManualClock) =>
      createSharedGate({ store: new MemoryStore({ clock }), clock, limits: [] }),
  };
  it.each(Object.entries(gates))(
    '%s: a processed 429 resolves the call with its value, sent once, and pauses the next call',
    async (_name, make) => {
      const clock = new ManualClock(T0);
      const gate = make(clock);
      let sends = 0;
      const processed = {
        status: 429,
        headers: { 'retry-after': '1' },
        method: 'POST',
        processed: true,
      } satisfies Inspection;
      const value = await gate.schedule(
        () => {
          sends++;
          return processed;
        },
        { inspect: (r: Inspection) => r },
      );
      expect(value).toBe(processed);
      expect(sends).toBe(1);
      let startedAt: number | undefined;
      const next = gate.schedule(() => {
        startedAt = clock.now();
      });
      await ticks();
      expect(startedAt).toBeUndefined();
      clock.advance(1_000);
      await next;
      expect(startedAt).toBe(T0 + 1_000);
      await gate.close();
    },
  );

  const garbage: unknown[] = ['yes', 1, null, {}, Number.NaN, false];
  it.each(Object.entries(gates))(
    '%s: a processed that is not true (garbage included) reads as false: the 429 is retried',
    async (_name, make) => {
      for (const value of garbage) {
        const clock = new ManualClock(T0);
        const gate = make(clock);
        let sends = 0;
        const call = gate.schedule(
          () => {
            sends++;
            return sends === 1
              ? { status: 429, headers: { 'retry-after': '1' }, method: 'POST', processed: value }
              : { status: 200, headers: {} };
          },
          { inspect: (r: Inspection) => r },
        );
        await ticks();
        clock.advance(1_000);
        await expect(call, String(value)).resolves.toMatchObject({ status: 200 });
        expect(sends, String(value)).toBe(2);
        await gate.close();
      }
    },
  );
});

describe('axios fetch adapter: a fetch of its own (config.env.fetch)', () => {
  it('is still the one that sends, and its redirects are seen: the POST is sent once', async () => {
    const server = await ordersServer(1);
    const gate = createGate({ clock: new ManualClock(T0) });
    const seen: string[] = [];
    const own: typeof fetch = (input, init) => {
      seen.push(input instanceof Request ? input.method : String(init?.method));
      return fetch(input, init);
    };
    const instance = axios.create({ adapter: 'fetch', env: { fetch: own } });
    disposers.push(throttleAxios(instance, gate, { axios }));
    const error = await instance.post(`${server.url}/orders`, { item: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AxiosError);
    expect((error as AxiosError).response?.status).toBe(429);
    expect(seen).toEqual(['POST']);
    expect(server.requests.map((r) => r.method)).toEqual(['POST', 'GET']);
    await gate.close();
  });
});

describe('axios fetch adapter: config.env.fetch that is not a function', () => {
  it('is left to axios, which refuses the request as without tollgate (nothing sent)', async () => {
    const server = await ordersServer(0);
    const gate = createGate({ clock: new ManualClock(T0) });
    const plain = axios.create({ adapter: 'fetch', env: { fetch: 42 as never } });
    const throttled = axios.create({ adapter: 'fetch', env: { fetch: 42 as never } });
    disposers.push(throttleAxios(throttled, gate, { axios }));
    const without = await plain.get(`${server.url}/orders/1`).catch((e: unknown) => e);
    const withGate = await throttled.get(`${server.url}/orders/1`).catch((e: unknown) => e);
    expect(without).toBeInstanceOf(Error);
    expect((withGate as Error).message).toBe((without as Error).message);
    expect(server.requests).toHaveLength(0);
    await gate.close();
  });
});
