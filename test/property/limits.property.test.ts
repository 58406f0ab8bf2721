import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { windowIndexAt } from '../../src/core/aligned-window.js';
import { createLimit } from '../../src/core/create-limit.js';
import type { Algorithm, LimitCore } from '../../src/core/limit.js';
import type { SlidingWindowState } from '../../src/core/sliding-window.js';
import { windowSafe } from '../../src/core/window-safe.js';

// Random workloads against every algorithm: record the starts each core grants and check its stated
// promise over every window. Costs are integers, so every count below is exact; only the token and
// leaky buckets compare real-valued bounds, with a tolerance for the rounding of times (ms) on a float.

const numRuns = 1000;

type Kind = 'try' | 'reserve' | 'refund';

interface Op {
  /** Time to advance before the op, as a fraction of intervalMs. */
  gap: number;
  /** `try`: start only if allowed now; `reserve`: start as early as allowed; `refund`: cancel the latest take. */
  kind: Kind;
  /** Picks the cost in 1..capacity. */
  u: number;
}

interface Take {
  at: number;
  cost: number;
}

const opArb: fc.Arbitrary<Op> = fc.record({
  gap: fc.oneof(
    fc.constant(0),
    fc.double({ min: 0, max: 0.05, noNaN: true }),
    fc.double({ min: 0, max: 2.5, noNaN: true }),
  ),
  kind: fc.constantFrom<Kind>('try', 'reserve', 'reserve', 'refund'),
  u: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
});

const workloadArb = fc.record({
  limit: fc.integer({ min: 1, max: 12 }),
  burst: fc.integer({ min: 1, max: 15 }),
  intervalMs: fc.oneof(fc.integer({ min: 1, max: 5000 }), fc.double({ min: 1, max: 5000, noNaN: true })),
  startMs: fc.oneof(
    fc.constant(0),
    fc.integer({ min: -1_000_000, max: 1_000_000 }),
    fc.double({ min: 0, max: 1_000_000, noNaN: true }),
  ),
  ops: fc.array(opArb, { minLength: 1, maxLength: 60 }),
});

type Workload = typeof workloadArb extends fc.Arbitrary<infer W> ? W : never;

function coreFor(algorithm: Algorithm, workload: Workload): LimitCore {
  const { limit, intervalMs, burst } = workload;
  return createLimit(
    algorithm === 'token-bucket' ? { algorithm, limit, intervalMs, burst } : { algorithm, limit, intervalMs },
  );
}

function costOf(core: LimitCore, u: number): number {
  return 1 + Math.floor(u * core.capacity);
}

/**
 * Runs the ops; returns the takes still standing (refunded ones removed), the final state and time.
 * Along the way checks what every core promises: `earliestAt >= now`, and FIFO (no start before the
 * latest standing take).
 */
function simulate(
  core: LimitCore,
  workload: Workload,
  onAdmit?: (taken: readonly Take[], at: number, cost: number) => void,
): { taken: Take[]; state: unknown; now: number } {
  let now = workload.startMs;
  let state = core.initial(now);
  const taken: Take[] = [];
  for (const op of workload.ops) {
    now += op.gap * workload.intervalMs;
    if (op.kind === 'refund') {
      const last = taken.pop();
      if (last !== undefined) state = core.refund(state, last.cost, last.at, now);
      continue;
    }
    const cost = costOf(core, op.u);
    const at = core.earliestAt(state, cost, now);
    expect(at).toBeGreaterThanOrEqual(now);
    if (at === Infinity || (op.kind === 'try' && at > now)) continue;
    const latest = taken[taken.length - 1];
    if (latest !== undefined) expect(at).toBeGreaterThanOrEqual(latest.at);
    onAdmit?.(taken, at, cost);
    state = core.take(state, cost, at);
    taken.push({ at, cost });
  }
  return { taken, state, now };
}

/** Tolerance in units for bounds computed from float times: a few ulps per take, over T ms per unit. */
function unitTolerance(workload: Workload, taken: readonly Take[], emissionMs: number): number {
  const largest = taken.reduce((most, take) => Math.max(most, Math.abs(take.at)), Math.abs(workload.startMs));
  return 1e-9 + (workload.ops.length * 4 * largest * Number.EPSILON) / emissionMs;
}

function byTime(taken: readonly Take[]): Take[] {
  return [...taken].sort((a, b) => a.at - b.at);
}

function unitsPerWindow(taken: readonly Take[], intervalMs: number): Map<number, number> {
  const units = new Map<number, number>();
  for (const { at, cost } of taken) {
    const window = windowIndexAt(at, intervalMs);
    units.set(window, (units.get(window) ?? 0) + cost);
  }
  return units;
}

/** Units started in the window (endMs - intervalMs, endMs], in the form the cores use. */
function unitsInWindowEndingAt(taken: readonly Take[], endMs: number, intervalMs: number): number {
  let units = 0;
  for (const { at, cost } of taken) if (at <= endMs && at + intervalMs > endMs) units += cost;
  return units;
}

