/**
 * A Redis ledger reserve whose answer never reaches the client (timed out, connection lost) may
 * still run on Redis, late or re-sent by ioredis after a reconnect. The caller was refused and
 * sends nothing, so such a reserve must hold nothing: the ledger releases its id, and a reserve
 * that arrives after that release never stands.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import type { LedgerEntry } from '../../src/budget/ledger.js';
import { StoreUnavailableError } from '../../src/errors.js';
import { AsyncBudgetGuard } from '../../src/redis/async-budget-guard.js';
import { loadedScript, type RedisClient } from '../../src/redis/redis-client.js';
import { RedisLedger } from '../../src/redis/redis-ledger.js';
import { LEDGER_RESERVE_LUA } from '../../src/redis/redis-ledger-scripts.js';
import {
  DedicatedRedis,
  freePort,
  hasRedisServer,
  keysOfTag,
  REDIS_URL,
  redisSkipReason,
} from '../helpers/redis-server.js';

const skip = await redisSkipReason();
const skipDedicated =
  skip || (hasRedisServer() || process.env['CI'] === 'true' ? false : 'redis-server is not on PATH');
if (skip) console.log(`[redis lost reserve] skipped (${skip})`);
else if (skipDedicated) console.log(`[redis lost reserve] dedicated-server case skipped (${skipDedicated})`);

const prefix = `tollgate-lost-${process.pid}-${Date.now()}`;
const servers: DedicatedRedis[] = [];
const admin = skip ? undefined : new Redis(REDIS_URL);
afterAll(async () => {
  for (const server of servers) await server.stop();
  if (admin === undefined) return;
  const keys = await keysOfTag(admin, `{${prefix}-*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Poll `check` until it holds or `ms` pass; resolves either way (the assertion that follows decides). */
async function until(check: () => Promise<boolean>, ms = 3_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline && !(await check())) await sleep(20);
}

const reserveSha = loadedScript('ledger reserve', LEDGER_RESERVE_LUA).sha;
const DAY = 86_400_000;
const now = Date.now();
const today = Math.floor(now / DAY) * DAY;
const entry = (estimateMicros: number): LedgerEntry => ({
  budgetId: 'day',
  windowStart: today,
  windowEnd: today + DAY,
  limitMicros: 1_000_000,
  estimateMicros,
  expiresAt: now + 60_000,
});

/**
 * A client passing every command to `real`, except reserves (EVALSHA of the reserve script), which
 * `onReserve` sends as it likes (`send` runs the command on Redis and answers its reply).
 */
function tampered(real: Redis, onReserve: (send: () => Promise<unknown>) => Promise<unknown>): RedisClient {
  return {
    call(command: string, args: (string | number)[]) {
      const send = () => real.call(command, args);
      return command === 'EVALSHA' && args[0] === reserveSha ? onReserve(send) : send();
    },
  } as unknown as RedisClient;
}

/** Today's window of budget `day` in a ledger read with no tampering (a fresh connection). */
async function window(keyPrefix: string, at = now) {
  const ledger = new RedisLedger({ redis: REDIS_URL, keyPrefix });
  try {
    return (await ledger.snapshot(at)).find((w) => w.budgetId === 'day');
  } finally {
    await ledger.close();
  }
}

