/**
 * The marks a shared gate writes beside a key's pause (a capped wait's reprobe mark, a Retry-After
 * round's pace mark) and the pauses it hears of keys it does not know: kept within bounds, read
 * when the key comes, never reported as pauses, and written again when the store answers after an
 * outage. Gates on one memory store play processes; manual clock.
 */
import { expect, it } from 'vitest';
import { StoreUnavailableError } from '../../../src/errors.js';
import type { Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate, type SharedGate, type SharedPauseEvent } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = 1_000_000;
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};
const refusedForADay: Inspection = { status: 429, headers: { 'retry-after': '86400' } };
const ok: Inspection = { status: 200, headers: {} };

/**
 * Three calls of `key` through `gate`, each answering 200 after 50 ms: their statuses, and when each
 * was sent (ms after T0).
 */
function threeCalls(gate: SharedGate, clock: ManualClock, key: string) {
  const sent: number[] = [];
  const statuses = Array.from({ length: 3 }, () =>
    gate
      .schedule(
        () =>
          new Promise<Inspection>((resolve) => {
            sent.push(clock.now() - T0);
            clock.setTimeout(() => resolve(ok), 50);
          }),
        { key, inspect: (r: Inspection) => r },
      )
      .then((r) => r.status),
  );
  return { sent, statuses: Promise.all(statuses) };
}

/**
 * One call of `key` through `gate` whose provider answers when the test says (`answer`); `outcome`:
 * the error code it ends with.
 */
function answeredLater(gate: SharedGate, key: string) {
  let answer!: (inspection: Inspection) => void;
  const outcome = gate
    .schedule(() => new Promise<Inspection>((resolve) => (answer = resolve)), {
      key,
      inspect: (r: Inspection) => r,
    })
    .catch((e: { code: string }) => e.code);
  return { answer: (inspection: Inspection) => answer(inspection), outcome };
}

/** A view of `store` that throws StoreUnavailableError while `state.down` (one process's connection). */
function flaky(memory: MemoryStore) {
  const state = { down: false };
  const store = Object.create(memory) as MemoryStore;
  for (const method of ['reserve', 'refund', 'time', 'pauseFor', 'recount', 'claimProbe'] as const) {
    const real = memory[method].bind(memory) as (...args: unknown[]) => unknown;
    (store as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      if (state.down) throw new StoreUnavailableError('down');
      return real(...args);
    };
  }
  return { store, state };
}

/** The largest Map or Set the gate holds (what grows with the keys it hears of). */
function largestCollection(gate: SharedGate): number {
  let largest = 0;
  for (const value of Object.values(gate as unknown as Record<string, unknown>))
    if (value instanceof Map || value instanceof Set) largest = Math.max(largest, value.size);
  return largest;
}

const run = async (clock: ManualClock, ms: number) => {
  for (let t = 0; t < ms; t += 10) {
    await flush();
    clock.advance(10);
  }
  await flush();
};

it('a capped wait answered while the store is down is marked for every process when it answers again', async () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  const { store, state } = flaky(memory);
  // A configured limit: no first-call probe, so only a reprobe holds the other process's queue.
  const options = {
    clock,
    adapt: { maxRetryAfterMs: 5000 },
    perKey: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000, burst: 10 }],
    arrivalMarginMs: 0,
    recoveryProbeMs: 100,
    failure: 'fail-closed',
  } as const;
  const a = createSharedGate({ ...options, store });
  const b = createSharedGate({ ...options, store: memory });
  const { answer, outcome: first } = answeredLater(a, 'api');
  await run(clock, 20);
  // The store goes down while the call runs; its answer (a day, capped at 5 s) comes meanwhile:
  // neither its pause nor its reprobe mark reaches the store.
  state.down = true;
  answer(refusedForADay);
  expect(await first).toBe('ERR_RATE_LIMITED');
  await run(clock, 30);
  state.down = false;
  // Recovered at the next probe (100 ms): the pause still in force is written for every process.
  await run(clock, 200);
  const { sent, statuses: rest } = threeCalls(b, clock, 'api');
  await run(clock, 6000);
  expect(await rest).toEqual([200, 200, 200]);
  // The pause ends at 5,020 (answered at 20): one call asks the provider then, the others after
  // its answer (without the mark, all three went at 5,020).
  expect(sent[0]).toBeGreaterThanOrEqual(5020);
  expect(sent[0]).toBeLessThan(5030);
  expect(sent.slice(1).every((t) => t >= sent[0]! + 50)).toBe(true);
  await a.close();
  await b.close();
});

