import { paced } from './peers.js';
import { fmt, percentile, table } from './stats.js';

const CALLS = 300;

async function run(make: (rate: number) => (fn: () => void) => Promise<unknown>, rate: number) {
  const schedule = make(rate);
  const starts: number[] = [];
  const calls: Promise<unknown>[] = [];
  for (let i = 0; i < CALLS; i++) calls.push(schedule(() => void starts.push(performance.now())));
  await Promise.all(calls);
  const first = starts[0]!;
  const spacing = 1000 / rate;
  // Deviation of each start from the ideal schedule first + i/rate.
  const deviations = starts.map((t, i) => Math.abs(t - (first + i * spacing)));
  const achieved = ((starts.length - 1) / (starts.at(-1)! - first)) * 1000;
  return {
    achieved,
    errorPct: ((achieved - rate) / rate) * 100,
    p50: percentile(deviations, 50),
    p99: percentile(deviations, 99),
    max: Math.max(...deviations),
  };
}

/** 300 calls at 100/s and at 1000/s: achieved rate and deviation of each start from the ideal schedule. */
export async function precision(): Promise<{
  markdown: string;
  ours: Record<number, Awaited<ReturnType<typeof run>>>;
}> {
  const rows: (string | number)[][] = [];
  const ours: Record<number, Awaited<ReturnType<typeof run>>> = {};
  for (const rate of [100, 1000]) {
    for (const [name, make] of Object.entries(paced)) {
      const r = await run(make, rate);
      if (name === 'tollgate') ours[rate] = r;
      rows.push([
        `${rate}/s`,
        name,
        fmt(r.achieved, 1),
        `${r.errorPct >= 0 ? '+' : ''}${fmt(r.errorPct, 2)}%`,
        fmt(r.p50, 2),
        fmt(r.p99, 2),
        fmt(r.max, 2),
      ]);
    }
  }
  return {
    markdown: table(
      ['rate', 'contender', 'achieved/s', 'rate error', 'p50 dev ms', 'p99 dev ms', 'max dev ms'],
      rows,
    ),
    ours,
  };
}
