import { describe, expect, it } from 'vitest';
import { reserveAt } from '../../../src/core/limit.js';
import { createSlidingWindow } from '../../../src/core/sliding-window.js';
import { expectInvalidOption } from './expect-invalid-option.js';
import { expectSameAnswers, runRows } from './rows.js';

// 4 per 1000 ms, estimated as prev·(1 - f) + cur over aligned windows of 1000 ms.
const counter = createSlidingWindow({ limit: 4, intervalMs: 1000 });

describe('sliding window counter', () => {
  it('weights the previous window by the part still inside the sliding interval', () => {
    runRows(counter, [
      { at: 0, cost: 4, expectOk: true },
      // Window 0 is full; in window 1 the estimate is 4·(1 - f): 1 more fits from f = 1/4.
      { at: 500, cost: 1, expectOk: false, expectRetryAfterMs: 750 },
      { at: 1250, cost: 1, expectOk: true },
      // 4·(1 - f) + 1 + 1 <= 4 from f = 1/2.
      { at: 1250, cost: 1, expectOk: false, expectRetryAfterMs: 250 },
      { at: 1500, cost: 2, expectOk: false, expectRetryAfterMs: 250 },
      { at: 1750, cost: 2, expectOk: true },
      // Window 1 holds 3 (its own limit is 4): 1 more at the end of window 1.
      { at: 1750, cost: 1, expectOk: false, expectRetryAfterMs: 250 },
      // Window 2 starts with an estimate of 3·1 + 0; then 3·(1 - f) + 1 + 1 <= 4 from f = 1/3.
      { at: 2000, cost: 1, expectOk: true },
      { at: 2000, cost: 1, expectOk: false, expectRetryAfterMs: 1000 / 3 },
    ]);
  });

  it('admits a whole limit once the previous window holds nothing', () => {
    runRows(counter, [
      { at: 100, cost: 4, expectOk: true },
      { at: 2000, cost: 4, expectOk: true },
      { at: 3000, cost: 1, expectOk: false, expectRetryAfterMs: 250 },
    ]);
  });

  it('returns times a check at that very time admits, with awkward numbers', () => {
    const odd = createSlidingWindow({ limit: 7, intervalMs: 1000 / 3 });
    let state = odd.initial(1_700_000_000_000);
    let now = 1_700_000_000_000;
    for (let i = 0; i < 200; i++) {
      const cost = 1 + (i % 7);
      const at = odd.earliestAt(state, cost, now);
      expect(odd.earliestAt(state, cost, at)).toBe(at);
      state = odd.take(state, cost, at);
      now = at + (i % 3) * 17.3;
    }
  });

  it('queues reservations behind the latest reserved window', () => {
    let state = counter.initial(0);
    const starts: number[] = [];
    for (const cost of [4, 4, 1]) {
      const reserved = reserveAt(counter, state, cost, 0);
      state = reserved.state;
      starts.push(reserved.startAt);
    }
    // A whole limit fits only where the previous window weighs nothing: window 2's start. Then
    // window 2 is full, and in window 3 the estimate 4·(1 - f) + 1 leaves room from f = 1/4.
    expect(starts).toEqual([0, 2000, 3250]);
    expect(counter.earliestAt(state, 0, 0)).toBe(3250);
    expect(counter.available(state, 0)).toBe(0);
  });

  it('cancelling a reservation pushed into the next window reopens the current one exactly', () => {
    const before = counter.take(counter.take(counter.initial(0), 2, 0), 2, 900);
    const reserved = reserveAt(counter, counter.clone(before), 3, 950);
    expect(reserved.startAt).toBe(1750);
    const after = counter.refund(reserved.state, 3, reserved.startAt, 960);
    expectSameAnswers(counter, after, before, [960, 999, 1000, 1500, 2500], [1, 2, 3, 4]);
  });

  it('cancelling the latest take in the current window is exact', () => {
    const before = counter.take(counter.initial(0), 1, 100);
    const after = counter.refund(counter.take(counter.clone(before), 2, 200), 2, 200, 300);
    expectSameAnswers(counter, after, before, [300, 1000, 1500], [1, 2, 4]);
  });

  it('records takes in the two windows before its latest one and drops older ones', () => {
    const state = counter.take(counter.initial(0), 1, 3500);
    counter.take(state, 1, 2500);
    counter.take(state, 2, 1500);
    counter.take(state, 1, 500);
    expect(state).toEqual({ w: 3, cur: 1, prev: 1, older: 2 });
  });

  it('reports the room under the estimate', () => {
    const state = counter.take(counter.initial(0), 4, 0);
    expect(counter.available(state, 500)).toBe(0);
    expect(counter.available(state, 1500)).toBe(2);
    expect(counter.available(state, 2000)).toBe(4);
    expect(counter.capacity).toBe(4);
    expect(counter.earliestAt(state, 5, 0)).toBe(Infinity);
  });

  it('is idle once nothing it counted weighs on now', () => {
    const state = counter.take(counter.initial(0), 1, 100);
    expect(counter.isIdle(counter.initial(0), 0)).toBe(true);
    expect(counter.isIdle(state, 1999)).toBe(false);
    expect(counter.isIdle(state, 2000)).toBe(true);
  });

  it('clones deeply', () => {
    const state = counter.take(counter.initial(0), 1, 100);
    const copy = counter.clone(state);
    counter.take(state, 1, 1100);
    expect(copy).toEqual({ w: 0, cur: 1, prev: 0, older: 0 });
  });

  it('never spins when the window index stops changing (past 2^53): the wait is unpredictable', () => {
    // Unreachable with a validated spec and a real clock (intervalMs >= 1); found by review with
    // intervalMs 1e-4 on the epoch clock, where the second call at the same instant looped forever.
    const core = createSlidingWindow({ limit: 1, intervalMs: 1 });
    const now = 2 ** 53;
    const state = core.take(core.initial(now), 1, now);
    expect(core.earliestAt(state, 1, now)).toBe(Infinity);
    expect(core.earliestAt(state, Number.NaN, now)).toBe(Infinity);
  });

  it.each([
    [null, 'limit', 'Expected `limit` to be an object, got `null` (null)'],
    [
      { limit: 4, intervalMs: 1000, burst: 1 },
      'limit.burst',
      "Expected `limit.burst` to be omitted (only 'token-bucket' has a burst; 'sliding-window' does not), got `1` (number)",
    ],
    [
      { limit: 4, intervalMs: -Infinity },
      'limit.intervalMs',
      'Expected `limit.intervalMs` to be a finite number >= 1, got `-Infinity` (number)',
    ],
  ])('rejects an invalid spec %j', (spec, option, message) => {
    expectInvalidOption(() => createSlidingWindow(spec as never), option, message);
  });
});
