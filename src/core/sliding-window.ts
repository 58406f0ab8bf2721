import { windowIndexAt, windowStartMs } from './aligned-window.js';
import type { LimitCore } from './limit.js';
import { nextUp } from './next-up.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * State of a sliding window counter: the latest aligned window holding a take and the units counted
 * in it and the two windows before it. Plain numbers only, so it serializes as JSON as is.
 */
export interface SlidingWindowState {
  /** Index of the latest window holding a take (`windowIndexAt(t, intervalMs)`). */
  w: number;
  /** Units taken in window `w`. */
  cur: number;
  /** Units taken in window `w - 1`. */
  prev: number;
  /**
   * Units taken in window `w - 2`. Only consulted when a refund empties window `w` and the state
   * steps back to `w - 1` (so cancelling a reservation pushed into the next window is exact).
   * Set to `limit` (unknown: assume full) when it can no longer be known.
   */
  older: number;
}

/**
 * Sliding window counter (the weighted overlap Cloudflare describes): at time `t` in aligned window
 * `k`, a fraction `f` of the way through it, the estimate is `prev·(1 - f) + cur` (units of windows
 * `k - 1` and `k`), and a cost is admitted when `estimate + cost <= limit`.
 *
 * Promise: at most `limit` units start in each aligned window; at every admission the weighted
 * estimate including the cost is at most `limit`; any interval of length `intervalMs` holds fewer
 * than `2·limit` units (at most `limit·(1 + f)`: the worst case is the previous window's units
 * bunched at its end). Cheap and nearly exact, but not a hard bound for a paid quota: use the
 * sliding log for that.
 *
 * Calls queue behind takes recorded in the future (FIFO): while window `w` holds reservations, nothing
 * is admitted in an earlier window. Takes in windows `w - 1` and `w - 2` are added to their counts;
 * older ones are dropped (no admission at or after window `w` depends on them).
 *
 * A time returned by `earliestAt` is admitted by the same test at that time: the analytic solution
 * is nudged up by an ulp at a time until the test agrees.
 *
 * `take`/`refund` update the state object in place and return it (use `clone` to keep a copy).
 * `capacity = limit`.
 */
export function createSlidingWindow(
  spec: SpecFor<'sliding-window'>,
  path = 'limit',
): LimitCore<SlidingWindowState> {
  const normalized = normalizeLimitSpec(spec, path, 'sliding-window');
  const { limit, intervalMs } = normalized;

  /** Weighted units at `t` (ms), or Infinity when `t` lies before window `w` (FIFO). */
  function estimateAt(state: SlidingWindowState, t: number): number {
    // x (windows) = t (ms) / intervalMs (ms per window); its integer part is the window index and
    // its fractional part f the elapsed fraction of that window (x - floor(x) is exact).
    const x = t / intervalMs;
    const window = Math.floor(x);
    const ahead = window - state.w;
    if (ahead < 0) return Infinity;
    if (ahead >= 2) return 0;
    const remaining = 1 - (x - window);
    // In window w: prev weighted by the part of window w - 1 still inside (t - interval, t], plus cur.
    // In window w + 1: cur is now the previous window's count, and nothing is counted yet.
    return ahead === 0 ? state.prev * remaining + state.cur : state.cur * remaining;
  }

  const core: LimitCore<SlidingWindowState> = {
    algorithm: 'sliding-window',
    unit: normalized.unit,
    capacity: limit,
    timed: true,
    creditsLateStart: false,
    spec: normalized,
    initial: (now) => ({ w: windowIndexAt(now, intervalMs), cur: 0, prev: 0, older: 0 }),
    earliestAt(state, cost, now) {
      if (cost > limit) return Infinity;
      if (estimateAt(state, now) + cost <= limit) return now;
      let t = now;
      let window = windowIndexAt(now, intervalMs);
      if (window < state.w) {
        // FIFO: behind the reservations in window w.
        window = state.w;
        t = windowStartMs(window, intervalMs);
      }
      // At most three windows: w, w + 1, and w + 2, where nothing counts any more.
      for (;;) {
        if (estimateAt(state, t) + cost <= limit) return t;
        const ahead = window - state.w;
        const weighted = ahead === 0 ? state.prev : state.cur;
        // room (units) = what the weighted part may still be: limit - unweighted count - cost.
        const room = limit - (ahead === 0 ? state.cur : 0) - cost;
        if (room >= 0 && weighted > 0) {
          // weighted·(1 - f) <= room  ⇔  f >= 1 - room / weighted; t (ms) = (window + f) × intervalMs.
          const solvedMs = (window + 1 - room / weighted) * intervalMs;
          if (solvedMs > t) t = solvedMs;
          // Rounding may leave the solution an ulp or two short: step up until the test agrees.
          for (let step = 0; step < 64 && windowIndexAt(t, intervalMs) === window; step++) {
            if (estimateAt(state, t) + cost <= limit) return t;
            t = nextUp(t);
          }
        }
        // Not within this window: the estimate only falls, so try the next window's start.
        window += 1;
        t = windowStartMs(window, intervalMs);
      }
    },
    take(state, cost, at) {
      const window = windowIndexAt(at, intervalMs);
      const ahead = window - state.w;
      if (ahead === 0) {
        state.cur += cost;
      } else if (ahead > 0) {
        // Shift the counts: windows skipped over held no take.
        state.older = ahead === 1 ? state.prev : ahead === 2 ? state.cur : 0;
        state.prev = ahead === 1 ? state.cur : 0;
        state.cur = cost;
        state.w = window;
      } else if (ahead === -1) {
        state.prev += cost;
      } else if (ahead === -2) {
        state.older += cost;
      }
      return state;
    },
    refund(state, cost, at) {
      const window = windowIndexAt(at, intervalMs);
      const ahead = window - state.w;
      if (ahead === 0) {
        state.cur -= cost;
        if (state.cur <= 0) {
          // Window w is empty again: step back to w - 1, so the windows before w are no longer held
          // behind a reservation that no longer exists. The count before `older` is unknown.
          state.w -= 1;
          state.cur = state.prev;
          state.prev = state.older;
          state.older = limit;
        }
      } else if (ahead === -1) {
        state.prev = state.prev > cost ? state.prev - cost : 0;
      } else if (ahead === -2) {
        state.older = state.older > cost ? state.older - cost : 0;
      }
      return state;
    },
    available(state, now) {
      const units = limit - estimateAt(state, now);
      return Math.max(units, 0);
    },
    isIdle(state, now) {
      const ahead = windowIndexAt(now, intervalMs) - state.w;
      if (ahead >= 2) return true;
      if (ahead === 1) return state.cur <= 0;
      return ahead === 0 && state.cur <= 0 && state.prev <= 0;
    },
    clone: (state) => ({ w: state.w, cur: state.cur, prev: state.prev, older: state.older }),
  };
  return Object.freeze(core);
}
