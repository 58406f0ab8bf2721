/**
 * A call aborted while Redis does not answer: its refund fails, and the shared gate keeps its
 * concurrency permit to give back when Redis answers again. On the Redis store that did nothing
 * (found by a fuzzing review, session 15): the store marked the refund done before sending it, so
 * the second try was a no-op, and the permit stayed taken for every process until its lease ended
 * (`concurrencyLeaseMs`, 5 min). Real Redis, real time (about 1.5 s).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';
import { REDIS_URL, redisSkipReason } from '../helpers/redis-server.js';

const skip = await redisSkipReason();
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const stores: RedisStore[] = [];
afterAll(async () => {
  await Promise.all(stores.map((store) => store.close()));
});

describe.skipIf(skip !== false)('redis store: permits of a refund that failed', () => {
  it('are given back when Redis answers again', async () => {
    const store = new RedisStore({
      redis: REDIS_URL,
      keyPrefix: `permit-recovery-${process.pid}-${Date.now()}`,
    });
    stores.push(store);
    // Redis "down": every command of this store fails until `down` is false.
    let down = false;
    const runner = (store as unknown as { runner: { evalsha: (...args: unknown[]) => Promise<unknown> } })
      .runner;
    const evalsha = runner.evalsha.bind(runner);
    const time = store.time.bind(store);
    runner.evalsha = (...args) =>
      down ? Promise.reject(new StoreUnavailableError('down')) : evalsha(...args);
    store.time = () => (down ? Promise.reject(new StoreUnavailableError('down')) : time());
    const gate = createSharedGate({
      store,
      recoveryProbeMs: 20,
      limits: [
        { algorithm: 'concurrency', limit: 1 },
        { algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 },
      ],
    });
    await gate.schedule(() => 'x');
    // y is reserved a second ahead and holds the one permit meanwhile; aborted while Redis is down.
    const abort = new AbortController();
    const y = gate.schedule(() => 'y', { signal: abort.signal }).catch((error: unknown) => error);
    await sleep(50);
    down = true;
    abort.abort();
    await y;
    await sleep(50);
    down = false;
    // Past y's slot: the next call needs only the permit.
    await sleep(1_100);
    let ran = false;
    const z = await gate
      .schedule(
        () => {
          ran = true;
        },
        { maxQueueTimeMs: 1_500 },
      )
      .catch((error: unknown) => error);
    expect(ran, String(z)).toBe(true);
    await gate.close();
  }, 10_000);
});
