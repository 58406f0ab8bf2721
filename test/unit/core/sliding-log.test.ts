import { describe, expect, it } from 'vitest';
import { reserveAt } from '../../../src/core/limit.js';
import { createSlidingLog } from '../../../src/core/sliding-log.js';
import { expectInvalidOption } from './expect-invalid-option.js';
import { expectSameAnswers, runRows } from './rows.js';

// 3 per any window (t - 1000, t].
const log = createSlidingLog({ limit: 3, intervalMs: 1000 });

describe('sliding log', () => {
  it('waits until the oldest units leave the window', () => {
    runRows(log, [
      { at: 0, cost: 1, expectOk: true },
      { at: 100, cost: 1, expectOk: true },
      { at: 200, cost: 1, expectOk: true },
      { at: 300, cost: 1, expectOk: false, expectRetryAfterMs: 700 },
      { at: 1000, cost: 1, expectOk: true },
      { at: 1000, cost: 1, expectOk: false, expectRetryAfterMs: 100 },
      // In (100, 1100]: the units at 200 and 1000. Two more need the one at 200 gone: 1200.
      { at: 1100, cost: 2, expectOk: false, expectRetryAfterMs: 100 },
      { at: 1200, cost: 2, expectOk: true },
    ]);
  });

  it('counts every window of length intervalMs, not aligned windows', () => {
    runRows(log, [
      { at: 900, cost: 3, expectOk: true },
      { at: 1000, cost: 1, expectOk: false, expectRetryAfterMs: 900 },
      { at: 1899, cost: 1, expectOk: false, expectRetryAfterMs: 1 },
      { at: 1900, cost: 3, expectOk: true },
    ]);
  });

  it('queues reservations behind the latest one (FIFO)', () => {
    let state = log.initial(0);
    const starts: number[] = [];
    for (const cost of [3, 1, 2, 1]) {
      const reserved = reserveAt(log, state, cost, 0);
      state = reserved.state;
      starts.push(reserved.startAt);
    }
    expect(starts).toEqual([0, 1000, 1000, 2000]);
    // Behind the last reservation even though this cost would fit at 1000.
    expect(log.earliestAt(state, 0, 0)).toBe(2000);
    expect(log.earliestAt(state, 2, 0)).toBe(2000);
    expect(log.earliestAt(state, 3, 0)).toBe(3000);
    expect(log.available(state, 0)).toBe(0);
  });

  it('cancelling the two latest reservations, newest first, is exact', () => {
    let state = log.take(log.initial(0), 2, 0);
    state = log.take(state, 1, 400);
    const before = log.clone(state);
    const first = reserveAt(log, state, 2, 500);
    const second = reserveAt(log, first.state, 3, 500);
    expect([first.startAt, second.startAt]).toEqual([1000, 2000]);
    state = log.refund(second.state, 3, second.startAt, 500);
    state = log.refund(state, 2, first.startAt, 500);
    expectSameAnswers(log, state, before, [500, 999, 1000, 1400, 3000], [1, 2, 3]);
  });

  it('never under-counts after cancelling a deep queue of reservations', () => {
    let state = log.take(log.initial(0), 3, 0);
    const starts: number[] = [];
    for (let i = 0; i < 6; i++) {
      const reserved = reserveAt(log, state, 3, 10);
      state = reserved.state;
      starts.push(reserved.startAt);
    }
    expect(starts).toEqual([1000, 2000, 3000, 4000, 5000, 6000]);
    for (const at of [...starts].reverse()) state = log.refund(state, 3, at, 10);
    // The 3 units at 0 still fill the window until 1000: nothing may start before.
    expect(log.earliestAt(state, 1, 10)).toBeGreaterThanOrEqual(1000);
  });

  it('merges takes at the same time and refunds part of one', () => {
    let state = log.take(log.initial(0), 1, 100);
    state = log.take(state, 1, 100);
    expect(state.length).toBe(3);
    state = log.refund(state, 1, 100, 100);
    expect(log.available(state, 100)).toBe(2);
  });

  it('inserts a take recorded out of order at its place', () => {
    let state = log.take(log.initial(0), 1, 500);
    state = log.take(state, 1, 100);
    expect(state.slice(1)).toEqual([100, 1, 500, 1]);
    expect(log.earliestAt(state, 2, 600)).toBe(1100);
  });

  it('prunes entries that can no longer count, keeping memory bounded', () => {
    let state = log.initial(0);
    for (let t = 0; t < 100_000; t += 400) state = log.take(state, 1, t);
    expect(state.length).toBeLessThan(1 + 2 * 20);
    state = log.refund(state, 0, -1, 200_000);
    expect(state.length).toBe(1);
    expect(log.isIdle(state, 200_000)).toBe(true);
  });

  it('reports the units left in the window ending now', () => {
    let state = log.take(log.initial(0), 2, 0);
    state = log.take(state, 1, 500);
    expect(log.available(state, 600)).toBe(0);
    expect(log.available(state, 1000)).toBe(2);
    expect(log.available(state, 1500)).toBe(3);
    expect(log.capacity).toBe(3);
    expect(log.earliestAt(state, 4, 5000)).toBe(Infinity);
  });

  it('is idle once the newest take has left the window', () => {
    const state = log.take(log.initial(0), 1, 100);
    expect(log.isIdle(log.initial(0), 0)).toBe(true);
    expect(log.isIdle(state, 1099)).toBe(false);
    expect(log.isIdle(state, 1100)).toBe(true);
  });

  it('clones deeply and keeps a JSON-safe state', () => {
    const state = log.take(log.initial(0), 1, 100);
    const copy = log.clone(state);
    log.take(state, 1, 200);
    expect(copy).toEqual([-Number.MAX_VALUE, 100, 1]);
    expect(JSON.parse(JSON.stringify(copy))).toEqual(copy);
  });

  it.each([
    [
      { limit: 1.5, intervalMs: 1000 },
      'limit.limit',
      'Expected `limit.limit` to be an integer >= 1, got `1.5` (number)',
    ],
    [
      { limit: 3, intervalMs: '1000' },
      'limit.intervalMs',
      'Expected `limit.intervalMs` to be a finite number >= 1, got `"1000"` (string)',
    ],
    [
      { limit: 3, intervalMs: 1000, unit: '' },
      'limit.unit',
      'Expected `limit.unit` to be a non-empty string, got `""` (string)',
    ],
  ])('rejects an invalid spec %j', (spec, option, message) => {
    expectInvalidOption(() => createSlidingLog(spec as never), option, message);
  });
});
