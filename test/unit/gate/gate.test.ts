import { describe, expect, it } from 'vitest';
import {
  AbortedError,
  GateClosedError,
  InvalidCostError,
  InvalidOptionError,
  isTollgateError,
  QueueFullError,
  QueueTimeoutError,
} from '../../../src/errors.js';
import { createGate } from '../../../src/gate/gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

/** Let promise reactions run (no time passes on the manual clock). */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function recorder(clock: ManualClock) {
  const starts: { id: string | number; at: number }[] = [];
  const task = (id: string | number) => () => {
    starts.push({ id, at: clock.now() });
    return id;
  };
  return { starts, task };
}

describe('gate: admission and spacing', () => {
  it('admits at once while the limit has room, with no timer armed', async () => {
    const clock = new ManualClock(1_000);
    const gate = createGate({ clock, limits: [{ algorithm: 'token-bucket', limit: 5, intervalMs: 1000 }] });
    const results = await Promise.all([1, 2, 3].map((i) => gate.schedule(() => i)));
    expect(results).toEqual([1, 2, 3]);
    expect(clock.pendingTimers).toBe(0);
    expect(gate.stats().started).toBe(3);
  });

  it('queues beyond the burst and starts each call at its scheduled time', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({
      clock,
      limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000, burst: 2 }],
    });
    const { starts, task } = recorder(clock);
    const all = Promise.all([0, 1, 2, 3, 4].map((i) => gate.schedule(task(i))));
    expect(starts.map((s) => s.at)).toEqual([0, 0]);
    expect(clock.pendingTimers).toBe(1);
    clock.runAll();
    await all;
    expect(starts.map((s) => s.at)).toEqual([0, 0, 100, 200, 300]);
    expect(clock.pendingTimers).toBe(0);
  });

  it('keeps one timer per partition however many calls are queued', () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 100, intervalMs: 1000 }] });
    for (let i = 0; i < 1000; i++) gate.schedule(() => i).catch(() => {});
    expect(gate.stats().queued).toBe(999);
    expect(clock.pendingTimers).toBe(1);
    clock.advance(10_000);
    expect(gate.stats().queued).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('checks every limit all-or-nothing: a call refused by tokens takes no request quota', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({
      clock,
      limits: [
        { algorithm: 'fixed-window', limit: 10, intervalMs: 1000 },
        { algorithm: 'fixed-window', limit: 100, intervalMs: 1000, unit: 'tokens' },
      ],
    });
    const { starts, task } = recorder(clock);
    const a = gate.schedule(task('a'), { cost: { tokens: 80 } });
    const b = gate.schedule(task('b'), { cost: { tokens: 80 } });
    await a;
    expect(starts.map((s) => s.id)).toEqual(['a']);
    const requests = gate.stats().limits[0]!;
    expect(requests.available).toBe(9);
    clock.advanceTo(1000);
    await b;
    expect(starts).toEqual([
      { id: 'a', at: 0 },
      { id: 'b', at: 1000 },
    ]);
  });

  it('applies global and per-key limits together', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({
      clock,
      limits: [{ algorithm: 'fixed-window', limit: 3, intervalMs: 1000 }],
      perKey: [{ algorithm: 'fixed-window', limit: 2, intervalMs: 1000 }],
    });
    const { starts, task } = recorder(clock);
    const calls = [
      gate.schedule(task('a1'), { key: 'a' }),
      gate.schedule(task('a2'), { key: 'a' }),
      gate.schedule(task('a3'), { key: 'a' }),
      gate.schedule(task('b1'), { key: 'b' }),
      gate.schedule(task('b2'), { key: 'b' }),
    ];
    await flush();
    expect(starts.map((s) => s.id)).toEqual(['a1', 'a2', 'b1']);
    clock.advanceTo(1000);
    await Promise.all(calls);
    expect(
      starts
        .filter((s) => s.at === 1000)
        .map((s) => s.id)
        .sort(),
    ).toEqual(['a3', 'b2']);
  });
});

