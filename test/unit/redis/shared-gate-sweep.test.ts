/**
 * A shared gate keeps at most about 10,000 keys' records: past that, a new key drops the records of
 * keys with nothing waiting (their state lives in the store). A key whose probe is still out keeps
 * its record: dropped, its next call would probe a second time before the first one's answer.
 * Memory store, manual clock.
 */
import { expect, it } from 'vitest';
import type { Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};
const ok: Inspection = { status: 200, headers: {} };

it('a key whose probe is out keeps its record when 10,000 other keys come: its next call waits for the answer', async () => {
  const clock = new ManualClock(1_000_000);
  // No limits: every key knows nothing of its provider, so its first inspected call is a probe.
  const gate = createSharedGate({ store: new MemoryStore({ clock }), clock, limits: [] });
  let answer!: (inspection: Inspection) => void;
  let sentK = 0;
  const probe = gate.schedule(
    () => {
      sentK++;
      return new Promise<Inspection>((resolve) => {
        answer = resolve;
      });
    },
    { key: 'k', inspect: (r: Inspection) => r },
  );
  await flush();
  expect(sentK).toBe(1);
  // 10,000 other keys, each answered at once: their records have nothing waiting.
  const others: Promise<unknown>[] = [];
  for (let i = 0; i < 10_000; i++)
    others.push(gate.schedule(() => ok, { key: `o${i}`, inspect: (r: Inspection) => r }));
  await Promise.all(others);
  // A new key past 10,000 sweeps the idle records.
  await gate.schedule(() => ok, { key: 'new', inspect: (r: Inspection) => r });
  const next = gate.schedule(
    () => {
      sentK++;
      return ok;
    },
    { key: 'k', inspect: (r: Inspection) => r, maxQueueTimeMs: 10_000 },
  );
  await flush();
  clock.advance(100);
  await flush();
  // Still waiting for the probe's answer (a dropped record would have sent it as a second probe).
  expect(sentK).toBe(1);
  answer(ok);
  await probe;
  for (let t = 0; t < 30 && sentK < 2; t++) {
    clock.advance(100);
    await flush();
  }
  await next;
  expect(sentK).toBe(2);
  await gate.close();
});
