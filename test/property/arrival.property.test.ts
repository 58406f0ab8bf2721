import fc from 'fast-check';
import { describe, it } from 'vitest';
import { createGate } from '../../src/gate/gate.js';
import { ManualClock } from '../helpers/manual-clock.js';

// The provider counts a request when it arrives, somewhere between the gate's start and the
// response. With `arrivalMarginMs` > 0 a window limit counts each call from its response (capped at
// `start + max(margin, intervalMs / 10)`). The promise: whenever every request arrives no later
// than that point, no window of `intervalMs` at the provider ever holds more than `limit` arrivals,
// however the arrivals fall in between. Checked here on a manual clock with random latencies
// (shorter than the window) against the worst arrivals.

const numRuns = Number(process.env['GATE_PROPERTY_RUNS'] ?? 1000);

interface Sent {
  startedAt: number;
  /** The latest time the request may have arrived: its response, or the cap. */
  latestArrival: number;
}

/**
 * The most arrivals any window `(t - intervalMs, t]` can hold when each request arrives anywhere in
 * `[startedAt, latestArrival]` and `t` is itself an arrival: the count only rises at a start, so
 * trying every start and every latest arrival as `t` finds the maximum.
 */
function worstWindow(sent: readonly Sent[], intervalMs: number): number {
  let worst = 0;
  for (const end of sent.flatMap((s) => [s.startedAt, s.latestArrival])) {
    let n = 0;
    for (const s of sent) if (s.startedAt <= end && s.latestArrival > end - intervalMs) n++;
    worst = Math.max(worst, n);
  }
  return worst;
}

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('gate: window limits count a call from its response', () => {
  it('no provider window over the limit, whatever the arrival between start and response (or cap)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          algorithm: fc.constantFrom('sliding-log' as const),
          limit: fc.integer({ min: 1, max: 4 }),
          intervalMs: fc.constantFrom(100, 1000),
          arrivalMarginMs: fc.constantFrom(1, 50),
          calls: fc.array(
            fc.record({
              gapMs: fc.integer({ min: 0, max: 120 }),
              latency: fc.double({ min: 0, max: 0.99, noNaN: true }),
            }),
            { minLength: 1, maxLength: 25 },
          ),
        }),
        async ({ algorithm, limit, intervalMs, arrivalMarginMs, calls }) => {
          const clock = new ManualClock(0);
          const gate = createGate({ clock, arrivalMarginMs, limits: [{ algorithm, limit, intervalMs }] });
          const capMs = Math.max(arrivalMarginMs, intervalMs / 10);
          const sent: Sent[] = [];
          const settled: Promise<unknown>[] = [];
          let scheduleAt = 0;
          for (const call of calls) {
            scheduleAt += call.gapMs;
            while ((clock.nextTimerAt() ?? Infinity) <= scheduleAt) {
              clock.advanceTo(clock.nextTimerAt()!);
              await flush();
            }
            clock.advanceTo(scheduleAt);
            await flush();
            const latencyMs = Math.floor(call.latency * intervalMs);
            settled.push(
              gate.schedule(
                () =>
                  new Promise<void>((resolve) => {
                    const startedAt = clock.now();
                    clock.setTimeout(() => {
                      sent.push({ startedAt, latestArrival: Math.min(clock.now(), startedAt + capMs) });
                      resolve();
                    }, latencyMs);
                  }),
                { maxQueueTimeMs: 60_000 },
              ),
            );
          }
          for (let steps = 0; clock.nextTimerAt() !== undefined; steps++) {
            if (steps > 10_000)
              throw new Error(`timers still firing at ${clock.now()} ms after ${steps} steps`);
            clock.advanceTo(clock.nextTimerAt()!);
            await flush();
          }
          await Promise.all(settled);
          const worst = worstWindow(sent, intervalMs);
          if (sent.length !== calls.length || worst > limit)
            throw new Error(`${sent.length}/${calls.length} sent; a window holds ${worst} > ${limit}`);
        },
      ),
      { numRuns },
    );
  });
});
