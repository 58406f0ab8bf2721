import { createServer } from 'node:net';
import { inspect } from 'node:util';
/**
 * Garbage in: every option of the Redis mode is checked at construction with one message shape
 * (``Expected `localShare` to be a number in (0, 1], got `0` (number)``), and a call's options at
 * schedule time with a typed rejection. No Redis server is needed (clients connect lazily).
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidCostError, InvalidOptionError, StoreUnavailableError } from '../../src/errors.js';
import { AsyncBudgetGuard } from '../../src/redis/async-budget-guard.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { RedisLedger } from '../../src/redis/redis-ledger.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';

const lazy = new Redis({ lazyConnect: true });
afterAll(() => lazy.disconnect());

function rejectsOption(make: () => unknown, option: string, message?: RegExp): void {
  let error: unknown;
  try {
    make();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(InvalidOptionError);
  expect((error as InvalidOptionError).option).toBe(option);
  expect((error as Error).message).toMatch(
    message ?? new RegExp(`^Expected \`${option.replace(/[.[\]]/g, '\\$&')}\` to be `),
  );
}

describe('createSharedGate options', () => {
  const store = new MemoryStore();
  it.each([
    ['no store at all', {}, 'redis'],
    ['both redis and store', { redis: lazy, store }, 'store'],
    ['an unknown option', { store, maxWait: 5 }, 'options.maxWait'],
    ['an unknown failure policy', { store, failure: 'retry' }, 'failure'],
    ['a zero local share', { store, localShare: 0 }, 'localShare'],
    ['a local share above 1', { store, localShare: 1.5 }, 'localShare'],
    ['a NaN local share', { store, localShare: Number.NaN }, 'localShare'],
    ['a zero probe interval', { store, recoveryProbeMs: 0 }, 'recoveryProbeMs'],
    ['a fractional concurrency retry', { store, concurrencyRetryMs: 2.5 }, 'concurrencyRetryMs'],
    ['keyPrefix with a store', { store, keyPrefix: 'x' }, 'keyPrefix'],
    ['commandTimeoutMs with a store', { store, commandTimeoutMs: 10 }, 'commandTimeoutMs'],
    ['a store that is not one', { store: { reserve: 1 } }, 'store'],
    [
      'a bad limit',
      { store, limits: [{ algorithm: 'token-bucket', limit: 0, intervalMs: 1000 }] },
      'limits[0].limit',
    ],
    ['a bad per-key limit', { store, perKey: [{ algorithm: 'nope', limit: 1 }] }, 'perKey[0].algorithm'],
    ['a negative deadline', { store, maxQueueTimeMs: -1 }, 'maxQueueTimeMs'],
    ['a budget without methods', { store, budget: { tryReserve: () => 0 } }, 'budget.settle'],
    ['a redis that is a number', { redis: 42 }, 'redis'],
    ['a key prefix with braces', { redis: lazy, keyPrefix: 'a{b}' }, 'keyPrefix'],
    ['a zero command timeout', { redis: lazy, commandTimeoutMs: 0 }, 'commandTimeoutMs'],
    ['concurrencyLeaseMs with a store', { store, concurrencyLeaseMs: 1000 }, 'concurrencyLeaseMs'],
    ['a fractional lease', { redis: lazy, concurrencyLeaseMs: 1.5 }, 'concurrencyLeaseMs'],
    ['a zero lease', { redis: lazy, concurrencyLeaseMs: 0 }, 'concurrencyLeaseMs'],
    ['a lease given as text', { redis: lazy, concurrencyLeaseMs: '1000' }, 'concurrencyLeaseMs'],
  ])('refuses %s', (_name, options, option) => {
    rejectsOption(() => createSharedGate(options as never), option);
  });

  /** The error each Redis entry point (shared gate, store, ledger) throws at construction for `url`. */
  const errorsFor = (url: string): unknown[] =>
    [
      () => createSharedGate({ redis: url }),
      () => new RedisStore({ redis: url }),
      () => new RedisLedger({ redis: url }),
    ].map((make) => {
      try {
        make();
      } catch (e) {
        return e;
      }
      return undefined;
    });

  it('refuses a Redis URL that cannot be parsed with a typed error that does not show its password', () => {
    for (const error of errorsFor('redis://:S3CRETPASS@127.0.0.1:notaport')) {
      expect(error).toBeInstanceOf(InvalidOptionError);
      expect((error as InvalidOptionError).option).toBe('redis');
      expect(inspect(error, { depth: 10, showHidden: true })).not.toContain('S3CRETPASS');
    }
  });

  // Found by a review (session 17): ioredis reads any scheme as redis://, so http://host:6379
  // connected to the Redis there; only redis:// and rediss:// are meant.
  it('refuses a URL of another scheme at construction, without showing it', () => {
    for (const url of [
      'http://:S3CRETPASS@127.0.0.1:6379',
      'https://127.0.0.1:6379/S3CRETPASS',
      'valkey://127.0.0.1:6379',
    ]) {
      for (const error of errorsFor(url)) {
        expect(error).toBeInstanceOf(InvalidOptionError);
        expect((error as InvalidOptionError).option).toBe('redis');
        expect((error as Error).message).toMatch(/redis:\/\/ or rediss:\/\//);
        expect(inspect(error, { depth: 10, showHidden: true })).not.toContain('S3CRETPASS');
      }
    }
  });

  it('refuses a bad budget before it opens a Redis connection (a socket left open keeps the process alive)', async () => {
    const sockets = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP')).length;
    const before = sockets();
    rejectsOption(
      () => createSharedGate({ redis: 'redis://127.0.0.1:6379', budget: {} } as never),
      'budget.tryReserve',
    );
    // A client connects on a later turn of the event loop.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(sockets()).toBeLessThanOrEqual(before);
  });

  it('a Redis that does not answer is named (host and port, never the password) in the error', async () => {
    // A port nothing listens on.
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as { port: number };
        probe.close(() => resolve(port));
      });
    });
    const sockets = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP')).length;
    const before = sockets();
    const gate = createSharedGate({
      redis: `redis://:S3CRETPASS@127.0.0.1:${port}`,
      limits: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 1000 }],
      failure: 'fail-closed',
      commandTimeoutMs: 200,
    });
    const error = await gate.schedule(() => 'sent').catch((e: unknown) => e);
    await gate.close();
    // Closed: no reconnecting socket left behind (it would keep the process alive).
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(sockets()).toBeLessThanOrEqual(before);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toMatch(new RegExp(`^Redis at 127\\.0\\.0\\.1:${port} `));
    expect(inspect(error, { depth: 10, showHidden: true })).not.toContain('S3CRETPASS');
  });

  it('rejects garbage call options with typed errors, without calling fn', async () => {
    const gate = createSharedGate({
      store,
      limits: [{ algorithm: 'token-bucket', limit: 5, intervalMs: 1000, burst: 2 }],
    });
    let called = 0;
    const fn = () => called++;
    await expect(gate.schedule(fn, { cost: -1 })).rejects.toBeInstanceOf(InvalidCostError);
    await expect(gate.schedule(fn, { cost: Number.NaN })).rejects.toBeInstanceOf(InvalidCostError);
    await expect(gate.schedule(fn, { cost: { tokens: -5 } })).rejects.toBeInstanceOf(InvalidCostError);
    await expect(gate.schedule(fn, { cost: 'two' as never })).rejects.toBeInstanceOf(InvalidCostError);
    // More than the burst can ever admit is misuse, not a wait.
    await expect(gate.schedule(fn, { cost: 3 })).rejects.toBeInstanceOf(InvalidCostError);
    await expect(gate.schedule(fn, { key: 7 as never })).rejects.toMatchObject({ option: 'key' });
    await expect(gate.schedule(fn, { priority: 1.5 })).rejects.toMatchObject({ option: 'priority' });
    await expect(gate.schedule(fn, { cots: 3 } as never)).rejects.toMatchObject({ option: 'options.cots' });
    await expect(gate.schedule(fn, { maxQueueTimeMs: -2 })).rejects.toMatchObject({
      option: 'maxQueueTimeMs',
    });
    await expect(gate.schedule(fn, { signal: {} as never })).rejects.toMatchObject({ option: 'signal' });
    await expect(gate.schedule(fn, { inspect: 'yes' as never })).rejects.toMatchObject({ option: 'inspect' });
    await expect(gate.schedule(fn, { priceMicros: 0.5 })).rejects.toBeInstanceOf(InvalidCostError);
    // null is garbage, not "unset" (as for the in-memory gate).
    await expect(gate.schedule(fn, { priority: null as never })).rejects.toMatchObject({
      option: 'priority',
    });
    await expect(gate.schedule(fn, { maxQueueTimeMs: null as never })).rejects.toMatchObject({
      option: 'maxQueueTimeMs',
    });
    await expect(gate.schedule(fn, { priceMicros: null as never })).rejects.toBeInstanceOf(InvalidCostError);
    await expect(gate.schedule('fn' as never)).rejects.toMatchObject({ option: 'fn' });
    expect(() => gate.pause(Number.NaN)).toThrow(InvalidOptionError);
    expect(() => gate.pauseFor(-1)).toThrow(InvalidOptionError);
    await expect(gate.close({ queued: 'later' as never })).rejects.toMatchObject({ option: 'queued' });
    expect(called).toBe(0);
    await gate.close();
  });
});

