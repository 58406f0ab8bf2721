import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGate } from '../src/index.js';
import { fmt, median, table } from './stats.js';

const CALLS = 20_000;
const RUNS = 5;
const noop = async () => {};

async function measure(
  make: () => { schedule: () => Promise<unknown>; close: () => Promise<void> },
): Promise<number> {
  const { schedule, close } = make();
  const calls = new Array<Promise<unknown>>(CALLS);
  const start = performance.now();
  for (let i = 0; i < CALLS; i++) calls[i] = schedule();
  await Promise.all(calls);
  const rate = (CALLS / (performance.now() - start)) * 1000;
  await close();
  return rate;
}

/** Added cost of the budget check per call: no budget, memory ledger, file (SQLite) ledger. */
export async function budget(): Promise<{ markdown: string; fileRate: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
  let run = 0;
  const budgets = { name: 'bench', limit: 1_000_000, period: 'day' as const };
  const contenders: Record<string, () => { schedule: () => Promise<unknown>; close: () => Promise<void> }> = {
    'no budget': () => {
      const gate = createGate({ limits: [{ algorithm: 'token-bucket', limit: 1e9, intervalMs: 1000 }] });
      return { schedule: () => gate.schedule(noop, { priceMicros: 10 }), close: () => gate.close() };
    },
    'memory ledger': () => {
      const gate = createGate({ budget: { budgets, ledger: 'memory' } });
      return { schedule: () => gate.schedule(noop, { priceMicros: 10 }), close: () => gate.close() };
    },
    'file ledger (SQLite)': () => {
      const gate = createGate({ budget: { budgets, ledger: { path: join(dir, `ledger-${run++}.sqlite`) } } });
      return { schedule: () => gate.schedule(noop, { priceMicros: 10 }), close: () => gate.close() };
    },
  };
  const samples: Record<string, number[]> = {};
  try {
    for (let r = 0; r < RUNS; r++) {
      for (const [name, make] of Object.entries(contenders)) {
        const list = samples[name] ?? [];
        samples[name] = list;
        list.push(await measure(make));
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const base = median(samples['no budget']!);
  const rows = Object.entries(samples).map(([name, values]) => {
    const rate = median(values);
    // Added cost per call: 1/rate - 1/base seconds, shown in microseconds.
    const addedUs = name === 'no budget' ? 0 : (1 / rate - 1 / base) * 1e6;
    return [name, fmt(rate), fmt(addedUs, 1)];
  });
  return {
    markdown: table(['gate', 'budgeted calls/s (median of 5)', 'added µs per call'], rows),
    fileRate: median(samples['file ledger (SQLite)']!),
  };
}
