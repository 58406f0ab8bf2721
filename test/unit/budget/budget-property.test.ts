import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BudgetReservation, createBudgetGuard } from '../../../src/budget/budget-guard.js';

type Op =
  | { kind: 'reserve'; estimateMicros: number; key: 'a' | 'b' }
  | { kind: 'settle'; pick: number; actualMicros: number }
  | { kind: 'release'; pick: number };

const micros = fc.oneof(
  fc.integer({ min: 0, max: 400_000 }),
  fc.constantFrom(0, 1, 999_999, 1_000_000, 333_333),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('reserve' as const),
    estimateMicros: micros,
    key: fc.constantFrom('a' as const, 'b' as const),
  }),
  fc.record({ kind: fc.constant('settle' as const), pick: fc.nat(), actualMicros: micros }),
  fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
);

describe('budget accounting (property)', () => {
  it('never admits past the cap, refuses only when it must, and spent is exactly the settled actuals', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        // A $1 global day budget and a $0.6 per-key budget: every call must fit both.
        const guard = createBudgetGuard({
          budgets: [
            { name: 'all', limit: 1, period: 'day' },
            { name: 'key', limit: 0.6, period: 'day', perKey: true },
          ],
          ledger: 'memory',
          clock: { now: () => 0 },
        });
        const open: BudgetReservation[] = [];
        const model = {
          all: { spent: 0, reserved: 0 },
          a: { spent: 0, reserved: 0 },
          b: { spent: 0, reserved: 0 },
        };
        const spend = () => new Map(guard.spend().map((s) => [s.budgetId, s]));
        for (const o of ops) {
          if (o.kind === 'reserve') {
            const k = model[o.key];
            const fitsAll = model.all.spent + model.all.reserved + o.estimateMicros <= 1_000_000;
            const fitsKey = k.spent + k.reserved + o.estimateMicros <= 600_000;
            const d = guard.tryReserve(o.estimateMicros, o.key);
            expect(d.ok).toBe(fitsAll && fitsKey);
            if (d.ok) {
              open.push(d.reservation);
              model.all.reserved += o.estimateMicros;
              k.reserved += o.estimateMicros;
              // At admission, committed spend never exceeds either limit.
              const s = spend();
              const committed = (id: string) =>
                (s.get(id)?.spentMicros ?? 0) + (s.get(id)?.reservedMicros ?? 0);
              expect(committed('all')).toBeLessThanOrEqual(1_000_000);
              expect(committed(`key[${o.key}]`)).toBeLessThanOrEqual(600_000);
            }
          } else if (open.length > 0) {
            const r = open.splice(o.pick % open.length, 1)[0]!;
            const k = model[r.key as 'a' | 'b'];
            model.all.reserved -= r.estimateMicros;
            k.reserved -= r.estimateMicros;
            if (o.kind === 'settle') {
              expect(guard.settle(r, o.actualMicros)).toBe(true);
              model.all.spent += o.actualMicros;
              k.spent += o.actualMicros;
            } else {
              expect(guard.release(r)).toBe(true);
            }
          }
          const s = spend();
          const all = s.get('all');
          expect(all).toMatchObject({
            spentMicros: model.all.spent,
            reservedMicros: model.all.reserved,
          });
          for (const key of ['a', 'b'] as const) {
            const seen = s.get(`key[${key}]`);
            expect(seen?.spentMicros ?? 0).toBe(model[key].spent);
            expect(seen?.reservedMicros ?? 0).toBe(model[key].reserved);
          }
        }
      }),
      { numRuns: 1000 },
    );
  });
});

describe('file ledger agrees with the memory ledger (differential property)', () => {
  type Step =
    | { kind: 'reserve'; estimateMicros: number }
    | { kind: 'settle' | 'release'; pick: number; actualMicros: number }
    | { kind: 'advance'; ms: number };
  const step: fc.Arbitrary<Step> = fc.oneof(
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('reserve' as const), estimateMicros: micros }) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constantFrom('settle' as const, 'release' as const),
        pick: fc.nat(),
        actualMicros: micros,
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('advance' as const),
        ms: fc.integer({ min: 1, max: 40_000 }),
      }),
    },
  );

  it('same decisions and the same spend, with rolling windows, rollover and expiring reservations', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { FileLedger } = await import('../../../src/budget/file-ledger.js');
    const { MemoryLedger } = await import('../../../src/budget/memory-ledger.js');
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-diff-'));
    let n = 0;
    try {
      fc.assert(
        fc.property(fc.array(step, { maxLength: 40 }), (steps) => {
          let now = Date.parse('2026-03-08T06:58:00Z');
          const clock = { now: () => now };
          const budgets = [
            { name: 'roll', limit: 1, period: { rollingMs: 60_000 } },
            { name: 'hour', limit: 1.5, period: 'hour' as const, timeZone: 'America/New_York' },
          ];
          const file = new FileLedger({ path: join(dir, `d${n++}.sqlite`) });
          const a = createBudgetGuard({
            budgets,
            ledger: new MemoryLedger(),
            clock,
            reservationTtlMs: 30_000,
          });
          const b = createBudgetGuard({ budgets, ledger: file, clock, reservationTtlMs: 30_000 });
          const open: [BudgetReservation, BudgetReservation][] = [];
          try {
            for (const s of steps) {
              if (s.kind === 'advance') now += s.ms;
              else if (s.kind === 'reserve') {
                const da = a.tryReserve(s.estimateMicros);
                const db = b.tryReserve(s.estimateMicros);
                expect(db.ok).toBe(da.ok);
                if (da.ok && db.ok) open.push([da.reservation, db.reservation]);
                else expect(db).toEqual(da);
              } else if (open.length > 0) {
                const [ra, rb] = open.splice(s.pick % open.length, 1)[0]!;
                if (s.kind === 'settle')
                  expect(b.settle(rb, s.actualMicros)).toBe(a.settle(ra, s.actualMicros));
                else expect(b.release(rb)).toBe(a.release(ra));
              }
              expect(b.spend()).toEqual(a.spend());
            }
          } finally {
            file.close();
          }
        }),
        { numRuns: 150 },
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
