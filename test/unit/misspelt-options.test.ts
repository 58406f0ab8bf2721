/**
 * A misspelt option must fail where it is written, naming it, rather than be ignored: `acutal`
 * for `actual` silently charged every call at its estimate; `close({ queue: 'reject' })` ran the
 * queue it was meant to reject.
 */
import { describe, expect, it } from 'vitest';
import { createCostModel } from '../../src/budget/cost-model.js';
import { InvalidOptionError } from '../../src/errors.js';
import { createGate } from '../../src/gate/gate.js';
import { parseRateLimitHeaders } from '../../src/headers/parse-ratelimit.js';
import { asyncLedger } from '../../src/redis/async-ledger.js';
import { MemoryStore } from '../../src/redis/memory-store.js';
import { RedisStore } from '../../src/redis/redis-store.js';
import { createSharedGate } from '../../src/redis/shared-gate.js';
import { ManualClock } from '../helpers/manual-clock.js';

function refusal(run: () => unknown): InvalidOptionError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidOptionError);
    return error as InvalidOptionError;
  }
  throw new Error('expected an InvalidOptionError, nothing was thrown');
}

describe('misspelt and malformed options are refused, naming the option', () => {
  it('adapt.aimd', () => {
    const error = refusal(() => createGate({ adapt: { aimd: { decreese: 0.5 } as never } }));
    expect(error.option).toBe('adapt.aimd.decreese');
  });

  it('a misspelt option set to undefined (a spread of an unset value) is refused too', () => {
    const unset: number | undefined = undefined;
    expect(refusal(() => createGate({ maxQueueTimeMS: unset } as never)).option).toBe(
      'options.maxQueueTimeMS',
    );
    expect(refusal(() => createGate({ adapt: { aimd: { decreese: unset } } as never })).option).toBe(
      'adapt.aimd.decreese',
    );
    expect(refusal(() => createCostModel({ estimate: '$0.01', acutal: unset } as never)).option).toBe(
      'costModel.acutal',
    );
    // A known option set to undefined is its default.
    expect(() => createGate({ maxQueueTimeMs: unset } as never)).not.toThrow();
  });

  it('costModel', () => {
    const error = refusal(() => createCostModel({ estimate: '$0.01', acutal: () => 0.02 } as never));
    expect(error.option).toBe('costModel.acutal');
  });

  it('parseRateLimitHeaders options', () => {
    expect(refusal(() => parseRateLimitHeaders(200, {}, { now: 0, bodyReader: [] } as never)).option).toBe(
      'options.bodyReader',
    );
    expect(refusal(() => parseRateLimitHeaders(200, {}, null as never)).option).toBe('options');
    expect(
      refusal(() => parseRateLimitHeaders(200, {}, { now: 0, preferReceiveTime: 'yes' } as never)).option,
    ).toBe('preferReceiveTime');
    expect(
      refusal(() =>
        parseRateLimitHeaders(200, {}, { now: 0, resetFormats: { 'x-rate-limit-reset': 'ms' } } as never),
      ).option,
    ).toBe('resetFormats.x-rate-limit-reset');
    // A well-formed call still reads the headers.
    const observation = parseRateLimitHeaders(
      200,
      { 'x-rate-limit-remaining': '3', 'x-rate-limit-reset': '1500' },
      { now: 0, resetFormats: { 'x-rate-limit-reset': 'delta-ms' } },
    );
    expect(observation.policies[0]).toMatchObject({ remaining: 3, resetMs: 1500 });
  });

  it("gate.close and gate.setLimits: a typo keeps the queue from running when 'reject' was meant", async () => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, limits: [{ algorithm: 'fixed-window', limit: 1, intervalMs: 1000 }] });
    const ran: number[] = [];
    const first = gate.schedule(() => ran.push(1));
    const second = gate.schedule(() => ran.push(2));
    expect(refusal(() => gate.setLimits({ limts: [] } as never)).option).toBe('update.limts');
    expect(refusal(() => gate.close({ queue: 'reject' } as never)).option).toBe('options.queue');
    expect(refusal(() => gate.close(null as never)).option).toBe('options');
    // Nothing was closed by the refused calls: the queue is whole.
    expect(gate.stats().queued).toBe(1);
    const closed = gate.close({ queued: 'reject' });
    await first;
    await expect(second).rejects.toMatchObject({ code: 'ERR_GATE_CLOSED' });
    await closed;
    expect(ran).toEqual([1]);
  });

  it('shared gate close', async () => {
    const clock = new ManualClock(0);
    const gate = createSharedGate({ store: new MemoryStore({ clock }), clock });
    await expect(gate.close({ queue: 'reject' } as never)).rejects.toMatchObject({ option: 'options.queue' });
    await gate.close();
  });

  it('asyncLedger of something that is not a ledger', () => {
    expect(refusal(() => asyncLedger(null as never)).option).toBe('ledger');
    expect(refusal(() => asyncLedger({ reserve() {} } as never)).option).toBe('ledger');
  });

  it("RedisStore with an empty URL does not connect to localhost's default port", () => {
    expect(refusal(() => new RedisStore({ redis: '' })).option).toBe('redis');
    expect(refusal(() => new RedisStore({ redis: '  ' })).option).toBe('redis');
  });
});

describe('a random source that misbehaves', () => {
  it.each([
    ['NaN', () => Number.NaN],
    ['1e9', () => 1e9],
    [
      'a throw',
      () => {
        throw new Error('no entropy');
      },
    ],
  ])('returning %s: the backoff pause stays a finite wait within its bound', async (_, random) => {
    const clock = new ManualClock(0);
    const gate = createGate({ clock, random, adapt: { backoffBaseMs: 100, aimd: false } });
    let n = 0;
    const result = gate.schedule(async () => ({ status: n++ === 0 ? 429 : 200, headers: {} }), {
      key: 'api',
      inspect: (r: { status: number; headers: Record<string, string> }) => ({ ...r, method: 'GET' }),
    });
    for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
    const pausedUntil = gate.stats('api').partition.pausedUntil;
    expect(Number.isFinite(pausedUntil)).toBe(true);
    expect(pausedUntil).toBeLessThanOrEqual(100);
    clock.advance(100);
    await expect(result).resolves.toMatchObject({ status: 200 });
  });
});
