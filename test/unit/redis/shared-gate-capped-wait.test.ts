/**
 * When a wait capped at `maxRetryAfterMs` ends (the provider asked for longer: Retry-After 86400, a
 * GitHub primary limit spent for 40 minutes), one call among every gate on the store asks the
 * provider again and the queues wait for its answer, as the in-memory gate does. Two gates on one
 * memory store play two processes; manual clock.
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

const refusedForADay: Inspection = { status: 429, headers: { 'retry-after': '86400' } };
const githubSpent: Inspection = {
  status: 403,
  headers: {
    'x-ratelimit-limit': '5000',
    'x-ratelimit-remaining': '0',
    'x-ratelimit-reset': String(Math.floor(T0 / 1000) + 2400),
    'x-ratelimit-resource': 'core',
  },
  body: { message: 'API rate limit exceeded for user ID 1.' },
};

/**
 * A provider answering 50 ms after each request: `refusals` times `refusal`, then 200. Two gates
 * (two processes) on one store, maxRetryAfterMs 5000.
 */
function setup(refusal: Inspection, refusals: number, extra: Partial<SharedGateOptions> = {}) {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const options = { store, clock, adapt: { maxRetryAfterMs: 5000 }, ...extra } as SharedGateOptions;
  const gates = { a: createSharedGate(options), b: createSharedGate(options) };
  const sent: { gate: string; at: number }[] = [];
  const call = (name: 'a' | 'b', gate: SharedGate) =>
    gate
      .schedule(
        () =>
          new Promise<Inspection>((resolve) => {
            const n = sent.push({ gate: name, at: clock.now() - T0 }) - 1;
            const answer =
              n < refusals ? { ...refusal, headers: { ...refusal.headers } } : { status: 200, headers: {} };
            clock.setTimeout(() => resolve(answer), 50);
          }),
        { key: 'api', inspect: (r: Inspection) => r },
      )
      .then(
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
  return { clock, gates, sent, call, run };
}

describe('shared gate: the end of a wait capped at maxRetryAfterMs', () => {
  it.each([
    ['a Retry-After of a day', refusedForADay],
    ['a GitHub primary limit spent for 40 minutes', githubSpent],
  ] as const)('one call among the gates asks the provider again, not the queues (%s)', async (_, refusal) => {
    // Refused twice (the first call, then the first after the capped wait), then the provider is back.
    const { gates, sent, call, run } = setup(refusal, 2);
    const done = (['a', 'b', 'a', 'b', 'a', 'b'] as const).map((name) => call(name, gates[name]));
    await run(12_000);
    const outcomes = await Promise.all(done);
    expect(outcomes.filter((o) => o === 'ERR_RATE_LIMITED')).toHaveLength(2);
    expect(outcomes.filter((o) => o === 200)).toHaveLength(4);
    const at = sent.map((s) => s.at);
    // The first call; one at the capped time (5,000 after its answer at 50), one at the next (its
    // answer came at 5,100); the rest after that one's answer (10,150), in both gates.
    expect(at.slice(0, 3)).toEqual([0, 5050, 10_100]);
    expect(at.slice(3).every((t) => t >= 10_150)).toBe(true);
    expect(new Set(sent.map((s) => s.gate))).toEqual(new Set(['a', 'b']));
  });

  it('a queue with no deadline waits out a long limit one probe per capped period', async () => {
    const { gates, sent, call, run } = setup(refusedForADay, 4);
    const done = (['a', 'b', 'a', 'b', 'a', 'b'] as const).map((name) => call(name, gates[name]));
    await run(25_000);
    const outcomes = await Promise.all(done);
    expect(outcomes.filter((o) => o === 200)).toHaveLength(2);
    // One call per capped period (each answered 50 ms after it), then the two left after the answer.
    const at = sent.map((s) => s.at);
    expect(at.slice(0, 5)).toEqual([0, 5050, 10_100, 15_150, 20_200]);
    expect(at[5]).toBeGreaterThanOrEqual(20_250);
  });

  it('calls holding reservations for the end of the capped wait give them back and wait for the probe', async () => {
    // A configured bucket (no first-call probe): the calls reserve their slots in the store.
    const { gates, sent, call, run, clock } = setup(refusedForADay, 2, {
      perKey: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000, burst: 10 }],
      arrivalMarginMs: 0,
    });
    const first = call('a', gates.a);
    await run(100);
    // Paused until 5,050: calls scheduled 3 ms before its end ask the store at once (a pause about
    // to end is not waited for) and hold slots from 5,050 on.
    clock.advanceTo(T0 + 5047);
    const rest = (['a', 'b', 'a', 'b'] as const).map((name) => call(name, gates[name]));
    await run(8000);
    expect(await first).toBe('ERR_RATE_LIMITED');
    expect((await Promise.all(rest)).filter((o) => o === 200)).toHaveLength(3);
    const at = sent.map((s) => s.at);
    // One call at the capped time (asked again when the slot held for it was given back: within
    // the 10 ms step), one at the next, the rest after its answer.
    expect(at[0]).toBe(0);
    expect(at[1]).toBeGreaterThanOrEqual(5050);
    expect(at[1]).toBeLessThan(5060);
    expect(at[2]).toBeGreaterThanOrEqual(at[1]! + 5050);
    expect(at[2]).toBeLessThan(at[1]! + 5060);
    expect(at.slice(3).every((t) => t >= at[2]! + 50)).toBe(true);
  });
});
