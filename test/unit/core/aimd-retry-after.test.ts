import { describe, expect, it } from 'vitest';
import { aimdOnRetryAfter, defaultAdaptOptions, roundRatePerSec } from '../../../src/core/adaptation.js';

const options = { decrease: 0.7, increase: 0.05, minRatePerSec: 0.1, maxRatePerSec: Infinity };

describe('the rate a round showed before a Retry-After', () => {
  it.each([
    // accepted, round from, pause until, calls/s
    [10, 0, 1000, 10],
    [10, 0, 2000, 5],
    [50, 1000, 3000, 25],
    [3, 500, 500, 3000],
    [0, 0, 1000, undefined],
    [-1, 0, 1000, undefined],
    [Number.NaN, 0, 1000, undefined],
  ])('%d accepted from %d, paused until %d: %s/s', (accepted, roundAt, pauseUntil, expected) => {
    expect(roundRatePerSec(accepted, roundAt, pauseUntil)).toBe(expected);
  });
});

describe('AIMD on a Retry-After alone', () => {
  const state = { ratePerSec: 20, rateAtDecrease: 20, changedAt: 0, decreaseSeq: 50 };

  it('changes nothing when the round accepted nothing (a Retry-After says when, not how fast)', () => {
    expect(aimdOnRetryAfter(undefined, undefined, 1, 1, 0, options)).toBeUndefined();
    expect(aimdOnRetryAfter(state, undefined, 60, 70, 0, options)).toBe(state);
  });

  it("starts at the round's rate", () => {
    expect(aimdOnRetryAfter(undefined, 10, 11, 100, 5, options)).toEqual({
      ratePerSec: 10,
      rateAtDecrease: 10,
      changedAt: 5,
      decreaseSeq: 100,
    });
  });

  it("news (a call sent after the last decrease) decreases, and never above the round's rate", () => {
    expect(aimdOnRetryAfter(state, 30, 60, 70, 9, options)?.ratePerSec).toBeCloseTo(14);
    expect(aimdOnRetryAfter(state, 8, 60, 70, 9, options)?.ratePerSec).toBe(8);
    expect(aimdOnRetryAfter(state, 8, 60, 70, 9, options)?.decreaseSeq).toBe(70);
  });

  it("an older call's refusal only lowers the rate to its round's, and keeps the decrease mark", () => {
    expect(aimdOnRetryAfter(state, 30, 40, 70, 9, options)).toBe(state);
    const lowered = aimdOnRetryAfter(state, 12, 40, 70, 9, options);
    expect(lowered?.ratePerSec).toBe(12);
    expect(lowered?.decreaseSeq).toBe(50);
  });

  it('stays within the configured bounds', () => {
    expect(aimdOnRetryAfter(undefined, 0.001, 2, 2, 0, options)?.ratePerSec).toBe(0.1);
    expect(aimdOnRetryAfter(undefined, 500, 2, 2, 0, { ...options, maxRatePerSec: 50 })?.ratePerSec).toBe(50);
    expect(defaultAdaptOptions.aimd).not.toBe(false);
  });
});
