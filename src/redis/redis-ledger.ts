import { randomBytes } from 'node:crypto';
import type {
  LedgerEntry,
  LedgerReserveResult,
  LedgerSettleResult,
  LedgerTotals,
  LedgerWindow,
  ThresholdClaim,
  ThresholdClaimResult,
} from '../budget/ledger.js';
import { checkLedgerEntries, checkLedgerNow, checkThresholdClaim, windowKey } from '../budget/ledger.js';
import { checkMicros } from '../budget/money.js';
import { InvalidCostError, StoreUnavailableError } from '../errors.js';
import { integer, invalid, nonEmptyString, onlyKnownKeys, plainObject } from '../validate.js';
import type { AsyncLedger } from './async-ledger.js';
import { CommandRunner, connectRedis, loadedScript, type RedisClient } from './redis-client.js';
import { DigestCache } from './redis-keys.js';
import {
  LEDGER_CLAIM_LUA,
  LEDGER_RESERVE_LUA,
  LEDGER_RESET_LUA,
  LEDGER_SETTLE_LUA,
  LEDGER_SNAPSHOT_LUA,
} from './redis-ledger-scripts.js';

export interface RedisLedgerOptions {
  /** An `ioredis` client, or a URL such as `redis://127.0.0.1:6379`. */
  redis: RedisClient | string;
  /**
   * The ledger's hash tag is `{<keyPrefix>:ledger}`: every process sharing budgets shares it.
   * Letters, digits and `-_.:` only.
   * @default 'tollgate'
   */
  keyPrefix?: string;
  /** A command slower than this fails with `StoreUnavailableError`. Integer >= 1. @default 1000 */
  commandTimeoutMs?: number;
}

const scripts = {
  reserve: loadedScript('ledger reserve', LEDGER_RESERVE_LUA),
  settle: loadedScript('ledger settle', LEDGER_SETTLE_LUA),
  snapshot: loadedScript('ledger snapshot', LEDGER_SNAPSHOT_LUA),
  reset: loadedScript('ledger reset', LEDGER_RESET_LUA),
  claim: loadedScript('ledger claim', LEDGER_CLAIM_LUA),
};

/**
 * How long a tombstone keeps a released id from being reserved (ms): an hour, the grace the
 * ledger's keys get. A reserve re-sent by ioredis goes out when the connection is back, before
 * anything sent after it; one redirected by a Cluster comes within its retry delays (ms to s).
 */
const TOMBSTONE_MS = 3_600_000;
// A release whose command failed (no connection, queue flushed) is sent again after this, doubling
// up to the cap (ms), until Redis answers it or the ledger closes.
const CANCEL_RETRY_MS = 50;
const CANCEL_RETRY_CAP_MS = 1_000;

const num = (value: unknown): number => {
  const text = String(value);
  return text === 'inf' ? Infinity : Number(text);
};

/**
 * A budget ledger in Redis, for budgets shared by processes on many machines. Same rules and the
 * same exactness as the file ledger (integer micro-units, all-or-nothing reservations, holds that
 * count at their estimate once expired, never dropped before their window ends), each operation one
 * Lua script (see `redis-ledger-scripts.ts`). Asynchronous: use it through `AsyncBudgetGuard` (or a
 * shared gate's `budget`).
 */
export class RedisLedger implements AsyncLedger {
  readonly keyPrefix: string;
  private readonly client: RedisClient;
  private readonly ownsClient: boolean;
  private readonly runner: CommandRunner;
  private readonly tagKey: string;
  private readonly digests = new DigestCache();
  /**
   * Reservation ids are `<idPrefix><counter in base 36>`: 96 random bits per ledger, so ids are
   * unique across processes and restarts without asking Redis, and carry nothing of the caller.
   */
  private readonly idPrefix = `${randomBytes(12).toString('base64url')}.`;
  private idCount = 0;
  /** Releases of unanswered reserves waiting to be sent again (see `cancel`), by reservation id. */
  private readonly cancelling = new Map<string, { now: number; timer: ReturnType<typeof setTimeout> }>();
  private closed = false;

