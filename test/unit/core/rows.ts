import { expect } from 'vitest';
import { type LimitCore, tryAcquireAt } from '../../../src/core/limit.js';

/**
 * One step of a table-driven core test (x/time style): at time `at`, try to start `cost` now.
 * When admitted, the take is recorded at `at`; when refused, `expectRetryAfterMs` is the wait.
 */
export interface Row {
  at: number;
  cost: number;
  expectOk: boolean;
  expectRetryAfterMs?: number;
}

/** Runs the rows in order from `initial(startMs)` and returns the final state. */
export function runRows<S>(core: LimitCore<S>, rows: readonly Row[], startMs = 0): S {
  let state = core.initial(startMs);
  rows.forEach((row, index) => {
    const decision = tryAcquireAt(core, state, row.cost, row.at);
    const retryAfterMs = decision.ok ? undefined : decision.retryAfterMs;
    expect({ row: index, ok: decision.ok }).toEqual({ row: index, ok: row.expectOk });
    if (row.expectRetryAfterMs !== undefined) {
      if (row.expectRetryAfterMs === Infinity) expect(retryAfterMs).toBe(Infinity);
      else expect(retryAfterMs, `row ${index}`).toBeCloseTo(row.expectRetryAfterMs, 6);
    }
    if (decision.ok) state = core.take(state, row.cost, row.at);
  });
  return state;
}

/**
 * Asserts two states answer alike: the same `earliestAt` for every cost in `costs` at every time in
 * `times`, and the same `available` and `isIdle`.
 */
export function expectSameAnswers<S>(
  core: LimitCore<S>,
  actual: S,
  expected: S,
  times: readonly number[],
  costs: readonly number[] = [1, core.capacity],
): void {
  for (const now of times) {
    for (const cost of costs) {
      expect(core.earliestAt(actual, cost, now), `earliestAt(cost ${cost}, now ${now})`).toBe(
        core.earliestAt(expected, cost, now),
      );
    }
    expect(core.available(actual, now), `available(${now})`).toBe(core.available(expected, now));
    expect(core.isIdle(actual, now), `isIdle(${now})`).toBe(core.isIdle(expected, now));
  }
}