describe('store, ledger and budget options', () => {
  it.each([
    ['an unknown option', { redis: lazy, prefix: 'x' }, 'options.prefix'],
    ['no client', { redis: undefined }, 'redis'],
    ['a key prefix with a space', { redis: lazy, keyPrefix: 'a b' }, 'keyPrefix'],
    ['an empty key prefix', { redis: lazy, keyPrefix: '' }, 'keyPrefix'],
    ['a zero lease', { redis: lazy, concurrencyLeaseMs: 0 }, 'concurrencyLeaseMs'],
    ['a fractional learned TTL', { redis: lazy, learnedTtlMs: 1.5 }, 'learnedTtlMs'],
    ['a zero minimum TTL', { redis: lazy, minTtlMs: 0 }, 'minTtlMs'],
  ])('RedisStore refuses %s', (_name, options, option) => {
    rejectsOption(() => new RedisStore(options as never), option);
  });

  it.each([
    ['an unknown option', { redis: lazy, tag: 'x' }, 'ledger.tag'],
    ['a client that is not one', { redis: {} }, 'ledger.redis'],
    ['a key prefix with braces', { redis: lazy, keyPrefix: '{x}' }, 'ledger.keyPrefix'],
    ['a zero command timeout', { redis: lazy, commandTimeoutMs: 0 }, 'ledger.commandTimeoutMs'],
  ])('RedisLedger refuses %s', (_name, options, option) => {
    rejectsOption(() => new RedisLedger(options as never), option);
  });

  it.each([
    ['an unknown option', { clock: { now: () => 0 }, ttl: 1 }, 'options.ttl'],
    ['a clock without now', { clock: {} }, 'clock'],
    ['a zero learned TTL', { learnedTtlMs: 0 }, 'learnedTtlMs'],
  ])('MemoryStore refuses %s', (_name, options, option) => {
    rejectsOption(() => new MemoryStore(options as never), option);
  });

  it('AsyncBudgetGuard refuses missing budgets, a ledger that is not one, and bad amounts', async () => {
    const ledger = new RedisLedger({ redis: lazy });
    rejectsOption(() => new AsyncBudgetGuard({ ledger } as never), 'budgets');
    rejectsOption(() => new AsyncBudgetGuard({ budgets: [], ledger } as never), 'budgets');
    rejectsOption(
      () => new AsyncBudgetGuard({ budgets: { limit: 1, period: 'day' }, ledger: {} as never }),
      'ledger',
    );
    rejectsOption(
      () => new AsyncBudgetGuard({ budgets: { limit: 1, period: 'fortnight' as never }, ledger }),
      'budget.period',
    );
    rejectsOption(
      () => new AsyncBudgetGuard({ budgets: { limit: 1, period: 'day' }, ledger, reservationTtlMs: 0 }),
      'reservationTtlMs',
    );
    const guard = new AsyncBudgetGuard({ budgets: { limit: 1, period: 'day' }, ledger });
    await expect(guard.tryReserve(-5)).rejects.toBeInstanceOf(InvalidCostError);
    await expect(guard.tryReserve(1.5)).rejects.toBeInstanceOf(InvalidCostError);
  });

  it('learning a concurrency limit, or a malformed one, is refused', () => {
    const store = new MemoryStore();
    expect(() => store.learn('p', { algorithm: 'concurrency', limit: 2 })).toThrow(InvalidOptionError);
    expect(() => store.learn('p', { algorithm: 'sliding-log', limit: -1, intervalMs: 10 })).toThrow(
      InvalidOptionError,
    );
  });
});
