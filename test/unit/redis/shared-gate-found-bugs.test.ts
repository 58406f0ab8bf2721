/**
 * Shared-gate bugs found by the session-15 fuzzing review, each pinned by the scenario that showed
 * it (both failed on the code before their fix). Memory store, manual clock.
 */
import { expect, it } from 'vitest';
import { StoreUnavailableError } from '../../../src/errors.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = 1_000_000;
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** Move the manual clock `ms` forward in 5 ms steps, letting promise jobs run between them. */
async function steps(clock: ManualClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 5) {
    clock.advance(5);
    await flush();
  }
}

/**
 * A memory store whose reservations are decided when asked and answered `ms` later (a round trip,
 * a stalled event loop), and a shared gate on it with the given bucket and lateToleranceMs 10.
 */
function gateAnsweredLater(clock: ManualClock, ms: number, limit: number) {
  const memory = new MemoryStore({ clock });
  const store = Object.create(memory) as MemoryStore;
  (store as unknown as Record<string, unknown>)['reserve'] = (...args: unknown[]) => {
    const decision = (memory.reserve as (...a: unknown[]) => unknown).apply(memory, args);
    return new Promise((resolve) => clock.setTimeout(() => resolve(decision), ms));
  };
  return createSharedGate({
    store,
    clock,
    arrivalMarginMs: 0,
    lateToleranceMs: 10,
    limits: [{ algorithm: 'token-bucket', limit, intervalMs: 1000, burst: limit }],
  });
}

it('a call refused while its turn passes, and aborted by the call its turn starts, settles once and close() resolves', async () => {
  const clock = new ManualClock(T0);
  const gate = createSharedGate({
    store: new MemoryStore({ clock }),
    clock,
    perKey: [{ algorithm: 'concurrency', limit: 1 }],
    concurrencyRetryMs: 20,
  });
  let releaseA!: () => void;
  // A priority: the gate's calls of key k take turns.
  const a = gate.schedule(() => new Promise<void>((resolve) => (releaseA = resolve)), {
    key: 'k',
    priority: 1,
  });
  await flush();
  const abortB = new AbortController();
  // b waits for the permit (asks again at 20); c waits behind it for a turn, and aborts b when it runs.
  const b = gate.schedule(() => 'b', { key: 'k', maxQueueTimeMs: 30, signal: abortB.signal });
  const c = gate.schedule(() => abortB.abort(), { key: 'k' });
  const bSettled = b.catch((error: unknown) => error);
  await flush();
  releaseA();
  await a;
  // b's timer (due at 20) fires at 35, past its deadline: refused, its turn passes to c, which
  // starts at once (synchronous store) and aborts b while b is being refused.
  clock.stallUntil(T0 + 35);
  await flush();
  await c;
  expect(await bSettled).toBeInstanceOf(Error);
  expect(gate.stats().queued).toBe(0);
  let closed = false;
  void gate.close().then(() => {
    closed = true;
  });
  await flush();
  expect(closed).toBe(true);
});

it('a call refused while the store is down gets its concurrency permit back in the store when it answers again', async () => {
  const clock = new ManualClock(T0);
  const { store, state } = flakyStore(clock);
  const gate = createSharedGate({
    store,
    clock,
    recoveryProbeMs: 5,
    limits: [
      { algorithm: 'concurrency', limit: 1 },
      { algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 },
    ],
  });
  await gate.schedule(() => 'x');
  // y is reserved for 1000 and holds the one permit meanwhile.
  const abortY = new AbortController();
  const y = gate.schedule(() => 'y', { signal: abortY.signal }).catch((error: unknown) => error);
  await flush();
  clock.advance(10);
  state.down = true;
  // Its refund fails: the store is down.
  abortY.abort();
  await y;
  clock.advance(10);
  state.down = false;
  // The recovery probe finds the store up again.
  clock.advance(10);
  await flush();
  clock.advanceTo(T0 + 2000);
  let ran = false;
  const z = gate.schedule(
    () => {
      ran = true;
    },
    { maxQueueTimeMs: 1000 },
  );
  for (let i = 0; i < 60 && !ran; i++) {
    clock.advance(20);
    await flush();
  }
  await z;
  expect(ran).toBe(true);
  await gate.close();
});

