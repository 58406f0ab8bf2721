/**
 * A shared gate settles what a call actually used (`Inspection.actualCost`) in its store, as the
 * in-memory gate settles it in its limits: more than the estimate holds later calls back, less gives
 * the difference back. A memory store on a manual clock: no Redis, no sleeps (the Redis store's
 * `adjust` passes the same contract suite, and redis-shared-gate.test.ts runs it through Redis).
 */
import { describe, expect, it } from 'vitest';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import type { Store } from '../../../src/redis/store.js';
import { ManualClock } from '../../helpers/manual-clock.js';

// 1,000 tokens a minute, all of them at once.
const limits = [{ algorithm: 'token-bucket', limit: 1_000, intervalMs: 60_000, unit: 'tokens' }] as const;

async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

type Gate = {
  schedule<T>(fn: () => T, options: object): Promise<T>;
  close(): Promise<void>;
};

function sharedGate(clock: ManualClock, store: Store = new MemoryStore({ clock })): Gate {
  return createSharedGate({ store, limits: [...limits], clock }) as unknown as Gate;
}

function memoryGate(clock: ManualClock): Gate {
  return createGate({ limits: [...limits], clock }) as unknown as Gate;
}

/**
 * One call estimated at `estimate` tokens that used `used`, then one costing `next`: when (ms after
 * the first) the second starts.
 */
async function secondStart(make: (clock: ManualClock) => Gate, estimate: number, used: number, next: number) {
  const clock = new ManualClock(1_000_000);
  const gate = make(clock);
  const inspection: Inspection = { status: 200, headers: {}, actualCost: { tokens: used } };
  await gate.schedule(() => 'first', { cost: { tokens: estimate }, inspect: () => inspection });
  await flush();
  let startedAt: number | undefined;
  const second = gate.schedule(
    () => {
      startedAt = clock.now();
    },
    { cost: { tokens: next } },
  );
  for (let i = 0; i < 200 && startedAt === undefined; i++) {
    await flush();
    const at = clock.nextTimerAt();
    if (startedAt === undefined && at !== undefined) clock.advanceTo(at);
  }
  await second;
  await gate.close();
  return startedAt! - 1_000_000;
}

describe('a shared gate settles Inspection.actualCost in its store', () => {
  it('a call that used less than its estimate gives the rest back: the next call starts at once', async () => {
    // 900 estimated, 100 used: 900 more fit at once (without the settlement: after 48 s).
    expect(await secondStart(sharedGate, 900, 100, 900)).toBe(0);
    expect(await secondStart(memoryGate, 900, 100, 900)).toBe(0);
  });

  it('a call that used more than its estimate is charged the rest: the next call waits for it', async () => {
    // 100 estimated, 900 used: 500 more fit once 400 tokens have come back, 24 s after the first.
    const shared = await secondStart(sharedGate, 100, 900, 500);
    expect(shared).toBe(24_000);
    expect(await secondStart(memoryGate, 100, 900, 500)).toBe(shared);
  });

  it('garbage actual costs change nothing and settle every call', async () => {
    for (const actualCost of [null, 'tokens', [1], { tokens: Number.NaN }, { tokens: -5 }, { other: 1 }]) {
      const clock = new ManualClock(1_000_000);
      const gate = sharedGate(clock);
      const inspection = { status: 200, headers: {}, actualCost } as unknown as Inspection;
      await expect(
        gate.schedule(() => 'ran', { cost: { tokens: 600 }, inspect: () => inspection }),
      ).resolves.toBe('ran');
      // 600 still counted: 600 more wait 12 s for 200 tokens to come back.
      let startedAt: number | undefined;
      const next = gate.schedule(
        () => {
          startedAt = clock.now();
        },
        { cost: { tokens: 600 } },
      );
      for (let i = 0; i < 200 && startedAt === undefined; i++) {
        await flush();
        const at = clock.nextTimerAt();
        if (startedAt === undefined && at !== undefined) clock.advanceTo(at);
      }
      await next;
      expect(startedAt! - 1_000_000).toBe(12_000);
      await gate.close();
    }
  });

  it('a store without adjust keeps the estimate counted', async () => {
    const withoutAdjust = (clock: ManualClock) =>
      new Proxy(new MemoryStore({ clock }), {
        get: (target, name) =>
          name === 'adjust' || name === 'adjustAt' ? undefined : Reflect.get(target, name),
      }) as Store;
    // 900 still counted: 900 more wait 48 s for 800 tokens to come back.
    expect(await secondStart((clock) => sharedGate(clock, withoutAdjust(clock)), 900, 100, 900)).toBe(48_000);
  });
});
