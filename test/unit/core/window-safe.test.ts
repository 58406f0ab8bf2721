import { describe, expect, it } from 'vitest';
import { createLimit } from '../../../src/core/create-limit.js';
import { type LimitCore, reserveAt } from '../../../src/core/limit.js';
import { windowSafe } from '../../../src/core/window-safe.js';
import { expectInvalidOption } from './expect-invalid-option.js';

/** The most units started in any closed window [s, s + intervalMs], when every call starts as early as allowed. */
function busiestWindow(core: LimitCore, intervalMs: number, nows: readonly number[]): number {
  let state = core.initial(0);
  const starts: number[] = [];
  for (const now of nows) {
    const reserved = reserveAt(core, state, 1, now);
    state = reserved.state;
    starts.push(reserved.startAt);
  }
  let most = 0;
  for (const from of starts)
    most = Math.max(most, starts.filter((t) => t >= from && t <= from + intervalMs).length);
  return most;
}

describe('windowSafe', () => {
  it('solves burst + refill per window = limit, with a tenth of the limit as burst by default', () => {
    expect(windowSafe(100, 60_000)).toEqual({
      algorithm: 'token-bucket',
      limit: 90,
      intervalMs: 60_000,
      burst: 10,
      unit: 'requests',
    });
    expect(windowSafe(2, 1000)).toMatchObject({ limit: 1, burst: 1 });
    expect(windowSafe(19, 1000)).toMatchObject({ limit: 18, burst: 1 });
    expect(windowSafe(100, 60_000, { burst: 40, unit: 'tokens' })).toMatchObject({
      limit: 60,
      burst: 40,
      unit: 'tokens',
    });
    expect(Object.isFrozen(windowSafe(10, 1000))).toBe(true);
  });

  it('never starts more than limit in any window, where a plain token bucket starts limit + burst', () => {
    const nows = Array.from({ length: 400 }, (_, i) => Math.floor(i / 40) * 2500);
    const safe = createLimit(windowSafe(20, 1000, { burst: 5 }));
    expect(busiestWindow(safe, 1000, nows)).toBe(20);
    // The trap: rate 20 per 1000 ms and burst 5 admits 25 in one window.
    const trap = createLimit({ algorithm: 'token-bucket', limit: 20, intervalMs: 1000, burst: 5 });
    expect(busiestWindow(trap, 1000, nows)).toBe(25);
  });

  it.each([
    [() => windowSafe(1, 1000), 'limit', 'Expected `limit` to be an integer >= 2, got `1` (number)'],
    [() => windowSafe(2.5, 1000), 'limit', 'Expected `limit` to be an integer >= 2, got `2.5` (number)'],
    [
      () => windowSafe(10, 0),
      'intervalMs',
      'Expected `intervalMs` to be a finite number >= 1, got `0` (number)',
    ],
    [
      () => windowSafe(10, Number.NaN),
      'intervalMs',
      'Expected `intervalMs` to be a finite number >= 1, got `NaN` (number)',
    ],
    [
      () => windowSafe(10, 1000, { burst: 10 }),
      'burst',
      "Expected `burst` to be an integer from 1 to 9 (limit - 1: the rest of the window's quota is the refill), got `10` (number)",
    ],
    [
      () => windowSafe(10, 1000, { burst: 0 }),
      'burst',
      "Expected `burst` to be an integer from 1 to 9 (limit - 1: the rest of the window's quota is the refill), got `0` (number)",
    ],
    [
      () => windowSafe(10, 1000, { unit: '' }),
      'unit',
      'Expected `unit` to be a non-empty string, got `""` (string)',
    ],
    [
      () => windowSafe(10, 1000, { brust: 2 } as never),
      'options.brust',
      'Expected `options.brust` to be omitted (not a windowSafe option; known: burst, unit), got `2` (number)',
    ],
    [
      // Shorter than the clock's and timers' ms (found by review: window indexes overflowed 2^53).
      () => windowSafe(10, 0.5),
      'intervalMs',
      'Expected `intervalMs` to be a finite number >= 1, got `0.5` (number)',
    ],
  ])('rejects invalid arguments (%#)', (call, option, message) => {
    expectInvalidOption(call, option, message);
  });
});
