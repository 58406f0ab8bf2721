/**
 * Two shared gates on one Redis against the simulated API, whose 429s carry a Retry-After and
 * nothing else (no quota headers), with no limit configured: each gate paces its own calls at the
 * rate the provider accepted from it in the round before a refusal (session 19). Before, every gate
 * sent its whole queue again after each shared pause, and half the calls ended refused.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { wrapFetch } from '../../src/adapters/fetch.js';
import { createSharedGate, type SharedGate } from '../../src/redis/shared-gate.js';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/simulated-api.js';
import { REDIS_URL, redisSkipReason } from '../helpers/redis-server.js';

const skip = await redisSkipReason();
if (skip) console.log(`[Retry-After pace on Redis] skipped (${skip})`);

describe.skipIf(skip !== false)('Retry-After pace on Redis', () => {
  const gates: SharedGate[] = [];
  const apis: SimulatedApi[] = [];
  afterAll(async () => {
    for (const g of gates) await g.close();
    for (const api of apis) await api.close();
  });

  it('two gates, a fixed window of 10 a second answering Retry-After alone: every call succeeds', async () => {
    const api = await startSimulatedApi({
      policy: { kind: 'fixed-window', limit: 10, intervalMs: 1000 },
      headers: 'none',
    });
    apis.push(api);
    const keyPrefix = `tollgate-ra-pace-${process.pid}-${Date.now()}`;
    for (let i = 0; i < 2; i++) gates.push(createSharedGate({ redis: REDIS_URL, keyPrefix }));
    await Promise.all(gates.map((g) => g.store.time()));
    // What the gates sent, answered when (ms from the start): retries stay inside the gates.
    const answers: { atMs: number; status: number }[] = [];
    const t0 = performance.now();
    const recorded: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      answers.push({ atMs: performance.now() - t0, status: response.status });
      return response;
    };
    const fetches = gates.map((g) => wrapFetch(g, { fetch: recorded }));
    const outcomes = await Promise.all(
      Array.from({ length: 60 }, async (_, i) => {
        try {
          const response = await fetches[i % 2]!(`${api.url}/v1/things/${i}`);
          await response.arrayBuffer();
          return response.status;
        } catch (error) {
          return (error as { code?: string }).code;
        }
      }),
    );
    const elapsedMs = performance.now() - t0;
    const stats = api.stats();
    // The first second's burst draws most 429s (nothing told the gates the limit); after it, a few
    // when a pace grows past the provider's. Without a pace: every round's burst, 40-80 after it.
    const laterRefusals = answers.filter((a) => a.status === 429 && a.atMs > 1500).length;
    console.log(
      `[Retry-After pace on Redis] 60 calls, 2 gates: ${stats.accepted} accepted, ${stats.rejected} × 429 (${laterRefusals} after 1.5 s), ${Math.round(elapsedMs)} ms (minimum ${Math.round(stats.physicalMinimumMs({ requests: 60 }))} ms)`,
    );
    expect(outcomes).toEqual(Array(60).fill(200));
    expect(laterRefusals).toBeLessThan(20);
    // Measured 8-13 s here; generous for a busy machine.
    expect(elapsedMs).toBeLessThan(20_000);
  }, 30_000);
});
