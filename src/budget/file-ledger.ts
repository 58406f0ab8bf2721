/**
 * The embedded persistent ledger: one SQLite file (through the optional dependency `better-sqlite3`),
 * shared safely by every process on one machine and kept across restarts.
 *
 * - Durable before the request is sent: `reserve` commits its transaction before returning. The
 *   journal is WAL with `synchronous=NORMAL`: a commit is in the WAL (the OS's cache) when it
 *   returns, so it survives the process crashing or being killed; only a power loss or kernel crash
 *   can lose the last commits (use `synchronous: 'full'` to pay an fsync per commit for that too).
 * - Safe across processes: every change runs in `BEGIN IMMEDIATE`, which takes SQLite's write lock
 *   before reading, so check-then-reserve is atomic; a process waiting for the lock retries for up
 *   to `busyTimeoutMs`.
 * - Never a silent reset: a file that is not a tollgate ledger (garbage, another database, damaged
 *   pages, a newer schema) raises `LedgerCorruptError` and is not modified.
 *
 * Default path: `.tollgate/ledger.sqlite` under the current working directory (see `defaultLedgerPath`).
 */

import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { InvalidOptionError, StoreUnavailableError, TollgateError } from '../errors.js';
import { requireOptional } from '../optional-dependency.js';
import { integer, invalid, oneOf, plainObject } from '../validate.js';
import {
  fits,
  type LogEntry,
  rollingResetAt,
  rollingRetryAt,
  rollingSettleDate,
  thresholdDue,
} from './budget.js';
import { LedgerCorruptError } from './errors.js';
import type {
  Ledger,
  LedgerEntry,
  LedgerReserveResult,
  LedgerSettleResult,
  LedgerTotals,
  LedgerWindow,
  ThresholdClaim,
  ThresholdClaimResult,
} from './ledger.js';
import {
  checkLedgerEntries,
  checkLedgerNow,
  checkThresholdClaim,
  ROLLING_WINDOW_START,
  windowKey,
} from './ledger.js';
import { addMicros, checkMicros } from './money.js';

/** Schema version written to `PRAGMA user_version`. Bump with a migration when the schema changes. */
export const LEDGER_SCHEMA_VERSION = 1;

const FORMAT = 'tollgate-ledger';

export interface FileLedgerOptions {
  /**
   * The ledger file. Its directory is created if missing.
   * @default defaultLedgerPath() = `${process.cwd()}/.tollgate/ledger.sqlite`
   */
  path?: string;
  /**
   * How long a process waits for another one's write lock before failing with
   * `StoreUnavailableError`. Integer >= 0.
   * @default 5000
   */
  busyTimeoutMs?: number;
  /**
   * `'normal'`: commits survive a process crash (not a power loss); fast.
   * `'full'`: an fsync per commit; survives a power loss; far slower.
   * @default 'normal'
   */
  synchronous?: 'normal' | 'full';
}

/**
 * The default ledger file: `.tollgate/ledger.sqlite` under `cwd` (the current directory). Per
 * project rather than per user (`~/.local/state`), because budget names such as `day` would collide
 * between unrelated projects of one user; it is visible next to the code that spends, and easy to
 * ignore in git. A job started from another directory gets another ledger: pass `path` to share one.
 */
export function defaultLedgerPath(cwd: string = process.cwd()): string {
  return join(cwd, '.tollgate', 'ledger.sqlite');
}

type DatabaseConstructor = typeof BetterSqlite3;

// better-sqlite3 is optional: load it only when a file ledger is created.
function loadSqlite(): DatabaseConstructor {
  try {
    return requireOptional('better-sqlite3') as DatabaseConstructor;
  } catch (error) {
    throw new InvalidOptionError(
      'ledger',
      'The file ledger needs the optional dependency `better-sqlite3` (npm install better-sqlite3), ' +
        `which could not be loaded (${(error as Error).message}). Install it, or pass \`ledger: 'memory'\` ` +
        'for a ledger that is not persisted.',
    );
  }
}

