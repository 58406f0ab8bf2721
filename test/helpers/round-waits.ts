/** A call as a test saw it: when its function started and when its response had been read. */
export interface TimedCall {
  readonly startedAt: number;
  readonly doneAt: number;
}

/**
 * What a gate counting window calls from their responses must wait for beyond the windows
 * themselves: the calls in start order, `perRound` at a time (the window's limit), and the slowest
 * round trip of each round but the last (the next round may start only a window after those
 * responses). A loaded test machine stretches these round trips, and the whole run with them; a
 * bound on the run's span that adds them still catches a gate slower than its responses allow.
 */
export function roundWaitsMs(calls: readonly TimedCall[], perRound: number): number {
  const sorted = [...calls].sort((a, b) => a.startedAt - b.startedAt);
  let waitsMs = 0;
  for (let from = 0; from + perRound < sorted.length; from += perRound)
    waitsMs += Math.max(...sorted.slice(from, from + perRound).map((c) => c.doneAt - c.startedAt));
  return waitsMs;
}
