/**
 * The calls of one key waiting for its pace (after a Retry-After alone, see `RoundPace`) get its
 * slots in the gate's order, priority then schedule order, as the in-memory gate's queue; a call a
 * pause holds keeps its place. One shared gate on a memory store; manual clock.
 */
import { expect, it } from 'vitest';
import type { Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = 1_000_000;
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/**
 * A provider admitting at most 10 arrivals per aligned second, answering `latencyMs` after each request;
 * a refusal says only when the second ends (Retry-After, whole seconds). One gate: `schedule(name)`
 * records the name of each call the provider accepted, in order.
 */
function setup(latencyMs = 20) {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const gate = createSharedGate({ store, clock, maxQueueTimeMs: 120_000 });
  const sent: { name: string; at: number; status: number }[] = [];
  const schedule = (name: string, priority = 0) =>
    gate
      .schedule(
        () =>
          new Promise<Inspection>((resolve) => {
            const at = clock.now() - T0;
            const second = Math.floor(at / 1000);
            const inSecond = sent.filter(
              (s) => s.status === 200 && Math.floor(s.at / 1000) === second,
            ).length;
            const status = inSecond < 10 ? 200 : 429;
            sent.push({ name, at, status });
            const headers: Record<string, string> =
              status === 200 ? {} : { 'retry-after': String(Math.ceil(((second + 1) * 1000 - at) / 1000)) };
            clock.setTimeout(() => resolve({ status, headers }), latencyMs);
          }),
        { key: 'api', priority, inspect: (r: Inspection) => r },
      )
      .then((r) => r.status);
  const run = async (ms: number) => {
    for (let t = 0; t < ms; t += 10) {
      await flush();
      clock.advance(10);
    }
    await flush();
  };
  const accepted = () => sent.filter((s) => s.status === 200).map((s) => s.name);
  return { clock, store, gate, sent, schedule, run, accepted };
}

it('a call of a higher priority takes the next slot of its key’s pace, before the calls booked earlier', async () => {
  const { gate, schedule, run, accepted } = setup();
  // A first burst: 10 accepted, 20 refused until the second ends, then paced.
  const low = Array.from({ length: 30 }, (_, i) => schedule(`low${i}`));
  await run(1500);
  const before = accepted().length;
  const high = schedule('high', 5);
  await run(20_000);
  expect(await Promise.all([...low, high])).toEqual(Array(31).fill(200));
  // The next call accepted after it was scheduled (or the one after, if a slot was due then).
  expect(accepted().indexOf('high')).toBeLessThanOrEqual(before + 1);
  await gate.close();
});

it('calls a pause holds at their slots of the pace keep their places before the calls booked later', async () => {
  const { gate, schedule, run, accepted } = setup();
  const low = Array.from({ length: 30 }, (_, i) => schedule(`c${i}`));
  await run(1500);
  gate.pauseFor(400, 'api');
  await run(20_000);
  expect(await Promise.all(low)).toEqual(Array(30).fill(200));
  // Accepted in schedule order (those refused in the first burst came back in theirs).
  const names = accepted();
  const order = names.map((n) => Number(n.slice(1)));
  expect(order.slice(10)).toEqual([...order.slice(10)].sort((a, b) => a - b));
  await gate.close();
});

it('calls a reprobe holds at their slots of the pace keep their places before the calls booked later', async () => {
  // Answered in 300 ms: the calls whose slots come while the reprobe is out wait for its answer.
  const { store, gate, schedule, run, accepted } = setup(300);
  const calls = Array.from({ length: 30 }, (_, i) => schedule(`c${i}`));
  await run(2000);
  // Another process's wait capped until 2,100 (its reprobe mark): the first call due from then on
  // probes, and the calls whose slots come before its answer wait for it.
  store.pauseFor('api', 100, '\u0000reprobe');
  await run(20_000);
  expect(await Promise.all(calls)).toEqual(Array(30).fill(200));
  const order = accepted().map((n) => Number(n.slice(1)));
  expect(order.slice(10)).toEqual([...order.slice(10)].sort((a, b) => a - b));
  await gate.close();
});