/**
 * Thresholds fired in the window, as JSON (`{"0.8": <ms it fired at>}`), read and written only by
 * `claimThreshold`. Added to schema 1 in place (`addFiredColumn`), without a new version: a file
 * that has it still opens in an older tollgate, which ignores it (and drops it with its window).
 */
const FIRED_COLUMN = 'fired TEXT';

const SCHEMA = `
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
-- One row per budget window. Calendar: [window_start, window_end). Rolling: window_start is
-- ${ROLLING_WINDOW_START} and window_end = window_start + rolling_ms, one row per (budget, length).
CREATE TABLE windows (
  budget_id TEXT NOT NULL,
  window_start REAL NOT NULL,
  window_end REAL NOT NULL,
  rolling_ms REAL,
  limit_micros INTEGER NOT NULL,
  spent_micros INTEGER NOT NULL,
  reserved_micros INTEGER NOT NULL,
  ${FIRED_COLUMN},
  PRIMARY KEY (budget_id, window_start, window_end)
) WITHOUT ROWID;
-- Reservations in flight, one row per budget held. reserved_micros above is their sum.
CREATE TABLE holds (
  reservation_id TEXT NOT NULL,
  budget_id TEXT NOT NULL,
  window_start REAL NOT NULL,
  window_end REAL NOT NULL,
  at REAL NOT NULL,
  micros INTEGER NOT NULL,
  expires_at REAL NOT NULL,
  PRIMARY KEY (reservation_id, budget_id)
) WITHOUT ROWID;
CREATE INDEX holds_by_window ON holds (budget_id, window_start, window_end, expires_at);
-- Rolling windows: settled spend by time, dropped once older than the window. (Rolling holds are
-- dropped rolling_ms after they expired.)
CREATE TABLE rolling_log (budget_id TEXT NOT NULL, window_end REAL NOT NULL, at REAL NOT NULL, micros INTEGER NOT NULL);
CREATE INDEX rolling_log_by_time ON rolling_log (budget_id, window_end, at);
`;

interface WindowRow {
  budget_id: string;
  window_start: number;
  window_end: number;
  rolling_ms: number | null;
  limit_micros: number;
  spent_micros: number;
  reserved_micros: number;
}

interface HoldRow {
  budget_id: string;
  window_start: number;
  window_end: number;
  at: number;
  micros: number;
  expires_at: number;
}

type Stmt<P extends unknown[], R = unknown> = BetterSqlite3.Statement<P, R>;

const fileLedgerOptionKeys: readonly string[] = ['path', 'busyTimeoutMs', 'synchronous'];

/** A ledger in a SQLite file shared by processes on one machine. Construct with `new FileLedger(options)`. */
export class FileLedger implements Ledger {
  /** The absolute path of the ledger file. */
  readonly path: string;
  private readonly db: BetterSqlite3.Database;
  private readonly tag = randomBytes(6).toString('base64url');
  private nextId = 1;
  // Rolling windows: when this process last dropped old entries, per window; bounds table growth.
  private readonly lastPrune = new Map<string, number>();

  private readonly s: {
    getWindow: Stmt<[string, number, number], { s: number; r: number; l: number }>;
    getFired: Stmt<[string, number, number], { fired: string | null; rolling_ms: number | null }>;
    setFired: Stmt<[string, string, number, number]>;
    setLimit: Stmt<[number, string, number, number]>;
    insertWindow: Stmt<[string, number, number, number | null, number]>;
    dropOtherWindows: Stmt<[{ id: string; start: number; end: number; rolling: number }]>;
    dropOrphanHolds: Stmt<[{ id: string }]>;
    dropOrphanLog: Stmt<[{ id: string }]>;
    addReserved: Stmt<[number, string, number, number], { s: number; r: number }>;
    insertHold: Stmt<[string, string, number, number, number, number, number]>;
    holdsOf: Stmt<[string], HoldRow>;
    deleteHolds: Stmt<[string]>;
    applyHold: Stmt<[number, number, string, number, number], { s: number; r: number; l: number }>;
    insertLog: Stmt<[string, number, number, number]>;
    pruneLog: Stmt<[string, number, number], { micros: number }>;
    pruneHolds: Stmt<[string, number, number, number], { micros: number }>;
    subtract: Stmt<[number, number, string, number, number]>;
    expired: Stmt<[string, number, number, number], { m: number }>;
    counted: Stmt<[{ id: string; start: number; end: number; now: number; rm: number }], LogEntry>;
    current: Stmt<[{ now: number }], WindowRow>;
  };

