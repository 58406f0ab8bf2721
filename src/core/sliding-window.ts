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
   * Units taken in window `w - 2`. Consulted when window `w` is empty again after a refund (the
   * estimate in window `w - 1` weighs it), so cancelling a reservation pushed into the next window
   * reopens the current one exactly.
   */
  older: number;
}

/**
 * Sliding window counter (the weighted overlap Cloudflare describes): at time `t` in aligned window
 * `k`, a fraction `f` of the way through it, the estimate is `units(k - 1)·(1 - f) + units(k)`, and
 * a cost is admitted when `estimate + cost <= limit`.
 *
 * Promise: at most `limit` units start in each aligned window; at every admission the weighted
 * estimate including the cost is at most `limit`; any interval of length `intervalMs` holds fewer
 * than `2·limit` units (at most `limit·(1 + f)`: the worst case is the previous window's units
 * bunched at its end). Cheap and nearly exact, but not a hard bound for a paid quota: use the
 * sliding log for that.
 *
 * The state knows the units of windows `w`, `w - 1` and `w - 2` (and that later windows are empty).
 * Takes may be recorded in the future (reservations) and calls queue behind them (FIFO): nothing is
 * admitted before window `w` while it holds units, nor before `w - 1` at all (its estimate would need
 * the units of `w - 3`, which are not kept). Takes in windows `w - 1` and `w - 2` are added to their
 * counts; older ones are dropped (no admission depends on them). `refund` subtracts from the window
 * the take was in: exact for the latest take, except for a take landing two windows past the first
 * open window (only a cost of the whole limit does), after whose refund that first open window
 * stays closed (conservative: the count its estimate needs was shifted out).
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

  /** Units in window `index`, for `index >= w - 2`. */
  function unitsIn(state: SlidingWindowState, index: number): number {
    if (index > state.w) return 0;
    if (index === state.w) return state.cur;
    return index === state.w - 1 ? state.prev : state.older;
  }

  /** The first window a take may land in: w while it holds units (FIFO), else w - 1. */
  function firstOpenWindow(state: SlidingWindowState): number {
    return state.cur > 0 ? state.w : state.w - 1;
  }

  /** Weighted units at `t` (ms), or Infinity before the first open window. */
  function estimateAt(state: SlidingWindowState, t: number): number {
    // x (windows) = t (ms) / intervalMs (ms per window); its integer part is the window index and
    // its fractional part f the elapsed fraction of that window (x - floor(x) is exact).
    const x = t / intervalMs;
    const window = Math.floor(x);
    if (window > state.w + 1) return 0;
    if (window < firstOpenWindow(state)) return Infinity;
    // The previous window's units weighted by the part of it still inside (t - interval, t].
    return unitsIn(state, window - 1) * (1 - (x - window)) + unitsIn(state, window);
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
      // A NaN cost never fits either (written so that it fails the test).
      if (!(cost <= limit)) return Infinity;
      if (estimateAt(state, now) + cost <= limit) return now;
      let t = now;
      let window = windowIndexAt(now, intervalMs);
      const firstOpen = firstOpenWindow(state);
      if (window < firstOpen) {
        // FIFO: behind the units counted in the first open window.
        window = firstOpen;
        t = windowStartMs(window, intervalMs);
      }
      // At most w - 1, w, w + 1, and w + 2, where nothing counts any more. Bounded all the same:
      // past 2^53 `window + 1` no longer moves, and a NaN cost never fits (neither happens with a
      // validated spec and cost); Infinity then means "not predictable", never a hang.
      for (let windows = 0; windows < 5; windows++) {
        if (estimateAt(state, t) + cost <= limit) return t;
        const weighted = unitsIn(state, window - 1);
        // room (units) = what the weighted part may still be: limit - this window's units - cost.
        const room = limit - unitsIn(state, window) - cost;
        if (room >= 0 && weighted > 0) {
          // weighted·(1 - f) <= room  ⇔  f >= 1 - room / weighted; t (ms) = (window + f) × intervalMs.
          t = Math.max(t, (window + 1 - room / weighted) * intervalMs);
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
      return Infinity;
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
      const ahead = windowIndexAt(at, intervalMs) - state.w;
      if (ahead === 0) state.cur = Math.max(state.cur - cost, 0);
      else if (ahead === -1) state.prev = Math.max(state.prev - cost, 0);
      else if (ahead === -2) state.older = Math.max(state.older - cost, 0);
      return state;
    },
    available(state, now) {
      return Math.max(limit - estimateAt(state, now), 0);
    },
    isIdle(state, now) {
      // Nothing counted that weighs on now's window or later, and nothing holding it closed.
      const nowWindow = windowIndexAt(now, intervalMs);
      if (nowWindow < firstOpenWindow(state)) return false;
      for (let window = nowWindow - 1; window <= state.w; window++) {
        if (unitsIn(state, window) > 0) return false;
      }
      return true;
    },
    clone: (state) => ({ w: state.w, cur: state.cur, prev: state.prev, older: state.older }),
  };
  return Object.freeze(core);
}
