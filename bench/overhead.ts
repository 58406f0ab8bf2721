import { unbound } from './peers.js';
import { fmt, median, table } from './stats.js';

const CALLS = 100_000;
const RUNS = 5;
const noop = () => {};

async function measure(make: () => (fn: () => void) => Promise<unknown>): Promise<number> {
  const schedule = make();
  const calls = new Array<Promise<unknown>>(CALLS);
  const start = performance.now();
  for (let i = 0; i < CALLS; i++) calls[i] = schedule(noop);
  await Promise.all(calls);
  return (CALLS / (performance.now() - start)) * 1000;
}

/** 100k no-op calls, all issued at once, through a limit that never binds. Median of 5 (interleaved). */
export async function overhead(): Promise<{ markdown: string; ratios: Record<string, number> }> {
  const contenders: Record<string, () => (fn: () => void) => Promise<unknown>> = {
    'bare async call': () => async (fn) => fn(),
    ...unbound,
  };
  const samples: Record<string, number[]> = {};
  for (const name of Object.keys(contenders)) await measure(contenders[name]!); // warm-up
  for (let run = 0; run < RUNS; run++) {
    for (const [name, make] of Object.entries(contenders)) {
      (samples[name] ??= []).push(await measure(make));
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
