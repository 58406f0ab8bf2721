import { windowIndexAt, windowStartMs } from './aligned-window.js';
import type { LimitCore } from './limit.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * State of a fixed window: the latest window that holds a take, and two counts.
 * Plain numbers only, so it serializes as JSON as is.
 */
export interface FixedWindowState {
  /** Index of the latest window holding a take (`windowIndexAt(t, intervalMs)`). */
  w: number;
  /** Units taken in window `w`. */
  n: number;
  /**
   * Units taken in window `w - 1`. Only consulted when a refund empties window `w` and the state
   * steps back to `w - 1` (so cancelling a reservation pushed into the next window is exact).
   * Set to `limit` (unknown: assume full) when it can no longer be known.
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
 * Takes may be recorded in the future (reservations). Calls queue behind them (FIFO): while window
 * `w` holds reservations, nothing is admitted in an earlier window. A take in window `w - 1` is added
 * to `p`; a take older than that is dropped: no admission at or after window `w - 1` depends on it
 * (and `earliestAt` never admits into such a window, so only a caller ignoring it records one).
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

  const core: LimitCore<FixedWindowState> = {
    algorithm: 'fixed-window',
    unit: normalized.unit,
    capacity: limit,
    timed: true,
    creditsLateStart: false,
    spec: normalized,
    initial: (now) => ({ w: windowIndexAt(now, intervalMs), n: 0, p: 0 }),
    earliestAt(state, cost, now) {
      if (cost > limit) return Infinity;
      const nowWindow = windowIndexAt(now, intervalMs);
      // The state's windows are over: a fresh window holds any cost up to the limit.
      if (nowWindow > state.w) return now;
      if (state.n + cost <= limit) {
        // Fits in window w: now if that is the current window, else (FIFO) at its start.
        return nowWindow === state.w ? now : windowStartMs(state.w, intervalMs);
      }
      // Window w is full for this cost: the next window is empty.
      return windowStartMs(state.w + 1, intervalMs);
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
      if (window === state.w) {
        state.n -= cost;
        if (state.n <= 0) {
          // Window w is empty again: step back to w - 1, so the windows before w are no longer
          // held behind a reservation that no longer exists. Its predecessor's count is unknown.
          state.w -= 1;
          state.n = state.p;
          state.p = limit;
        }
      } else if (window === state.w - 1) {
        state.p = state.p > cost ? state.p - cost : 0;
      }
      return state;
    },
    available(state, now) {
      const nowWindow = windowIndexAt(now, intervalMs);
      if (nowWindow > state.w) return limit;
      if (nowWindow < state.w) return 0;
      return state.n < limit ? limit - state.n : 0;
    },
    isIdle(state, now) {
      const nowWindow = windowIndexAt(now, intervalMs);
      return nowWindow > state.w || (nowWindow === state.w && state.n <= 0);
    },
    clone: (state) => ({ w: state.w, n: state.n, p: state.p }),
  };
  return Object.freeze(core);
}
