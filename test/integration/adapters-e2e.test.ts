/**
 * End to end: each adapter against the simulated paid API on a real loopback socket, real time,
 * through a gate with NO configured limit. The hidden policy is a token bucket of 20/s (burst 20);
 * only the response headers tell the gate about it.
 *
 * The first request goes alone: before any response, a gate without limits knows nothing, so a
 * first blind burst would be refused by any client. After it, the headers must keep the other 59
 * within the policy: all 60 succeed, the server's limit is never exceeded, and with IETF
 * structured headers (which state the window: a learned limit) at most a couple of 429s.
 *
 * X-RateLimit headers state no window, only "remaining until reset" (in whole epoch seconds) and
 * the limit. The gate turns that into a server quota that renews itself at the reset to the
 * announced limit (X-RateLimit-Limit) for another window of the longest reset span seen, so the
 * calls waiting for the reset do not all rush out at once. The 59 go out on new connections and
 * reach the server in no fixed order: a response counts every call still in flight as unseen,
 * and an answer to an older call can only tighten the quota (it used to draw 5 to 16 429s).
 */
import axios from 'axios';
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { throttleAxios } from '../../src/adapters/axios.js';
import { wrapFetch } from '../../src/adapters/fetch.js';
import { tollgateInterceptor } from '../../src/adapters/undici.js';
import { createGate, type Gate } from '../../src/gate/gate.js';
import { type SimulatedApi, type SimulatedHeaderStyle, startSimulatedApi } from '../../src/testing/index.js';

const apis: SimulatedApi[] = [];
afterEach(async () => {
  await Promise.all(apis.splice(0).map((api) => api.close()));
});

const total = 60;
const policy = { kind: 'token-bucket', limit: 20, intervalMs: 1000, burst: 20 } as const;

async function start(headers: SimulatedHeaderStyle): Promise<SimulatedApi> {
  const api = await startSimulatedApi({ policy, headers });
  apis.push(api);
  return api;
}

/** One request alone, then the rest at once; every call must resolve with a 200. */
async function run(send: (i: number) => Promise<number>): Promise<{ statuses: number[]; elapsedMs: number }> {
  const startedAt = performance.now();
  const first = await send(0);
  const rest = await Promise.all(Array.from({ length: total - 1 }, (_, i) => send(i + 1)));
  return { statuses: [first, ...rest], elapsedMs: performance.now() - startedAt };
}

// 429s allowed per run: at most a couple once the first response has told the quota.
const max429s: Record<'x-ratelimit-epoch' | 'ietf-structured', number> = {
  'ietf-structured': 2,
  'x-ratelimit-epoch': 2,
};

function expectWithinPolicy(
  api: SimulatedApi,
  statuses: number[],
  elapsedMs: number,
  max429: number,
  label: string,
): void {
  const stats = api.stats();
  console.log(`[e2e] ${label}: ${stats.rejected} × 429, ${Math.round(elapsedMs)} ms`);
  expect(statuses.filter((s) => s === 200)).toHaveLength(total);
  expect(stats.accepted).toBe(total);
  expect(stats.rejected).toBeLessThanOrEqual(max429);
  expect(stats.overLimitWindows()).toBe(0);
  // Physical minimum: 20 at once, then one per 50 ms: 40 × 50 ms = 2 s; whole-second resets may
  // add up to a second per window. Generous bound for CI.
  expect(elapsedMs).toBeLessThan(8000);
}

describe.each(['ietf-structured', 'x-ratelimit-epoch'] as const)(
  '%s headers, no configured limit',
  (style) => {
    it('wrapFetch: 60 requests, all succeed within the policy', async () => {
      const api = await start(style);
      const gate: Gate = createGate();
      const fetch = wrapFetch(gate);
      const { statuses, elapsedMs } = await run(async (i) => {
        const response = await fetch(`${api.url}/v1/things/${i}`);
        await response.arrayBuffer();
        return response.status;
      });
      expectWithinPolicy(api, statuses, elapsedMs, max429s[style], `${style} wrapFetch`);
    });

    it('throttleAxios: 60 requests, all succeed within the policy', async () => {
      const api = await start(style);
      const instance = axios.create({ baseURL: api.url });
      const dispose = throttleAxios(instance, createGate(), { axios });
      try {
        const { statuses, elapsedMs } = await run(
          async (i) => (await instance.get(`/v1/things/${i}`)).status,
        );
        expectWithinPolicy(api, statuses, elapsedMs, max429s[style], `${style} throttleAxios`);
      } finally {
        dispose();
      }
    });

    it("undici interceptor as the global dispatcher: Node's fetch, 60 requests, all succeed within the policy", async () => {
      const api = await start(style);
      const agent = new Agent();
      const previous = getGlobalDispatcher();
      setGlobalDispatcher(agent.compose(tollgateInterceptor(createGate())));
      try {
        const { statuses, elapsedMs } = await run(async (i) => {
          const response = await fetch(`${api.url}/v1/things/${i}`);
          await response.arrayBuffer();
          return response.status;
        });
        expectWithinPolicy(api, statuses, elapsedMs, max429s[style], `${style} undici`);
      } finally {
        setGlobalDispatcher(previous);
        await agent.close();
      }
    });
  },
);
