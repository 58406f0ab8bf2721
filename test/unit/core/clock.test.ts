import { describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/clock.js';

describe('systemClock', () => {
  it('arms a delay beyond what a Node timer keeps at that bound, not at 1 ms', () => {
    // Node turns a delay above 2^31 - 1 ms into 1 ms: a wait of 60 days re-armed every millisecond.
    const handle = systemClock.setTimeout(() => {}, 60 * 86_400_000) as unknown as { _idleTimeout: number };
    try {
      expect(handle._idleTimeout).toBe(2 ** 31 - 1);
    } finally {
      systemClock.clearTimeout(handle);
    }
    const near = systemClock.setTimeout(() => {}, 1_500) as unknown as { _idleTimeout: number };
    expect(near._idleTimeout).toBe(1_500);
    systemClock.clearTimeout(near);
  });
});