  constructor(options: FileLedgerOptions = {}) {
    const o = plainObject('ledger', options);
    // A misspelt key (`pth`) would otherwise open the default file and record spend there.
    for (const key of Object.keys(o)) {
      if (!fileLedgerOptionKeys.includes(key)) {
        throw invalid(`ledger.${key}`, `not set (known: ${fileLedgerOptionKeys.join(', ')})`, o[key]);
      }
    }
    const path = options.path ?? defaultLedgerPath();
    if (typeof path !== 'string' || path.length === 0) throw invalid('ledger.path', 'a file path', path);
    const busyTimeoutMs = integer('ledger.busyTimeoutMs', options.busyTimeoutMs ?? 5000, 0);
    const synchronous = oneOf('ledger.synchronous', options.synchronous ?? 'normal', ['normal', 'full']);
    this.path = resolve(path);
    const Database = loadSqlite();
    let fresh: boolean;
    try {
      if (!existsSync(dirname(this.path))) mkdirSync(dirname(this.path), { recursive: true });
      fresh = !existsSync(this.path) || statSync(this.path).size === 0;
    } catch (error) {
      throw new StoreUnavailableError(`Cannot create ledger file ${this.path}: ${(error as Error).message}`, {
        cause: error,
      });
    }

    let db: BetterSqlite3.Database;
    try {
      db = new Database(this.path, { timeout: busyTimeoutMs });
    } catch (error) {
      throw new StoreUnavailableError(`Cannot open ledger file ${this.path}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    try {
      if (!fresh) checkExisting(db, this.path);
      enableWal(db, busyTimeoutMs);
      db.pragma(`synchronous = ${synchronous.toUpperCase()}`);
      db.transaction(() => initSchema(db, this.path)).immediate();
    } catch (error) {
      db.close();
      throw this.translate(error);
    }
    this.db = db;
    this.s = {
      getWindow: db.prepare(
        'SELECT spent_micros AS s, reserved_micros AS r, limit_micros AS l FROM windows WHERE budget_id = ? AND window_start = ? AND window_end = ?',
      ),
      getFired: db.prepare(
        'SELECT fired, rolling_ms FROM windows WHERE budget_id = ? AND window_start = ? AND window_end = ?',
      ),
      setFired: db.prepare(
        'UPDATE windows SET fired = ? WHERE budget_id = ? AND window_start = ? AND window_end = ?',
      ),
      setLimit: db.prepare(
        'UPDATE windows SET limit_micros = ? WHERE budget_id = ? AND window_start = ? AND window_end = ?',
      ),
      insertWindow: db.prepare(
        'INSERT INTO windows (budget_id, window_start, window_end, rolling_ms, limit_micros, spent_micros, reserved_micros) VALUES (?, ?, ?, ?, ?, 0, 0)',
      ),
      // On a new window: keep only the previous calendar window (a settle may still land there);
      // rolling rows of this budget other than the new one belong to an old period definition.
      dropOtherWindows: db.prepare(
        `DELETE FROM windows WHERE budget_id = @id AND NOT (window_start = @start AND window_end = @end)
           AND (rolling_ms IS NOT NULL OR @rolling = 1 OR window_end < @start)`,
      ),
      dropOrphanHolds: db.prepare(
        `DELETE FROM holds WHERE budget_id = @id AND NOT EXISTS (SELECT 1 FROM windows w
           WHERE w.budget_id = @id AND w.window_start = holds.window_start AND w.window_end = holds.window_end)`,
      ),
      dropOrphanLog: db.prepare(
        `DELETE FROM rolling_log WHERE budget_id = @id AND NOT EXISTS (SELECT 1 FROM windows w
           WHERE w.budget_id = @id AND w.window_end = rolling_log.window_end AND w.rolling_ms IS NOT NULL)`,
      ),
      addReserved: db.prepare(
        `UPDATE windows SET reserved_micros = reserved_micros + ?
           WHERE budget_id = ? AND window_start = ? AND window_end = ? RETURNING spent_micros AS s, reserved_micros AS r`,
      ),
      insertHold: db.prepare(
        'INSERT INTO holds (reservation_id, budget_id, window_start, window_end, at, micros, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      holdsOf: db.prepare(
        'SELECT budget_id, window_start, window_end, at, micros, expires_at FROM holds WHERE reservation_id = ? ORDER BY budget_id',
      ),
      deleteHolds: db.prepare('DELETE FROM holds WHERE reservation_id = ?'),
      // Settle: the hold's estimate leaves reserved, the actual joins spent (release: actual 0).
      applyHold: db.prepare(
        `UPDATE windows SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?
           WHERE budget_id = ? AND window_start = ? AND window_end = ?
           RETURNING spent_micros AS s, reserved_micros AS r, limit_micros AS l`,
      ),
      insertLog: db.prepare(
        'INSERT INTO rolling_log (budget_id, window_end, at, micros) VALUES (?, ?, ?, ?)',
      ),
      pruneLog: db.prepare(
        'DELETE FROM rolling_log WHERE budget_id = ? AND window_end = ? AND at <= ? RETURNING micros',
      ),
      // Rolling holds leave rollingMs after they expired (holds_by_window finds them).
      pruneHolds: db.prepare(
        'DELETE FROM holds WHERE budget_id = ? AND window_start = ? AND window_end = ? AND expires_at <= ? RETURNING micros',
      ),
      subtract: db.prepare(
        `UPDATE windows SET spent_micros = spent_micros - ?, reserved_micros = reserved_micros - ?
           WHERE budget_id = ? AND window_start = ? AND window_end = ?`,
      ),
      expired: db.prepare(
        `SELECT coalesce(sum(micros), 0) AS m FROM holds
           WHERE budget_id = ? AND window_start = ? AND window_end = ? AND expires_at <= ?`,
      ),
      // Rolling: settled spend by its date, holds by the date they leave from (budget.ts rollingHoldDate).
      counted: db.prepare(
        `SELECT at, micros FROM rolling_log WHERE budget_id = @id AND window_end = @end
         UNION ALL SELECT CASE WHEN expires_at <= @now THEN expires_at WHEN at > @now - @rm THEN at ELSE @now END,
           micros FROM holds WHERE budget_id = @id AND window_start = @start AND window_end = @end`,
      ),
      current: db.prepare(
        `SELECT * FROM windows WHERE rolling_ms IS NOT NULL OR (window_start <= @now AND window_end > @now)
           ORDER BY budget_id, window_start`,
      ),
    };
  }

  reserve(entries: readonly LedgerEntry[], now: number): LedgerReserveResult {
    checkLedgerNow(now);
    checkLedgerEntries(entries);
    return this.run(() => this.reserveTx.immediate(entries, now));
  }

  settle(reservationId: string, actualMicros: number, now: number): LedgerSettleResult {
    checkLedgerNow(now);
    checkMicros(actualMicros, 'actualMicros');
    return this.run(() => this.applyTx.immediate(reservationId, actualMicros, now));
  }

  release(reservationId: string, now: number): LedgerSettleResult {
    checkLedgerNow(now);
    return this.run(() => this.applyTx.immediate(reservationId, undefined, now));
  }

  snapshot(now: number): LedgerWindow[] {
    checkLedgerNow(now);
    return this.run(() => this.snapshotTx.immediate(now));
  }

  claimThreshold(claim: ThresholdClaim, now: number): ThresholdClaimResult {
    checkLedgerNow(now);
    checkThresholdClaim(claim);
    return this.run(() => this.claimTx.immediate(claim, now));
  }

  reset(budgetId?: string): void {
    this.run(() =>
      this.db
        .transaction(() => {
          for (const table of ['windows', 'holds', 'rolling_log']) {
            if (budgetId === undefined) this.db.prepare(`DELETE FROM ${table}`).run();
            else
              this.db
                .prepare(
                  `DELETE FROM ${table} WHERE budget_id = @id OR substr(budget_id, 1, length(@prefix)) = @prefix`,
                )
                .run({ id: budgetId, prefix: `${budgetId}[` });
          }
        })
        .immediate(),
    );
    this.lastPrune.clear();
  }

  close(): void {
    if (this.db.open) this.db.close();
  }

  // --- transactions (run inside BEGIN IMMEDIATE) ---

  private readonly reserveTx = this.lazyTx(
    (entries: readonly LedgerEntry[], now: number): LedgerReserveResult => {
      const s = this.s;
      for (const entry of entries) {
        const { start, end } = windowKey(entry);
        let row = s.getWindow.get(entry.budgetId, start, end);
        if (row === undefined) {
          this.openWindow(entry, start, end);
          row = { s: 0, r: 0, l: entry.limitMicros };
        } else if (row.l !== entry.limitMicros) {
          // The configuration changed: the latest limit applies (and is what snapshots report).
          s.setLimit.run(entry.limitMicros, entry.budgetId, start, end);
        }
        if (entry.rollingMs !== undefined) {
          const pruneKey = `${entry.budgetId}\u0000${end}`;
          const last = this.lastPrune.get(pruneKey);
          // Before refusing, always drop what left the window (admission stays exact); otherwise now
          // and then, so the log stays small. Pruning late only over-counts, never under-counts.
          const due = last === undefined || now - last >= entry.rollingMs / 16;
          if (due || !fits(row.s, row.r, entry.estimateMicros, entry.limitMicros)) {
            this.pruneRolling(entry.budgetId, end, now - entry.rollingMs);
            this.lastPrune.set(pruneKey, now);
            row = s.getWindow.get(entry.budgetId, start, end)!;
          }
        }
        if (!fits(row.s, row.r, entry.estimateMicros, entry.limitMicros))
          return this.refusal(entry, start, end, now);
      }
      const reservationId = `${this.tag}.${this.nextId++}`;
      const totals: LedgerTotals[] = [];
      for (const entry of entries) {
        const { start, end } = windowKey(entry);
        const after = s.addReserved.get(entry.estimateMicros, entry.budgetId, start, end)!;
        s.insertHold.run(
          reservationId,
          entry.budgetId,
          start,
          end,
          now,
          entry.estimateMicros,
          // Rolling: a hold leaves rollingMs after it expired, so never before rollingMs after now.
          entry.rollingMs !== undefined && entry.expiresAt < now ? now : entry.expiresAt,
        );
        totals.push({
          budgetId: entry.budgetId,
          spentMicros: after.s,
          reservedMicros: after.r,
          limitMicros: entry.limitMicros,
        });
      }
      return { ok: true, reservationId, totals };
    },
  );

  // actualMicros undefined: release.
  private readonly applyTx = this.lazyTx(
    (reservationId: string, actualMicros: number | undefined, now: number): LedgerSettleResult => {
      const s = this.s;
      const holds = s.holdsOf.all(reservationId);
      if (holds.length === 0) return { found: false, totals: [] };
      const live: HoldRow[] = [];
      for (const hold of holds) {
        // Rolling (end - start is rollingMs): a hold that expired rollingMs or more ago has left the
        // window. Pruning is lazy here, so drop it now as pruning would: it is not held, nothing is
        // charged.
        if (
          hold.window_start === ROLLING_WINDOW_START &&
          hold.expires_at <= now - (hold.window_end - hold.window_start)
        ) {
          s.subtract.run(0, hold.micros, hold.budget_id, hold.window_start, hold.window_end);
          continue;
        }
        if (actualMicros !== undefined) {
          // Every budget before any change: spent + reserved is exact (the invariant, see money.ts),
          // and the actual cost may exceed the estimate by any amount.
          const row = s.getWindow.get(hold.budget_id, hold.window_start, hold.window_end);
          if (row !== undefined) {
            addMicros(
              row.s + row.r - hold.micros,
              actualMicros,
              `Settling reservation ${reservationId} on budget \`${hold.budget_id}\` (spent + reserved, then the actual cost)`,
            );
          }
        }
        live.push(hold);
      }
      s.deleteHolds.run(reservationId);
      const totals: LedgerTotals[] = [];
      for (const hold of live) {
        const after = s.applyHold.get(
          hold.micros,
          actualMicros ?? 0,
          hold.budget_id,
          hold.window_start,
          hold.window_end,
        );
        if (after === undefined) continue;
        if (actualMicros !== undefined && actualMicros > 0 && hold.window_start === ROLLING_WINDOW_START) {
          // Rolling: spend is dated when the call was sent, the hold's `at`, unless that has left the
          // window (a long call): then now (budget.ts rollingSettleDate).
          const date = rollingSettleDate(hold.at, hold.window_end - hold.window_start, now);
          s.insertLog.run(hold.budget_id, hold.window_end, date, actualMicros);
        }
        totals.push({
          budgetId: hold.budget_id,
          spentMicros: after.s,
          reservedMicros: after.r,
          limitMicros: after.l,
        });
      }
      // Found only if some window still held it (not one dropped, nor a rolling hold expired a window ago).
      return { found: totals.length > 0, totals };
    },
  );

  // Read and written under the write lock: of the processes claiming one threshold, one records it.
  private readonly claimTx = this.lazyTx((claim: ThresholdClaim, now: number): ThresholdClaimResult => {
    const { start, end } = windowKey(claim);
    const row = this.s.getFired.get(claim.budgetId, start, end);
    if (row === undefined) return { claimed: false, firedAt: undefined };
    const fired = firedOf(row.fired);
    const key = String(claim.threshold);
    const last = fired[key];
    if (!thresholdDue(last, row.rolling_ms ?? undefined, now)) return { claimed: false, firedAt: last };
    fired[key] = now;
    this.s.setFired.run(JSON.stringify(fired), claim.budgetId, start, end);
    return { claimed: true, firedAt: now };
  });

  private readonly snapshotTx = this.lazyTx((now: number): LedgerWindow[] => {
    const rows = this.s.current.all({ now });
    const windows: LedgerWindow[] = [];
    for (const row of rows) {
      const rolling = row.rolling_ms !== null;
      if (rolling) {
        this.pruneRolling(row.budget_id, row.window_end, now - row.rolling_ms!);
        const fresh = this.s.getWindow.get(row.budget_id, row.window_start, row.window_end)!;
        row.spent_micros = fresh.s;
        row.reserved_micros = fresh.r;
      }
      const expired = this.s.expired.get(row.budget_id, row.window_start, row.window_end, now)!.m;
      const spentMicros = row.spent_micros + expired;
      const reservedMicros = row.reserved_micros - expired;
      windows.push({
        budgetId: row.budget_id,
        windowStart: rolling ? now - row.rolling_ms! : row.window_start,
        windowEnd: rolling ? now : row.window_end,
        rollingMs: rolling ? row.rolling_ms! : undefined,
        spentMicros,
        reservedMicros,
        limitMicros: row.limit_micros,
        remainingMicros: Math.max(0, row.limit_micros - spentMicros - reservedMicros),
        resetAt: rolling
          ? rollingResetAt(
              this.s.counted.all({
                id: row.budget_id,
                start: row.window_start,
                end: row.window_end,
                now,
                rm: row.rolling_ms!,
              }),
              row.rolling_ms!,
              now,
            )
          : row.window_end,
      });
    }
    return windows;
  });

  private openWindow(entry: LedgerEntry, start: number, end: number): void {
    const s = this.s;
    s.insertWindow.run(entry.budgetId, start, end, entry.rollingMs ?? null, entry.limitMicros);
    s.dropOtherWindows.run({
      id: entry.budgetId,
      start,
      end,
      rolling: entry.rollingMs === undefined ? 0 : 1,
    });
    s.dropOrphanHolds.run({ id: entry.budgetId });
    s.dropOrphanLog.run({ id: entry.budgetId });
  }

  // Drop rolling spend dated at or before `cutoff` and holds expired by then (both have been in the
  // window rollingMs since).
  private pruneRolling(budgetId: string, end: number, cutoff: number): void {
    let spent = 0;
    for (const r of this.s.pruneLog.all(budgetId, end, cutoff)) spent += r.micros;
    let reserved = 0;
    for (const r of this.s.pruneHolds.all(budgetId, ROLLING_WINDOW_START, end, cutoff)) reserved += r.micros;
    if (spent !== 0 || reserved !== 0)
      this.s.subtract.run(spent, reserved, budgetId, ROLLING_WINDOW_START, end);
  }

  private refusal(entry: LedgerEntry, start: number, end: number, now: number): LedgerReserveResult {
    const row = this.s.getWindow.get(entry.budgetId, start, end)!;
    const expired = this.s.expired.get(entry.budgetId, start, end, now)!.m;
    let resetAt = end;
    let retryAt = entry.estimateMicros <= entry.limitMicros ? end : Infinity;
    if (entry.rollingMs !== undefined) {
      const counted = this.s.counted.all({ id: entry.budgetId, start, end, now, rm: entry.rollingMs });
      resetAt = rollingResetAt(counted, entry.rollingMs, now);
      retryAt = rollingRetryAt(counted, entry.rollingMs, entry.estimateMicros, entry.limitMicros, now);
    }
    return {
      ok: false,
      budgetId: entry.budgetId,
      spentMicros: row.s + expired,
      reservedMicros: row.r - expired,
      limitMicros: entry.limitMicros,
      estimateMicros: entry.estimateMicros,
      resetAt,
      retryAt,
    };
  }

  // Transactions are built on first use: class fields initialize before the constructor body runs.
  private lazyTx<A extends unknown[], R>(fn: (...args: A) => R): { immediate: (...args: A) => R } {
    let tx: BetterSqlite3.Transaction<(...args: A) => R> | undefined;
    return {
      immediate: (...args: A): R => {
        tx ??= this.db.transaction(fn);
        return tx.immediate(...args);
      },
    };
  }

  private run<R>(fn: () => R): R {
    if (!this.db.open) throw new StoreUnavailableError(`Ledger ${this.path} is closed`);
    try {
      return fn();
    } catch (error) {
      throw this.translate(error);
    }
  }

  private translate(error: unknown): unknown {
    if (error instanceof TollgateError) return error;
    const code = (error as { code?: unknown }).code;
    if (code === 'SQLITE_CORRUPT' || code === 'SQLITE_NOTADB' || code === 'SQLITE_CORRUPT_INDEX') {
      return new LedgerCorruptError(this.path, (error as Error).message, { cause: error });
    }
    if (typeof code === 'string' && code.startsWith('SQLITE_')) {
      return new StoreUnavailableError(`Ledger ${this.path}: ${(error as Error).message} (${code})`, {
        cause: error,
      });
    }
    return error;
  }
}

