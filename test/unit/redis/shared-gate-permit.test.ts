/**
 * A shared gate gives a call's concurrency permit back once its response is read, as the in-memory
 * gate does: a 429 read asynchronously (the adapters read a JSON error body first) pauses the key
 * before the call waiting for the permit may start, so that call goes after the retry, not into the
 * provider's pause. Memory store, manual clock.
 */
import { expect, it } from 'vitest';
import type { Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = Date.parse('2026-11-30T12:00:00Z');
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

interface Reply {
  status: number;
  headers: Record<string, string>;
}

for (const [level, name] of [
  ['perKey', 'per-key'],
  ['limits', 'gate-wide'],
] as const) {
  it(`a 429 read later under a ${name} concurrency limit holds the call waiting for the permit behind the retry`, async () => {
    const clock = new ManualClock(T0);
    const gate = createSharedGate({
      store: new MemoryStore({ clock }),
      clock,
      concurrencyRetryMs: 10,
      [level]: [{ algorithm: 'concurrency', limit: 1 }],
    });
    const sent: [string, number][] = [];
    const call = (label: string) => ({
      fn: async (): Promise<Reply> => {
        sent.push([label, clock.now() - T0]);
        return sent.length === 1
          ? { status: 429, headers: { 'retry-after': '1' } }
          : { status: 200, headers: {} };
      },
      // The error body takes 200 ms to read before the inspection answers.
      inspect: (r: Reply): Inspection | Promise<Inspection> => {
        const inspection: Inspection = { status: r.status, headers: r.headers, method: 'GET' };
        return r.status < 400
          ? inspection
          : new Promise((resolve) => clock.setTimeout(() => resolve(inspection), 200));
      },
    });
    const a = call('a');
    const b = call('b');
    const done = [
      gate.schedule(a.fn, { key: 'api', inspect: a.inspect }),
      gate.schedule(b.fn, { key: 'api', inspect: b.inspect }),
    ];
    for (let s = 0; s < 100; s++) {
      await flush();
      clock.advance(50);
    }
    expect((await Promise.all(done)).map((r) => r.status)).toEqual([200, 200]);
    // The retried call first (after the 1 s pause set once the 429 was read), then the other.
    expect(sent.map(([label]) => label)).toEqual(['a', 'a', 'b']);
    expect(sent[1]![1]).toBeGreaterThanOrEqual(1200);
    await gate.close();
  });
}