describe('rate-limit promises under random workloads', () => {
  it('token bucket: any interval of length L holds at most burst + r·L units', () => {
    fc.assert(
      fc.property(workloadArb, (workload) => {
        const core = coreFor('token-bucket', workload);
        const { taken } = simulate(core, workload);
        const ratePerMs = workload.limit / workload.intervalMs;
        const tolerance = unitTolerance(workload, taken, 1 / ratePerMs);
        const sorted = byTime(taken);
        // The busiest interval starts and ends at starts: check every pair [t_i, t_j] (closed).
        for (let i = 0; i < sorted.length; i++) {
          let units = 0;
          for (let j = i; j < sorted.length; j++) {
            units += sorted[j]!.cost;
            const bound = workload.burst + (sorted[j]!.at - sorted[i]!.at) * ratePerMs;
            expect(units).toBeLessThanOrEqual(bound + tolerance);
          }
        }
      }),
      { numRuns },
    );
  });

  it('leaky bucket: consecutive starts are at least cost_prev·intervalMs/limit apart', () => {
    fc.assert(
      fc.property(workloadArb, (workload) => {
        const core = coreFor('leaky-bucket', workload);
        const { taken } = simulate(core, workload);
        const emissionMs = workload.intervalMs / workload.limit;
        const toleranceMs = unitTolerance(workload, taken, emissionMs) * emissionMs;
        const sorted = byTime(taken);
        for (let i = 1; i < sorted.length; i++) {
          const previous = sorted[i - 1]!;
          expect(sorted[i]!.at - previous.at).toBeGreaterThanOrEqual(
            previous.cost * emissionMs - toleranceMs,
          );
        }
      }),
      { numRuns },
    );
  });

  it('fixed window: each aligned window holds at most limit units', () => {
    fc.assert(
      fc.property(workloadArb, (workload) => {
        const core = coreFor('fixed-window', workload);
        const { taken } = simulate(core, workload);
        for (const units of unitsPerWindow(taken, workload.intervalMs).values()) {
          expect(units).toBeLessThanOrEqual(workload.limit);
        }
      }),
      { numRuns },
    );
  });

  it('sliding log: every window of length intervalMs holds at most limit units', () => {
    fc.assert(
      fc.property(workloadArb, (workload) => {
        const core = coreFor('sliding-log', workload);
        const { taken } = simulate(core, workload);
        for (const { at } of taken) {
          expect(unitsInWindowEndingAt(taken, at, workload.intervalMs)).toBeLessThanOrEqual(workload.limit);
        }
      }),
      { numRuns },
    );
  });

  it('sliding window: limit per aligned window, estimate within limit at each start, under 2·limit per interval', () => {
    fc.assert(
      fc.property(workloadArb, (workload) => {
        const core = coreFor('sliding-window', workload);
        const { intervalMs, limit } = workload;
        const { taken } = simulate(core, workload, (before, at, cost) => {
          const x = at / intervalMs;
          const window = Math.floor(x);
          let previous = 0;
          let current = 0;
          for (const take of before) {
            const takeWindow = windowIndexAt(take.at, intervalMs);
            if (takeWindow === window - 1) previous += take.cost;
            else if (takeWindow === window) current += take.cost;
          }
          expect(previous * (1 - (x - window)) + current + cost).toBeLessThanOrEqual(limit + 1e-9);
        });
        for (const units of unitsPerWindow(taken, intervalMs).values())
          expect(units).toBeLessThanOrEqual(limit);
        for (const { at } of taken) {
          expect(unitsInWindowEndingAt(taken, at, intervalMs)).toBeLessThan(2 * limit);
        }
      }),
      { numRuns },
    );
  });

  it('concurrency: units in flight never exceed the limit', () => {
    const concurrencyArb = fc.record({
      limit: fc.integer({ min: 1, max: 12 }),
      ops: fc.array(
        fc.record({ start: fc.boolean(), u: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }) }),
        { minLength: 1, maxLength: 80 },
      ),
    });
    fc.assert(
      fc.property(concurrencyArb, ({ limit, ops }) => {
        const core = createLimit({ algorithm: 'concurrency', limit });
        let state = core.initial(0);
        const inFlight: number[] = [];
        for (const [index, op] of ops.entries()) {
          if (op.start) {
            const cost = costOf(core, op.u);
            const at = core.earliestAt(state, cost, index);
            const running = inFlight.reduce((sum, c) => sum + c, 0);
            expect(at === index || at === Infinity).toBe(true);
            expect(at === index).toBe(running + cost <= limit);
            if (at === index) {
              state = core.take(state, cost, at);
              inFlight.push(cost);
            }
          } else if (inFlight.length > 0) {
            // A random call finishes and releases its units.
            const [cost] = inFlight.splice(Math.floor(op.u * inFlight.length), 1);
            state = core.refund(state, cost!, 0, index);
          }
          expect(inFlight.reduce((sum, c) => sum + c, 0)).toBeLessThanOrEqual(limit);
          expect(core.available(state, index)).toBe(limit - inFlight.reduce((sum, c) => sum + c, 0));
        }
      }),
      { numRuns },
    );
  });

  it('windowSafe: any closed window of length intervalMs holds at most limit units', () => {
    const safeArb = fc.record({
      limit: fc.integer({ min: 2, max: 40 }),
      burstU: fc.option(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true })),
      intervalMs: fc.oneof(fc.integer({ min: 1, max: 5000 }), fc.double({ min: 1, max: 5000, noNaN: true })),
      startMs: fc.integer({ min: 0, max: 1_000_000 }),
      ops: fc.array(opArb, { minLength: 1, maxLength: 60 }),
    });
    fc.assert(
      fc.property(safeArb, ({ limit, burstU, intervalMs, startMs, ops }) => {
        const options = burstU === null ? {} : { burst: 1 + Math.floor(burstU * (limit - 1)) };
        const spec = windowSafe(limit, intervalMs, options);
        const core = createLimit(spec);
        const workload: Workload = { limit, burst: core.capacity, intervalMs, startMs, ops };
        const { taken } = simulate(core, workload);
        const tolerance = unitTolerance(workload, taken, intervalMs / spec.limit);
        const sorted = byTime(taken);
        for (let i = 0; i < sorted.length; i++) {
          let units = 0;
          for (let j = i; j < sorted.length && sorted[j]!.at <= sorted[i]!.at + intervalMs; j++)
            units += sorted[j]!.cost;
          expect(units).toBeLessThanOrEqual(limit + tolerance);
        }
      }),
      { numRuns },
    );
  });
});