describe('gate: queue order and bounds', () => {
  it('starts higher priority first and keeps FIFO among equals', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    const { starts, task } = recorder(clock);
    const calls = [
      gate.schedule(task('first')),
      gate.schedule(task('low1')),
      gate.schedule(task('low2')),
      gate.schedule(task('high1'), { priority: 5 }),
      gate.schedule(task('high2'), { priority: 5 }),
      gate.schedule(task('mid'), { priority: 1 }),
    ];
    clock.runAll();
    await Promise.all(calls);
    expect(starts.map((s) => s.id)).toEqual(['first', 'high1', 'high2', 'mid', 'low1', 'low2']);
    expect(starts.map((s) => s.at)).toEqual([0, 100, 200, 300, 400, 500]);
  });

  it('refuses a call at once when the partition queue is full', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({
      clock,
      maxQueue: 2,
      limits: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }],
    });
    const ok = [gate.schedule(() => 1), gate.schedule(() => 2), gate.schedule(() => 3)];
    const fn = () => 4;
    const refused = gate.schedule(fn);
    await expect(refused).rejects.toBeInstanceOf(QueueFullError);
    await expect(refused).rejects.toMatchObject({ code: 'ERR_QUEUE_FULL', maxQueue: 2 });
    clock.runAll();
    expect(await Promise.all(ok)).toEqual([1, 2, 3]);
  });

  it('refuses at once, with the predicted wait, a call that cannot start within maxQueueTimeMs', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    let called = false;
    const queued = [gate.schedule(() => 0), gate.schedule(() => 1), gate.schedule(() => 2)];
    const late = gate.schedule(
      () => {
        called = true;
      },
      { maxQueueTimeMs: 250 },
    );
    const error = await late.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QueueTimeoutError);
    expect(error).toMatchObject({
      code: 'ERR_QUEUE_TIMEOUT',
      predictedWaitMs: 300,
      maxQueueTimeMs: 250,
      predicted: true,
    });
    // A call that fits its deadline is accepted.
    const fitting = gate.schedule(() => 'ok', { maxQueueTimeMs: 300 });
    clock.runAll();
    expect(await fitting).toBe('ok');
    await Promise.all(queued);
    expect(called).toBe(false);
  });
});

describe('gate: abort, pause, limit changes', () => {
  it('removes an aborted call and moves the next one up into its slot', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    const { starts, task } = recorder(clock);
    const controller = new AbortController();
    const a = gate.schedule(task('a'));
    const b = gate.schedule(task('b'), { signal: controller.signal });
    const c = gate.schedule(task('c'));
    controller.abort(new Error('user cancelled'));
    const error = await b.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AbortedError);
    expect((error as AbortedError).cause).toEqual(new Error('user cancelled'));
    clock.runAll();
    await Promise.all([a, c]);
    expect(starts).toEqual([
      { id: 'a', at: 0 },
      { id: 'c', at: 100 },
    ]);
  });

  it('rejects a call whose signal is already aborted without calling it', async () => {
    const gate = createGate({ clock: new ManualClock(0) });
    let called = false;
    const p = gate.schedule(
      () => {
        called = true;
      },
      { signal: AbortSignal.abort('stop') },
    );
    await expect(p).rejects.toMatchObject({ code: 'ERR_ABORTED', cause: 'stop' });
    expect(called).toBe(false);
  });

  it('a pause holds the partition and refuses at once the queued calls it pushes past their deadline', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    const { starts, task } = recorder(clock);
    const a = gate.schedule(task('a'));
    const b = gate.schedule(task('b'), { maxQueueTimeMs: 500 });
    const c = gate.schedule(task('c'), { maxQueueTimeMs: 5000 });
    const refused: string[] = [];
    gate.onRefused((e) => refused.push(e.error.code));
    gate.pause(2000, undefined, 'test');
    // b is refused at the moment of the pause, not when its deadline passes.
    await expect(b).rejects.toMatchObject({ code: 'ERR_QUEUE_TIMEOUT', predicted: false });
    expect(refused).toEqual(['ERR_QUEUE_TIMEOUT']);
    clock.runAll();
    await Promise.all([a, c]);
    expect(starts).toEqual([
      { id: 'a', at: 0 },
      { id: 'c', at: 2000 },
    ]);
  });

  it('resume lets a paused key start again at once', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock });
    const pauses: number[] = [];
    gate.onPause((e) => pauses.push(e.untilMs));
    gate.pause(10_000, 'api.example.com');
    const { starts, task } = recorder(clock);
    const p = gate.schedule(task('x'), { key: 'api.example.com' });
    const other = gate.schedule(task('y'), { key: 'other' });
    await other;
    expect(starts.map((s) => s.id)).toEqual(['y']);
    expect(gate.stats('api.example.com').partition.pausedUntil).toBe(10_000);
    clock.advance(100);
    gate.resume('api.example.com');
    await p;
    expect(starts).toEqual([
      { id: 'y', at: 0 },
      { id: 'x', at: 100 },
    ]);
    expect(pauses).toEqual([10_000]);
  });

  it('setLimits re-plans queued calls under the new rate', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }] });
    const { starts, task } = recorder(clock);
    const calls = [0, 1, 2].map((i) => gate.schedule(task(i)));
    gate.setLimits({ limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    clock.runAll();
    await Promise.all(calls);
    // The first start reserved 1000 ms under the old rate (its state is kept); then 100 ms spacing.
    expect(starts.map((s) => s.at)).toEqual([0, 1000, 1100]);
  });

  it('setLimits refuses queued calls that no longer fit any start', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    const a = gate.schedule(() => 'a');
    const b = gate.schedule(() => 'b', { cost: 5 });
    gate.setLimits({ limits: [{ algorithm: 'leaky-bucket', limit: 2, intervalMs: 1000 }] });
    await expect(b).rejects.toBeInstanceOf(InvalidCostError);
    expect(await a).toBe('a');
  });
});