  constructor(options: RedisLedgerOptions) {
    const o = plainObject('options', options);
    onlyKnownKeys('ledger', o, ['redis', 'keyPrefix', 'commandTimeoutMs']);
    const prefix = nonEmptyString('ledger.keyPrefix', o['keyPrefix'] ?? 'tollgate');
    if (!/^[\w\-.:]{1,100}$/.test(prefix))
      throw invalid('ledger.keyPrefix', 'letters, digits and `-_.:`', prefix);
    this.keyPrefix = prefix;
    const timeoutMs = integer('ledger.commandTimeoutMs', o['commandTimeoutMs'] ?? 1000, 1);
    const redis = o['redis'];
    if (typeof redis === 'string') {
      this.client = connectRedis(redis);
      this.ownsClient = true;
      this.client.on('error', () => {});
    } else if (typeof (redis as RedisClient | null)?.call === 'function') {
      this.client = redis as RedisClient;
      this.ownsClient = false;
    } else {
      throw invalid('ledger.redis', 'an ioredis client or a redis:// URL', redis);
    }
    this.runner = new CommandRunner(this.client, timeoutMs, Object.values(scripts));
    this.tagKey = `{${prefix}:ledger}`;
  }

  async reserve(entries: readonly LedgerEntry[], now: number): Promise<LedgerReserveResult> {
    this.checkOpen();
    checkLedgerNow(now);
    checkLedgerEntries(entries);
    // Chosen here, not in Redis: a reserve whose answer never comes can still be released by id.
    const id = this.idPrefix + (this.idCount++).toString(36);
    const args: (string | number)[] = [
      scripts.reserve.sha,
      1,
      this.tagKey,
      String(now),
      id,
      String(entries.length),
    ];
    for (const entry of entries) {
      const { start, end } = windowKey(entry);
      const bid = this.digests.get(entry.budgetId);
      args.push(
        entry.budgetId,
        bid,
        `${bid}:${start}:${end}`,
        String(start),
        String(end),
        entry.rollingMs === undefined ? '' : String(entry.rollingMs),
        String(entry.limitMicros),
        String(entry.estimateMicros),
        String(entry.expiresAt),
      );
    }
    const reply = await new Promise<(string | number)[]>((resolve, reject) => {
      this.runner.evalshaArgs(
        scripts.reserve,
        args,
        (answer) => resolve(answer as (string | number)[]),
        (error) => {
          // No answer in time, a lost connection, the ledger closing, an error: the caller sends
          // nothing, but the script may have run, or still run (late, or re-sent by ioredis after a
          // reconnect). Release the id now, from inside the failure (so before a closing QUIT).
          this.cancel(id, now);
          reject(error);
        },
      );
    });
    if (reply[0] === 2) {
      // Released before it ran: only a reserve given up on is released so, never one awaited here.
      throw new StoreUnavailableError(`Redis ledger reservation ${id} was released before it ran`);
    }
    if (reply[0] !== 1) {
      return {
        ok: false,
        budgetId: String(reply[1]),
        spentMicros: num(reply[2]),
        reservedMicros: num(reply[3]),
        limitMicros: num(reply[4]),
        estimateMicros: num(reply[5]),
        resetAt: num(reply[6]),
        retryAt: num(reply[7]),
      };
    }
    return { ok: true, reservationId: String(reply[1]), totals: totals(reply, 2) };
  }

  settle(reservationId: string, actualMicros: number, now: number): Promise<LedgerSettleResult> {
    // Checked before anything is sent (see checkLedgerNow): the script would drop the hold, then
    // fail to charge a fraction.
    return Promise.resolve().then(() => {
      checkMicros(actualMicros, 'actualMicros');
      return this.apply(reservationId, String(actualMicros), now);
    });
  }

  release(reservationId: string, now: number): Promise<LedgerSettleResult> {
    return this.apply(reservationId, '', now);
  }

  async claimThreshold(claim: ThresholdClaim, now: number): Promise<ThresholdClaimResult> {
    this.checkOpen();
    checkLedgerNow(now);
    checkThresholdClaim(claim);
    const { start, end } = windowKey(claim);
    const wid = `${this.digests.get(claim.budgetId)}:${start}:${end}`;
    const rollingMs = claim.rollingMs === undefined ? '' : String(claim.rollingMs);
    const reply = (await this.runner.evalsha(scripts.claim, 1, [
      this.tagKey,
      String(now),
      wid,
      String(claim.threshold),
      rollingMs,
    ])) as (string | number)[];
    const firedAt = reply[1] === undefined ? undefined : num(reply[1]);
    return { claimed: reply[0] === 1, firedAt };
  }

  async snapshot(now: number): Promise<LedgerWindow[]> {
    this.checkOpen();
    checkLedgerNow(now);
    const reply = (await this.runner.evalsha(scripts.snapshot, 1, [this.tagKey, String(now)])) as string[];
    const windows: LedgerWindow[] = [];
    for (let i = 0; i + 7 < reply.length; i += 8) {
      const rollingMs = reply[i + 3] === '' ? undefined : num(reply[i + 3]);
      const spentMicros = num(reply[i + 4]);
      const reservedMicros = num(reply[i + 5]);
      const limitMicros = num(reply[i + 6]);
      windows.push({
        budgetId: reply[i]!,
        windowStart: rollingMs === undefined ? num(reply[i + 1]) : now - rollingMs,
        windowEnd: rollingMs === undefined ? num(reply[i + 2]) : now,
        rollingMs,
        spentMicros,
        reservedMicros,
        limitMicros,
        remainingMicros: Math.max(0, limitMicros - spentMicros - reservedMicros),
        resetAt: num(reply[i + 7]),
      });
    }
    return windows.sort((a, b) => (a.budgetId < b.budgetId ? -1 : a.budgetId > b.budgetId ? 1 : 0));
  }

