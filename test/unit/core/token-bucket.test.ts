import { describe, expect, it } from 'vitest';
import { reserveAt } from '../../../src/core/limit.js';
import { createTokenBucket } from '../../../src/core/token-bucket.js';
import { expectInvalidOption } from './expect-invalid-option.js';
import { expectSameAnswers, runRows } from './rows.js';

// 10 per 1000 ms with a burst of 5: one unit refills every T = 100 ms.
const bucket = createTokenBucket({ limit: 10, intervalMs: 1000, burst: 5 });

describe('token bucket', () => {
  it('starts a full burst at once, then one unit per emission interval', () => {
    runRows(bucket, [
      { at: 0, cost: 5, expectOk: true },
      { at: 0, cost: 1, expectOk: false, expectRetryAfterMs: 100 },
      { at: 99, cost: 1, expectOk: false, expectRetryAfterMs: 1 },
      { at: 100, cost: 1, expectOk: true },
      { at: 100, cost: 2, expectOk: false, expectRetryAfterMs: 200 },
      { at: 300, cost: 2, expectOk: true },
      { at: 350, cost: 1, expectOk: false, expectRetryAfterMs: 50 },
    ]);
  });

  it('refills no higher than burst after long idle', () => {
    runRows(bucket, [
      { at: 0, cost: 5, expectOk: true },
      { at: 60_000, cost: 5, expectOk: true },
      { at: 60_000, cost: 1, expectOk: false, expectRetryAfterMs: 100 },
    ]);
  });

  it('charges a costly call its whole cost', () => {
    runRows(bucket, [
      { at: 0, cost: 3, expectOk: true },
      { at: 0, cost: 3, expectOk: false, expectRetryAfterMs: 100 },
      { at: 100, cost: 3, expectOk: true },
      { at: 100, cost: 1, expectOk: false, expectRetryAfterMs: 100 },
    ]);
  });

  it('reports capacity = burst and never admits a cost above it', () => {
    expect(bucket.capacity).toBe(5);
    expect(bucket.earliestAt(bucket.initial(0), 6, 0)).toBe(Infinity);
    expect(createTokenBucket({ limit: 10, intervalMs: 1000 }).capacity).toBe(10);
  });

  it('with a capacity above the burst, admits a cost up to it (cost - burst)·T beyond a full bucket', () => {
    // Burst 5 (the tolerance), capacity 8: a call of 8 waits 3 intervals once the bucket is full,
    // unless it has been full for those 3 intervals already (idle, or fresh).
    const wide = createTokenBucket({ limit: 10, intervalMs: 1000, burst: 5 }, 'limit', 8);
    expect(wide.capacity).toBe(8);
    expect(wide.earliestAt(wide.initial(0), 9, 0)).toBe(Infinity);
    const state = runRows(wide, [
      { at: 0, cost: 8, expectOk: true },
      // TAT 800: full at 800, so 8 more fit at 1100; 5 or less are timed as without a capacity.
      { at: 0, cost: 8, expectOk: false, expectRetryAfterMs: 1100 },
      { at: 800, cost: 5, expectOk: true },
      { at: 900, cost: 2, expectOk: false, expectRetryAfterMs: 100 },
      // TAT 1300: full for 300 ms at 1600.
      { at: 1599, cost: 8, expectOk: false, expectRetryAfterMs: 1 },
      { at: 1600, cost: 8, expectOk: true },
    ]);
    expect(wide.earliestAt(state, 8, 1600)).toBe(2700);
    expect([wide.isIdle(1300, 1599), wide.isIdle(1300, 1600)]).toEqual([false, true]);
    // An idle state answers as a fresh one.
    expectSameAnswers(wide, 1300, wide.initial(1600), [1600, 1700, 5000], [1, 5, 6, 8]);
    expectInvalidOption(
      () => createTokenBucket({ limit: 10, intervalMs: 1000, burst: 5 }, 'limit', 4),
      'limit.capacity',
      'Expected `limit.capacity` to be an integer >= 5, got `4` (number)',
    );
  });

  it('queues a reservation behind the ones before it', () => {
    let state = bucket.initial(0);
    const starts: number[] = [];
    for (const cost of [5, 5, 1, 2]) {
      const reserved = reserveAt(bucket, state, cost, 0);
      state = reserved.state;
      starts.push(reserved.startAt);
    }
    expect(starts).toEqual([0, 500, 600, 800]);
    // Behind all of them: 1 more unit is due one interval after the last.
    expect(bucket.earliestAt(state, 1, 0)).toBe(900);
    expect(bucket.earliestAt(state, 1, 950)).toBe(950);
  });

  it('cancelling the latest reservation gives its slot back exactly', () => {
    let state = bucket.take(bucket.initial(0), 5, 0);
    const before = bucket.clone(state);
    const reserved = reserveAt(bucket, state, 3, 0);
    expect(reserved.startAt).toBe(300);
    state = bucket.refund(reserved.state, 3, reserved.startAt, 10);
    expectSameAnswers(bucket, state, before, [10, 100, 250, 499, 500, 5000], [1, 3, 5]);
  });

  it('a refund after an immediate start restores a full bucket from that start on', () => {
    const before = bucket.initial(0);
    const state = bucket.refund(bucket.take(before, 2, 1000), 2, 1000, 1000);
    expectSameAnswers(bucket, state, before, [1000, 1001, 2000], [1, 5]);
  });

  it('never fills beyond the burst when refunds exceed what was taken', () => {
    let state = bucket.refund(bucket.take(bucket.initial(0), 1, 0), 5, 0, 0);
    expect(bucket.available(state, 0)).toBe(5);
    expect(bucket.earliestAt(state, 5, 0)).toBe(0);
    state = bucket.take(state, 5, 0);
    expect(bucket.earliestAt(state, 1, 0)).toBe(100);
  });

  it('reports partly refilled units as available', () => {
    const state = bucket.take(bucket.initial(0), 5, 0);
    expect(bucket.available(state, 0)).toBe(0);
    expect(bucket.available(state, 250)).toBeCloseTo(2.5, 9);
    expect(bucket.available(state, 10_000)).toBe(5);
  });

  it('is idle once everything taken has refilled', () => {
    const state = bucket.take(bucket.initial(0), 5, 0);
    expect(bucket.isIdle(bucket.initial(0), 0)).toBe(true);
    expect(bucket.isIdle(state, 499)).toBe(false);
    expect(bucket.isIdle(state, 500)).toBe(true);
  });

  it('keeps its state a plain number and records late starts at their scheduled time', () => {
    expect(typeof bucket.initial(0)).toBe('number');
    expect(bucket.clone(123)).toBe(123);
    expect(bucket).toMatchObject({
      algorithm: 'token-bucket',
      timed: true,
      creditsLateStart: true,
      unit: 'requests',
    });
    expect(Object.isFrozen(bucket)).toBe(true);
    expect(bucket.spec).toEqual({
      algorithm: 'token-bucket',
      limit: 10,
      intervalMs: 1000,
      burst: 5,
      unit: 'requests',
    });
  });

  it.each([
    [
      { limit: 10, intervalMs: 1000, burst: 0 },
      'limit.burst',
      'Expected `limit.burst` to be an integer >= 1, got `0` (number)',
    ],
    [
      { limit: 10, intervalMs: 1000, burst: 2.5 },
      'limit.burst',
      'Expected `limit.burst` to be an integer >= 1, got `2.5` (number)',
    ],
    [
      { limit: 10, intervalMs: 1000, burst: '5' },
      'limit.burst',
      'Expected `limit.burst` to be an integer >= 1, got `"5"` (string)',
    ],
    [
      { limit: -1, intervalMs: 1000 },
      'limit.limit',
      'Expected `limit.limit` to be an integer >= 1, got `-1` (number)',
    ],
    [
      { limit: 10, intervalMs: Infinity },
      'limit.intervalMs',
      'Expected `limit.intervalMs` to be a finite number >= 1, got `Infinity` (number)',
    ],
    [
      { algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 },
      'limit.algorithm',
      'Expected `limit.algorithm` to be one of \'token-bucket\', got `"leaky-bucket"` (string)',
    ],
  ])('rejects an invalid spec %j', (spec, option, message) => {
    expectInvalidOption(() => createTokenBucket(spec as never), option, message);
  });
});