it('marks and pauses heard of keys the gate does not know are kept within 10,000 (the oldest dropped)', () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  const gate = createSharedGate({ store: memory, clock, limits: [] });
  // Another process's capped waits on 20,000 keys this gate never sees (a mark, then its pause).
  for (let i = 0; i < 20_000; i++) {
    memory.pauseFor(`u${i}`, 60_000, '\u0000reprobe');
    memory.pauseFor(`u${i}`, 60_000);
  }
  expect(largestCollection(gate)).toBeLessThanOrEqual(10_000);
  void gate.close();
});

it('a pause or mark heard of a key the gate does not know is not reported; one of a known key names it', async () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  const gate = createSharedGate({ store: memory, clock, limits: [] });
  const events: SharedPauseEvent[] = [];
  gate.onPause((event) => events.push(event));
  // Another process's capped wait on key x (its reprobe mark, its pace mark, then its pause).
  memory.pauseFor('x', 5000, '\u0000reprobe');
  memory.pauseFor('x', 5000, '\u0000pace');
  memory.pauseFor('x', 5000);
  expect(events).toEqual([]);
  // Key api is known here (a call ran); its pause, heard with nothing waiting, names it.
  await gate.schedule(() => 'ok', { key: 'api' });
  memory.pauseFor('api', 5000, '\u0000reprobe');
  memory.pauseFor('api', 5000);
  expect(events).toEqual([{ key: 'api', untilMs: T0 + 5000, reason: 'shared' }]);
  await gate.close();
});

it('keys with a reprobe pending are swept past 10,000 keys, and one that comes back still probes first', async () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  // A configured limit: no first-call probe, so only a reprobe holds a key's calls.
  const gate = createSharedGate({
    store: memory,
    clock,
    adapt: { maxRetryAfterMs: 5000 },
    perKey: [{ algorithm: 'token-bucket', limit: 1000, intervalMs: 1000, burst: 1000 }],
    arrivalMarginMs: 0,
  });
  // Another process's capped waits on 10,000 keys, each of which then runs a call here (no
  // inspection: no reprobe sent, so each key's stays pending).
  for (let i = 0; i < 10_000; i++) memory.pauseFor(`k${i}`, 1000, '\u0000reprobe');
  const calls: Promise<unknown>[] = [];
  for (let i = 0; i < 10_000; i++) calls.push(gate.schedule(() => 'ok', { key: `k${i}` }));
  await Promise.all(calls);
  // New keys past 10,000 sweep the records with nothing waiting.
  for (let i = 0; i < 10; i++) await gate.schedule(() => 'ok', { key: `new${i}` });
  expect(largestCollection(gate)).toBeLessThanOrEqual(10_001);
  // k0 comes back after its capped wait: one call asks the provider, the others after its answer.
  clock.advance(2000);
  const { sent, statuses: back } = threeCalls(gate, clock, 'k0');
  await run(clock, 200);
  expect(await back).toEqual([200, 200, 200]);
  expect(sent).toHaveLength(3);
  expect(sent.slice(1).every((t) => t >= sent[0]! + 50)).toBe(true);
  await gate.close();
});

it('a Retry-After round ended while the store is down is marked for every process when it answers again', async () => {
  const clock = new ManualClock(T0);
  const memory = new MemoryStore({ clock });
  const { store, state } = flaky(memory);
  const a = createSharedGate({ store, clock, recoveryProbeMs: 100, failure: 'fail-closed' });
  const heard: string[] = [];
  memory.onPause((event) => heard.push(event.pauseId));
  const { answer, outcome: first } = answeredLater(a, 'api');
  await run(clock, 20);
  // The store goes down while the call runs; its answer (a Retry-After alone) comes meanwhile.
  state.down = true;
  answer({ status: 429, headers: { 'retry-after': '2' } });
  await run(clock, 30);
  expect(heard).toEqual([]);
  state.down = false;
  await run(clock, 200);
  // Recovered, inside the pause: the pace mark, then the pause, for every process.
  expect(heard).toEqual([memory.pauseId('api', '\u0000pace'), memory.pauseId('api')]);
  expect(await first).toBe('ERR_STORE_UNAVAILABLE');
  await a.close();
});
