import { describe, expect, it } from 'vitest';
import { windowIndexAt, windowStartMs } from '../../../src/core/aligned-window.js';
import { nextUp } from '../../../src/core/next-up.js';

describe('aligned windows', () => {
  it('puts a window start in its own window, even when the product rounds down', () => {
    for (const intervalMs of [0.1, 1000 / 3, 1000 / 7, 60_000, 0.3]) {
      for (let index = -50; index < 5000; index += 7) {
        const startMs = windowStartMs(index, intervalMs);
        expect(windowIndexAt(startMs, intervalMs)).toBe(index);
        expect(startMs - index * intervalMs).toBeLessThan(Math.abs(index * intervalMs) * 1e-14 + 1e-300);
      }
    }
  });

  it('aligns epoch-scale times to wall-clock minutes', () => {
    expect(windowStartMs(windowIndexAt(1_700_000_012_345, 60_000), 60_000)).toBe(1_699_999_980_000);
  });

  it('steps to a strictly greater number', () => {
    for (const x of [0, -0, 1, -1, 1e-320, 1.7e12, -1.7e12, 0.1]) expect(nextUp(x)).toBeGreaterThan(x);
    expect(nextUp(1) - 1).toBeLessThanOrEqual(2 * Number.EPSILON);
  });
});