describe.skipIf(skip !== false)('a Redis ledger reserve whose answer is lost', () => {
  it('re-sent after it ran (its reply lost), it holds once', async () => {
    const keyPrefix = `${prefix}-resent`;
    const real = new Redis(REDIS_URL);
    // ioredis re-sends a command written before the connection dropped: Redis may run it twice.
    const ledger = new RedisLedger({
      redis: tampered(real, (send) => send().then(() => send())),
      keyPrefix,
    });
    const reserved = await ledger.reserve([entry(300_000)], now);
    expect(reserved.ok).toBe(true);
    expect(await window(keyPrefix)).toMatchObject({ spentMicros: 0, reservedMicros: 300_000 });
    if (!reserved.ok) return;
    expect((await ledger.settle(reserved.reservationId, 200_000, now)).found).toBe(true);
    expect(await window(keyPrefix)).toMatchObject({ spentMicros: 200_000, reservedMicros: 0 });
    await ledger.close();
    real.disconnect();
  });

  it('a reserve that reaches Redis after its release (overtaken: a redirection, a re-send) never stands', async () => {
    const keyPrefix = `${prefix}-overtaken`;
    const real = new Redis(REDIS_URL);
    let late: (() => Promise<unknown>) | undefined;
    // The reserve is held back (no answer: the command times out) and sent later by hand.
    const ledger = new RedisLedger({
      redis: tampered(real, (send) => {
        late = send;
        return new Promise(() => {});
      }),
      keyPrefix,
      commandTimeoutMs: 50,
    });
    // The window exists (made through an untampered ledger), so its totals can be read.
    const plain = new RedisLedger({ redis: REDIS_URL, keyPrefix });
    const first = await plain.reserve([entry(1)], now);
    if (first.ok) await plain.release(first.reservationId, now);
    await plain.close();
    await expect(ledger.reserve([entry(300_000)], now)).rejects.toBeInstanceOf(StoreUnavailableError);
    // The ledger's release of that id has run by now (it is sent at the timeout).
    await sleep(200);
    expect(late).toBeDefined();
    await late!().catch(() => {});
    expect(await window(keyPrefix)).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    // Nor does it count once its hold would have expired.
    expect(await window(keyPrefix, now + 120_000)).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    await ledger.close();
    real.disconnect();
  });

  it('reserves sent while the connection is down (queued, then re-sent) hold nothing once Redis is back', async () => {
    const keyPrefix = `${prefix}-outage`;
    const proxy = await tcpProxy(Number(new URL(REDIS_URL).port || 6379));
    const ledger = new RedisLedger({ redis: proxy.url, keyPrefix, commandTimeoutMs: 150 });
    (ledger as unknown as { client: Redis }).client.on('error', () => {});
    const guard = new AsyncBudgetGuard({
      budgets: { name: 'day', limit: '$1', period: 'day' },
      ledger,
      reservationTtlMs: 1_000,
    });
    await guard.release(await guard.reserve(1)); // connected, scripts loaded
    proxy.down();
    const outcomes = await Promise.allSettled([0, 1, 2].map(() => guard.reserve(300_000)));
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
    await sleep(300);
    proxy.up();
    const view = new AsyncBudgetGuard({
      budgets: { name: 'day', limit: '$1', period: 'day' },
      ledger: new RedisLedger({ redis: REDIS_URL, keyPrefix }),
    });
    const spend = async () => (await view.spend())[0]!;
    // The queued reserves and their releases reach Redis after the reconnect (50 ms to 1 s).
    await until(async () => (await spend()).reservedMicros === 0);
    // Past reservationTtlMs a hold left behind would count as spent: none is.
    await sleep(1_100);
    expect(await spend()).toMatchObject({ spentMicros: 0, reservedMicros: 0, remainingMicros: 1_000_000 });
    expect((await guard.tryReserve(900_000)).ok).toBe(true);
    await ledger.close();
    await view.ledger.close();
    proxy.close();
  });
});

describe.skipIf(skipDedicated !== false)('a Redis ledger reserve that times out (a stalled server)', () => {
  it('is released when Redis runs it late: nothing held, nothing spent after reservationTtlMs', async () => {
    const server = new DedicatedRedis(await freePort());
    servers.push(server);
    await server.start();
    const stall = new Redis(server.url);
    const ledger = new RedisLedger({ redis: server.url, keyPrefix: 'stalled', commandTimeoutMs: 100 });
    const guard = new AsyncBudgetGuard({
      budgets: { name: 'day', limit: '$1', period: 'day' },
      ledger,
      reservationTtlMs: 500,
    });
    await guard.release(await guard.reserve(1)); // connected, scripts loaded
    // Every client's commands wait 400 ms (> commandTimeoutMs), then run.
    await stall.call('CLIENT', 'PAUSE', '400');
    const pausedAt = Date.now();
    await expect(guard.reserve(600_000)).rejects.toBeInstanceOf(StoreUnavailableError);
    await sleep(pausedAt + 450 - Date.now());
    const spend = async () => (await guard.spend())[0]!;
    await until(async () => (await spend()).reservedMicros === 0);
    expect(await spend()).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    await sleep(600);
    expect(await spend()).toMatchObject({ spentMicros: 0, reservedMicros: 0, remainingMicros: 1_000_000 });
    expect((await guard.tryReserve(600_000)).ok).toBe(true);
    await ledger.close();
    stall.disconnect();
  });
});

/** A TCP proxy to Redis that can drop every connection and refuse new ones (`down`) until `up`. */
async function tcpProxy(targetPort: number) {
  const sockets = new Set<Socket>();
  let isDown = false;
  const server: Server = createServer((client) => {
    if (isDown) {
      client.destroy();
      return;
    }
    const upstream = connect(targetPort, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  const dropAll = () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  return {
    url: `redis://127.0.0.1:${port}`,
    down() {
      isDown = true;
      dropAll();
    },
    up() {
      isDown = false;
    },
    close() {
      isDown = true;
      dropAll();
      server.close();
    },
  };
}
