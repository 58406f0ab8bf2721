import { describe, expect, it } from 'vitest';
import { createGate } from '../../../src/gate/gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

// Found by review (session 16): a window call whose response came after its window ended was
// recounted into a state nobody kept. Its key's state had gone idle at the window's end and was
// dropped (the gate's sweep; a TTL in Redis), so the next call of the key was admitted in the
// window the provider had counted the first one in.

const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('a window call recounted after its key went idle', () => {
  for (const algorithm of ['fixed-window', 'sliding-log'] as const) {
    it(`${algorithm}: still counts where its response puts it`, async () => {
      const clock = new ManualClock(0);
      const gate = createGate({
        clock,
        adapt: false,
        arrivalMarginMs: 250,
        perKey: [{ algorithm, limit: 1, intervalMs: 1000 }],
      });
      const startTimes: number[] = [];
      clock.advanceTo(algorithm === 'fixed-window' ? 850 : 0);
      let finish!: () => void;
      const first = gate.schedule(
        () =>
          new Promise<void>((resolve) => {
            startTimes.push(clock.now());
            finish = resolve;
          }),
        { key: 'a' },
      );
      await flush();
      // Past the point where key a's state is idle: new keys sweep idle keys away.
      clock.advanceTo(algorithm === 'fixed-window' ? 1001 : 1001);
      for (let i = 0; i < 8; i++) await gate.schedule(() => {}, { key: `other-${i}` });
      // The response comes back: the call is counted from here (capped at start + 250 ms).
      clock.advanceTo(algorithm === 'fixed-window' ? 1089 : 1100);
      finish();
      await first;
      await flush();
      let secondAt: number | undefined;
      const second = gate.schedule(
        () => {
          secondAt = clock.now();
        },
        { key: 'a' },
      );
      await flush();
      clock.runAll();
      await second;
      // fixed window: counted at 1089, in [1000, 2000): the next call waits for 2000.
      // sliding log: counted at min(1100, 0 + 250) = 250: the next waits for 1250.
      expect(secondAt).toBe(algorithm === 'fixed-window' ? 2000 : 1250);
    });
  }
});
