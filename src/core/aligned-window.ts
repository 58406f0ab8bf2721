import { nextUp } from './next-up.js';

/**
 * Aligned windows: window `k` holds the times `t` with `Math.floor(t / intervalMs) === k`, so windows
 * start at multiples of `intervalMs` on the `now` scale (with epoch-scale ms, a 60 000 ms window
 * starts on each wall-clock minute). Every window algorithm and its tests classify times through
 * `windowIndexAt`, so a time is never counted in one window and checked in another.
 */
export function windowIndexAt(t: number, intervalMs: number): number {
  // index (windows) = t (ms) / intervalMs (ms per window), rounded down.
  return Math.floor(t / intervalMs);
}

/**
 * The first time we use for window `index`: `index · intervalMs`, nudged up when rounding would put
 * that product in the window before (`windowIndexAt(windowStartMs(k, I), I) === k` always holds).
 */
export function windowStartMs(index: number, intervalMs: number): number {
  // start (ms) = index (windows) × intervalMs (ms per window)
  let startMs = index * intervalMs;
  // A few ulps at most; bounded so that no input (NaN, Infinity) can spin.
  for (let step = 0; step < 64 && Math.floor(startMs / intervalMs) < index; step++) startMs = nextUp(startMs);
  return startMs;
}
