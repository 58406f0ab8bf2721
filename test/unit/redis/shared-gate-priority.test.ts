/**
 * Priority in the shared gate: once a gate has seen a priority other than 0 it reserves no call
 * ahead; calls wait in the gate (for their key's turn, in the gate-wide line, for a pause to end,
 * for a probe's answer) and ask the store when due, higher priority first, then in schedule order.
 */
import { describe, expect, it } from 'vitest';
import { QueueTimeoutError } from '../../../src/errors.js';
import { MemoryStore } from '../../../src/redis/memory-store.js';
import { createSharedGate, type SharedGate } from '../../../src/redis/shared-gate.js';
import type { SharedGateOptions } from '../../../src/redis/shared-gate-options.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const T0 = Date.parse('2026-12-01T12:00:00Z');
const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

function setup(options: Partial<SharedGateOptions>) {
  const clock = new ManualClock(T0);
  const store = new MemoryStore({ clock });
  const gate = createSharedGate({ store, clock, maxQueueTimeMs: 60_000, ...options });
  const starts: string[] = [];
  const times: Record<string, number> = {};
  const call = (name: string, priority: number, key?: string, maxQueueTimeMs?: number) =>
    gate.schedule(
      () => {
        starts.push(name);
        times[name] = clock.now() - T0;
      },
      {
        priority,
        ...(key === undefined ? {} : { key }),
        ...(maxQueueTimeMs === undefined ? {} : { maxQueueTimeMs }),
      },
    );
  /** Run the manual clock `ms` in `step` ms steps, letting every answer and start happen. */
  const run = async (ms: number, step: number) => {
    for (let t = 0; t < ms; t += step) {
      clock.advance(step);
      await flush();
    }
  };
  return { clock, gate, starts, times, call, run };
}

const close = (gate: SharedGate) => gate.close();

describe('shared gate priority', () => {
  it('calls waiting for their key turn: a higher priority goes before the calls queued earlier', async () => {
    const { gate, starts, times, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }],
    });
    const calls = [call('low1', 0, 'k'), call('low2', 0, 'k'), call('low3', 0, 'k'), call('low4', 0, 'k')];
    await flush();
    calls.push(call('high', 5, 'k'), call('higher', 9, 'k'));
    await run(6_000, 100);
    await Promise.all(calls);
    // low1 started at once; low2 waited for the slot the store named (1 s), and the calls of a
    // higher priority that came meanwhile take it and the next before it.
    expect(starts).toEqual(['low1', 'higher', 'high', 'low2', 'low3', 'low4']);
    expect(Object.values(times)).toEqual([0, 1000, 2000, 3000, 4000, 5000]);
    await close(gate);
  });

  it('window calls in the gate-wide line: a higher priority leaves the line first', async () => {
    const { gate, starts, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      perKey: [{ algorithm: 'sliding-log', limit: 5, intervalMs: 1000 }],
      // Window calls are counted from their responses (the default on a real clock).
      arrivalMarginMs: 50,
    });
    const calls = Array.from({ length: 20 }, (_, i) => call(`low${i}`, 0, `k${i}`));
    await flush();
    calls.push(call('high', 1, 'urgent'));
    await run(3_000, 10);
    await Promise.all(calls);
    expect(starts).toHaveLength(21);
    // The line holds the low calls from the second on; the high one joins it at its front.
    const high = starts.indexOf('high');
    expect(high).toBeGreaterThan(0);
    expect(high).toBeLessThanOrEqual(3);
    // The low ones keep their schedule order.
    expect(starts.filter((s) => s !== 'high')).toEqual(Array.from({ length: 20 }, (_, i) => `low${i}`));
    await close(gate);
  });

  it('calls waiting for a pause to end: a higher priority asks first and takes the first slot', async () => {
    const { gate, starts, times, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
    });
    gate.pauseFor(1_000);
    await flush();
    const calls = [call('low1', 0), call('low2', 0), call('high', 3), call('low3', 0)];
    await run(2_000, 50);
    await Promise.all(calls);
    expect(starts).toEqual(['high', 'low1', 'low2', 'low3']);
    expect(times['high']).toBe(1_000);
    await close(gate);
  });

  it('equal priorities keep schedule order, and a negative priority goes last', async () => {
    const { gate, starts, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }],
      perKey: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }],
    });
    const calls = [
      call('a', 0, 'k'),
      call('b', 0, 'k'),
      call('last', -1, 'k'),
      call('c', 0, 'k'),
      call('d', 0, 'k'),
    ];
    await run(6_000, 100);
    await Promise.all(calls);
    expect(starts).toEqual(['a', 'b', 'c', 'd', 'last']);
    await close(gate);
  });

  it('calls reserved before the gate saw a priority give their slots back: a higher priority goes first, the others one slot later', async () => {
    const { gate, starts, times, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
    });
    const calls = Array.from({ length: 5 }, (_, i) => call(`low${i}`, 0));
    await flush();
    calls.push(call('high', 2));
    await run(1_000, 10);
    await Promise.all(calls);
    // low0 started at once; the others held slots 100..400, gave them back when high came, and
    // asked again behind it.
    expect(starts).toEqual(['low0', 'high', 'low1', 'low2', 'low3', 'low4']);
    expect(starts.map((name) => times[name])).toEqual([0, 100, 200, 300, 400, 500]);
    await close(gate);
  });

  it('a call that the calls of a higher priority push past its deadline is refused, and the ones after it move up', async () => {
    const { gate, times, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
    });
    const low = [
      call('low0', 0),
      call('low1', 0),
      call('low2', 0),
      call('tight', 0, undefined, 300),
      call('low4', 0),
    ];
    await flush();
    const high = call('high', 1);
    const refused = expect(low[3]).rejects.toBeInstanceOf(QueueTimeoutError);
    await run(1_000, 10);
    await refused;
    await Promise.all([low[0], low[1], low[2], low[4], high]);
    expect(times).toEqual({ low0: 0, high: 100, low1: 200, low2: 300, low4: 400 });
    await close(gate);
  });

  it('calls of other keys: a higher priority goes first across keys too (the gate-wide line)', async () => {
    const { gate, starts, call, run } = setup({
      limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }],
      perKey: [{ algorithm: 'token-bucket', limit: 100, intervalMs: 1000, burst: 100 }],
    });
    const calls = Array.from({ length: 3 }, (_, i) => call(`a${i}`, 0, 'a'));
    await flush();
    calls.push(call('b-high', 5, 'b'));
    await run(1_000, 10);
    await Promise.all(calls);
    expect(starts).toEqual(['a0', 'b-high', 'a1', 'a2']);
    await close(gate);
  });
});
