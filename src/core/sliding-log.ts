import type { LimitCore } from './limit.js';
import { normalizeLimitSpec, type SpecFor } from './normalize-limit-spec.js';

/**
 * State of a sliding log: one flat array `[horizonMs, t0, c0, t1, c1, ...]`: the times (ms) and costs
 * (units) of the takes that may still matter, times ascending (equal times merged), after a header:
 *
 * `horizonMs` is the latest time at which a dropped entry stops counting. Entries are dropped (to
 * bound memory) without knowing `now`, because `take` is not given it; an entry dropped that way
 * could still count if the reservations after it were all cancelled later. So no admission is ever
 * answered before `horizonMs`: the log never under-counts. `-Number.MAX_VALUE` means "none"
 * (JSON has no -Infinity).
 */
export type SlidingLogState = number[];

// An entry taken at `t` counts at time `x` while `t + intervalMs > x`: it leaves the window at exactly
// `t + intervalMs`. Every test below is written in that form, so the time `earliestAt` computes
// (`t + intervalMs`) is the time at which the entry is gone, to the last bit.

const noHorizon = -Number.MAX_VALUE;

/**
 * Sliding log: at most `limit` units in every window `(t - intervalMs, t]`, exactly, by keeping the
 * time and cost of each take.
 *
 * Promise: at most `limit` units start in any window of length `intervalMs` (half-open: starts
 * exactly `intervalMs` apart fall in different windows).
 *
 * Calls queue behind every recorded take, including reservations in the future (FIFO): `earliestAt`
 * answers the earliest `t >= max(now, last take)` at which the units in `(t - intervalMs, t]` plus the
 * cost fit. Entries are pruned once they can no longer count: in `refund`, those that left the window
 * before `now`; in `take`, those that left it an interval before the previous latest take (keeping
 * one interval in hand makes cancelling the two latest reservations exact as well).
 *
 * `take`/`refund` update the array in place and return it (use `clone` to keep a copy).
 * `capacity = limit`. Counting is exact for integer costs.
 */
export function createSlidingLog(spec: SpecFor<'sliding-log'>, path = 'limit'): LimitCore<SlidingLogState> {
  const normalized = normalizeLimitSpec(spec, path, 'sliding-log');
  const { limit, intervalMs } = normalized;

  /** Units of entries still counting at `t` (entries are ascending: scan back from the newest). */
  function unitsAt(log: SlidingLogState, t: number): number {
    let units = 0;
    for (let i = log.length - 2; i >= 1; i -= 2) {
      if (log[i]! + intervalMs <= t) break;
      units += log[i + 1]!;
    }
    return units;
  }

  /** Earliest time the log lets anything start: after its last take and its horizon. */
  function queueEndAt(log: SlidingLogState): number {
    const horizonMs = log[0]!;
    const lastMs = log.length > 1 ? log[log.length - 2]! : noHorizon;
    return Math.max(lastMs, horizonMs);
  }

  /**
   * Drops the entries that left the window at or before `cutoffMs` and raises the horizon to the
   * latest such exit time. With `lazy`, only when they are at least half the entries (so a take
   * moves the array at most once per halving: amortized O(1)); stale entries cost nothing meanwhile,
   * since `unitsAt` stops at the first one.
   */
  function prune(log: SlidingLogState, cutoffMs: number, lazy: boolean): void {
    // Binary search over entries 0..count-1 for the first one still counting after cutoffMs.
    const count = (log.length - 1) / 2;
    let lo = 0;
    let hi = count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (log[1 + 2 * mid]! + intervalMs <= cutoffMs) lo = mid + 1;
      else hi = mid;
    }
    if (lo === 0 || (lazy && lo * 2 < count)) return;
    // Entries are ascending, so the last dropped one leaves the window last.
    const exitMs = log[1 + 2 * (lo - 1)]! + intervalMs;
    if (exitMs > log[0]!) log[0] = exitMs;
    log.copyWithin(1, 1 + 2 * lo);
    log.length -= 2 * lo;
  }

  const core: LimitCore<SlidingLogState> = {
    algorithm: 'sliding-log',
    unit: normalized.unit,
    capacity: limit,
    timed: true,
    creditsLateStart: false,
    spec: normalized,
    initial: () => [noHorizon],
    earliestAt(log, cost, now) {
      // A NaN cost never fits either (written so that it fails the test).
      if (!(cost <= limit)) return Infinity;
      // FIFO: never before the latest recorded take (nor the horizon of dropped entries).
      const queueEnd = queueEndAt(log);
      const fromMs = Math.max(queueEnd, now);
      // No entry lies after fromMs, so from there on the window only loses entries.
      let first = log.length;
      let units = 0;
      for (let i = log.length - 2; i >= 1; i -= 2) {
        if (log[i]! + intervalMs <= fromMs) break;
        units += log[i + 1]!;
        first = i;
      }
      // excess (units) = what must leave the window before `cost` fits.
      const excess = units + cost - limit;
      if (excess <= 0) return fromMs;
      let freed = 0;
      for (let i = first; i < log.length; i += 2) {
        freed += log[i + 1]!;
        // The entry at log[i] leaves the window at log[i] + intervalMs (ms).
        if (freed >= excess) return log[i]! + intervalMs;
      }
      return Infinity; // Unreachable for cost <= limit: once every entry has left, the cost fits.
    },
    take(log, cost, at) {
      const end = log.length;
      if (end === 1) {
        log.push(at, cost);
        return log;
      }
      const lastMs = log[end - 2]!;
      // Entries that left the window an interval before the latest take cannot count again even if
      // that take and the one being recorded are both cancelled (reservations chain less than an
      // interval apart); the horizon covers deeper cancellations.
      prune(log, lastMs - intervalMs, true);
      if (at > lastMs) {
        log.push(at, cost);
        return log;
      }
      // Same time as an entry: merge. Earlier (a caller recording out of order): insert in place.
      let i = log.length - 2;
      while (i >= 1 && log[i]! > at) i -= 2;
      if (i >= 1 && log[i] === at) log[i + 1]! += cost;
      else log.splice(i + 2, 0, at, cost);
      return log;
    },
    refund(log, cost, at, now) {
      for (let i = log.length - 2; i >= 1; i -= 2) {
        const timeMs = log[i]!;
        if (timeMs < at) break;
        if (timeMs === at) {
          const left = log[i + 1]! - cost;
          if (left > 0) {
            log[i + 1] = left;
          } else {
            log.copyWithin(i, i + 2);
            log.length -= 2;
          }
          break;
        }
      }
      // Not found: it was pruned, and the horizon still stands for it.
      prune(log, now, false);
      return log;
    },
    available(log, now) {
      if (queueEndAt(log) > now) return 0;
      const units = limit - unitsAt(log, now);
      return Math.max(units, 0);
    },
    isIdle(log, now) {
      // The newest entry has left the window and no horizon lies ahead.
      return queueEndAt(log) <= now && (log.length === 1 || log[log.length - 2]! + intervalMs <= now);
    },
    clone: (log) => log.slice(),
  };
  return Object.freeze(core);
}