// Reads only: a file that fails any check is reported and left exactly as it was.
/**
 * Put the file in WAL mode (a no-op once it is). Switching needs the file to itself, and SQLite
 * answers SQLITE_BUSY at once, without its busy handler, where waiting could deadlock two
 * connections: 4 processes opening one new ledger together failed so in CI (once). The switch is
 * asked again every 10 ms, for up to `timeoutMs`, as a busy lock is waited for elsewhere.
 */
export function enableWal(db: Pick<BetterSqlite3.Database, 'pragma'>, timeoutMs: number): void {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      db.pragma('journal_mode = WAL');
      return;
    } catch (error) {
      if ((error as { code?: unknown }).code !== 'SQLITE_BUSY' || Date.now() >= deadline) throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
  }
}

function checkExisting(db: BetterSqlite3.Database, path: string): void {
  let version: number;
  let tables: string[];
  try {
    version = db.pragma('user_version', { simple: true }) as number;
    tables = (
      db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]
    ).map((r) => r.name);
  } catch (error) {
    throw new LedgerCorruptError(path, `not a SQLite database (${(error as Error).message})`, {
      cause: error,
    });
  }
  if (version === 0 && tables.length === 0) return; // an empty database: initSchema creates the tables
  if (version > LEDGER_SCHEMA_VERSION) {
    throw new LedgerCorruptError(
      path,
      `written by a newer tollgate (schema ${version}, this one reads ${LEDGER_SCHEMA_VERSION})`,
    );
  }
  let format: string | undefined;
  try {
    format = (
      db.prepare("SELECT value FROM meta WHERE key = 'format'").get() as { value: string } | undefined
    )?.value;
  } catch {
    format = undefined;
  }
  if (format !== FORMAT || version !== LEDGER_SCHEMA_VERSION) {
    throw new LedgerCorruptError(path, 'a SQLite database, but not a tollgate ledger');
  }
  let check: string[];
  try {
    check = db.pragma('quick_check', { simple: false }) as string[];
  } catch (error) {
    throw new LedgerCorruptError(path, `integrity check failed (${(error as Error).message})`, {
      cause: error,
    });
  }
  const problems = (check as unknown as Record<string, string>[]).map((r) => Object.values(r)[0]);
  if (problems.length !== 1 || problems[0] !== 'ok') {
    throw new LedgerCorruptError(path, `integrity check failed: ${problems.slice(0, 3).join('; ')}`);
  }
}

