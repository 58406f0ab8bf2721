/**
 * close() and a call in flight that the provider answers 429: `queued: 'run'` (the default) lets the
 * queued calls finish, and a throttled call going back to its queue is one of them; `'reject'`
 * rejects the queued calls, and the throttled one with them. Both gates, on a manual clock.
 */
import { describe, expect, it } from 'vitest';
import { GateClosedError, RateLimitedError } from '../../../src/errors.js';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate } from '../../../src/redis/shared-gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = Date.parse('2026-11-30T12:00:00Z');

interface Reply {
  status: number;
  headers: Record<string, string>;
}
type AnyGate = {
  schedule<T>(fn: () => Promise<T>, options: object): Promise<T>;
  close(options?: { queued?: 'run' | 'reject' }): Promise<void>;
};

const gates: [string, (clock: ManualClock) => AnyGate][] = [
  ['in-memory gate', (clock) => createGate({ clock }) as unknown as AnyGate],
  [
    'shared gate',
    (clock) => createSharedGate({ store: new MemoryStore({ clock }), clock }) as unknown as AnyGate,
  ],
];

async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Runs the clock to each timer until `done` settles (at most 20 timers). */
async function runUntil(clock: ManualClock, done: Promise<unknown>): Promise<void> {
  let settled = false;
  done.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let i = 0; i < 20 && !settled; i++) {
    await flush();
    const at = clock.nextTimerAt();
    if (!settled && at !== undefined) clock.advanceTo(at);
  }
  await flush();
}

/** A call answered 429 with Retry-After: 2 the first time, 200 after; closed while in flight. */
async function closeDuringThrottledCall(make: (clock: ManualClock) => AnyGate, queued: 'run' | 'reject') {
  const clock = new ManualClock(T0);
  const gate = make(clock);
  const sentAt: number[] = [];
  let answer!: (reply: Reply) => void;
  const fn = () => {
    sentAt.push(clock.now() - T0);
    if (sentAt.length > 1) return Promise.resolve({ status: 200, headers: {} });
    return new Promise<Reply>((resolve) => (answer = resolve));
  };
  const inspect = (r: Reply): Inspection => ({ status: r.status, headers: r.headers, method: 'GET' });
  const call = gate.schedule(fn, { inspect });
  const outcome = call.then(
    (reply) => ({ ok: true as const, reply }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  await flush();
  expect(sentAt).toEqual([0]);
  const closed = gate.close({ queued });
  answer({ status: 429, headers: { 'retry-after': '2' } });
  await runUntil(clock, Promise.all([outcome, closed]));
  await closed;
  return { sentAt, result: await outcome };
}

describe('close() while a throttled call is in flight', () => {
  for (const [name, make] of gates) {
    it(`${name}: close() lets the 429'd call retry after the pause, as it lets queued calls run`, async () => {
      const { sentAt, result } = await closeDuringThrottledCall(make, 'run');
      expect(sentAt).toEqual([0, 2000]);
      expect(result.ok && result.reply.status).toBe(200);
    });

    it(`${name}: close({ queued: 'reject' }) rejects the 429'd call instead of queueing it again`, async () => {
      const { sentAt, result } = await closeDuringThrottledCall(make, 'reject');
      expect(sentAt).toEqual([0]);
      expect(result.ok).toBe(false);
      const error = (result as { error: unknown }).error;
      expect(error instanceof RateLimitedError || error instanceof GateClosedError).toBe(true);
    });
  }
});
