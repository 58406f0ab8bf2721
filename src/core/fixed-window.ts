import { windowIndexAt, windowStartMs } from './aligned-window.js';
import type { LimitCore } from './limit.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * State of a fixed window: the latest window that holds a take, and the units of it and the window
 * before. Plain numbers only, so it serializes as JSON as is.
 */
export interface FixedWindowState {
  /** Index of the latest window holding a take (`windowIndexAt(t, intervalMs)`). */
  w: number;
  /** Units taken in window `w`. */
  n: number;
  /**
   * Units taken in window `w - 1`. Consulted when window `w` is empty again after a refund, so
   * cancelling a reservation pushed into the next window reopens the current one exactly.
   */
  p: number;
}

/**
 * Fixed window: at most `limit` units per aligned window of `intervalMs` (windows start at multiples
 * of `intervalMs` on the `now` scale; see `aligned-window.ts`).
 *
 * Promise: at most `limit` units start in each aligned window. Across a window edge, two windows'
 * worth can start close together: up to `2·limit` units in an interval of length `intervalMs`.
 *
 * The state knows the units of windows `w` and `w - 1` (and that later windows are empty), not those
 * of older windows. Takes may be recorded in the future (reservations) and calls queue behind them
 * (FIFO): nothing is admitted before window `w` while it holds units, nor before `w - 1` at all
 * (its predecessor's count is not kept, so it counts as full). A take in window `w - 1` is added to
 * `p`; an older one is dropped: no admission depends on it (`earliestAt` never answers such a window,
 * so only a caller ignoring it records one). `refund` subtracts from the window the take was in.
 *
 * `take`/`refund` update the state object in place and return it (use `clone` to keep a copy).
 * `capacity = limit`.
 */
export function createFixedWindow(
  spec: SpecFor<'fixed-window'>,
  path = 'limit',
): LimitCore<FixedWindowState> {
  const normalized = normalizeLimitSpec(spec, path, 'fixed-window');
  const { limit, intervalMs } = normalized;

  /** Units in window `index`, for `index >= w - 1`. */
  function unitsIn(state: FixedWindowState, index: number): number {
    if (index > state.w) return 0;
    return index === state.w ? state.n : state.p;
  }

  /** The first window a take may land in: w while it holds units (FIFO), else w - 1. */
  function firstOpenWindow(state: FixedWindowState): number {
    return state.n > 0 ? state.w : state.w - 1;
  }

  const core: LimitCore<FixedWindowState> = {
    algorithm: 'fixed-window',
    unit: normalized.unit,
    capacity: limit,
    timed: true,
    creditsLateStart: false,
    spec: normalized,
    initial: (now) => ({ w: windowIndexAt(now, intervalMs), n: 0, p: 0 }),
    earliestAt(state, cost, now) {
      // A NaN cost never fits either (written so that it fails the test).
      if (!(cost <= limit)) return Infinity;
      const nowWindow = windowIndexAt(now, intervalMs);
      const firstOpen = firstOpenWindow(state);
      let window = Math.max(nowWindow, firstOpen);
      // At most w - 1, w and w + 1, which is empty. Bounded all the same: past 2^53 `window + 1`
      // no longer moves, and a NaN cost never fits (neither happens with a validated spec and cost).
      for (let step = 0; unitsIn(state, window) + cost > limit; step++) {
        if (step === 3) return Infinity;
        window += 1;
      }
      return window === nowWindow ? now : windowStartMs(window, intervalMs);
    },
    take(state, cost, at) {
      const window = windowIndexAt(at, intervalMs);
      if (window === state.w) {
        state.n += cost;
      } else if (window > state.w) {
        // Moving on: window `window - 1` is w itself (count known) or a window with no take.
        state.p = window === state.w + 1 ? state.n : 0;
        state.n = cost;
        state.w = window;
      } else if (window === state.w - 1) {
        state.p += cost;
      }
      return state;
    },
    refund(state, cost, at) {
      const window = windowIndexAt(at, intervalMs);
      if (window === state.w) state.n = Math.max(state.n - cost, 0);
      else if (window === state.w - 1) state.p = Math.max(state.p - cost, 0);
      return state;
    },
    available(state, now) {
      const nowWindow = windowIndexAt(now, intervalMs);
      if (nowWindow < firstOpenWindow(state)) return 0;
      return Math.max(limit - unitsIn(state, nowWindow), 0);
    },
    isIdle(state, now) {
      // Nothing counted from now's window on, and nothing holding now's window closed.
      const nowWindow = windowIndexAt(now, intervalMs);
      if (nowWindow > state.w) return true;
      if (nowWindow === state.w) return state.n <= 0;
      return nowWindow === state.w - 1 && state.n <= 0 && state.p <= 0;
    },
    clone: (state) => ({ w: state.w, n: state.n, p: state.p }),
  };
  return Object.freeze(core);
}