  async reset(budgetId?: string): Promise<void> {
    this.checkOpen();
    await this.runner.evalsha(scripts.reset, 1, [this.tagKey, budgetId ?? '']);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Reserves in flight fail now and send their releases, ahead of the QUIT; releases waiting to
    // be sent again go once more, now (after the QUIT nothing could send them).
    this.runner.abandon();
    for (const [id, pending] of this.cancelling) {
      clearTimeout(pending.timer);
      this.cancelling.delete(id);
      this.cancel(id, pending.now);
    }
    if (this.ownsClient) await this.runner.quit();
  }

  /**
   * Release reservation `id`, whose reserve got no answer, and leave a tombstone (`TOMBSTONE_MS`)
   * so that the reserve holds nothing if it runs after this. A release of an id never reserved
   * changes nothing else.
   *
   * Order. On one connection Redis runs commands as they were written, and ioredis writes them in
   * call order: a release sent after its reserve runs after it. When the connection drops, ioredis
   * re-sends the commands written and not answered (`autoResendUnfulfilledCommands`) before its
   * offline queue, where this release waits: still after. That order does not always hold, hence
   * the tombstone and the retries: (1) a queue flush (`maxRetriesPerRequest`) rejects the offline
   * queue, this release with it, while a reserve written on a connection that died can stay in
   * ioredis's re-send queue (kept once a reconnect got as far as a TCP connection) and go out
   * later; this release, sent again until Redis answers it, then goes out after that re-send
   * (ioredis re-sends before anything else when a connection is ready); (2) a Cluster client sends
   * a redirected or TRYAGAIN command again after a delay, behind commands sent later.
   *
   * Sent with EVAL (the script's text): no NOSCRIPT round trip, and no command timeout, which
   * would drop it; it goes even after `close()` began (from `abandon`). Retries stop once closed.
   */
  private cancel(id: string, now: number, delayMs = CANCEL_RETRY_MS): void {
    this.runner.commands++;
    (
      this.client.call('EVAL', [
        LEDGER_SETTLE_LUA,
        1,
        this.tagKey,
        String(now),
        id,
        '',
        String(TOMBSTONE_MS),
      ]) as Promise<unknown>
    ).then(
      () => {},
      () => {
        if (this.closed) return;
        const timer = setTimeout(() => {
          this.cancelling.delete(id);
          this.cancel(id, now, Math.min(delayMs * 2, CANCEL_RETRY_CAP_MS));
        }, delayMs);
        // A release still unsent must not keep the process alive (a hold left by a process that
        // exits counts at its estimate once it expires, as for a process that died).
        timer.unref?.();
        this.cancelling.set(id, { now, timer });
      },
    );
  }

  private async apply(reservationId: string, actual: string, now: number): Promise<LedgerSettleResult> {
    this.checkOpen();
    checkLedgerNow(now);
    const reply = (await this.runner.evalsha(scripts.settle, 1, [
      this.tagKey,
      String(now),
      reservationId,
      actual,
    ])) as (string | number)[];
    if (reply[0] === -1) {
      // As the memory and file ledgers' addMicros: an actual cost past the exact range.
      throw new InvalidCostError(
        `Settling reservation ${reservationId} on budget \`${String(reply[1])}\` overflows: spent + reserved ` +
          `plus the actual cost ${actual} micros passes ${Number.MAX_SAFE_INTEGER} micros, the largest amount counted exactly`,
        'micros',
      );
    }
    if (reply[0] !== 1) return { found: false, totals: [] };
    return { found: true, totals: totals(reply, 1) };
  }

  private checkOpen(): void {
    if (this.closed) throw new StoreUnavailableError('Redis ledger is closed');
  }
}

function totals(reply: readonly (string | number)[], from: number): LedgerTotals[] {
  const out: LedgerTotals[] = [];
  for (let i = from; i + 3 < reply.length; i += 4) {
    out.push({
      budgetId: String(reply[i]),
      spentMicros: num(reply[i + 1]),
      reservedMicros: num(reply[i + 2]),
      limitMicros: num(reply[i + 3]),
    });
  }
  return out;
}
