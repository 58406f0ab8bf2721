/**
 * A provider that answers 429 with a Retry-After and nothing else (no quota headers), with no limit
 * configured: each shared gate paces its own calls at the rate the provider accepted from it in the
 * round before the refusal (the in-memory gate's AIMD, per process: the shares add up to what the
 * provider accepted). Two gates on one memory store play two processes; manual clock.
 */
import { describe, expect, it } from 'vitest';
import type { Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate, type SharedGate } from '../../../src/redis/shared-gate.js';
import type { SharedGateOptions } from '../../../src/redis/shared-gate-options.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = 1_000_000;
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/**
 * A provider admitting at most `limit` arrivals per aligned second, answering 20 ms after each
 * request; a refusal says only when the second ends (Retry-After, whole seconds), plus `extra`
 * headers. Two gates on one store.
 */
function setup(limit: number, extra: Record<string, string> = {}, options: Partial<SharedGateOptions> = {}) {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const gateOptions = { store, clock, ...options } as SharedGateOptions;
  const gates = [createSharedGate(gateOptions), createSharedGate(gateOptions)];
  const sent: { gate: number; at: number; status: number }[] = [];
  const fn = (gate: number) => () =>
    new Promise<Inspection>((resolve) => {
      const at = clock.now() - T0;
      const second = Math.floor(at / 1000);
      const inSecond = sent.filter((s) => s.status === 200 && Math.floor(s.at / 1000) === second).length;
      const status = inSecond < limit ? 200 : 429;
      sent.push({ gate, at, status });
      const headers =
        status === 200
          ? { ...extra }
          : { ...extra, 'retry-after': String(Math.ceil(((second + 1) * 1000 - at) / 1000)) };
      clock.setTimeout(() => resolve({ status, headers }), 20);
    });
  const schedule = (gate: SharedGate) =>
    gate.schedule(fn(gates.indexOf(gate)), { key: 'api', inspect: (r: Inspection) => r }).then(
      (r) => r.status,
      (e: { code: string }) => e.code,
    );
  const run = async (ms: number) => {
    for (let t = 0; t < ms; t += 10) {
      await flush();
      clock.advance(10);
    }
    await flush();
  };
  return { clock, gates, sent, schedule, run };
}

describe('shared gate: a Retry-After alone sets each process’s pace', () => {
  // Found by a review (session 18), measured in session 19: without a pace every gate sent its
  // whole queue again after each shared pause, into the next 429s, and calls ended refused.
  it('two gates pace their calls after the first refusals: none is refused for good, few 429s after the first second', async () => {
    const { gates, sent, schedule, run } = setup(10);
    const done = Array.from({ length: 60 }, (_, i) => schedule(gates[i % 2]!));
    await run(20_000);
    expect(await Promise.all(done)).toEqual(Array(60).fill(200));
    // The first second's burst is refused (nothing told the gates the limit); after it, both gates
    // together keep to about the provider's pace, each at its share.
    expect(sent.filter((s) => s.status === 429 && s.at >= 1000).length).toBeLessThanOrEqual(4);
    // The pace recovers: the gate left alone finds the room the other one's calls leave (at least 7
    // starts within some second of its last 20).
    const last = sent.filter((s) => s.status === 200).slice(-20);
    const busiest = Math.max(
      ...last.map((s) => last.filter((t) => t.at >= s.at && t.at < s.at + 1000).length),
    );
    expect(busiest).toBeGreaterThanOrEqual(7);
  });

  it.each([
    [
      'a limit is configured',
      {},
      { perKey: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000, burst: 100 }] },
    ],
    ['the refusal states a quota', { 'x-ratelimit-limit': '10', 'x-ratelimit-remaining': '0' }, {}],
  ] as const)('no pace when %s: the queue goes at the pause’s end', async (_, extra, options) => {
    const { gates, sent, schedule, run } = setup(10, extra, { arrivalMarginMs: 0, ...options });
    const done = Array.from({ length: 24 }, () => schedule(gates[0]!));
    await run(1100);
    // 10 accepted at once and 14 refused until 1,000 (Retry-After 1): they all go again then.
    expect(sent.filter((s) => s.at >= 1000 && s.at < 1100)).toHaveLength(14);
    await run(5000);
    await Promise.all(done);
  });
});