/** The thresholds of a window's `fired` column; a value this version did not write counts as none. */
function firedOf(text: string | null): Record<string, number | undefined> {
  if (text === null) return {};
  try {
    const value = JSON.parse(text) as unknown;
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      const fired: Record<string, number | undefined> = {};
      for (const [key, at] of Object.entries(value)) if (typeof at === 'number') fired[key] = at;
      return fired;
    }
  } catch {
    // Not JSON: nothing recorded (a threshold fires again rather than never).
  }
  return {};
}

/** A schema-1 file written before thresholds were recorded gets the `fired` column (see FIRED_COLUMN). */
function addFiredColumn(db: BetterSqlite3.Database): void {
  const columns = db.prepare('SELECT name FROM pragma_table_info(?)').all('windows') as { name: string }[];
  if (!columns.some((c) => c.name === 'fired')) db.exec(`ALTER TABLE windows ADD COLUMN ${FIRED_COLUMN}`);
}

function initSchema(db: BetterSqlite3.Database, path: string): void {
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version === LEDGER_SCHEMA_VERSION) {
    addFiredColumn(db);
    return;
  }
  if (version !== 0) throw new LedgerCorruptError(path, `unexpected schema version ${version}`);
  const tables = db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE type = 'table'").get() as {
    n: number;
  };
  if (tables.n !== 0) throw new LedgerCorruptError(path, 'a SQLite database, but not a tollgate ledger');
  db.exec(SCHEMA);
  db.prepare('INSERT INTO meta (key, value) VALUES (?, ?), (?, ?)').run(
    'format',
    FORMAT,
    'version',
    String(LEDGER_SCHEMA_VERSION),
  );
  db.pragma(`user_version = ${LEDGER_SCHEMA_VERSION}`);
}
