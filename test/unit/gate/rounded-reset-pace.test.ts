/**
 * A provider that sends `x-ratelimit-reset` as seconds until its window resets, rounded up ("1" for
 * the whole of a 1 s window). The gate reads that as the latest moment of the reset, and every
 * answer of the next window looked like the same window: its allowance kept the old window's low,
 * its reset moved a second on with each answer, and calls waited for it. Found by a user's-eye
 * review (session 15): a configured 10/s against such a provider allowing 20/s ran at 70-75% of its
 * pace with headers read, 98-100% with `--header-adapt off`. An answer whose remaining rose above
 * one that came in before its call started proves a new window (a later count in one window
 * leaves less, never more). Manual clock, a simulated provider counting each call when it starts.
 */
import { expect, it } from 'vitest';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = Date.parse('2026-11-30T12:00:00.250Z');
const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** Runs `calls` calls through the gate against a provider of `limit` per wall-clock second; `latencyMs` per answer. */
async function run(options: { limitPerSec: number; calls: number; latencyMs: number; configured: number }) {
  const clock = new ManualClock(T0);
  const gate = createGate({
    clock,
    limits: [
      { algorithm: 'leaky-bucket', limit: options.configured, intervalMs: 1000 },
      { algorithm: 'concurrency', limit: 4 },
    ],
  });
  let windowStart = Number.NaN;
  let used = 0;
  let over = 0;
  let lastStart = T0;
  const call = () => {
    const now = clock.now();
    lastStart = now;
    const start = Math.floor(now / 1000) * 1000;
    if (start !== windowStart) {
      windowStart = start;
      used = 0;
    }
    if (used >= options.limitPerSec) over++;
    used++;
    const headers = {
      'x-ratelimit-limit': String(options.limitPerSec),
      'x-ratelimit-remaining': String(Math.max(0, options.limitPerSec - used)),
      'x-ratelimit-reset': String(Math.ceil((start + 1000 - now) / 1000)),
    };
    return new Promise<Inspection>((resolve) =>
      clock.setTimeout(() => resolve({ status: 200, headers }), options.latencyMs),
    );
  };
  const done = Array.from({ length: options.calls }, () =>
    gate.schedule(call, { inspect: (r: Inspection) => r, maxQueueTimeMs: 60_000 }),
  );
  let settled = 0;
  for (const p of done) void p.then(() => settled++);
  for (let ms = 0; ms < 60_000 && settled < options.calls; ms += 10) {
    clock.advance(10);
    await flush();
  }
  await Promise.all(done);
  await gate.close();
  return { spanMs: lastStart - T0, over };
}

it('a configured 10/s against a provider allowing 20/s with rounded-up delta resets keeps its pace', async () => {
  // 60 calls at 10/s: the last starts at 5.9 s at the earliest.
  const { spanMs, over } = await run({ limitPerSec: 20, calls: 60, latencyMs: 100, configured: 10 });
  expect(over).toBe(0);
  expect(spanMs).toBeLessThanOrEqual(6_000);
});

it('a configured 20/s, the provider limit itself: the provider counts nothing over its limit', async () => {
  // Its remaining reaches 0 in every window; no later answer can then prove the window reset, so
  // the gate waits for the rounded-up reset (the headers allow no better: epoch resets do).
  for (const latencyMs of [0, 30, 100, 400]) {
    const { over } = await run({ limitPerSec: 20, calls: 100, latencyMs, configured: 20 });
    expect(over, `latency ${latencyMs} ms`).toBe(0);
  }
});
