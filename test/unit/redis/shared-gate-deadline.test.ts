/**
 * A shared gate's call due to ask the store again exactly at its deadline (a concurrency retry, a
 * pause's end) asks then, once, as the in-memory gate starts a call whose slot comes at its
 * deadline. It was refused without asking: a call whose `maxQueueTimeMs` was at most
 * `concurrencyRetryMs` never retried for a permit. Memory store, manual clock.
 */
import { describe, expect, it } from 'vitest';
import { QueueTimeoutError, RateLimitedError } from '../../../src/errors.js';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = 1_000_000;
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** Two gates on one memory store, sharing one concurrency permit; each store request counted. */
function twoGates(extra: Record<string, unknown> = {}, timerLateMs = 0) {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  // Gate b's timers fire `timerLateMs` after they are due (a busy event loop).
  const bClock = {
    now: () => clock.now(),
    setTimeout: (fn: () => void, delayMs: number) => clock.setTimeout(fn, delayMs + timerLateMs),
    clearTimeout: (handle: unknown) => clock.clearTimeout(handle as never),
  };
  let asks = 0;
  const counted = Object.create(store) as MemoryStore;
  counted.reserve = (...args: Parameters<MemoryStore['reserve']>) => {
    asks++;
    return store.reserve(...args);
  };
  const limits = [{ algorithm: 'concurrency', limit: 1 }] as const;
  const a = createSharedGate({ store, clock, limits, ...extra });
  const b = createSharedGate({ store: counted, clock: bClock, limits, ...extra });
  return { clock, a, b, asks: () => asks };
}

/** Gate `a` holds the permit until `release` is called. */
async function holdPermit(a: ReturnType<typeof twoGates>['a']) {
  let release!: () => void;
  const holding = a.schedule(() => new Promise<void>((resolve) => (release = resolve)));
  await flush();
  return { holding, release: () => release() };
}

describe('a concurrency retry due at the deadline', () => {
  for (const maxQueueTimeMs of [20, 5]) {
    it(`asks once more at the deadline and starts there when a permit came back (maxQueueTimeMs ${maxQueueTimeMs}, retries every 20 ms)`, async () => {
      const { clock, a, b, asks } = twoGates();
      const { holding, release } = await holdPermit(a);
      let startedAt: number | undefined;
      const waiting = b.schedule(
        () => {
          startedAt = clock.now();
          return 'ran';
        },
        { maxQueueTimeMs },
      );
      await flush();
      expect(asks()).toBe(1);
      clock.advance(maxQueueTimeMs - 1);
      release();
      await holding;
      await flush();
      expect(startedAt).toBeUndefined();
      clock.advance(1);
      await flush();
      await expect(waiting).resolves.toBe('ran');
      expect(startedAt).toBe(T0 + maxQueueTimeMs);
      expect(asks()).toBe(2);
      await Promise.all([a.close(), b.close()]);
    });
  }

  it('is refused after that one ask when the permit is still held', async () => {
    const { clock, a, b, asks } = twoGates();
    const { holding, release } = await holdPermit(a);
    let ran = false;
    const waiting = b.schedule(
      () => {
        ran = true;
      },
      { maxQueueTimeMs: 20 },
    );
    const settled = expect(waiting).rejects.toBeInstanceOf(QueueTimeoutError);
    await flush();
    clock.advance(20);
    await flush();
    await settled;
    expect(ran).toBe(false);
    expect(asks()).toBe(2);
    release();
    await holding;
    await Promise.all([a.close(), b.close()]);
  });

  it('a timer within lateToleranceMs past the deadline still asks, and starts', async () => {
    const { clock, a, b, asks } = twoGates({}, 1);
    const { holding, release } = await holdPermit(a);
    let startedAt: number | undefined;
    const waiting = b.schedule(
      () => {
        startedAt = clock.now();
      },
      { maxQueueTimeMs: 20 },
    );
    await flush();
    release();
    await holding;
    clock.advance(21);
    await flush();
    await waiting;
    expect(startedAt).toBe(T0 + 21);
    expect(asks()).toBe(2);
    await Promise.all([a.close(), b.close()]);
  });

  it('a timer later than lateToleranceMs past the deadline refuses without asking', async () => {
    const { clock, a, b, asks } = twoGates({ lateToleranceMs: 2 }, 3);
    const { holding, release } = await holdPermit(a);
    const waiting = b.schedule(() => 'ran', { maxQueueTimeMs: 20 });
    const settled = expect(waiting).rejects.toBeInstanceOf(QueueTimeoutError);
    await flush();
    release();
    await holding;
    // The retry's timer runs 3 ms after the deadline.
    clock.advance(23);
    await flush();
    await settled;
    expect(asks()).toBe(1);
    await Promise.all([a.close(), b.close()]);
  });
});

