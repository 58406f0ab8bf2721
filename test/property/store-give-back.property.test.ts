import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLimit } from '../../src/core/create-limit.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import type { StoreLevel, StoreReservation } from '../../src/redis/store.js';

// Store give-backs in any order: processes sharing a bucket give back their interleaved takes (at a
// pause) in whatever order their messages reach the store. An older take's give-back waits for the
// takes above it (see Store.refund). Whatever the order, the starts that stand (reservations not
// given back, at what their calls used) must keep the bucket's promise, and once every take above a
// point is given back the bucket is back where it was before them. MemoryStore is the reference the
// Lua scripts match bit for bit (test/integration/redis-parity.test.ts).

const numRuns = Number(process.env['GATE_PROPERTY_RUNS'] ?? 1000);

type Op =
  | { kind: 'reserve'; gap: number; u: number }
  | { kind: 'refund'; gap: number; pick: number }
  | { kind: 'adjust'; gap: number; pick: number; used: number };

const gapArb = fc.oneof(
  fc.constant(0),
  fc.double({ min: 0, max: 0.3, noNaN: true }),
  fc.double({ min: 0, max: 2.5, noNaN: true }),
);
const pickArb = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('reserve' as const), gap: gapArb, u: pickArb }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('refund' as const), gap: gapArb, pick: pickArb }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('adjust' as const), gap: gapArb, pick: pickArb, used: pickArb }),
  },
);

const workloadArb = fc.record({
  algorithm: fc.constantFrom('token-bucket' as const, 'leaky-bucket' as const),
  limit: fc.integer({ min: 1, max: 12 }),
  burst: fc.integer({ min: 1, max: 15 }),
  intervalMs: fc.oneof(fc.integer({ min: 1, max: 5000 }), fc.double({ min: 1, max: 5000, noNaN: true })),
  startMs: fc.oneof(
    fc.constant(0),
    fc.integer({ min: 0, max: 2e12 }),
    fc.double({ min: 0, max: 1e6, noNaN: true }),
  ),
  ops: fc.array(opArb, { minLength: 1, maxLength: 80 }),
});

type Workload = typeof workloadArb extends fc.Arbitrary<infer W> ? W : never;

interface Standing {
  readonly reservation: StoreReservation;
  /** Units the call used (its cost, or less once adjusted). */
  units: number;
  adjusted: boolean;
}

function levelOf(w: Workload): StoreLevel {
  const spec =
    w.algorithm === 'token-bucket'
      ? { algorithm: w.algorithm, limit: w.limit, intervalMs: w.intervalMs, burst: w.burst }
      : { algorithm: w.algorithm, limit: w.limit, intervalMs: w.intervalMs };
  return { id: 'b', spec: createLimit(spec).spec };
}

/** Runs the ops: the starts that stand at the end, and how many give-backs were of an older take. */
function run(w: Workload): {
  standing: Standing[];
  olderGiveBacks: number;
  emissionMs: number;
  burst: number;
} {
  const store = new MemoryStore();
  const level = levelOf(w);
  const capacity = w.algorithm === 'token-bucket' ? w.burst : 1;
  const emissionMs = w.intervalMs / w.limit;
  let now = w.startMs;
  const standing: Standing[] = [];
  let olderGiveBacks = 0;
  for (const op of w.ops) {
    now += op.gap * w.intervalMs;
    if (op.kind === 'reserve') {
      const cost = 1 + Math.floor(op.u * capacity);
      const decision = store.reserveAt('p', [level], [cost], Number.POSITIVE_INFINITY, now);
      expect(decision.ok).toBe(true);
      if (decision.ok) standing.push({ reservation: decision, units: cost, adjusted: false });
      continue;
    }
    if (standing.length === 0) continue;
    const i = Math.floor(op.pick * standing.length);
    const s = standing[i]!;
    if (op.kind === 'refund') {
      // A call that ran (adjusted) is not given back; one that did not run is, once.
      if (s.adjusted) continue;
      if (i < standing.length - 1) olderGiveBacks++;
      store.refundAt(s.reservation, now);
      standing.splice(i, 1);
    } else if (!s.adjusted) {
      // The call ran and used less than it reserved (more is charged after the fact: not a start).
      const used = Math.floor(op.used * s.units);
      store.adjustAt(s.reservation, { requests: used }, undefined, now);
      s.units = used;
      s.adjusted = true;
    }
  }
  return { standing, olderGiveBacks, emissionMs, burst: w.algorithm === 'token-bucket' ? w.burst : 1 };
}

/** Tolerance in units for bounds on float times: a few ulps per op, over T ms per unit. */
function unitTolerance(w: Workload, standing: readonly Standing[], emissionMs: number): number {
  const largest = standing.reduce(
    (most, s) => Math.max(most, Math.abs(s.reservation.startAt)),
    Math.abs(w.startMs),
  );
  return 1e-9 + (w.ops.length * 8 * largest * Number.EPSILON) / emissionMs;
}

describe('bucket give-backs in any order (memory store, the reference of the Lua scripts)', () => {
  it('the starts that stand keep the bucket: any interval of length L holds at most burst + L/T units', () => {
    let older = 0;
    fc.assert(
      fc.property(workloadArb, (w) => {
        const { standing, olderGiveBacks, emissionMs, burst } = run(w);
        older += olderGiveBacks;
        const tolerance = unitTolerance(w, standing, emissionMs);
        const sorted = standing
          .map((s) => ({ at: s.reservation.startAt, units: s.units }))
          .sort((a, b) => a.at - b.at);
        // The busiest interval starts and ends at starts: every pair [t_i, t_j] (closed).
        for (let i = 0; i < sorted.length; i++) {
          let units = 0;
          for (let j = i; j < sorted.length; j++) {
            units += sorted[j]!.units;
            expect(units).toBeLessThanOrEqual(
              burst + (sorted[j]!.at - sorted[i]!.at) / emissionMs + tolerance,
            );
          }
        }
      }),
      { numRuns },
    );
    // The workloads do give back older takes (the case under test), many times.
    expect(older).toBeGreaterThan(numRuns / 4);
  });

  it('once every take above a point is given back, in any order, the bucket is where it was at that point', () => {
    fc.assert(
      fc.property(
        workloadArb,
        fc.integer({ min: 1, max: 12 }),
        fc.array(pickArb, { minLength: 12, maxLength: 12 }),
        (w, n, order) => {
          const level = levelOf(w);
          const store = new MemoryStore();
          const twin = new MemoryStore();
          const now = w.startMs;
          // The twin stops at the point; the store takes n more (every one in the future or now).
          const takes: StoreReservation[] = [];
          for (let i = 0; i < n; i++) {
            const d = store.reserveAt('p', [level], [1], Number.POSITIVE_INFINITY, now);
            if (d.ok) takes.push(d);
          }
          // Given back in a random order (a random permutation from the picks).
          const remaining = [...takes];
          for (let i = 0; remaining.length > 0; i++) {
            const [r] = remaining.splice(Math.floor(order[i % order.length]! * remaining.length), 1);
            store.refundAt(r!, now);
          }
          // Both now answer the same for the next call (to the rounding of the TATs given back).
          const a = store.reserveAt('p', [level], [1], Number.POSITIVE_INFINITY, now);
          const b = twin.reserveAt('p', [level], [1], Number.POSITIVE_INFINITY, now);
          if (!a.ok || !b.ok) throw new Error('a bucket reservation without a bound is always granted');
          expect(Math.abs(a.startAt - b.startAt)).toBeLessThanOrEqual(1e-9 + Math.abs(b.startAt) * 1e-12);
        },
      ),
      { numRuns },
    );
  });
});
