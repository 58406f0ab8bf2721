import { describe, expect, it } from 'vitest';
import { createLeakyBucket } from '../../../src/core/leaky-bucket.js';
import { reserveAt } from '../../../src/core/limit.js';
import { expectInvalidOption } from './expect-invalid-option.js';
import { expectSameAnswers, runRows } from './rows.js';

// 4 per 1000 ms, no burst: one unit drains every T = 250 ms.
const bucket = createLeakyBucket({ limit: 4, intervalMs: 1000 });

describe('leaky bucket', () => {
  it('spaces starts by the emission interval, with no burst after idle', () => {
    runRows(bucket, [
      { at: 0, cost: 1, expectOk: true },
      { at: 0, cost: 1, expectOk: false, expectRetryAfterMs: 250 },
      { at: 249, cost: 1, expectOk: false, expectRetryAfterMs: 1 },
      { at: 250, cost: 1, expectOk: true },
      { at: 60_000, cost: 1, expectOk: true },
      { at: 60_000, cost: 1, expectOk: false, expectRetryAfterMs: 250 },
    ]);
  });

  it('spaces the next start by the earlier call cost', () => {
    runRows(bucket, [
      { at: 0, cost: 2, expectOk: true },
      { at: 250, cost: 1, expectOk: false, expectRetryAfterMs: 250 },
      { at: 500, cost: 4, expectOk: true },
      { at: 1000, cost: 1, expectOk: false, expectRetryAfterMs: 500 },
      { at: 1500, cost: 1, expectOk: true },
    ]);
  });

  it('admits a call of the full limit once drained, never more', () => {
    expect(bucket.capacity).toBe(4);
    expect(bucket.earliestAt(bucket.initial(0), 4, 0)).toBe(0);
    expect(bucket.earliestAt(bucket.initial(0), 5, 0)).toBe(Infinity);
  });

  it('queues reservations back to back', () => {
    let state = bucket.initial(0);
    const starts: number[] = [];
    for (const cost of [1, 3, 1, 2]) {
      const reserved = reserveAt(bucket, state, cost, 0);
      state = reserved.state;
      starts.push(reserved.startAt);
    }
    expect(starts).toEqual([0, 250, 1000, 1250]);
    expect(bucket.earliestAt(state, 1, 0)).toBe(1750);
    expect(bucket.earliestAt(state, 1, 2000)).toBe(2000);
  });

  it('cancelling the latest reservation gives its slot back exactly', () => {
    let state = bucket.take(bucket.initial(0), 2, 0);
    const before = bucket.clone(state);
    const reserved = reserveAt(bucket, state, 1, 100);
    expect(reserved.startAt).toBe(500);
    state = bucket.refund(reserved.state, 1, reserved.startAt, 100);
    expectSameAnswers(bucket, state, before, [100, 499, 500, 800], [1, 4]);
  });

  it('reports the whole capacity available only once drained', () => {
    const state = bucket.take(bucket.initial(0), 1, 0);
    expect(bucket.available(state, 100)).toBe(0);
    expect(bucket.available(state, 250)).toBe(4);
  });

  it('is idle once drained', () => {
    const state = bucket.take(bucket.initial(0), 2, 0);
    expect(bucket.isIdle(state, 499)).toBe(false);
    expect(bucket.isIdle(state, 500)).toBe(true);
  });

  it('normalizes its spec with burst 0 and accepts that spec again', () => {
    expect(bucket.spec).toEqual({
      algorithm: 'leaky-bucket',
      limit: 4,
      intervalMs: 1000,
      burst: 0,
      unit: 'requests',
    });
    expect(createLeakyBucket(bucket.spec as never).spec).toEqual(bucket.spec);
    expect(bucket).toMatchObject({ timed: true, creditsLateStart: true });
  });

  it.each([
    [
      { limit: 4, intervalMs: 1000, burst: 2 },
      'limit.burst',
      "Expected `limit.burst` to be omitted (only 'token-bucket' has a burst; 'leaky-bucket' does not), got `2` (number)",
    ],
    [
      { limit: 4, intervalMs: 1000, burst: 4 },
      'limit.burst',
      "Expected `limit.burst` to be omitted (only 'token-bucket' has a burst; 'leaky-bucket' does not), got `4` (number)",
    ],
    [
      { limit: 0, intervalMs: 1000 },
      'limit.limit',
      'Expected `limit.limit` to be an integer >= 1, got `0` (number)',
    ],
    [
      { limit: 4 },
      'limit.intervalMs',
      'Expected `limit.intervalMs` to be a finite number >= 1, got `undefined` (undefined)',
    ],
    [
      { limit: 4, intervalMs: Number.NaN },
      'limit.intervalMs',
      'Expected `limit.intervalMs` to be a finite number >= 1, got `NaN` (number)',
    ],
  ])('rejects an invalid spec %j', (spec, option, message) => {
    expectInvalidOption(() => createLeakyBucket(spec as never), option, message);
  });
});