describe('a pause ending at the deadline', () => {
  const gates = {
    shared: (clock: ManualClock) =>
      createSharedGate({
        store: new MemoryStore({ clock }),
        clock,
        limits: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000 }],
      }),
    'in-memory': (clock: ManualClock) =>
      createGate({ clock, limits: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000 }] }),
  };
  it.each(Object.entries(gates))(
    'the call due at the end of a Retry-After asks then and starts (%s gate)',
    async (_, make) => {
      const clock = new ManualClock(T0);
      const gate = make(clock);
      const inspect = (r: Inspection) => r;
      // A 429 whose Retry-After pauses the key for 1 s; its own retry may wait up to 1 s.
      let first = true;
      const throttled = gate.schedule(
        () => {
          if (!first) return { status: 200, headers: {} } satisfies Inspection;
          first = false;
          return { status: 429, headers: { 'retry-after': '1' } } satisfies Inspection;
        },
        { inspect, maxQueueTimeMs: 1000 },
      );
      await flush();
      expect(first).toBe(false);
      let startedAt: number | undefined;
      const next = gate.schedule(
        () => {
          startedAt = clock.now();
          return { status: 200, headers: {} } satisfies Inspection;
        },
        { inspect, maxQueueTimeMs: 1000 },
      );
      await flush();
      clock.advance(1000);
      await flush();
      await expect(throttled).resolves.toMatchObject({ status: 200 });
      await expect(next).resolves.toMatchObject({ status: 200 });
      expect(startedAt).toBe(T0 + 1000);
      await gate.close();
    },
  );

  it('a retry whose Retry-After ends past its deadline is refused with the provider refusal', async () => {
    const clock = new ManualClock(T0);
    const gate = createSharedGate({
      store: new MemoryStore({ clock }),
      clock,
      limits: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000 }],
    });
    const call = gate.schedule(
      () => ({ status: 429, headers: { 'retry-after': '2' } }) satisfies Inspection,
      {
        inspect: (r: Inspection) => r,
        maxQueueTimeMs: 1000,
      },
    );
    await expect(call).rejects.toBeInstanceOf(RateLimitedError);
    await gate.close();
  });
});

describe('a call waiting for its key probe at its deadline', () => {
  it('is refused at its deadline (asking once does not loop) while the probe goes on', async () => {
    const clock = new ManualClock(T0);
    // No limits: the key's first inspected call is a probe, the others wait for its answer.
    const gate = createSharedGate({ store: new MemoryStore({ clock }), clock, limits: [] });
    const inspect = (r: Inspection) => r;
    let answer!: (inspection: Inspection) => void;
    const probe = gate.schedule(
      () =>
        new Promise<Inspection>((resolve) => {
          answer = resolve;
        }),
      { inspect },
    );
    await flush();
    let ran = false;
    const waiter = gate.schedule(
      () => {
        ran = true;
        return { status: 200, headers: {} } satisfies Inspection;
      },
      { inspect, maxQueueTimeMs: 50 },
    );
    const settled = expect(waiter).rejects.toBeInstanceOf(QueueTimeoutError);
    await flush();
    clock.advance(50);
    await flush();
    await settled;
    expect(ran).toBe(false);
    answer({ status: 200, headers: {} });
    await expect(probe).resolves.toMatchObject({ status: 200 });
    await gate.close();
  });
});

describe('a prober that lost its claim, due again at its deadline', () => {
  it('does not claim and reserve after its one ask (two round trips past the deadline): it is refused', async () => {
    const clock = new ManualClock(T0);
    const memory = new MemoryStore({ clock });
    const roundTripMs = 8;
    // Gate b's store answers a round trip later.
    const slow = Object.create(memory) as MemoryStore;
    for (const method of [
      'reserve',
      'refund',
      'claimProbe',
      'releaseProbe',
      'pauseFor',
      'learn',
      'recount',
      'time',
    ] as const) {
      const real = (memory[method] as (...args: unknown[]) => unknown).bind(memory);
      (slow as unknown as Record<string, unknown>)[method] = (...args: unknown[]) =>
        new Promise((resolve, reject) =>
          clock.setTimeout(() => {
            let value: unknown;
            try {
              value = real(...args);
            } catch (error) {
              clock.setTimeout(() => reject(error), roundTripMs / 2);
              return;
            }
            clock.setTimeout(() => resolve(value), roundTripMs / 2);
          }, roundTripMs / 2),
        );
    }
    const inspect = (r: Inspection) => r;
    const a = createSharedGate({ store: memory, clock, limits: [] });
    const b = createSharedGate({ store: slow, clock, limits: [] });
    let answer!: () => void;
    // a holds the key's probe.
    const probe = a.schedule(
      () =>
        new Promise<Inspection>((resolve) => {
          answer = () => resolve({ status: 200, headers: {} });
        }),
      { key: 'k', inspect },
    );
    await flush();
    let startedAt: number | undefined;
    const late = b.schedule(
      () => {
        startedAt = clock.now();
        return { status: 200, headers: {} } satisfies Inspection;
      },
      { key: 'k', inspect, maxQueueTimeMs: 20 },
    );
    const settled = expect(late).rejects.toBeInstanceOf(QueueTimeoutError);
    await flush();
    // b's claim is answered (lost): it asks again at its deadline, 20.
    clock.advance(roundTripMs);
    await flush();
    clock.advance(2);
    answer();
    await probe;
    await flush();
    for (let i = 0; i < 40; i++) {
      clock.advance(1);
      await flush();
    }
    await settled;
    expect(startedAt).toBeUndefined();
    await Promise.all([a.close(), b.close()]);
  });
});
