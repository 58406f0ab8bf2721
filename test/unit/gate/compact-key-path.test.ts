/**
 * A gate whose only per-key limit is a GCRA one stores an idle key as that one number and admits
 * its calls without a partition (the compact fast path in `schedule`). Such a call belongs to its
 * key all the same: nothing of it may be counted in the default (unkeyed) partition, whose server
 * quota and AIMD rate describe the unkeyed calls only. Each behaviour is checked on the compact
 * gate and on a gate whose extra per-key limit takes the ordinary path, which must agree.
 */
import { describe, expect, it } from 'vitest';
import type { LimitSpec } from '../../../src/core/limit.js';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

const T0 = Date.parse('2026-11-30T12:00:00Z');

interface Reply {
  status: number;
  headers: Record<string, string>;
}

const inspect = (r: Reply): Inspection => ({ status: r.status, headers: r.headers, method: 'GET' });

/** Unkeyed calls answered by the test one by one, and keyed calls that run until the test ends them. */
function provider(clock: ManualClock) {
  const unkeyed: { at: number; answer: (reply: Reply) => void }[] = [];
  const keyed: (() => void)[] = [];
  const unkeyedFn = () =>
    new Promise<Reply>((resolve) => {
      unkeyed.push({ at: clock.now(), answer: resolve });
    });
  const keyedFn = () =>
    new Promise<void>((resolve) => {
      keyed.push(resolve);
    });
  return { unkeyed, keyed, unkeyedFn, keyedFn };
}

const quota = (remaining: number, resetEpochSeconds: number): Reply => ({
  status: 200,
  headers: {
    'x-ratelimit-limit': '10',
    'x-ratelimit-remaining': String(remaining),
    'x-ratelimit-reset': String(resetEpochSeconds),
  },
});

const tokenBucket: LimitSpec = { algorithm: 'token-bucket', limit: 100, intervalMs: 1000 };
const cases: { name: string; limits: LimitSpec[]; perKey: LimitSpec[] }[] = [
  { name: 'a single GCRA per-key limit (compact keys)', limits: [], perKey: [tokenBucket] },
  {
    // The gate observes completions (a permit to give back): the keyed call's release too.
    name: 'compact keys under a gate-wide concurrency limit',
    limits: [{ algorithm: 'concurrency', limit: 100 }],
    perKey: [tokenBucket],
  },
  {
    name: 'two per-key limits (keys as partitions)',
    limits: [],
    perKey: [tokenBucket, { algorithm: 'fixed-window', limit: 1000, intervalMs: 60_000 }],
  },
];

describe.each(cases)('keyed calls leave the default partition alone: $name', ({ limits, perKey }) => {
  it("keyed calls in flight do not lower the unkeyed calls' server quota", async () => {
    const clock = new ManualClock(T0);
    const gate = createGate({ clock, limits, perKey });
    const api = provider(clock);
    const reset = T0 / 1000 + 60;
    const calls: Promise<unknown>[] = [];
    const unkeyed = () => calls.push(gate.schedule(api.unkeyedFn, { inspect }));
    unkeyed();
    await flush();
    api.unkeyed[0]!.answer(quota(9, reset));
    await flush();
    // Another key's calls start and run on.
    for (let i = 0; i < 5; i++) calls.push(gate.schedule(api.keyedFn, { key: 'other' }));
    await flush();
    expect(api.keyed).toHaveLength(5);
    unkeyed();
    await flush();
    api.unkeyed[1]!.answer(quota(8, reset));
    await flush();
    // The provider has 8 left for the unkeyed calls, and the gate knows of no unkeyed call it has
    // not counted yet: all 8 go at once.
    expect(gate.stats().partition.adaptive.find((l) => l.algorithm === 'server-quota')).toMatchObject({
      available: 8,
    });
    for (let i = 0; i < 8; i++) unkeyed();
    await flush();
    expect(api.unkeyed).toHaveLength(10);
    for (const finish of api.keyed) finish();
    for (let i = 2; i < 10; i++) api.unkeyed[i]!.answer(quota(9 - i, reset));
    await flush();
    await Promise.all(calls);
  });

  it("keyed starts do not count in the unkeyed calls' recent rate (AIMD's starting point)", async () => {
    const clock = new ManualClock(T0);
    const gate = createGate({ clock, limits, perKey, adapt: { aimd: { decrease: 0.5 } } });
    const api = provider(clock);
    const first = gate.schedule(api.unkeyedFn, { inspect });
    await flush();
    api.unkeyed[0]!.answer({ status: 200, headers: {} });
    await first;
    // 50 keyed calls over the next 10 s, while the unkeyed partition sends nothing.
    const keyed: Promise<unknown>[] = [];
    for (let s = 0; s < 10; s++) {
      for (let i = 0; i < 5; i++) keyed.push(gate.schedule(api.keyedFn, { key: 'other' }));
      clock.advance(1000);
      await flush();
    }
    for (const finish of api.keyed) finish();
    await Promise.all(keyed);
    // The second unkeyed call is throttled without a word: AIMD starts from the unkeyed partition's
    // own rate (2 calls over 10 s, read as 1/s at least) and halves it.
    const second = gate.schedule(api.unkeyedFn, { inspect });
    await flush();
    api.unkeyed[1]!.answer({ status: 429, headers: {} });
    await flush();
    const aimd = gate.stats().partition.adaptive.find((l) => l.algorithm === 'leaky-bucket');
    expect(aimd?.ratePerSec).toBe(0.5);
    await gate.close({ queued: 'reject' });
    await second.catch(() => {});
  });
});
