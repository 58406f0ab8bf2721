/**
 * `tollgate run` with a tokens limit reads the usage in response bodies: it charges more than a
 * line's tokens when the usage says more, never less. OpenAI counts the prompt plus max_tokens at
 * admission and gives nothing back; settling down to the usage sent 116-122% of the tokens limit a
 * minute (found by a user's-eye review, session 15).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { send } from '../../src/cli/http-call.js';
import { parseRequestLine } from '../../src/cli/request-line.js';
import { createGate } from '../../src/gate/gate.js';

let usedTokens = 0;
const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ usage: { prompt_tokens: usedTokens / 2, completion_tokens: usedTokens / 2 } }));
});
let url = '';
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** Tokens left in the gate's bucket after one line costing 1,000 tokens, its response reporting `used`. */
async function leftAfter(used: number): Promise<number> {
  usedTokens = used;
  const gate = createGate({
    perKey: [{ algorithm: 'token-bucket', limit: 1, intervalMs: 3_600_000, burst: 5_000, unit: 'tokens' }],
  });
  const request = parseRequestLine(
    JSON.stringify({ id: 1, url: `${url}/v1/chat`, cost: { tokens: 1_000 } }),
    1,
    undefined,
  );
  await send(request, undefined, {
    gate,
    pricing: { priceHeader: undefined, price: undefined, reconcileTokens: true },
    baseHeaders: new Headers(),
    stop: new AbortController().signal,
    kill: new AbortController().signal,
    timeoutMs: 10_000,
    now: () => performance.now(),
    onAttempt: () => {},
  });
  // Whole units: what is left, less a fraction for the time the call took.
  const left = gate.stats(url).partition.limits[0]?.available;
  await gate.close();
  return Math.ceil(left ?? Number.NaN);
}

it('usage below the line tokens gives nothing back', async () => {
  expect(await leftAfter(200)).toBe(4_000);
});

it('usage above the line tokens charges the difference', async () => {
  expect(await leftAfter(1_600)).toBe(3_400);
});
