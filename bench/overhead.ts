import { unbound } from './peers.js';
import { fmt, median, table } from './stats.js';

const CALLS = 100_000;
// Bottleneck runs each job through its own timer (about 400 jobs/s here whatever the limits), so
// 100k calls would take minutes per run; it gets fewer calls and is reported as calls/s all the same.
const CALLS_FOR: Record<string, number> = { bottleneck: 2_000 };
const RUNS = 5;
// The work is an async no-op: what a real API call returns (a promise), with nothing to wait for.
const noop = async () => {};

async function measure(
  name: string,
  make: () => (fn: () => Promise<void>) => Promise<unknown>,
): Promise<number> {
  const schedule = make();
  const n = CALLS_FOR[name] ?? CALLS;
  const calls = new Array<Promise<unknown>>(n);
  const start = performance.now();
  for (let i = 0; i < n; i++) calls[i] = schedule(noop);
  await Promise.all(calls);
  return (n / (performance.now() - start)) * 1000;
}

/** 100k async no-op calls, all issued at once, through a limit that never binds. Median of 5 (interleaved). */
export async function overhead(): Promise<{ markdown: string; ratios: Record<string, number> }> {
  const contenders: Record<string, () => (fn: () => Promise<void>) => Promise<unknown>> = {
    'bare async call': () => (fn) => fn(),
    ...unbound,
  };
  const samples: Record<string, number[]> = {};
  for (const [name, make] of Object.entries(contenders)) await measure(name, make); // warm-up
  for (let run = 0; run < RUNS; run++) {
    for (const [name, make] of Object.entries(contenders)) {
      const list = samples[name] ?? [];
      samples[name] = list;
      list.push(await measure(name, make));
    }
  }
  const medians = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]));
  const ours = medians['tollgate']!;
  const rows = Object.entries(medians)
    .sort((a, b) => b[1] - a[1])
    .map(([name, rate]) => [name, fmt(rate), name === 'tollgate' ? '1.00' : fmt(ours / rate, 2)]);
  const ratios = Object.fromEntries(Object.entries(medians).map(([k, v]) => [k, ours / v]));
  return {
    markdown: table(['contender', 'calls/s (median of 5)', 'tollgate ÷ contender'], rows),
    ratios,
  };
}