describe('gate: concurrency', () => {
  it('never runs more than the concurrency limit and starts the next call on release', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'concurrency', limit: 2 }] });
    let running = 0;
    let peak = 0;
    const releases: (() => void)[] = [];
    const task = () =>
      new Promise<void>((resolve) => {
        running++;
        peak = Math.max(peak, running);
        releases.push(() => {
          running--;
          resolve();
        });
      });
    const calls = Array.from({ length: 5 }, () => gate.schedule(task));
    await flush();
    expect(running).toBe(2);
    expect(gate.stats().inFlight).toBe(2);
    expect(clock.pendingTimers).toBe(0);
    while (releases.length > 0) {
      releases.shift()!();
      await flush();
    }
    await Promise.all(calls);
    expect(peak).toBe(2);
    expect(gate.stats().inFlight).toBe(0);
  });

  it('refuses a call still waiting for a permit when its deadline passes', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'concurrency', limit: 1 }] });
    gate.schedule(() => new Promise(() => {})).catch(() => {});
    const waiting = gate.schedule(() => 'late', { maxQueueTimeMs: 1000 });
    clock.advance(999);
    await flush();
    clock.advance(1);
    await expect(waiting).rejects.toMatchObject({ code: 'ERR_QUEUE_TIMEOUT', predicted: false });
  });
});

describe('gate: close', () => {
  it("close({ queued: 'reject' }) rejects what is queued and refuses new calls", async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }] });
    const first = gate.schedule(() => 1);
    const queued = gate.schedule(() => 2);
    await gate.close({ queued: 'reject' });
    expect(await first).toBe(1);
    await expect(queued).rejects.toBeInstanceOf(GateClosedError);
    await expect(gate.schedule(() => 3)).rejects.toMatchObject({ code: 'ERR_GATE_CLOSED' });
    expect(clock.pendingTimers).toBe(0);
  });

  it('close() lets queued calls run and resolves when they have started', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1000 }] });
    const calls = [1, 2, 3].map((i) => gate.schedule(() => i));
    let closed = false;
    const closing = gate.close().then(() => {
      closed = true;
    });
    await flush();
    expect(closed).toBe(false);
    clock.runAll();
    await closing;
    expect(await Promise.all(calls)).toEqual([1, 2, 3]);
  });
});

