import { describe, expect, it } from 'vitest';
import { createConcurrency } from '../../../src/core/concurrency.js';
import { reserveAt, tryAcquireAt } from '../../../src/core/limit.js';
import { expectInvalidOption } from './expect-invalid-option.js';
import { runRows } from './rows.js';

const permits = createConcurrency({ limit: 3 });

describe('concurrency', () => {
  it('admits up to the limit in flight and cannot predict the wait beyond it', () => {
    runRows(permits, [
      { at: 0, cost: 2, expectOk: true },
      { at: 0, cost: 1, expectOk: true },
      { at: 5, cost: 1, expectOk: false, expectRetryAfterMs: Infinity },
    ]);
  });

  it('admits again once a call finishes and is released', () => {
    let inFlight = permits.take(permits.initial(0), 3, 0);
    expect(tryAcquireAt(permits, inFlight, 1, 10)).toEqual({ ok: false, retryAfterMs: Infinity });
    inFlight = permits.refund(inFlight, 1, 0, 20);
    expect(tryAcquireAt(permits, inFlight, 1, 20)).toEqual({ ok: true });
    expect(permits.earliestAt(inFlight, 2, 20)).toBe(Infinity);
  });

  it('does not reserve while full', () => {
    const full = permits.take(permits.initial(0), 3, 0);
    expect(reserveAt(permits, full, 1, 0)).toEqual({ state: 3, startAt: Infinity });
  });

  it('never goes below zero on a double release', () => {
    const inFlight = permits.refund(permits.refund(permits.take(0, 1, 0), 1, 0, 0), 1, 0, 0);
    expect(inFlight).toBe(0);
    expect(permits.available(inFlight, 0)).toBe(3);
  });

  it('reports the free units and is idle with nothing in flight', () => {
    expect(permits.available(2, 0)).toBe(1);
    expect(permits.available(4, 0)).toBe(0);
    expect(permits.isIdle(0, 0)).toBe(true);
    expect(permits.isIdle(1, 0)).toBe(false);
    expect(permits.clone(2)).toBe(2);
  });

  it('is untimed, ignores intervalMs and has capacity = limit', () => {
    expect(permits).toMatchObject({ algorithm: 'concurrency', timed: false, capacity: 3 });
    expect(permits.spec).toEqual({
      algorithm: 'concurrency',
      limit: 3,
      intervalMs: 0,
      burst: 0,
      unit: 'requests',
    });
    expect(createConcurrency({ limit: 3, intervalMs: 1000 }).spec.intervalMs).toBe(0);
  });

  it.each([
    [{ limit: 0 }, 'limit.limit', 'Expected `limit.limit` to be an integer >= 1, got `0` (number)'],
    [
      { limit: 3, intervalMs: -1 },
      'limit.intervalMs',
      'Expected `limit.intervalMs` to be a finite number >= 0, got `-1` (number)',
    ],
    [
      { limit: 3, burst: 2 },
      'limit.burst',
      "Expected `limit.burst` to be omitted (only 'token-bucket' has a burst; 'concurrency' does not), got `2` (number)",
    ],
  ])('rejects an invalid spec %j', (spec, option, message) => {
    expectInvalidOption(() => createConcurrency(spec as never), option, message);
  });
});
