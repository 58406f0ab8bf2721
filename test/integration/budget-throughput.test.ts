import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createBudgetGuard } from '../../src/budget/budget-guard.js';
import { FileLedger } from '../../src/budget/file-ledger.js';
import type { Ledger } from '../../src/budget/ledger.js';
import { MemoryLedger } from '../../src/budget/memory-ledger.js';

// Not a speed assertion (machines differ): measures and prints reserve+settle pairs per second.
// The target on the reference machine (2 cores) is >= 5,000/s for the file ledger.
const dir = mkdtempSync(join(tmpdir(), 'tollgate-budget-bench-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function measure(label: string, pair: (i: number) => void, ms = 1_000): number {
  for (let i = 0; i < 200; i++) pair(i); // warm up
  let n = 0;
  const start = performance.now();
  while (performance.now() - start < ms) {
    for (let k = 0; k < 100; k++) pair(n++);
  }
  const perSec = Math.round((n / (performance.now() - start)) * 1000);
  console.log(`[budget throughput] ${label}: ${perSec.toLocaleString('en-US')} reserve+settle pairs/s`);
  return perSec;
}

function guardPairs(ledger: Ledger, budgets: Parameters<typeof createBudgetGuard>[0]['budgets']) {
  let now = Date.parse('2026-06-15T12:00:00Z');
  const guard = createBudgetGuard({ budgets, ledger, clock: { now: () => now } });
  return {
    guard,
    pair: () => {
      now += 0.01;
      const r = guard.reserve(1_000);
      guard.settle(r, 900);
    },
  };
}

describe('budget throughput', () => {
  const day = { name: 'day', limit: 1_000_000, period: 'day' as const };
  const two = [
    { name: 'day', limit: 1_000_000, period: 'day' as const, timeZone: 'Europe/Berlin' },
    { name: 'month', limit: 10_000_000, period: 'month' as const },
  ];

  it('memory ledger', () => {
    const ledger = new MemoryLedger();
    expect(measure('memory ledger, 1 budget (guard)', guardPairs(ledger, day).pair)).toBeGreaterThan(0);
    measure('memory ledger, day+month budgets (guard)', guardPairs(new MemoryLedger(), two).pair);
  });

  it('file ledger', () => {
    const a = new FileLedger({ path: join(dir, 'a.sqlite') });
    expect(measure('file ledger, 1 budget (guard)', guardPairs(a, day).pair)).toBeGreaterThan(0);
    a.close();
    const b = new FileLedger({ path: join(dir, 'b.sqlite') });
    measure('file ledger, day+month budgets (guard)', guardPairs(b, two).pair);
    b.close();
    const c = new FileLedger({ path: join(dir, 'c.sqlite') });
    measure(
      'file ledger, rolling 1 h budget (guard)',
      guardPairs(c, { name: 'r', limit: 1_000_000, period: { rollingMs: 3_600_000 } }).pair,
    );
    c.close();
  });
});