describe('gate: keys and memory', () => {
  it('drops keys whose state is back to full', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, perKey: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000 }] });
    for (let i = 0; i < 100; i++) await gate.schedule(() => i, { key: `k${i}` });
    expect(gate.stats().partitions).toBe(101);
    clock.advance(1000);
    for (let i = 0; i < 100; i++) await gate.schedule(() => i, { key: `fresh${i}` });
    // Each new key sweeps two old entries: all of the first hundred are gone.
    expect(gate.stats().partitions).toBeLessThanOrEqual(101);
    expect(gate.stats('k0').partition.limits[0]!.available).toBe(10);
  });
});

describe('gate: bad input', () => {
  it.each([
    [{ limits: [{ algorithm: 'token-bucket', limit: -1, intervalMs: 1000 }] }, 'limits[0].limit'],
    [{ limits: [{ algorithm: 'nope', limit: 1, intervalMs: 1000 }] }, 'limits[0].algorithm'],
    [{ limits: [{ algorithm: 'token-bucket', limit: 1, intervalMs: Number.NaN }] }, 'limits[0].intervalMs'],
    [{ perKey: [{ algorithm: 'fixed-window', limit: 1, intervalMs: Infinity }] }, 'perKey[0].intervalMs'],
    [{ maxQueue: 0 }, 'maxQueue'],
    [{ maxQueue: '10' }, 'maxQueue'],
    [{ maxQueueTimeMs: -1 }, 'maxQueueTimeMs'],
    [{ clock: {} }, 'clock'],
    [{ limts: [] }, 'options.limts'],
  ])('invalid options %j throw naming %s', (options, option) => {
    let error: unknown;
    try {
      createGate(options as never);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(isTollgateError(error)).toBe(true);
    expect((error as InvalidOptionError).option).toBe(option);
    expect((error as Error).message).toContain(`\`${option}\``);
  });

  it.each([
    [{ cost: -1 }, 'ERR_INVALID_COST'],
    [{ cost: Number.NaN }, 'ERR_INVALID_COST'],
    [{ cost: { tokens: Infinity } }, 'ERR_INVALID_COST'],
    [{ cost: 11 }, 'ERR_INVALID_COST'],
    [{ cost: 'one' }, 'ERR_INVALID_COST'],
    [{ priority: 1.5 }, 'ERR_INVALID_OPTION'],
    [{ maxQueueTimeMs: -5 }, 'ERR_INVALID_OPTION'],
    [{ key: 42 }, 'ERR_INVALID_OPTION'],
    [{ signal: 'yes' }, 'ERR_INVALID_OPTION'],
    // A misspelled option must not run at the default cost.
    [{ cots: 3 }, 'ERR_INVALID_OPTION'],
  ])('per-call option %j rejects with %s and never calls fn', async (options, code) => {
    const gate = createGate({
      clock: new ManualClock(0),
      limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000 }],
    });
    let called = false;
    const p = gate.schedule(() => {
      called = true;
    }, options as never);
    await expect(p).rejects.toMatchObject({ code });
    expect(called).toBe(false);
  });

  it('a signal that takes no listeners is refused at once and leaves the queue and close() working', async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'token-bucket', limit: 1, intervalMs: 1000 }] });
    const started: string[] = [];
    await gate.schedule(() => started.push('first'));
    // The limit is spent: this call would have to wait in the queue, listening to its signal.
    const odd = gate.schedule(() => started.push('odd'), { signal: { aborted: false } as never });
    await expect(odd).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'signal' });
    expect(gate.stats().queued).toBe(0);
    const next = gate.schedule(() => started.push('next'));
    clock.advance(1000);
    await next;
    expect(started).toEqual(['first', 'next']);
    await gate.close();
  });

  it('a throwing fn rejects its own call only', async () => {
    const gate = createGate({ clock: new ManualClock(0) });
    await expect(
      gate.schedule(() => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await gate.schedule(() => 'next')).toBe('next');
  });
});
