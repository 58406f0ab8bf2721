/**
 * 01: wrap axios for a third-party API.
 *
 * A REST API documents "20 requests per second" and answers with IETF RateLimit headers
 * (`RateLimit-Policy: "requests";q=20;w=1`, `RateLimit: "requests";r=…;t=…`). One `throttleAxios` call sends every request of an axios instance through a gate:
 * `windowSafe(20, 1_000)` never starts more than 20 in any second, and the gate reads the headers
 * (and retries a 429 after the server's Retry-After if one slips through anyway).
 *
 * Run: node --import tsx examples/01-axios-third-party.ts
 * In your project: import { createGate, windowSafe } from 'tollgate'; import { throttleAxios } from 'tollgate/axios';
 */
import axios from 'axios';
import { throttleAxios } from '../src/adapters/axios.js';
import { createGate, windowSafe } from '../src/index.js';
import { startSimulatedApi } from '../src/testing/index.js';

// The third-party API, simulated on 127.0.0.1 (its limit is enforced server-side).
const api = await startSimulatedApi({
  policy: { kind: 'sliding-window', limit: 20, intervalMs: 1_000 },
  headers: 'ietf-structured',
  latencyMs: { min: 10, max: 40 },
});

const gate = createGate({ limits: [windowSafe(20, 1_000)], maxQueueTimeMs: 30_000 });
const client = axios.create({ baseURL: api.url, timeout: 10_000 });
const dispose = throttleAxios(client, gate, { axios });

const started = performance.now();
// Fire 60 requests at once, as a script would: the gate spaces them out.
const responses = await Promise.all(
  Array.from({ length: 60 }, (_, i) => client.get<{ ok: boolean }>(`/repos/acme/widget/issues/${i + 1}`)),
);
const seconds = ((performance.now() - started) / 1000).toFixed(1);

const stats = api.stats();
console.log(
  `${responses.length} requests in ${seconds} s, all ${responses.every((r) => r.status === 200) ? '200 OK' : 'NOT ok'}`,
);
console.log(
  `server: ${stats.accepted} accepted, ${stats.rejected} × 429, busiest second ${stats.maxAcceptedInWindow(1_000).requests}/20`,
);
console.log(`last RateLimit header seen: ${responses.at(-1)?.headers['ratelimit']}`);

dispose();
await gate.close();
await api.close();
if (!responses.every((r) => r.status === 200)) process.exitCode = 1;