// Found by review and diagnosed (session 16): a burst whose answers came late (a cold connection:
// the store decided at the end of a long round trip, so the clock estimate put the starts half a
// round trip in the past) gave its slots back in answer order. A bucket gives back only its latest
// take, so 9 of 10 refunds gave nothing, and 1 call of a full burst of 10 started; 11 were refused.
it('calls of one burst that reached their slots late give them back latest first, and all start', async () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  const store = Object.create(memory) as MemoryStore;
  // Every reservation is decided 30 ms after it was asked (at the end of the round trip).
  (store as unknown as Record<string, unknown>)['reserve'] = (...args: unknown[]) =>
    new Promise((resolve) =>
      clock.setTimeout(
        () => resolve((memory.reserve as (...a: unknown[]) => unknown).apply(memory, args)),
        30,
      ),
    );
  const gate = createSharedGate({
    store,
    clock,
    arrivalMarginMs: 0,
    maxQueueTimeMs: 1_000,
    limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 2000, burst: 10 }],
  });
  const starts: number[] = [];
  const calls = Array.from({ length: 10 }, () =>
    gate.schedule(() => {
      starts.push(clock.now() - T0);
    }),
  );
  for (let i = 0; i < 40 && starts.length < 10; i++) {
    clock.advance(10);
    await flush();
  }
  await Promise.all(calls);
  expect(gate.stats().lateReserves).toBeGreaterThan(0);
  // The whole burst starts within a few round trips (a lost token would cost 200 ms each).
  expect(starts).toHaveLength(10);
  expect(Math.max(...starts)).toBeLessThan(150);
  await gate.close();
});

// Found by diagnosis (session 16): a window call whose reservation was answered late started late
// (window calls do not reserve again), but its recount was capped from the reserved start, so its
// entry sat before its real start; after a stall the next window's calls were let in less than a
// window after its arrival at the provider (68 against 57 across 4 processes).
it('a window call started after its reserved start is recounted from its real start', async () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  const slow = Object.create(memory) as MemoryStore;
  // Decided at once, answered 200 ms later (a stalled event loop, a slow network).
  (slow as unknown as Record<string, unknown>)['reserve'] = (...args: unknown[]) => {
    const decision = (memory.reserve as (...a: unknown[]) => unknown).apply(memory, args);
    return new Promise((resolve) => clock.setTimeout(() => resolve(decision), 200));
  };
  const limits = [{ algorithm: 'sliding-log' as const, limit: 1, intervalMs: 1000 }];
  const a = createSharedGate({ store: slow, clock, limits, arrivalMarginMs: 50 });
  const b = createSharedGate({ store: memory, clock, limits, arrivalMarginMs: 50 });
  let finishA!: () => void;
  let aStartedAt = 0;
  const first = a.schedule(
    () =>
      new Promise<void>((resolve) => {
        aStartedAt = clock.now() - T0;
        finishA = resolve;
      }),
  );
  for (let i = 0; i < 25; i++) {
    clock.advance(10);
    await flush();
  }
  expect(aStartedAt).toBe(200);
  // Answered 50 ms after its start: counted there (about 250 on the store's clock).
  finishA();
  await first;
  await flush();
  let bStartedAt = 0;
  const second = b.schedule(() => {
    bStartedAt = clock.now() - T0;
  });
  for (let i = 0; i < 150 && bStartedAt === 0; i++) {
    clock.advance(10);
    await flush();
  }
  await second;
  // From the reserved start (0) the entry would sit at 100 and b start at 1100, 100 ms before a
  // window has passed since a started. From a's start as the gate estimates it on the store's clock
  // (half the 200 ms round trip after its slot: 100), capped at 100 ms after: 200; b waits until 1200.
  expect(bStartedAt).toBeGreaterThanOrEqual(1200);
  await a.close();
  await b.close();
});

/**
 * A gate sharing a concurrency limit of 2 (local share: 1), and its call `a` running in the local
 * fallback while the store is down (still down on return).
 */
async function callRunningInFallback() {
  const clock = new ManualClock(T0);
  const { memory, store, state } = flakyStore(clock);
  const limits = [{ algorithm: 'concurrency' as const, limit: 2 }];
  const gate = createSharedGate({
    store,
    clock,
    recoveryProbeMs: 5,
    failure: 'local',
    localShare: 0.5,
    limits,
  });
  state.down = true;
  let finishA!: () => void;
  const a = gate.schedule(() => new Promise<void>((resolve) => (finishA = resolve)));
  await steps(clock, 10);
  return { clock, memory, state, gate, limits, a, finishA: () => finishA() };
}

