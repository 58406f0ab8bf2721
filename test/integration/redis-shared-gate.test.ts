/**
 * The shared gate's behaviour, first on a MemoryStore with a manual clock (deterministic: two gates
 * on one store play two processes), then on the real Redis (two gates, two connections).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryLedger } from '../../src/budget/memory-ledger.js';
import { AbortedError, GateClosedError, QueueTimeoutError, StoreUnavailableError } from '../../src/errors.js';
import type { Inspection } from '../../src/gate/gate.js';
import { AsyncBudgetGuard } from '../../src/redis/async-budget-guard.js';
import { asyncLedger } from '../../src/redis/async-ledger.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { createSharedGate, type SharedGate } from '../../src/redis/shared-gate.js';
import type { SharedGateOptions } from '../../src/redis/shared-gate-options.js';
import type { Store, StoreReservation } from '../../src/redis/store.js';
import { startSimulatedApi } from '../../src/testing/simulated-api.js';
import { learnedWindowStarts } from '../helpers/learned-window.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { REDIS_URL, redisSkipReason } from '../helpers/redis-server.js';
import { roundWaitsMs, type TimedCall } from '../helpers/round-waits.js';

const T0 = Date.parse('2026-11-30T12:00:00Z');
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};
const ok = (headers: Record<string, string> = {}): Inspection => ({ status: 200, headers });

/** `store`, but every command throws StoreUnavailableError while `broken` is true. */
function flakyStore(store: MemoryStore, broken: boolean) {
  const outage = { broken, reserves: 0, store: Object.create(store) as MemoryStore };
  const down = () => {
    if (outage.broken) throw new StoreUnavailableError('down');
  };
  outage.store.reserve = (...args: Parameters<MemoryStore['reserve']>) => {
    down();
    outage.reserves++;
    return store.reserve(...args);
  };
  outage.store.time = () => {
    down();
    return store.time();
  };
  outage.store.refund = (...args: Parameters<MemoryStore['refund']>) => {
    down();
    return store.refund(...args);
  };
  outage.store.pauseFor = (...args: Parameters<MemoryStore['pauseFor']>) => {
    down();
    return store.pauseFor(...args);
  };
  return outage;
}

/**
 * A gate whose store fails while `outage.broken` (a process whose Redis goes away), on a manual
 * clock; `other` makes another process's gate on the same store, which stays up.
 */
function outageSetup(broken: boolean, options: Partial<SharedGateOptions> = {}) {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const outage = flakyStore(store, broken);
  const gate = createSharedGate({ store: outage.store, clock, recoveryProbeMs: 100, ...options });
  const other = (extra: Partial<SharedGateOptions> = {}) => createSharedGate({ store, clock, ...extra });
  return { clock, outage, gate, other };
}

function setup() {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const gate = (extra: Record<string, unknown> = {}) =>
    createSharedGate({
      store,
      clock,
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      ...extra,
    });
  return { clock, store, gate };
}

/** A gate on a memory store (manual clock) that counts the store's reserves. */
function countedGate(options: Partial<SharedGateOptions>) {
  const { clock, store } = setup();
  const count = { reserves: 0 };
  const counted = Object.create(store) as MemoryStore;
  counted.reserve = (...args: Parameters<MemoryStore['reserve']>) => {
    count.reserves++;
    return store.reserve(...args);
  };
  const gate = createSharedGate({ store: counted, clock, maxQueueTimeMs: 60_000, ...options });
  return { clock, gate, count };
}

/** One call on each of `n` keys; `starts` holds their start times (ms after T0). */
function oneCallPerKey(gate: SharedGate, clock: ManualClock, n: number) {
  const starts: number[] = [];
  const calls = Array.from({ length: n }, (_, i) =>
    gate.schedule(() => starts.push(clock.now() - T0), { key: `k${i}` }),
  );
  return { starts, calls };
}

/**
 * A gate on a memory store a round trip away: each reserve reaches the store `rttMs / 2` after it
 * is sent (manual clock) and its answer comes back as long after. Counts the reserves.
 */
function remoteGate(rttMs: number, options: Partial<SharedGateOptions>) {
  const { clock, store } = setup();
  const count = { reserves: 0 };
  const remote = Object.create(store) as MemoryStore;
  remote.reserve = ((...args: Parameters<MemoryStore['reserve']>) => {
    count.reserves++;
    return new Promise((resolve) => {
      clock.setTimeout(() => {
        const decision = store.reserve(...args);
        clock.setTimeout(() => resolve(decision), rttMs / 2);
      }, rttMs / 2);
    });
  }) as unknown as MemoryStore['reserve'];
  const gate = createSharedGate({ store: remote, clock, maxQueueTimeMs: 60_000, ...options });
  /** Run the clock 1 ms at a time for `ms`, letting every answer and start happen. */
  const run = async (ms: number) => {
    for (let t = 0; t < ms; t++) {
      clock.advance(1);
      await flush();
    }
  };
  return { clock, gate, count, run };
}

/**
 * `workers` loops, each scheduling calls of `callMs` (on `keys` keys, round robin) back to back for
 * `ms` of the manual clock; answers how many finished in the last second.
 */
async function closedLoop(
  gate: SharedGate,
  clock: ManualClock,
  run: (ms: number) => Promise<void>,
  o: { workers: number; callMs: number; keys: number; ms: number },
) {
  const finished: number[] = [];
  let stop = false;
  const work = () => new Promise<void>((resolve) => clock.setTimeout(resolve, o.callMs));
  const workers = Array.from({ length: o.workers }, async (_, w) => {
    while (!stop) {
      await gate.schedule(work, { key: `k${w % o.keys}` });
      finished.push(clock.now() - T0);
    }
  });
  await run(o.ms);
  stop = true;
  await run(200);
  await Promise.all(workers);
  return { lastSecond: finished.filter((at) => at > o.ms - 1_000 && at <= o.ms).length };
}

