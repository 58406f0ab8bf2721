/**
 * Pure statistics over accepted arrival times: how many requests (and tokens) the server saw in the
 * busiest window, and how often a limit was exceeded. Used by `SimulatedApi.stats()` and usable on
 * any recorded arrivals. `at` must be non-decreasing and `tokens` parallel to it.
 */
import { finiteNumber } from '../validate.js';
import type { SimulatedRule } from './policy-spec.js';

/** The most units seen in one window. */
export interface WindowPeak {
  /** Most accepted requests in any window of the given length. */
  readonly requests: number;
  /** Most accepted tokens in any window of the given length (possibly a different window). */
  readonly tokens: number;
}

/**
 * The most accepted requests, and separately tokens, in any window `[s, s + windowMs)`, sliding over
 * the arrival times (two arrivals share such a window iff they are less than `windowMs` apart).
 */
export function maxAcceptedInWindow(
  at: readonly number[],
  tokens: readonly number[],
  windowMs: number,
): WindowPeak {
  finiteNumber('windowMs', windowMs, { min: 0, minExclusive: true });
  let requests = 0;
  let tokenPeak = 0;
  let tokenSum = 0;
  let first = 0;
  for (let last = 0; last < at.length; last++) {
    tokenSum += tokens[last] ?? 0;
    // Drop arrivals too old to share a window with `last`.
    while (at[last]! - at[first]! >= windowMs) {
      tokenSum -= tokens[first] ?? 0;
      first++;
    }
    requests = Math.max(requests, last - first + 1);
    tokenPeak = Math.max(tokenPeak, tokenSum);
  }
  return { requests, tokens: tokenPeak };
}

// Slack for float sums in the token-bucket bound (units).
const epsilonUnits = 1e-9;

function overLimitForRule(rule: SimulatedRule, at: readonly number[], tokens: readonly number[]): number {
  const unitsAt = (i: number) => (rule.unit === 'requests' ? 1 : (tokens[i] ?? 0));
  let count = 0;
  switch (rule.kind) {
    case 'sliding-window': {
      // One window per arrival: the trailing interval (t - I, t] ending at it.
      let first = 0;
      let sum = 0;
      for (let last = 0; last < at.length; last++) {
        sum += unitsAt(last);
        while (at[first]! + rule.intervalMs <= at[last]!) sum -= unitsAt(first++);
        if (unitsAt(last) > 0 && sum > rule.limit) count++;
      }
      return count;
    }
    case 'fixed-window': {
      // One window per aligned interval [k·I, (k+1)·I) that holds an arrival.
      let index = Number.NaN;
      let sum = 0;
      for (let i = 0; i <= at.length; i++) {
        const k = i < at.length ? Math.floor(at[i]! / rule.intervalMs) : Number.NaN;
        if (k !== index) {
          if (sum > rule.limit) count++;
          index = k;
          sum = 0;
        }
        if (i < at.length) sum += unitsAt(i);
      }
      return count;
    }
    case 'token-bucket': {
      // A bucket (rate r, burst b) promises at most b + r·(t_j − t_i) units in any [t_i, t_j]. The
      // deficit D_j = max(0, D_{j−1} − r·(t_j − t_{j−1})) + c_j is the largest excess over r·span of any
      // such interval ending at j (Lindley's recursion), so the bound fails at j iff D_j > b.
      const ratePerMs = rule.limit / rule.intervalMs;
      let deficit = 0;
      for (let j = 0; j < at.length; j++) {
        const elapsedMs = j === 0 ? 0 : at[j]! - at[j - 1]!;
        deficit = Math.max(0, deficit - elapsedMs * ratePerMs) + unitsAt(j);
        if (unitsAt(j) > 0 && deficit > rule.burst + epsilonUnits) count++;
      }
      return count;
    }
  }
}

/**
 * How often the arrivals broke the rules, summed over rules: for a sliding window, the arrivals whose
 * trailing window `(t − interval, t]` held more than `limit`; for a fixed window, the aligned windows
 * holding more than `limit`; for a token bucket, the arrivals at which some interval ending there
 * held more than `burst + rate·length`. 0 means every rule was respected.
 */
export function overLimitWindows(
  rules: readonly SimulatedRule[],
  at: readonly number[],
  tokens: readonly number[],
): number {
  let total = 0;
  for (const rule of rules) total += overLimitForRule(rule, at, tokens);
  return total;
}