// Found by review (session 16): a call running in the local fallback across two recoveries took its
// concurrency permits in the store at each, and gave back only the last: one permit stayed held
// for every process until its lease ran out.
it('a call running in the fallback through two recoveries holds its permits in the store once', async () => {
  const { clock, memory, state, gate, limits, a, finishA } = await callRunningInFallback();
  const step = (ms: number) => steps(clock, ms);
  state.down = false;
  await step(20); // recovery 1: a takes its permit in the store
  state.down = true;
  // Meets the store down: a second outage (it waits in the fallback, whose one permit a holds).
  let bDone = false;
  const b = gate
    .schedule(() => {})
    .finally(() => {
      bDone = true;
    });
  await step(10);
  state.down = false;
  // Recovery 2: b goes back to the store and runs there (a holds one permit of two, not both).
  await step(200);
  expect(bDone).toBe(true);
  await b;
  finishA();
  await a;
  await step(10);
  // Nothing runs any more: another process gets both permits.
  const other = createSharedGate({ store: memory, clock, limits, maxQueueTimeMs: 0 });
  const held: (() => void)[] = [];
  const both = [1, 2].map(() => other.schedule(() => new Promise<void>((resolve) => held.push(resolve))));
  await flush();
  expect(held).toHaveLength(2);
  for (const release of held) release();
  await Promise.all(both);
  await gate.close();
  await other.close();
});

/** A memory store that throws StoreUnavailableError while `state.down` (or once, `state.blips`). */
function flakyStore(clock: ManualClock) {
  const memory = new MemoryStore({ clock });
  const state = { down: false, blips: 0 };
  const store = Object.create(memory) as MemoryStore;
  for (const method of ['reserve', 'refund', 'time', 'pauseFor', 'recount'] as const) {
    const real = memory[method].bind(memory) as (...args: unknown[]) => unknown;
    (store as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      if (state.down) throw new StoreUnavailableError('down');
      if (method === 'reserve' && state.blips > 0) {
        state.blips--;
        throw new StoreUnavailableError('blip');
      }
      return real(...args);
    };
  }
  return { memory, store, state };
}

// Found by review (session 16): close() called when the store came back (an onStoreUp listener)
// caught the calls being taken back from the fallback, which then failed with an AbortedError
// nobody asked for; close() runs queued calls by default.
it('closing as the store comes back runs the calls taken back from the fallback', async () => {
  const clock = new ManualClock(T0);
  const { store, state } = flakyStore(clock);
  const gate = createSharedGate({
    store,
    clock,
    recoveryProbeMs: 5,
    failure: 'local',
    localShare: 0.5,
    limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
  });
  gate.onStoreUp(() => void gate.close());
  state.down = true;
  const outcomes = Array.from({ length: 5 }, (_, i) =>
    gate.schedule(() => `ok ${i}`).catch((error: Error) => error.constructor.name),
  );
  clock.advance(10);
  await flush();
  state.down = false;
  for (let i = 0; i < 200; i++) {
    clock.advance(10);
    await flush();
  }
  expect(await Promise.all(outcomes)).toEqual(['ok 0', 'ok 1', 'ok 2', 'ok 3', 'ok 4']);
});

// Found by review (session 16): a store that failed synchronously when a fallback call asked for
// its permits at recovery left it marked as asked: it never asked again, and another process got
// the permit it still used (3 running against 2).
it('a fallback call whose permit request failed asks again at the next recovery', async () => {
  const { clock, memory, state, gate, limits, a, finishA } = await callRunningInFallback();
  const step = (ms: number) => steps(clock, ms);
  state.down = false;
  state.blips = 1; // recovery 1: a's permit request fails; the gate goes down again
  await step(40); // recovery 2: asked again
  const other = createSharedGate({ store: memory, clock, limits, maxQueueTimeMs: 0 });
  let started = 0;
  const held: (() => void)[] = [];
  const calls = [1, 2].map(() =>
    other
      .schedule(() => {
        started++;
        return new Promise<void>((resolve) => held.push(resolve));
      })
      .catch(() => {}),
  );
  await flush();
  // a still runs and holds one permit: one of the two starts.
  expect(started).toBe(1);
  for (const release of held) release();
  finishA();
  await Promise.all([a, ...calls]);
  await gate.close();
  await other.close();
});