describe('shared gate on a memory store', () => {
  it('two gates on one store interleave their starts on the shared limit', async () => {
    const { clock, gate } = setup();
    const a = gate();
    const b = gate();
    const starts: [string, number][] = [];
    const calls = [];
    for (let i = 0; i < 3; i++) {
      calls.push(a.schedule(() => starts.push(['a', clock.now() - T0])));
      calls.push(b.schedule(() => starts.push(['b', clock.now() - T0])));
    }
    await flush();
    clock.advance(1000);
    await Promise.all(calls);
    // One start per 100 ms whichever gate asked: the quota is shared.
    expect(starts).toEqual([
      ['a', 0],
      ['b', 100],
      ['a', 200],
      ['b', 300],
      ['a', 400],
      ['b', 500],
    ]);
    expect(a.stats()).toMatchObject({ queued: 0, inFlight: 0, started: 3, storeUp: true });
  });

  it('refuses at once a call whose reserved start is past its deadline, and reserves nothing', async () => {
    const { clock, gate } = setup();
    const a = gate({ maxQueueTimeMs: 250 });
    const calls = [0, 1, 2].map(() => a.schedule(() => clock.now() - T0));
    const late = a.schedule(() => 'late');
    await expect(late).rejects.toBeInstanceOf(QueueTimeoutError);
    await expect(late).rejects.toMatchObject({ predicted: true, predictedWaitMs: 300 });
    const next = a.schedule(() => clock.now() - T0, { maxQueueTimeMs: 1000 });
    clock.advance(1000);
    expect(await Promise.all([...calls, next])).toEqual([0, 100, 200, 300]);
  });

  for (const perKey of [
    { algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 },
    { algorithm: 'sliding-log', limit: 1, intervalMs: 1000 },
  ] as const) {
    it(`a call whose timer fires past its deadline (a stalled event loop) is refused, not started (${perKey.algorithm})`, async () => {
      // Found by a fuzzer (session 13): it started 500 ms past its deadline; the in-memory gate refuses.
      const { clock, store } = setup();
      const g = createSharedGate({ store, clock, perKey: [perKey], arrivalMarginMs: 50 });
      const first = g.schedule(() => {}, { key: 'k' });
      let startedAt: number | undefined;
      const second = g.schedule(
        () => {
          startedAt = clock.now() - T0;
        },
        {
          key: 'k',
          maxQueueTimeMs: 1_000,
        },
      );
      const outcome = second.then(
        () => 'started',
        (error: unknown) => error,
      );
      await flush();
      // Its slot (or its turn to ask) is at 1,000 ms, its deadline; the event loop stalls until
      // 1,500 ms, when the timer due at 1,000 fires.
      clock.stallUntil(T0 + 1_500);
      await flush();
      await first;
      expect(await outcome).toBeInstanceOf(QueueTimeoutError);
      expect(startedAt).toBeUndefined();
      // Its slot was given back: the next call takes it now.
      let nextAt: number | undefined;
      await Promise.all([
        g.schedule(
          () => {
            nextAt = clock.now() - T0;
          },
          { key: 'k', maxQueueTimeMs: 0 },
        ),
        (async () => {
          for (let t = 0; t < 5; t++) await flush();
        })(),
      ]);
      expect(nextAt).toBe(1_500);
      await g.close();
    });
  }

  it('an abort while waiting rejects at once and gives the slot to the next call', async () => {
    const { clock, gate } = setup();
    const a = gate();
    const controller = new AbortController();
    const first = a.schedule(() => clock.now() - T0);
    const second = a.schedule(() => clock.now() - T0, { signal: controller.signal });
    await flush();
    controller.abort('changed my mind');
    await expect(second).rejects.toBeInstanceOf(AbortedError);
    const third = a.schedule(() => clock.now() - T0);
    clock.advance(500);
    expect([await first, await third]).toEqual([0, 100]);
  });

  it('a 429 seen by one gate pauses the waiting calls of the other, which reserve again after it', async () => {
    const { clock, gate } = setup();
    const a = gate();
    const b = gate();
    const sent: [string, number][] = [];
    let throttled = false;
    const throttledOnce = async () => {
      sent.push(['a', clock.now() - T0]);
      if (!throttled) {
        throttled = true;
        return { status: 429, headers: { 'retry-after': '2' } };
      }
      return { status: 200, headers: {} };
    };
    const aCall = a.schedule(throttledOnce, { inspect: (r: Inspection) => r });
    const bCalls = [1, 2].map(() => b.schedule(() => sent.push(['b', clock.now() - T0])));
    await flush();
    expect(sent).toEqual([['a', 0]]);
    clock.advance(1_900);
    await flush();
    // Nothing started during the pause, in either gate.
    expect(sent).toEqual([['a', 0]]);
    clock.advance(1_000);
    await flush();
    expect((await aCall).status).toBe(200);
    await Promise.all(bCalls);
    const after = sent.slice(1).map(([, at]) => at);
    expect(Math.min(...after)).toBeGreaterThanOrEqual(2000);
    // Still spaced by the shared limit after the pause.
    const sorted = [...after].sort((x, y) => x - y);
    for (let i = 1; i < sorted.length; i++) expect(sorted[i]! - sorted[i - 1]!).toBeGreaterThanOrEqual(100);
  });

  it('limits learned from one gate’s responses hold the other gate too', async () => {
    const { clock, gate } = setup();
    const a = gate({ limits: [] });
    const b = gate({ limits: [] });
    await a.schedule(async () => ok({ 'ratelimit-policy': '"p";q=2;w=60', ratelimit: '"p";r=1;t=60' }), {
      inspect: (r: Inspection) => r,
    });
    // Learned: 2 per minute, 1 already used. One more now, the next a minute later.
    const starts: number[] = [];
    const calls = [1, 2].map(() =>
      b.schedule(() => starts.push(clock.now() - T0), { maxQueueTimeMs: 120_000 }),
    );
    await flush();
    clock.advance(61_000);
    await Promise.all(calls);
    expect(starts[0]).toBe(0);
    expect(starts[1]).toBeGreaterThanOrEqual(60_000);
  });

  /**
   * A gate without limits and a provider of 3 requests per second whose answers come `latencyMs`
   * after the request (or never, for the calls `silent` names); `sent` stamps each request.
   */
  function unknownProvider(latencyMs: number, silent: (n: number) => boolean = () => false) {
    const { clock, gate } = setup();
    const g = gate({ limits: [] });
    const sent: number[] = [];
    const call = (options: { maxQueueTimeMs?: number; signal?: AbortSignal } = {}) =>
      g.schedule(
        () =>
          new Promise<Inspection>((resolve) => {
            const n = sent.push(clock.now() - T0) - 1;
            if (silent(n)) return;
            const used = sent.filter((t) => t > clock.now() - T0 - 1000).length;
            const headers = {
              'ratelimit-policy': '"s";q=3;w=1',
              ratelimit: `"s";r=${Math.max(0, 3 - used)};t=1`,
            };
            clock.setTimeout(() => resolve(ok(headers)), latencyMs);
          }),
        { inspect: (r: Inspection) => r, maxQueueTimeMs: 10_000, ...options },
      );
    const run = async (ms: number) => {
      for (let t = 0; t < ms; t += 10) {
        await flush();
        clock.advance(10);
      }
      await flush();
    };
    return { clock, gate: g, sent, call, run };
  }

  it('a key that knows nothing of its provider sends one call first, the others after its answer, within what it told', async () => {
    const provider = unknownProvider(50);
    const calls = Array.from({ length: 7 }, () => provider.call());
    await provider.run(40);
    expect(provider.sent).toEqual([0]);
    await provider.run(4000);
    await Promise.all(calls);
    // The answer at 50 told 3 per second with 2 left: 2 more then, the rest a window later.
    expect(provider.sent.slice(0, 3)).toEqual([0, 50, 50]);
    expect(provider.sent).toHaveLength(7);
    for (const t of provider.sent)
      expect(provider.sent.filter((u) => u >= t && u < t + 1000).length).toBeLessThanOrEqual(3);
  });

  it('two gates that know nothing of the provider send one probe between them: the first window holds the limit', async () => {
    const { clock, gate } = setup();
    const gates = { a: gate({ limits: [] }), b: gate({ limits: [] }) };
    const sent: [string, number][] = [];
    // The provider: 3 requests per second, stated in every answer (50 ms after the request).
    const request = (name: string) => () =>
      new Promise<Inspection>((resolve) => {
        const now = clock.now() - T0;
        sent.push([name, now]);
        const used = sent.filter(([, t]) => t > now - 1000).length;
        const headers = {
          'ratelimit-policy': '"s";q=3;w=1',
          ratelimit: `"s";r=${Math.max(0, 3 - used)};t=1`,
        };
        clock.setTimeout(() => resolve(ok(headers)), 50);
      });
    const calls = (['a', 'b', 'a', 'b', 'a', 'b', 'a', 'b'] as const).map((name) =>
      gates[name].schedule(request(name), { inspect: (r: Inspection) => r, maxQueueTimeMs: 10_000 }),
    );
    for (let t = 0; t < 4000; t += 10) {
      await flush();
      clock.advance(10);
    }
    await Promise.all(calls);
    // a's probe alone until its answer at 50; b asked for the probe and waited for it.
    expect(sent.filter(([, t]) => t < 50)).toEqual([['a', 0]]);
    expect(sent).toHaveLength(8);
    const times = sent.map(([, t]) => t);
    for (const t of times) expect(times.filter((u) => u >= t && u < t + 1000).length).toBeLessThanOrEqual(3);
  });

  /** A memory store on `clock` whose probe claims answer `claimMs` later (a round trip to Redis). */
  function slowClaims(claimMs: number) {
    const clock = new ManualClock(T0);
    const memory = new MemoryStore({ clock });
    const store: Store = Object.create(memory);
    store.claimProbe = (...args: Parameters<MemoryStore['claimProbe']>) =>
      new Promise<boolean>((resolve) => clock.setTimeout(() => resolve(memory.claimProbe(...args)), claimMs));
    const sent: [string, number][] = [];
    const call = (name: string) => () =>
      new Promise<Inspection>((resolve) => {
        sent.push([name, clock.now() - T0]);
        clock.setTimeout(() => resolve(ok()), 50);
      });
    return { clock, memory, store, sent, call };
  }

  it('a prober that leaves while its claim is on its way hands the probe to the next call', async () => {
    const { clock, memory, store, sent, call } = slowClaims(20);
    const g = createSharedGate({ store, clock });
    const inspect = (r: Inspection) => r;
    const controller = new AbortController();
    const first = g.schedule(call('first'), { inspect, signal: controller.signal });
    const second = g.schedule(call('second'), { inspect });
    await flush();
    clock.advance(5);
    controller.abort('not needed');
    await expect(first).rejects.toBeInstanceOf(AbortedError);
    // The claim sent for the first call answers at 20 and serves the second: not 2 s later.
    for (let t = 0; t < 100; t += 5) {
      await flush();
      clock.advance(5);
    }
    await second;
    expect(sent).toEqual([['second', 20]]);
    // Its answer ended the probe, and the claim went back: another gate may claim at once.
    expect(memory.claimProbe('~default', 'another gate', 1000)).toBe(true);
  });

  it('a first call with maxQueueTimeMs 0 probes once its claim answers: the round trip is not a wait', async () => {
    const { clock, store, sent, call } = slowClaims(20);
    const g = createSharedGate({ store, clock });
    const only = g.schedule(call('only'), { inspect: (r: Inspection) => r, maxQueueTimeMs: 0 });
    for (let t = 0; t < 100; t += 5) {
      await flush();
      clock.advance(5);
    }
    expect((await only).status).toBe(200);
    expect(sent).toEqual([['only', 20]]);
  });

  it('a store without probe claims (written before them) probes each gate for itself, and stays up', async () => {
    const { clock, gate } = setup();
    const store = Object.create(new MemoryStore({ clock })) as MemoryStore;
    Object.assign(store, { claimProbe: undefined, releaseProbe: undefined });
    const g = gate({ store, limits: [] });
    const answer = g.schedule(async () => ok(), { inspect: (r: Inspection) => r });
    await flush();
    expect((await answer).status).toBe(200);
    expect(g.stats()).toMatchObject({ storeUp: true, started: 1 });
  });

  it('a probe that is never answered holds the others no longer than 2 s', async () => {
    const provider = unknownProvider(50, (n) => n === 0);
    const [, second, third] = [provider.call(), provider.call(), provider.call()];
    await provider.run(1990);
    expect(provider.sent).toEqual([0]);
    await provider.run(100);
    await Promise.all([second, third]);
    expect(provider.sent).toEqual([0, 2000, 2000]);
  });

  it.each([
    [0, [0, 30, 1030, 1030]],
    [50, [0, 30, 1030, 1130]],
  ] as const)(
    'a learned limit with margin %i counts a call from its response',
    async (arrivalMarginMs, expected) => {
      const { clock, gate } = setup();
      const g = gate({ limits: [], arrivalMarginMs });
      const sent = await learnedWindowStarts(
        clock,
        (fn) => g.schedule(fn, { inspect: (r: Inspection) => r, maxQueueTimeMs: 10_000 }),
        flush,
      );
      // The probe's unit is counted from its answer (30) and leaves at 1030. Without a margin the
      // second call's leaves a window after its start (1030); with one, after its answer (130).
      expect(sent).toEqual(expected);
    },
  );

  it("a learned limit's used units leave at the provider's reset, and the tightest policy of a window binds", async () => {
    const { clock, gate } = setup();
    const a = gate({ limits: [] });
    const b = gate({ limits: [] });
    // A daily quota of 1000 with 999 used that renews in 60 s, listed before a looser one over the
    // same day.
    await a.schedule(
      async () =>
        ok({
          'ratelimit-policy': '"day";q=1000;w=86400, "org";q=5000;w=86400',
          ratelimit: '"day";r=1;t=60, "org";r=4000;t=60',
        }),
      { inspect: (r: Inspection) => r },
    );
    const starts: number[] = [];
    const calls = [1, 2, 3].map(() => b.schedule(() => starts.push(clock.now() - T0)));
    for (let s = 0; s < 70; s++) {
      await flush();
      clock.advance(1_000);
    }
    await Promise.all(calls);
    // One left now; the rest at the reset, not a day later.
    expect(starts[0]).toBe(0);
    expect(starts.slice(1).every((t) => t >= 60_000 && t <= 61_000)).toBe(true);
  });

  it('a quota at 0 with a far reset pauses no longer than maxRetryAfterMs', async () => {
    const { clock, gate } = setup();
    const a = gate({ limits: [], adapt: { maxRetryAfterMs: 60_000, learn: false } });
    await a.schedule(
      async () => ok({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(20 * 3600) }),
      {
        inspect: (r: Inspection) => r,
      },
    );
    const starts: number[] = [];
    const next = a.schedule(() => starts.push(clock.now() - T0));
    for (let s = 0; s < 62; s++) {
      await flush();
      clock.advance(1_000);
    }
    await next;
    expect(starts).toHaveLength(1);
    expect(starts[0]).toBeGreaterThanOrEqual(60_000);
    expect(starts[0]).toBeLessThanOrEqual(61_000);
  });

  it('a concurrency limit held by another gate is retried until a permit comes back', async () => {
    const { clock, gate } = setup();
    const limits = [{ algorithm: 'concurrency', limit: 1 }];
    const a = gate({ limits, concurrencyRetryMs: 10 });
    const b = gate({ limits, concurrencyRetryMs: 10 });
    let release!: () => void;
    const holding = a.schedule(() => new Promise<void>((resolve) => (release = resolve)));
    await flush();
    let ran = false;
    const waiting = b.schedule(() => {
      ran = true;
    });
    await flush();
    clock.advance(50);
    await flush();
    expect(ran).toBe(false);
    release();
    await holding;
    clock.advance(20);
    await flush();
    await waiting;
    expect(ran).toBe(true);
  });

  it('a call reached later than lateToleranceMs gives its slot back and reserves again', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    // The first timer of the gate fires 30 ms late (a busy event loop).
    let late = 30;
    const lateClock = {
      now: () => clock.now(),
      setTimeout: (fn: () => void, delayMs: number) => {
        const handle = clock.setTimeout(fn, delayMs + late);
        late = 0;
        return handle;
      },
      clearTimeout: (handle: unknown) => clock.clearTimeout(handle),
    };
    const limits = [{ algorithm: 'leaky-bucket' as const, limit: 10, intervalMs: 1000 }];
    const a = createSharedGate({ store, clock: lateClock, limits });
    const other = createSharedGate({ store, clock, limits });
    const starts: [string, number][] = [];
    const first = a.schedule(() => starts.push(['a', clock.now() - T0]));
    const second = a.schedule(() => starts.push(['a', clock.now() - T0]));
    // Another process reserves the slot after a's second.
    const third = other.schedule(() => starts.push(['b', clock.now() - T0]));
    await flush();
    // In steps, with the promise jobs of each between them (as between timers on a real clock).
    for (let i = 0; i < 100; i++) {
      clock.advance(10);
      await flush();
    }
    await Promise.all([first, second, third]);
    // a's second slot (100 ms) was reached at 130 ms: it did not start there (so close to b's slot at
    // 200 ms), but took the next slot after b's.
    expect(starts).toEqual([
      ['a', 0],
      ['b', 200],
      ['a', 300],
    ]);
    expect(a.stats().lateReserves).toBe(1);
    expect(() => createSharedGate({ store, lateToleranceMs: -1 })).toThrow(/lateToleranceMs/);
  });

  /** A MemoryStore whose reservations are counted (round trips, with Redis). */
  function countingStore(clock: ManualClock) {
    const store = new MemoryStore({ clock });
    let reserves = 0;
    const reserve = store.reserve.bind(store);
    store.reserve = (...args: Parameters<MemoryStore['reserve']>) => {
      reserves++;
      return reserve(...args);
    };
    return { store, reserves: () => reserves };
  }

  it('a call on a window limit counts from its response, so the next window waits for it, not for its start', async () => {
    const clock = new ManualClock(T0);
    const { store, reserves } = countingStore(clock);
    const limits = [{ algorithm: 'sliding-log' as const, limit: 2, intervalMs: 1000 }];
    const a = createSharedGate({ store, clock, limits, arrivalMarginMs: 50 });
    const responses: (() => void)[] = [];
    const call = () =>
      a.schedule(
        () =>
          new Promise<number>((resolve) => {
            const startedAt = clock.now() - T0;
            responses.push(() => resolve(startedAt));
          }),
      );
    const first = call();
    const second = call();
    const third = call();
    await flush();
    expect(responses).toHaveLength(2);
    // The first response comes 80 ms after its start; the second after 300 ms (counted at most a
    // tenth of the window, 100 ms, after its start).
    clock.advance(80);
    responses[0]!();
    await flush();
    clock.advance(220);
    responses[1]!();
    await flush();
    clock.advance(700);
    await flush();
    // At T0 + 1000 the log still holds both calls (at 80 and 100 ms): the third starts at 1080.
    expect(responses).toHaveLength(2);
    clock.advance(80);
    await flush();
    responses[2]!();
    expect(await Promise.all([first, second, third])).toEqual([0, 0, 1080]);
    // The third asked when it came, at 1000 and at 1080: never ahead of the recounts.
    expect(reserves()).toBe(5);
    // Without the margin (0) nothing is recounted and calls reserve ahead, as before.
    const plain = createSharedGate({ store: new MemoryStore({ clock }), clock, limits, arrivalMarginMs: 0 });
    const starts = [0, 1, 2].map(() => plain.schedule(() => clock.now() - T0));
    clock.advance(2000);
    expect(await Promise.all(starts)).toEqual([1080, 1080, 2080]);
  });

  it('a garbage arrivalMarginMs fails at construction, naming the option and the value', () => {
    const store = new MemoryStore();
    // (null and undefined mean the default, as for every gate option.)
    for (const bad of [-1, Number.NaN, Infinity, '50', {}]) {
      expect(() => createSharedGate({ store, arrivalMarginMs: bad as never })).toThrow(
        expect.objectContaining({
          code: 'ERR_INVALID_OPTION',
          message: expect.stringMatching(/arrivalMarginMs/),
        }),
      );
    }
    // The bound itself is fine, and 0 turns recounting off.
    expect(() => createSharedGate({ store, arrivalMarginMs: -1 })).toThrow(/got `-1`/);
    expect(() => createSharedGate({ store, arrivalMarginMs: 0 })).not.toThrow();
  });

  it('window calls of one key ask the store in turns: while one waits for its slot the others do not ask, and one whose deadline comes first is refused at once', async () => {
    const clock = new ManualClock(T0);
    const { store, reserves } = countingStore(clock);
    const limits = [{ algorithm: 'sliding-log' as const, limit: 1, intervalMs: 1000 }];
    const a = createSharedGate({ store, clock, limits, arrivalMarginMs: 50 });
    const stamp = () => clock.now() - T0;
    const c1 = a.schedule(stamp);
    const c2 = a.schedule(stamp);
    // c1 reserved, c2 was told to wait until 1000: c3 cannot start before then (refused at once),
    // and c4, c5 do not ask.
    const c3 = expect(a.schedule(stamp, { maxQueueTimeMs: 500 })).rejects.toMatchObject({
      code: 'ERR_QUEUE_TIMEOUT',
      predictedWaitMs: 1000,
    });
    const c4 = a.schedule(stamp);
    const c5 = a.schedule(stamp);
    await flush();
    await c3;
    expect(reserves()).toBe(2);
    for (let i = 0; i < 3; i++) {
      clock.advance(1000);
      await flush();
    }
    expect(await Promise.all([c1, c2, c4, c5])).toEqual([0, 1000, 2000, 3000]);
    // Each later call asked twice (told to wait, then reserved), c5 three times at most.
    expect(reserves()).toBeLessThanOrEqual(2 + 2 + 2 + 1);
    expect(a.stats()).toMatchObject({ queued: 0, inFlight: 0 });
  });

  it('calls waiting their turn for a window settle on abort and on close', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    const limits = [{ algorithm: 'fixed-window' as const, limit: 1, intervalMs: 1000 }];
    const a = createSharedGate({ store, clock, limits, arrivalMarginMs: 50 });
    const controller = new AbortController();
    const first = a.schedule(() => 'first');
    const waiting = a.schedule(() => 'waiting');
    const aborted = a.schedule(() => 'aborted', { signal: controller.signal });
    const behind = a.schedule(() => 'behind');
    await flush();
    controller.abort('no longer needed');
    await expect(aborted).rejects.toBeInstanceOf(AbortedError);
    expect(await first).toBe('first');
    const closed = [
      expect(waiting).rejects.toBeInstanceOf(GateClosedError),
      expect(behind).rejects.toBeInstanceOf(GateClosedError),
    ];
    await a.close({ queued: 'reject' });
    await Promise.all(closed);
    expect(a.stats()).toMatchObject({ queued: 0, inFlight: 0 });
  });

  it('close with queued: reject refuses calls whose store answer is in flight and gives their slots back', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    // A store whose answers land only when released: the answers are in flight at close.
    const held: (() => void)[] = [];
    const slow = Object.create(store) as Store;
    slow.reserve = (...args: Parameters<MemoryStore['reserve']>) =>
      new Promise((resolve) => held.push(() => resolve(store.reserve(...args))));
    const limits = [{ algorithm: 'fixed-window' as const, limit: 1, intervalMs: 1000 }];
    const a = createSharedGate({ store: slow, clock, limits, arrivalMarginMs: 50 });
    const ran: string[] = [];
    const asking = a.schedule(() => ran.push('asking'));
    const behind = a.schedule(() => ran.push('behind'));
    await flush();
    // One call holds the key's turn with its answer in flight; the other waits for a turn.
    expect(held).toHaveLength(1);
    const refused = [
      expect(asking).rejects.toBeInstanceOf(GateClosedError),
      expect(behind).rejects.toBeInstanceOf(GateClosedError),
    ];
    const closed = a.close({ queued: 'reject' });
    held.shift()!();
    await closed;
    await Promise.all(refused);
    expect(ran).toEqual([]);
    expect(held).toHaveLength(0);
    expect(a.stats()).toMatchObject({ queued: 0, inFlight: 0, started: 0 });
    // The window's one slot was given back: another process gets it now.
    const b = createSharedGate({ store, clock, limits, arrivalMarginMs: 50 });
    expect(await b.schedule(() => clock.now() - T0)).toBe(0);
  });

  it('a window call that must wait behind a later slot than its deadline is refused at once', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    // Answers one microtask later, so two calls of the key ask at once.
    const deferred = Object.create(store) as Store;
    deferred.reserve = (...args: Parameters<MemoryStore['reserve']>) =>
      Promise.resolve().then(() => store.reserve(...args));
    const limits = [{ algorithm: 'sliding-log' as const, limit: 3, intervalMs: 1000 }];
    const g = createSharedGate({ store: deferred, clock, limits, arrivalMarginMs: 1 });
    // The log holds calls at 0, 100 and 200 (each admitted answer widens the key's turns).
    for (let i = 0; i < 3; i++) {
      const call = g.schedule(() => 'x');
      await flush();
      expect(await call).toBe('x');
      clock.advance(100);
    }
    // At 300: a needs 2 units (free at 1100), b 1 unit (free at 1000) and may wait until 1050. They
    // ask together; a's answer comes first and a waits for 1100, so b cannot ask before then.
    const a = g.schedule(() => clock.now() - T0, { cost: 2 });
    let bError: unknown;
    const b = g.schedule(() => clock.now() - T0, { maxQueueTimeMs: 750 });
    b.catch((error: unknown) => {
      bError = error;
    });
    await flush();
    expect(clock.now() - T0).toBe(300);
    expect(bError).toBeInstanceOf(QueueTimeoutError);
    expect(bError).toMatchObject({ predicted: true, predictedWaitMs: 800 });
    clock.advance(800);
    await flush();
    expect(await a).toBe(1100);
    expect(g.stats()).toMatchObject({ queued: 0, inFlight: 0 });
  });

  it('window calls start in schedule order when a waiting call and the calls behind it are admitted together', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    const limits = [{ algorithm: 'fixed-window' as const, limit: 2, intervalMs: 1000 }];
    const g = createSharedGate({ store, clock, limits, arrivalMarginMs: 1 });
    const starts: string[] = [];
    const calls = [1, 2, 3, 4, 5].map((n) => g.schedule(() => starts.push(`${n}@${clock.now() - T0}`)));
    await flush();
    for (let i = 0; i < 2; i++) {
      clock.advance(1000);
      await flush();
    }
    await Promise.all(calls);
    // 3 waited for the next window with 4 and 5 queued behind it; at 1000 the window admits 3 and 4.
    expect(starts).toEqual(['1@0', '2@0', '3@1000', '4@1000', '5@2000']);
  });

  it('when the store goes down, calls waiting for a turn or a slot take the failure policy at once', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    const outage = flakyStore(store, false);
    const flaky = outage.store;
    const limits = [{ algorithm: 'fixed-window' as const, limit: 1, intervalMs: 1000 }];
    const g = createSharedGate({
      store: flaky,
      clock,
      limits,
      arrivalMarginMs: 1,
      failure: 'fail-closed',
      recoveryProbeMs: 100,
    });
    const first = g.schedule(() => 'first');
    // head waits for the next window (1000 ms on); behind waits for the key's turn.
    const outcomes: string[] = [];
    const note = (name: string, call: Promise<unknown>) =>
      call.then(
        () => outcomes.push(`${name} ran`),
        (error: unknown) => outcomes.push(`${name} ${(error as Error).name}`),
      );
    note(
      'head',
      g.schedule(() => 'head'),
    );
    note(
      'behind',
      g.schedule(() => 'behind'),
    );
    await flush();
    expect(await first).toBe('first');
    expect(outcomes).toEqual([]);
    outage.broken = true;
    // A call of another key waits in the gate-wide line (the gate-wide window is full: it does not
    // ask the store); a pause written to the store meets the outage.
    note(
      'other',
      g.schedule(() => 'other', { key: 'other' }),
    );
    await flush();
    expect(outcomes).toEqual([]);
    g.pauseFor(50, 'third');
    await flush();
    expect(clock.now()).toBe(T0);
    expect(outcomes.sort()).toEqual([
      'behind StoreUnavailableError',
      'head StoreUnavailableError',
      'other StoreUnavailableError',
    ]);
    expect(g.stats()).toMatchObject({ queued: 0, inFlight: 0, storeUp: false });
    outage.broken = false;
    clock.advance(100);
    await flush();
    expect(g.stats().storeUp).toBe(true);
    await g.close();
  });

  it('an actual price the ledger refuses (negative) settles at the estimate, not held until expiry', async () => {
    const { clock, store } = setup();
    const budget = new AsyncBudgetGuard({
      budgets: { name: 'day', limit: '$1', period: 'day' },
      ledger: asyncLedger(new MemoryLedger()),
      clock,
    });
    const gate = createSharedGate({ store, clock, budget });
    const answer = await gate.schedule(() => 'ok', {
      priceMicros: 100,
      inspect: () => ({ status: 200, headers: {}, actualPriceMicros: -5 }),
    });
    expect(answer).toBe('ok');
    await flush();
    expect(await budget.spend()).toMatchObject([{ spentMicros: 100, reservedMicros: 0 }]);
    await gate.close();
  });

  it('fail-closed rejects with StoreUnavailableError while the store fails, and recovers by itself', async () => {
    const { clock, store } = setup();
    const outage = flakyStore(store, true);
    const flaky = outage.store;
    const gate = createSharedGate({ store: flaky, clock, failure: 'fail-closed', recoveryProbeMs: 100 });
    const events: string[] = [];
    gate.onStoreDown((e) => events.push(`down ${e.policy}`));
    gate.onStoreUp(() => events.push('up'));
    await expect(gate.schedule(() => 1)).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(gate.schedule(() => 1)).rejects.toBeInstanceOf(StoreUnavailableError);
    outage.broken = false;
    clock.advance(100);
    await flush();
    expect(await gate.schedule(() => 2)).toBe(2);
    expect(events).toEqual(['down fail-closed', 'up']);
  });

  it('local failure policy: the fallback gate holds localShare of the quota', async () => {
    const { clock, store } = setup();
    const flaky = Object.create(store) as MemoryStore;
    flaky.reserve = () => {
      throw new StoreUnavailableError('down');
    };
    flaky.time = flaky.reserve as never;
    const gate = createSharedGate({
      store: flaky,
      clock,
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      localShare: 0.5,
    });
    const starts: number[] = [];
    const calls = [0, 1, 2].map(() => gate.schedule(() => starts.push(clock.now() - T0)));
    await flush();
    clock.advance(1000);
    await Promise.all(calls);
    // 5 per second locally: 200 ms apart.
    expect(starts).toEqual([0, 200, 400]);
    expect(gate.stats()).toMatchObject({ storeUp: false, fallbackCalls: 3 });
    // close with queued: 'reject' refuses the calls queued in the fallback too (the first of these
    // three starts at once, at 1000 ms; the others would wait for 1200 and 1400).
    const [now, ...queued] = [0, 1, 2].map(() => gate.schedule(() => starts.push(clock.now() - T0)));
    await flush();
    // Two wait in the fallback: queued, not started nor in flight.
    expect(gate.stats()).toMatchObject({ queued: 2, inFlight: 0, started: 4, fallbackCalls: 6 });
    const refused = queued.map((call) => expect(call).rejects.toBeInstanceOf(GateClosedError));
    await gate.close({ queued: 'reject' });
    await Promise.all(refused);
    expect(await now).toBe(4);
    expect(starts).toEqual([0, 200, 400, 1000]);
  });

  it('a learned limit is learned again within the store learnedTtlMs, and a looser one replaces a tighter one', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, learnedTtlMs: 2_000 });
    const learned: number[] = [];
    const learn = store.learn.bind(store);
    store.learn = (partition, spec, options) => {
      learned.push(spec.limit);
      return learn(partition, spec, options);
    };
    const gate = createSharedGate({
      store,
      clock,
      limits: [{ algorithm: 'leaky-bucket', limit: 50, intervalMs: 1000 }],
    });
    const stating = (q: number) => (): Inspection =>
      ok({ 'ratelimit-policy': `"p";q=${q};w=1`, ratelimit: `"p";r=${q - 1};t=1` });
    // The provider keeps stating 10 per second for 3 s: learned again before each 2 s expiry.
    for (let t = 0; t < 30; t++) {
      await gate.schedule(() => t, { inspect: stating(10) });
      clock.advance(100);
      await flush();
    }
    expect(learned.length).toBeGreaterThanOrEqual(3);
    expect(new Set(learned)).toEqual(new Set([10]));
    // Then 100 per second, looser than the configured 50: it replaces the 10 in the store.
    await gate.schedule(() => 'looser', { inspect: stating(100) });
    expect(learned.at(-1)).toBe(100);
    await gate.close();
  });

  it('a window call with maxQueueTimeMs 0 starts when a slot is free now, on a real clock', async () => {
    // The clock moves between schedule and the call's turn: the turn must not count as a missed deadline.
    const g = createSharedGate({
      store: new MemoryStore(),
      limits: [{ algorithm: 'sliding-log', limit: 5, intervalMs: 1000 }],
      arrivalMarginMs: 50,
    });
    expect(await g.schedule(() => 'now', { key: 'k', maxQueueTimeMs: 0 })).toBe('now');
    await g.close();
  });

  it('a 429 on one key does not hold the other keys behind the gate-wide limit', async () => {
    const { clock, store } = setup();
    const gate = createSharedGate({
      store,
      clock,
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }],
    });
    const starts: [string, number][] = [];
    let throttled = false;
    const inspect = (): Inspection => {
      if (throttled) return ok();
      throttled = true;
      return { status: 429, headers: { 'retry-after': '2' } };
    };
    const k1 = [0, 1, 2].map(() =>
      gate.schedule(() => starts.push(['k1', clock.now() - T0]), { key: 'k1', inspect }),
    );
    await flush();
    // k1 is paused until +2,000 ms; k2's calls come now.
    const k2 = [0, 1, 2].map(() => gate.schedule(() => starts.push(['k2', clock.now() - T0]), { key: 'k2' }));
    for (let t = 0; t < 40; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all([...k1, ...k2]);
    const k2Starts = starts.filter(([key]) => key === 'k2').map(([, at]) => at);
    expect(k2Starts).toHaveLength(3);
    expect(Math.max(...k2Starts)).toBeLessThan(1_000);
    for (const [key, at] of starts.slice(1)) if (key === 'k1') expect(at).toBeGreaterThanOrEqual(2_000);
    await gate.close();
  });

  it('a slow key does not hold the other keys behind the gate-wide limit, and its calls ask about twice each', async () => {
    const { clock, gate, count } = countedGate({
      limits: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }],
    });
    const starts: [string, number][] = [];
    const stamp = (key: string) => () => starts.push([key, clock.now() - T0]);
    const k1 = [0, 1, 2, 3, 4].map(() => gate.schedule(stamp('k1'), { key: 'k1' }));
    await flush();
    const k2 = gate.schedule(stamp('k2'), { key: 'k2' });
    for (let t = 0; t < 60; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all([...k1, k2]);
    // k2 starts at once (it started at 3,000 ms behind k1's reservations of the gate-wide slots).
    expect(starts.find(([key]) => key === 'k1')).toEqual(['k1', 0]);
    expect(starts.find(([key]) => key === 'k2')![1]).toBeLessThanOrEqual(100);
    // k1 keeps its own pace: one per second.
    expect(starts.filter(([key]) => key === 'k1').map(([, at]) => at)).toEqual([0, 1000, 2000, 3000, 4000]);
    // Each waiting call asks when its key's slot comes (one refusal, one grant), not at every slot.
    expect(count.reserves).toBeLessThanOrEqual(2 * 6);
    await gate.close();
  });

  it('many keys under a binding gate-wide limit cost one store request per call', async () => {
    const { clock, gate, count } = countedGate({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }],
    });
    const { starts, calls } = oneCallPerKey(gate, clock, 200);
    for (let t = 0; t < 250; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all(calls);
    // The gate-wide limit decides every start: reserved ahead in one request each, 10 per second.
    expect(count.reserves).toBe(200);
    expect(starts).toHaveLength(200);
    expect(Math.max(...starts)).toBe(19_900);
    await gate.close();
  });

  it('window calls of many keys under a binding gate-wide limit wait in one line: a few store requests per call', async () => {
    const { clock, gate, count } = countedGate({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      perKey: [{ algorithm: 'sliding-log', limit: 5, intervalMs: 1000 }],
      // Window calls are counted from their responses (the default on a real clock).
      arrivalMarginMs: 50,
    });
    const { starts, calls } = oneCallPerKey(gate, clock, 200);
    for (let t = 0; t < 2_200; t++) {
      clock.advance(10);
      await flush();
    }
    await Promise.all(calls);
    expect(starts).toHaveLength(200);
    // The gate-wide limit decides: 10 per second, in order, 19.9 s for 200 (within a tick).
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(99.9);
    expect(starts.at(-1)!).toBeLessThanOrEqual(19_900 + 20);
    // Each call asks about twice (a refusal that puts it in line, then its grant); every key's
    // call asking at every slot cost 20,100 for these 200 calls.
    console.log(
      `[shared gate] 200 keys of window calls under gate-wide 10/s: ${count.reserves} store requests`,
    );
    expect(count.reserves).toBeLessThanOrEqual(3 * 200);
    await gate.close();
  });

  it('the gate-wide line goes on when its calls are aborted, refuses at once what it cannot start in time, and close rejects it', async () => {
    const { clock, gate } = countedGate({
      limits: [{ algorithm: 'fixed-window', limit: 1, intervalMs: 1000 }],
      arrivalMarginMs: 1,
    });
    const outcomes: string[] = [];
    const note = (name: string, call: Promise<unknown>) =>
      call.then(
        () => outcomes.push(`${name} ran at ${clock.now() - T0}`),
        (error: unknown) => outcomes.push(`${name} ${(error as Error).name} at ${clock.now() - T0}`),
      );
    const abortB = new AbortController();
    const abortC = new AbortController();
    note(
      'A',
      gate.schedule(() => 'A', { key: 'k0' }),
    );
    // B is told the next window (1,000 ms) and waits for it for the line; C and E wait in line.
    note(
      'B',
      gate.schedule(() => 'B', { key: 'k1', signal: abortB.signal }),
    );
    note(
      'C',
      gate.schedule(() => 'C', { key: 'k2', signal: abortC.signal }),
    );
    // D cannot start before the line's first slot: refused now.
    note(
      'D',
      gate.schedule(() => 'D', { key: 'k3', maxQueueTimeMs: 500 }),
    );
    note(
      'E',
      gate.schedule(() => 'E', { key: 'k4' }),
    );
    await flush();
    expect([...outcomes].sort()).toEqual(['A ran at 0', 'D QueueTimeoutError at 0']);
    clock.advance(100);
    abortC.abort();
    abortB.abort();
    await flush();
    // E speaks for the line now, and starts at the next window.
    for (let t = 0; t < 10; t++) {
      clock.advance(100);
      await flush();
    }
    expect([...outcomes].sort()).toEqual([
      'A ran at 0',
      'B AbortedError at 100',
      'C AbortedError at 100',
      'D QueueTimeoutError at 0',
      'E ran at 1000',
    ]);
    // Closing with queued calls rejects the line too: F speaks for it, G waits in it.
    note(
      'F',
      gate.schedule(() => 'F', { key: 'k5' }),
    );
    note(
      'G',
      gate.schedule(() => 'G', { key: 'k6' }),
    );
    await flush();
    await gate.close({ queued: 'reject' });
    await flush();
    expect(outcomes.slice(5).sort()).toEqual(['F GateClosedError at 1100', 'G GateClosedError at 1100']);
    expect(gate.stats()).toMatchObject({ queued: 0, inFlight: 0 });
  });

  it('a call whose answer comes too late to start while the gate-wide line holds calls waits in the line and starts', async () => {
    const { clock, store } = setup();
    // Answers are held until the test delivers them (a slow store, or a busy event loop).
    const held: (() => void)[] = [];
    const slow = Object.create(store) as MemoryStore;
    slow.reserve = ((...args: Parameters<MemoryStore['reserve']>) => {
      const decision = store.reserve(...args);
      return new Promise((resolve) => held.push(() => resolve(decision)));
    }) as unknown as MemoryStore['reserve'];
    const gate = createSharedGate({
      store: slow,
      clock,
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      perKey: [{ algorithm: 'sliding-log', limit: 5, intervalMs: 1000 }],
      arrivalMarginMs: 50,
      maxQueueTimeMs: 60_000,
    });
    const starts: [string, number][] = [];
    const k0 = gate.schedule(() => starts.push(['k0', clock.now() - T0]), { key: 'k0' });
    const k1 = gate.schedule(() => starts.push(['k1', clock.now() - T0]), { key: 'k1' });
    await flush();
    // k0 was granted the slot at 0, k1 refused until the next one; both answers land 40 ms later
    // (k0's slot 20 ms late by the round trip's midpoint), k1's first: it speaks for the line, and
    // k0, too late for its slot, must reserve again.
    clock.advance(40);
    const answers = held.splice(0);
    answers[1]!();
    answers[0]!();
    for (let t = 0; t < 50; t++) {
      await flush();
      for (const deliver of held.splice(0)) deliver();
      clock.advance(10);
    }
    await Promise.all([k0, k1]);
    expect(starts.map(([key]) => key).sort()).toEqual(['k0', 'k1']);
    expect(gate.stats()).toMatchObject({ queued: 0, inFlight: 0 });
    await gate.close();
  });

  it('a key its own limit holds keeps its pace a round trip away (20 ms): no slot slips', async () => {
    const { clock, gate, count, run } = remoteGate(20, {
      limits: [{ algorithm: 'leaky-bucket', limit: 1000, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
    });
    const starts: number[] = [];
    const calls = Array.from({ length: 31 }, () =>
      gate.schedule(() => starts.push(clock.now() - T0), { key: 'k' }),
    );
    await run(4_000);
    await Promise.all(calls);
    expect(starts).toHaveLength(31);
    // 100 ms apart (asking when the wait had passed here, each slot slipped a round trip: 120 ms).
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeLessThanOrEqual(102);
    expect(starts.at(-1)! - starts[0]!).toBeLessThanOrEqual(3_000 + 20);
    // The 31 ask at once (a key's burst may admit them all), then each waits for its slot and asks
    // once more: 91 requests. (Doubling turns per slot, it cost a third request per call each slot.)
    expect(count.reserves).toBeLessThanOrEqual(3 * 31);
  });

  it('calls of one key inside both bursts reserve together, not in turns', async () => {
    const { clock, gate, run } = remoteGate(2, {
      limits: [{ algorithm: 'token-bucket', limit: 1000, intervalMs: 1000, burst: 100 }],
      perKey: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000, burst: 100 }],
    });
    const starts: number[] = [];
    const calls = Array.from({ length: 64 }, () =>
      gate.schedule(() => starts.push(clock.now() - T0), { key: 'k' }),
    );
    await run(50);
    await Promise.all(calls);
    // All within one round trip (in turns of 1, 2, 4, ... they took 20 ms).
    expect(Math.max(...starts)).toBeLessThanOrEqual(3);
  });

  it('the gate-wide line lets more calls ask at once when a window frees many slots', async () => {
    const { clock, gate, run } = remoteGate(2, {
      limits: [{ algorithm: 'fixed-window', limit: 100, intervalMs: 1000 }],
      arrivalMarginMs: 1,
    });
    const starts: number[] = [];
    const calls = Array.from({ length: 300 }, (_, i) =>
      gate.schedule(() => starts.push(clock.now() - T0), { key: `k${i}` }),
    );
    await run(3_100);
    await Promise.all(calls);
    const second = starts.filter((at) => at >= 1_000 && at < 2_000);
    expect(second).toHaveLength(100);
    // One at a time, a round trip each, the window's 100 took 200 ms to start.
    expect(Math.max(...second) - Math.min(...second)).toBeLessThanOrEqual(40);
  });

  it('a key briefly held by its own limit gets its full pace back (closed loop, 2 ms round trips)', async () => {
    const { clock, gate, run } = remoteGate(2, {
      limits: [{ algorithm: 'token-bucket', limit: 1e9, intervalMs: 1000 }],
      perKey: [{ algorithm: 'token-bucket', limit: 2_000, intervalMs: 1000, burst: 10 }],
    });
    const done = await closedLoop(gate, clock, run, { workers: 64, callMs: 50, keys: 1, ms: 3_000 });
    // 64 calls of 50 ms in flight allow about 1,280 a second; one call per round trip, 476.
    expect(done.lastSecond).toBeGreaterThan(1_100);
  });

  it('the gate-wide line clears once the gate-wide limit stops binding (closed loop, 2 ms round trips)', async () => {
    const { clock, gate, run } = remoteGate(2, {
      limits: [{ algorithm: 'token-bucket', limit: 6_000, intervalMs: 1000, burst: 5 }],
      perKey: [{ algorithm: 'sliding-log', limit: 1_000, intervalMs: 1000 }],
      arrivalMarginMs: 1,
    });
    const done = await closedLoop(gate, clock, run, { workers: 64, callMs: 10, keys: 64, ms: 3_000 });
    // 64 calls of 10 ms in flight, each a round trip to ask: about 5,300 a second; with the line
    // capped at 8 asking, 3,800.
    expect(done.lastSecond).toBeGreaterThan(4_800);
  });

  it('when the store is down at the gate-wide line slot, the line asker reaches the fallback first', async () => {
    const { clock, outage, gate } = outageSetup(false, {
      limits: [{ algorithm: 'fixed-window', limit: 1, intervalMs: 1000 }],
      arrivalMarginMs: 1,
      maxQueueTimeMs: 60_000,
    });
    const starts: string[] = [];
    const calls = ['A', 'B', 'C', 'D'].map((name, i) =>
      gate.schedule(() => starts.push(name), { key: `k${i}` }),
    );
    await flush();
    expect(starts).toEqual(['A']);
    // B waits for the next window for the line; C and D wait in it. The store fails at B's slot.
    outage.broken = true;
    for (let t = 0; t < 200; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all(calls);
    expect(starts).toEqual(['A', 'B', 'C', 'D']);
  });

  it('a pause set while the store is down holds the fallback, is written to the store when it answers, and costs no busy loop', async () => {
    const { clock, outage, gate: a, other } = outageSetup(false);
    const b = other();
    const starts: [string, number][] = [];
    const stamp = (name: string) => () => starts.push([name, clock.now() - T0]);
    outage.broken = true;
    // The first call meets the outage and goes to the fallback; then a pause until +2,500 ms.
    const first = a.schedule(stamp('first'));
    await flush();
    a.pauseFor(2_500);
    const during = a.schedule(stamp('during'));
    clock.advance(800);
    await flush();
    outage.broken = false;
    clock.advance(100);
    await flush();
    expect(a.stats().storeUp).toBe(true);
    const reservesBefore = outage.reserves;
    const after = a.schedule(stamp('after'));
    const otherProcess = b.schedule(stamp('other process'));
    for (let t = 0; t < 30; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all([first, during, after, otherProcess]);
    expect(starts[0]).toEqual(['first', 0]);
    expect(starts.map(([name]) => name).sort()).toEqual(['after', 'during', 'first', 'other process']);
    for (const [name, at] of starts.slice(1)) expect(at, name).toBeGreaterThanOrEqual(2_500);
    // A few reservations for the call after recovery, not one per turn of the event loop.
    expect(outage.reserves - reservesBefore).toBeLessThan(10);
    await Promise.all([a.close(), b.close()]);
  });

  it('a pause heard before this gate knew the key holds that key in the fallback too', async () => {
    // Found by a fuzzer (session 13): the fallback was paused only for keys this gate had seen,
    // so a call of a new key started through it inside another process's Retry-After pause.
    const {
      clock,
      outage,
      gate: a,
      other,
    } = outageSetup(false, {
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      failure: 'local',
    });
    const b = other({ limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    b.pauseFor(5_000, 'k');
    await flush();
    outage.broken = true;
    await a.schedule(() => {}, { key: 'other' });
    expect(a.stats().storeUp).toBe(false);
    let startedAt: number | undefined;
    const late = a.schedule(
      () => {
        startedAt = clock.now() - T0;
      },
      { key: 'k', maxQueueTimeMs: 60_000 },
    );
    for (let t = 0; t < 60; t++) {
      clock.advance(100);
      await flush();
    }
    await late;
    expect(startedAt).toBeGreaterThanOrEqual(5_000 - 5);
    await Promise.all([a.close(), b.close()]);
  });

  it('a 429 answered through the fallback pauses this gate and, once the store answers, the others', async () => {
    const { clock, outage, gate: a, other } = outageSetup(true);
    const b = other();
    const starts: [string, number][] = [];
    const stamp = (name: string) => () => starts.push([name, clock.now() - T0]);
    let answered429 = false;
    const throttled = a.schedule(stamp('throttled'), {
      inspect: () => {
        if (answered429) return ok();
        answered429 = true;
        return { status: 429, headers: { 'retry-after': '3' } };
      },
    });
    await flush();
    expect(a.stats().fallbackCalls).toBe(1);
    clock.advance(500);
    await flush();
    outage.broken = false;
    clock.advance(100);
    await flush();
    expect(a.stats().storeUp).toBe(true);
    const after = a.schedule(stamp('after'));
    const otherProcess = b.schedule(stamp('other process'));
    for (let t = 0; t < 40; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all([throttled, after, otherProcess]);
    expect(starts[0]).toEqual(['throttled', 0]);
    expect(starts.map(([name]) => name).sort()).toEqual(['after', 'other process', 'throttled', 'throttled']);
    for (const [name, at] of starts.slice(1)) expect(at, name).toBeGreaterThanOrEqual(3_000);
    await Promise.all([a.close(), b.close()]);
  });

  it('the fallback counts the calls still running on store reservations when the store goes down', async () => {
    const { outage, gate } = outageSetup(false, {
      limits: [{ algorithm: 'concurrency', limit: 2 }],
      localShare: 0.5,
      recoveryProbeMs: 60_000,
    });
    let running = 0;
    let peak = 0;
    const finish: (() => void)[] = [];
    const call = (name: string) =>
      gate.schedule(() => {
        running++;
        peak = Math.max(peak, running);
        return new Promise<string>((resolve) =>
          finish.push(() => {
            running--;
            resolve(name);
          }),
        );
      });
    const first = [call('a'), call('b')];
    await flush();
    expect(running).toBe(2);
    outage.broken = true;
    // The store is down: this call goes to the fallback (1 permit), which waits for a and b.
    const late = call('c');
    await flush();
    expect(gate.stats().storeUp).toBe(false);
    expect(running).toBe(2);
    finish.shift()!();
    await flush();
    expect(running).toBe(1);
    finish.shift()!();
    await flush();
    expect(running).toBe(1);
    finish.shift()!();
    expect(await Promise.all([...first, late])).toEqual(['a', 'b', 'c']);
    expect(peak).toBe(2);
    await gate.close();
  });

  it('a call running through two outages frees the fallback of both stand-ins when it finishes', async () => {
    const { clock, outage, gate } = outageSetup(false, {
      limits: [{ algorithm: 'concurrency', limit: 2 }],
      localShare: 0.5,
    });
    let finish!: () => void;
    const long = gate.schedule(() => new Promise<void>((resolve) => (finish = resolve)));
    await flush();
    for (let n = 0; n < 2; n++) {
      outage.broken = true;
      // A call meets the outage (the fallback's one permit is the stand-in's): it waits, then is
      // refused at its deadline.
      const refused = expect(gate.schedule(() => 'x', { maxQueueTimeMs: 50 })).rejects.toBeInstanceOf(
        QueueTimeoutError,
      );
      await flush();
      clock.advance(50);
      await flush();
      await refused;
      outage.broken = false;
      clock.advance(100);
      await flush();
      expect(gate.stats().storeUp).toBe(true);
    }
    outage.broken = true;
    finish();
    await long;
    await flush();
    // Down again after it finished: the fallback's permit is free.
    expect(await gate.schedule(() => 'after', { maxQueueTimeMs: 0 })).toBe('after');
    await gate.close();
  });

  it('what the fallback started is counted in the store when it answers again', async () => {
    const { clock, outage, gate } = outageSetup(true, {
      limits: [{ algorithm: 'fixed-window', limit: 10, intervalMs: 1000 }],
      localShare: 0.5,
    });
    const starts: number[] = [];
    const stamp = () => starts.push(clock.now() - T0);
    // Down: the fallback starts its 5 of this second; 3 wait for the next.
    const during = Array.from({ length: 8 }, () => gate.schedule(stamp));
    await flush();
    clock.advance(100);
    outage.broken = false;
    clock.advance(100);
    await flush();
    expect(gate.stats().storeUp).toBe(true);
    // Back: 10 more calls through the store.
    const after = Array.from({ length: 10 }, () => gate.schedule(stamp));
    for (let t = 0; t < 40; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all([...during, ...after]);
    expect(starts).toHaveLength(18);
    // Never more than 10 in one of the provider's seconds.
    const perSecond = new Map<number, number>();
    for (const at of starts)
      perSecond.set(Math.floor(at / 1000), (perSecond.get(Math.floor(at / 1000)) ?? 0) + 1);
    expect(Math.max(...perSecond.values())).toBeLessThanOrEqual(10);
    await gate.close();
  });

  it('permits of calls that finish while the store is down are given back when it answers', async () => {
    const limits = [{ algorithm: 'concurrency', limit: 2 }] as const;
    const { clock, outage, gate: a, other } = outageSetup(false, { limits });
    const b = other({ limits });
    const finish: (() => void)[] = [];
    const running = [0, 1].map(() => a.schedule(() => new Promise<void>((resolve) => finish.push(resolve))));
    await flush();
    expect(finish).toHaveLength(2);
    outage.broken = true;
    for (const done of finish) done();
    await Promise.all(running);
    await flush();
    outage.broken = false;
    clock.advance(100);
    await flush();
    expect(a.stats().storeUp).toBe(true);
    // Another process gets both permits at once (not after the lease of the lost refunds).
    expect(await Promise.all([0, 1].map((i) => b.schedule(() => i, { maxQueueTimeMs: 0 })))).toEqual([0, 1]);
    await Promise.all([a.close(), b.close()]);
  });

  it('an outage noticed while closing fails the queued calls over at once, not one command timeout each', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    let hanging = false;
    // A store that stops answering: each command fails after 1 s (its command timeout).
    const slow = Object.create(store) as Store;
    slow.reserve = (...args: Parameters<Store['reserve']>) => {
      if (!hanging) return store.reserve(...args);
      return new Promise((_, reject) =>
        clock.setTimeout(() => reject(new StoreUnavailableError('no answer within 1000 ms')), 1_000),
      );
    };
    slow.time = slow.reserve as never;
    const gate = createSharedGate({
      store: slow,
      clock,
      failure: 'fail-closed',
      limits: [{ algorithm: 'sliding-log', limit: 1, intervalMs: 100 }],
      maxQueueTimeMs: 60_000,
      // Window calls then ask the store in turns, each when its slot comes.
      arrivalMarginMs: 20,
    });
    const outcomes: string[] = [];
    const calls = Array.from({ length: 6 }, (_, i) =>
      gate
        .schedule(() => i)
        .then(
          () => outcomes.push('ok'),
          (error: Error) => outcomes.push(error.constructor.name),
        ),
    );
    await flush();
    hanging = true;
    const closed = gate.close();
    for (let t = 0; t < 100 && outcomes.length < 6; t++) {
      clock.advance(100);
      await flush();
    }
    await Promise.all(calls);
    await closed;
    expect(outcomes[0]).toBe('ok');
    expect(outcomes.slice(1)).toEqual(Array(5).fill('StoreUnavailableError'));
    // One command timeout and a few turns, not five timeouts in a row.
    expect(clock.now() - T0).toBeLessThanOrEqual(2_000);
  });

  it('a margined token bucket still admits a cost of its whole burst, later, and refuses burst + 1', async () => {
    // 100 points/s, bucket 1,000: 100/s × 50 ms = 5 points kept unused (burst′ 995), T = 10 ms.
    const clock = new ManualClock(T0);
    const bucket = {
      algorithm: 'token-bucket',
      limit: 100,
      intervalMs: 1000,
      burst: 1000,
      unit: 'points',
    } as const;
    // Alone, then beside a window limit: its calls ask the store again when their time comes.
    const window = { algorithm: 'fixed-window', limit: 100, intervalMs: 60_000 } as const;
    for (const perKey of [[bucket], [bucket, window]]) {
      const gate = createSharedGate({
        store: new MemoryStore({ clock }),
        clock,
        arrivalMarginMs: 50,
        perKey,
      });
      const t0 = clock.now();
      const starts: [string, number][] = [];
      const stamp = (key: string) => () => starts.push([key, clock.now() - t0]);
      const calls = [995, 1000, 1000].map((points) =>
        gate.schedule(stamp('a'), { key: 'a', cost: { points } }),
      );
      // A fresh bucket has been full long enough for the whole 1,000 at once.
      calls.push(gate.schedule(stamp('b'), { key: 'b', cost: { points: 1000 } }));
      await flush();
      expect(starts).toEqual([
        ['a', 0],
        ['b', 0],
      ]);
      // Above burst′, a call starts (1000 - 995)·T = 50 ms after the bucket is full (at 9 950),
      // and the next one 50 ms after it is full again (20 000).
      clock.advance(9_999);
      await flush();
      expect(starts).toHaveLength(2);
      clock.advance(1);
      await flush();
      expect(starts.at(-1)).toEqual(['a', 10_000]);
      clock.advance(30_000);
      await Promise.all(calls);
      expect(starts.at(-1)).toEqual(['a', 20_050]);
      await expect(gate.schedule(stamp('a'), { key: 'a', cost: { points: 1001 } })).rejects.toMatchObject({
        code: 'ERR_INVALID_COST',
        message: 'Cost 1001 points exceeds what the token-bucket limit can ever admit (1000)',
      });
      await gate.close();
    }
  });

  it('the local fallback of a margined token bucket admits the share of its whole burst', async () => {
    const clock = new ManualClock(T0);
    const flaky = Object.create(new MemoryStore({ clock })) as MemoryStore;
    flaky.reserve = () => {
      throw new StoreUnavailableError('down');
    };
    flaky.time = flaky.reserve as never;
    // Half of 100 points/s and of a 1,000 bucket, with the same margin: 50/s × 50 ms = 2.5 points
    // kept unused (burst′ 497), T = 20 ms; a call of the whole 500 starts 3 × 20 ms after the
    // bucket is full.
    const gate = createSharedGate({
      store: flaky,
      clock,
      arrivalMarginMs: 50,
      localShare: 0.5,
      perKey: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000, burst: 1000, unit: 'points' }],
    });
    const started = [497, 500].map((points) => gate.schedule(() => clock.now() - T0, { cost: { points } }));
    await flush();
    clock.advance(20_000);
    // 497 × 20 ms = 9 940, then 60 ms more.
    expect(await Promise.all(started)).toEqual([0, 10_000]);
    expect(gate.stats()).toMatchObject({ storeUp: false, fallbackCalls: 2 });
    await gate.close();
  });
});

const skip = await redisSkipReason();
if (skip) console.log(`[shared gate on Redis] skipped (${skip})`);

describe.skipIf(skip !== false)('shared gate on Redis', () => {
  const gates: SharedGate[] = [];
  afterAll(async () => {
    for (const g of gates) await g.close();
  });
  const keyPrefix = `tollgate-shared-${process.pid}-${Date.now()}`;
  /** Two gates on their own connections (two processes), both connected. */
  const twoGates = async (options: Partial<SharedGateOptions>) => {
    const pair = [0, 1].map(() => {
      const g = createSharedGate({ redis: REDIS_URL, ...options });
      gates.push(g);
      return g;
    });
    await Promise.all(pair.map((g) => g.store.time()));
    return pair as [SharedGate, SharedGate];
  };

  // Found by a review (session 18): close() resolved while a 429's error body was still being
  // read (the call had left inFlight at its response), closed the store the gate owned, and the
  // retry the 'run' mode promises failed with GateClosedError.
  it("close() waits for a 429'd call whose response is still being read, and its retry runs", async () => {
    const gate = createSharedGate({ redis: REDIS_URL, keyPrefix: `${keyPrefix}-close` });
    let sent = 0;
    const fn = async () => (++sent === 1 ? { status: 429, headers: { 'retry-after': '1' } } : ok());
    let readBody!: () => void;
    // As the adapters' bounded error-body read: the inspection answers later.
    const inspect = (r: Inspection) =>
      r.status === 429 ? new Promise<Inspection>((resolve) => (readBody = () => resolve(r))) : r;
    const call = gate.schedule(fn, { inspect });
    const outcome = call.then(
      (r) => r.status,
      (e: { code?: string }) => e.code,
    );
    for (let i = 0; i < 200 && sent === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(sent).toBe(1);
    let closed = false;
    const closing = gate.close().then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 30));
    expect(closed).toBe(false);
    readBody();
    expect(await outcome).toBe(200);
    await closing;
    expect(sent).toBe(2);
  });

  it('two gates (two connections) never exceed the shared leaky bucket together', async () => {
    // Both connected first: a first answer held up by connecting arrives after later slots have
    // passed, and calls up to lateToleranceMs late start together; this checks the spacing only.
    const [a, b] = await twoGates({
      keyPrefix,
      limits: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }],
    });
    // The slots the store granted and nobody gave back, on the store's clock.
    const held = new Set<StoreReservation>();
    for (const g of [a, b]) {
      const store = g.store;
      const reserve = store.reserve.bind(store);
      store.reserve = (...args) =>
        Promise.resolve(reserve(...args)).then((d) => {
          if (d.ok) held.add(d);
          return d;
        });
      const refund = store.refund.bind(store);
      store.refund = (reservation, which) => {
        held.delete(reservation);
        return refund(reservation, which);
      };
    }
    const starts: number[] = [];
    const stamp = () => starts.push(performance.now());
    const t0 = performance.now();
    await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).schedule(stamp)));
    const elapsed = performance.now() - t0;
    // The store spaced the 40 calls of both gates 10 ms apart. (Started on this machine's clock,
    // the gaps also carry each gate's clock-offset error and a start up to lateToleranceMs late:
    // 376-389 ms for the 390 ms span beside two busy loops.)
    const slots = [...held].map((r) => r.startAt).sort((x, y) => x - y);
    expect(slots).toHaveLength(40);
    for (let i = 1; i < slots.length; i++)
      expect(slots[i]! - slots[i - 1]!).toBeGreaterThanOrEqual(10 - 1e-9);
    starts.sort((x, y) => x - y);
    // Started on their slots' pace, not at once, and not much slower than it.
    expect(starts.at(-1)! - starts[0]!).toBeGreaterThan(300);
    expect(elapsed).toBeLessThan(1500);
    let minGap = Infinity;
    for (let i = 1; i < starts.length; i++) minGap = Math.min(minGap, starts[i]! - starts[i - 1]!);
    console.log(
      `[shared gate on Redis] 40 calls over ${elapsed.toFixed(0)} ms, min gap ${minGap.toFixed(2)} ms`,
    );
  });

  it("two gates: a call's actual tokens are settled in Redis, so the other gate sees what it used", async () => {
    // 10 tokens per 10 s, all at once: a token comes back every second.
    const limits = [{ algorithm: 'token-bucket', limit: 10, intervalMs: 10_000, unit: 'tokens' }] as const;
    const settleThenAsk = async (prefix: string, estimate: number, used: number, next: number) => {
      const [a, b] = await twoGates({ keyPrefix: `${keyPrefix}-${prefix}`, limits: [...limits] });
      const inspection: Inspection = { status: 200, headers: {}, actualCost: { tokens: used } };
      await a.schedule(() => 'ran', { cost: { tokens: estimate }, inspect: () => inspection });
      // The settlement goes out as the call settles, on a's connection: let it land first.
      await new Promise((resolve) => setTimeout(resolve, 100));
      return b.schedule(() => 'ran', { cost: { tokens: next }, maxQueueTimeMs: 0 });
    };
    // Used 10 of an estimated 2: nothing left for b now (it would have had 8).
    await expect(settleThenAsk('more', 2, 10, 1)).rejects.toBeInstanceOf(QueueTimeoutError);
    // Used 1 of an estimated 10: 8 fit for b now (it would have had none; the bucket keeps a token
    // of its burst back for arrivalMarginMs).
    await expect(settleThenAsk('less', 10, 1, 8)).resolves.toBe('ran');
  });

  it('two gates: a slow key does not hold the other keys behind the gate-wide limit', async () => {
    const [a, b] = await twoGates({
      keyPrefix: `${keyPrefix}-own`,
      limits: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 2, intervalMs: 1000 }],
    });
    const t0 = performance.now();
    const starts: [string, number][] = [];
    const stamp = (key: string) => () => starts.push([key, performance.now() - t0]);
    // k1 paces at 2 per second across both gates: its fourth call starts at 1.5 s.
    const k1 = [0, 1, 2, 3].map((i) => (i % 2 ? a : b).schedule(stamp('k1'), { key: 'k1' }));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const k2 = [b.schedule(stamp('k2'), { key: 'k2' }), a.schedule(stamp('k2'), { key: 'k2' })];
    await Promise.all([...k1, ...k2]);
    const k1Starts = starts.filter(([key]) => key === 'k1').map(([, at]) => at);
    const k2Starts = starts.filter(([key]) => key === 'k2').map(([, at]) => at);
    // k2's first call starts at once (generous bound: it used to wait 1.5 s behind k1's
    // reservations of the gate-wide slots), its second at k2's own pace.
    expect(Math.min(...k2Starts)).toBeLessThan(400);
    for (let i = 1; i < k1Starts.length; i++) expect(k1Starts[i]! - k1Starts[i - 1]!).toBeGreaterThan(450);
    expect(k1Starts.at(-1)!).toBeGreaterThan(1400);
  });

  it('two gates, window calls of many keys under a binding gate-wide limit: a few commands per call, on pace', async () => {
    const [a, b] = await twoGates({
      keyPrefix: `${keyPrefix}-line`,
      limits: [{ algorithm: 'leaky-bucket', limit: 20, intervalMs: 1000 }],
      // Each key's own window makes every call a window call (counted from its response).
      perKey: [{ algorithm: 'sliding-log', limit: 5, intervalMs: 1000 }],
      arrivalMarginMs: 20,
    });
    const sent = () =>
      (a.store as unknown as { commandsSent: number }).commandsSent +
      (b.store as unknown as { commandsSent: number }).commandsSent;
    // From here: the scripts were loaded when the gates connected (twoGates).
    const before = sent();
    const starts: number[] = [];
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        (i % 2 ? a : b).schedule(() => starts.push(performance.now() - t0), { key: `k${i % 30}` }),
      ),
    );
    starts.sort((x, y) => x - y);
    // 20 per second, 50 ms apart (generous bounds for timers on a shared machine): 60 in about 3 s.
    for (let i = 20; i < starts.length; i++) expect(starts[i]! - starts[i - 20]!).toBeGreaterThan(950);
    expect(starts.at(-1)!).toBeLessThan(4_500);
    const commands = sent() - before;
    console.log(`[shared gate on Redis] 60 window calls of 30 keys, 2 gates: ${commands} store commands`);
    // About a refused reserve, a granted one and a recount per call, plus each gate's asker losing
    // some slots to the other gate; every waiting key asking at every slot cost far more.
    expect(commands).toBeLessThan(60 * 6);
  });

  it('a sliding window at the provider’s exact limit: not one 429, close to the fastest schedule', async () => {
    // The provider counts each request when it arrives, tens of ms after its start for the first
    // burst (new connections); the gate counts window calls from their responses, at most
    // max(arrivalMarginMs, intervalMs / 10) after their start. The server runs in this process:
    // alone it stamped every request within the default's 100 ms (19 of 19 runs without a 429), but
    // beside other test files on 2 cores 2 of 6 runs drew 1-4 429s; with 250 ms, busy loops beside
    // the test made round trips of up to 265 ms and a run with 8 429s. The margin covers the test
    // machine, not the network: a whole window (the gate still counts from the responses).
    const api = await startSimulatedApi({
      policy: { kind: 'sliding-window', limit: 40, intervalMs: 1000 },
      latencyMs: { min: 5, max: 20 },
    });
    try {
      const g = createSharedGate({
        redis: REDIS_URL,
        keyPrefix,
        perKey: [{ algorithm: 'sliding-log', limit: 40, intervalMs: 1000 }],
        arrivalMarginMs: 1000,
      });
      gates.push(g);
      const statuses: number[] = [];
      const calls: TimedCall[] = [];
      await Promise.all(
        Array.from({ length: 120 }, (_, i) =>
          g.schedule(
            async () => {
              const startedAt = performance.now();
              const res = await fetch(`${api.url}/v1/work?i=${i}`);
              await res.arrayBuffer();
              calls.push({ startedAt, doneAt: performance.now() });
              statuses.push(res.status);
              return res.status;
            },
            { key: api.url, inspect: (status: number) => ({ status, headers: {} }) },
          ),
        ),
      );
      const stats = api.stats();
      const span = stats.acceptedAt.at(-1)! - stats.acceptedAt[0]!;
      const minimum = stats.physicalMinimumMs({ requests: 120 });
      // Each window counts from the responses: a round trip the machine slowed delays the next
      // window's calls by as much.
      const waitsMs = roundWaitsMs(calls, 40);
      console.log(
        `[shared gate on Redis] sliding window 40/s: 120 accepted over ${span.toFixed(0)} ms (minimum ${minimum.toFixed(0)} ms, ` +
          `responses waited for ${waitsMs.toFixed(0)} ms), ${stats.rejected} × 429`,
      );
      expect(stats.rejected).toBe(0);
      expect(statuses.filter((s) => s === 200)).toHaveLength(120);
      expect(stats.overLimitWindows()).toBe(0);
      expect(span).toBeLessThan(minimum * 1.25 + waitsMs);
    } finally {
      await api.close();
    }
  });

  it('gates that know nothing of the provider learn its sliding window from its headers and share it: not one 429', async () => {
    // No configured limit: the two gates start together; one probes (they claim the probe in Redis),
    // learns 20 per second from the IETF headers and shares it; the other's first call waits for it
    // and reserves through it. Learned limits count calls from their responses, as configured
    // windows do (with the margin of the test above, for the test machine).
    const api = await startSimulatedApi({
      policy: { kind: 'sliding-window', limit: 20, intervalMs: 1000 },
      latencyMs: { min: 5, max: 20 },
      headers: 'ietf-structured',
    });
    try {
      const make = () => {
        const g = createSharedGate({ redis: REDIS_URL, keyPrefix, arrivalMarginMs: 1000 });
        gates.push(g);
        return g;
      };
      const statuses: number[] = [];
      const burst = (g: SharedGate, from: number) =>
        Array.from({ length: 30 }, (_, i) =>
          g.schedule(
            async () => {
              const res = await fetch(`${api.url}/v1/work?i=${from + i}`);
              await res.arrayBuffer();
              statuses.push(res.status);
              return { status: res.status, headers: res.headers };
            },
            { key: `${api.url}#learned`, inspect: (r: Inspection) => r, maxQueueTimeMs: 30_000 },
          ),
        );
      await Promise.all([...burst(make(), 0), ...burst(make(), 30)]);
      const stats = api.stats();
      const span = stats.acceptedAt.at(-1)! - stats.acceptedAt[0]!;
      console.log(
        `[shared gate on Redis] learned sliding window 20/s, 2 gates: 60 accepted over ${span.toFixed(0)} ms, ${stats.rejected} × 429`,
      );
      expect(stats.rejected).toBe(0);
      expect(statuses.filter((s) => s === 200)).toHaveLength(60);
      expect(stats.overLimitWindows()).toBe(0);
      // Three windows' worth: the learned limit holds the calls to the provider's pace, no slower
      // than a window and a half more.
      expect(span).toBeLessThan(3500);
    } finally {
      await api.close();
    }
  });

  it('a margined token bucket still admits a cost of its whole burst, later, and refuses burst + 1', async () => {
    // 100 points/s, bucket 20: 100/s × 50 ms = 5 points kept unused (burst′ 15), T = 10 ms. Alone
    // (the bucket scripts), then beside a window limit (the general script; its calls ask the store
    // again when their time comes).
    const bucket = {
      algorithm: 'token-bucket',
      limit: 100,
      intervalMs: 1000,
      burst: 20,
      unit: 'points',
    } as const;
    const window = { algorithm: 'fixed-window', limit: 1000, intervalMs: 60_000 } as const;
    for (const perKey of [[bucket], [bucket, window]]) {
      const g = createSharedGate({ redis: REDIS_URL, keyPrefix, perKey, arrivalMarginMs: 50 });
      gates.push(g);
      const key = `margin-${perKey.length}`;
      await g.store.time();
      const t0 = performance.now();
      const stamp = () => performance.now() - t0;
      // 15 at once (TAT 150); 20 starts (20 - 15)·T = 50 ms after the bucket is full (200; TAT 400);
      // the next 20 at 450.
      const starts = await Promise.all(
        [15, 20, 20].map((points) => g.schedule(stamp, { key, cost: { points } })),
      );
      expect(Math.min(...starts.slice(1))).toBeGreaterThanOrEqual(190);
      expect(Math.max(...starts)).toBeGreaterThanOrEqual(440);
      expect(Math.max(...starts)).toBeLessThan(1500);
      await expect(g.schedule(stamp, { key, cost: { points: 21 } })).rejects.toMatchObject({
        code: 'ERR_INVALID_COST',
        message: 'Cost 21 points exceeds what the token-bucket limit can ever admit (20)',
      });
    }
  });

  it('a pause from one gate reaches the other through the store', async () => {
    // b's calls hold slots 100 ms apart: the pause, asked 20 ms after them, must reach b before the
    // second slot, 80 ms later (3-9 ms here beside busy loops). At 20/s it had 30 ms, less any
    // lateness of the 20 ms wait: a race a loaded machine could lose, not a pause ignored.
    const make = () => {
      const g = createSharedGate({
        redis: REDIS_URL,
        keyPrefix,
        perKey: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      });
      gates.push(g);
      return g;
    };
    const a = make();
    const b = make();
    const heard: number[] = [];
    b.onPause((e) => heard.push(e.untilMs));
    // Let b's subscription settle.
    await b.schedule(() => {}, { key: 'k' });
    await new Promise((r) => setTimeout(r, 100));
    const waiting = Array.from({ length: 5 }, () => b.schedule(() => performance.now(), { key: 'k' }));
    await new Promise((r) => setTimeout(r, 20));
    const pausedAt = performance.now();
    a.pauseFor(400, 'k');
    const starts = await Promise.all(waiting);
    for (const s of starts.slice(1)) expect(s - pausedAt).toBeGreaterThanOrEqual(395);
    expect(heard.length).toBeGreaterThan(0);
  });

  it('after a wait capped at maxRetryAfterMs one call among the gates asks again, the queues after its answer', async () => {
    // Retry-After: 86400 twice (the first call, then the first after the capped wait), then 200s;
    // answered 20 ms after each request. The reprobe mark reaches the other gate through Redis.
    const [a, b] = await twoGates({ keyPrefix: `${keyPrefix}-reprobe`, adapt: { maxRetryAfterMs: 300 } });
    const sent: number[] = [];
    const t0 = performance.now();
    const fn = () =>
      new Promise<Inspection>((resolve) => {
        const n = sent.push(performance.now() - t0) - 1;
        const answer = n < 2 ? { status: 429, headers: { 'retry-after': '86400' } } : ok();
        setTimeout(() => resolve(answer), 20);
      });
    const outcomes = await Promise.all(
      [a, b, a, b, a, b].map((g) =>
        g.schedule(fn, { key: 'k', inspect: (r: Inspection) => r }).then(
          (r) => r.status,
          (e: { code: string }) => e.code,
        ),
      ),
    );
    expect(outcomes.filter((o) => o === 200)).toHaveLength(4);
    expect(sent).toHaveLength(6);
    // One call per capped wait (300 ms after the answer before it), each alone until its answer.
    expect(sent[1]! - sent[0]!).toBeGreaterThanOrEqual(300);
    expect(sent[2]! - sent[1]!).toBeGreaterThanOrEqual(300);
    for (const t of sent.slice(3)) expect(t - sent[2]!).toBeGreaterThanOrEqual(19);
  });
});