const timedAlgorithms: readonly Algorithm[] = [
  'token-bucket',
  'leaky-bucket',
  'fixed-window',
  'sliding-log',
  'sliding-window',
];

/** Same answers from both states at `now` and later, for every cost (GCRA states within rounding). */
function expectSameAnswers(
  core: LimitCore,
  actual: unknown,
  expected: unknown,
  now: number,
  intervalMs: number,
): void {
  for (const later of [0, 0.01, 0.3, 0.99, 1, 1.5, 2.2, 4]) {
    const probeMs = now + later * intervalMs;
    for (let cost = 0; cost <= core.capacity; cost++) {
      const a = core.earliestAt(actual, cost, probeMs);
      const b = core.earliestAt(expected, cost, probeMs);
      if (core.algorithm === 'token-bucket' || core.algorithm === 'leaky-bucket') {
        expect(Math.abs(a - b)).toBeLessThanOrEqual(1e-9 + Math.abs(b) * 1e-12);
      } else {
        expect(a).toBe(b);
      }
    }
  }
}

describe.each(timedAlgorithms)('%s: reservations', (algorithm) => {
  const probeArb = fc.record({
    workload: workloadArb,
    u1: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
    u2: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
  });

  it('answers at or after now, admits at the time it answers, and queues the next call behind it', () => {
    fc.assert(
      fc.property(probeArb, ({ workload, u1, u2 }) => {
        const core = coreFor(algorithm, workload);
        const { state, now } = simulate(core, workload);
        const snapshot = JSON.stringify(state);
        const first = core.earliestAt(state, costOf(core, u1), now);
        expect(JSON.stringify(state)).toBe(snapshot);
        expect(first).toBeGreaterThanOrEqual(now);
        // The time returned is admitted by a check at that very time.
        expect(core.earliestAt(state, costOf(core, u1), first)).toBe(first);
        const after = core.take(core.clone(state), costOf(core, u1), first);
        expect(JSON.stringify(state)).toBe(snapshot);
        expect(core.earliestAt(after, costOf(core, u2), now)).toBeGreaterThanOrEqual(first);
      }),
      { numRuns },
    );
  });

  it('cancelling the latest reservation restores an equivalent state; an idle state acts as a fresh one', () => {
    fc.assert(
      fc.property(probeArb, ({ workload, u1 }) => {
        const core = coreFor(algorithm, workload);
        const { state, now } = simulate(core, workload);
        const cost = costOf(core, u1);
        const at = core.earliestAt(state, cost, now);
        // Documented exception: a sliding-window take two windows past the first open window (a cost
        // of the whole limit) is refunded conservatively, keeping the windows before it closed.
        let skipped = false;
        if (algorithm === 'sliding-window') {
          const { w, cur } = state as SlidingWindowState;
          const atWindow = windowIndexAt(at, workload.intervalMs);
          skipped =
            atWindow >= (cur > 0 ? w : w - 1) + 2 && atWindow - 1 > windowIndexAt(now, workload.intervalMs);
          if (skipped) expect(cost).toBe(workload.limit);
        }
        if (!skipped) {
          const refunded = core.refund(core.take(core.clone(state), cost, at), cost, at, now);
          expectSameAnswers(core, refunded, state, now, workload.intervalMs);
        }
        if (core.isIdle(state, now))
          expectSameAnswers(core, state, core.initial(now), now, workload.intervalMs);
      }),
      { numRuns },
    );
  });
});