// Diagnosed (session 16): a pause held only the calls whose slots fell inside it. Their slots could
// not be given back (a bucket gives back only its latest take, and the calls booked after the
// pause held the later ones), so the bucket came out of the pause booked past it, without its
// burst: after each 429 the gate sent paced at the limit into the next 429 (34 ok/s against 61).
// Left in session 16 for several processes, fixed in 17: their bookings interleave in the bucket,
// each process gives back its own latest first, and the store refused every give-back that was
// not the bucket's latest (another process's take stood above it), so most booked slots stayed
// taken (4 gates: 38-40 ok/s against 46-52 now, at a sliding window of 60 a second; scratch
// measurement). An older take now waits in the store for the takes above it and goes with them.
it.each([1, 2])(
  'a pause gives back every booked slot of its partition (%i gates on one store, interleaved): the bucket has its burst when it ends',
  async (count) => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    const options = {
      store,
      clock,
      arrivalMarginMs: 0,
      limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000, burst: 10 }],
    } as const;
    const gates = Array.from({ length: count }, () => createSharedGate(options));
    const starts: number[] = [];
    const calls = Array.from({ length: 40 }, (_, i) =>
      gates[i % count]!.schedule(() => void starts.push(clock.now() - T0)),
    );
    await steps(clock, 50);
    // The burst of 10 started; 30 more are booked 100 ms apart, up to 3 s ahead.
    expect(starts).toHaveLength(10);
    gates[0]!.pauseFor(1_000);
    await steps(clock, 1_100);
    // Every booked slot came back: at the pause's end (1050), a burst of 10 again.
    expect(starts.filter((at) => at >= 1_050 && at < 1_100)).toHaveLength(10);
    await steps(clock, 3_000);
    await Promise.all(calls);
    // 40 calls at 10 a second with a burst of 10, none lost or run twice.
    expect(starts).toHaveLength(40);
    for (const gate of gates) await gate.close();
  },
);

// Diagnosed by a helper (session 17): after a pause a shared gate reserved its waiting calls in one
// batch; their answers were handled one after another, each starting its call, whose function ran
// at once (fetch: 0.3-0.5 ms). Read after them, the clock put the later calls of the burst past
// lateToleranceMs: from about the 20th each gave its slot back and was booked behind the calls
// reserved ahead, and the gate used no burst after a pause (39-48 ok/s against 56 in memory).
it('the answers of one reply are late or not by when they came in, not by the calls started before them', async () => {
  const clock = new ManualClock(T0);
  // Decided when asked, answered 5 ms later, all in one reply.
  const gate = gateAnsweredLater(clock, 5, 60);
  const starts: number[] = [];
  const calls = Array.from({ length: 40 }, () =>
    gate.schedule(() => {
      starts.push(clock.now() - T0);
      // The function's own work before it returns its promise.
      clock.advance(0.5);
    }),
  );
  clock.advance(5);
  await flush();
  await Promise.all(calls);
  // All 40 started from the one reply, 0.5 ms apart: the last 19.5 ms after its answer came in.
  expect(starts).toHaveLength(40);
  expect(Math.max(...starts)).toBeCloseTo(24.5, 6);
  expect(gate.stats().lateReserves).toBe(0);
  await gate.close();
});

// Found by a review of the fix above: unbounded, the shared reading forgave any time the functions
// took (500 ms each: the 10th call started 4.5 s after its slot, never judged late). It is shared
// for ANSWERS_SPAN_MS (50 ms) at most.
it('functions that take long still make the answers after them late', async () => {
  const clock = new ManualClock(T0);
  const gate = gateAnsweredLater(clock, 5, 10);
  const calls = Array.from({ length: 10 }, () => gate.schedule(() => void clock.advance(500)));
  clock.advance(5);
  for (let i = 0; i < 100 && gate.stats().lateReserves === 0; i++) await flush();
  expect(gate.stats().lateReserves).toBeGreaterThan(0);
  for (let i = 0; i < 200; i++) {
    clock.advance(50);
    await flush();
  }
  await Promise.all(calls);
  await gate.close();
});
