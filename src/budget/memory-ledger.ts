import { StoreUnavailableError } from '../errors.js';
import {
  type Account,
  addHold,
  checkCharge,
  dropHolds,
  fits,
  type LogEntry,
  newAccount,
  pruneRolling,
  releaseHold,
  reportedTotals,
  rollingHoldDate,
  rollingResetAt,
  rollingRetryAt,
  settleHold,
  thresholdDue,
} from './budget.js';
import {
  checkLedgerEntries,
  checkLedgerNow,
  checkThresholdClaim,
  type Ledger,
  type LedgerEntry,
  type LedgerReserveResult,
  type LedgerSettleResult,
  type LedgerTotals,
  type LedgerWindow,
  matchesBudget,
  type ThresholdClaim,
  type ThresholdClaimResult,
  windowKey,
} from './ledger.js';
import { checkMicros } from './money.js';

/**
 * A ledger in this process's memory: exact and fast, but forgotten on exit and not shared with other
 * processes. Use it for tests and for short-lived programs that need no persistence.
 */
export class MemoryLedger implements Ledger {
  // Per budget id: its current window and the previous one (late settles still land there).
  private readonly accounts = new Map<string, Account[]>();
  // Reservation id -> the accounts it holds.
  private readonly reservations = new Map<string, Account[]>();
  private nextId = 1;
  private closed = false;

  reserve(entries: readonly LedgerEntry[], now: number): LedgerReserveResult {
    this.checkOpen();
    checkLedgerNow(now);
    checkLedgerEntries(entries);
    const held: Account[] = [];
    for (const entry of entries) {
      const account = this.accountFor(entry);
      account.limitMicros = entry.limitMicros;
      pruneRolling(account, now);
      if (!fits(account.spentMicros, account.reservedMicros, entry.estimateMicros, entry.limitMicros)) {
        return refusal(account, entry, now);
      }
      held.push(account);
    }
    const reservationId = `m${this.nextId++}`;
    const totals: LedgerTotals[] = [];
    for (let i = 0; i < held.length; i++) {
      const account = held[i]!;
      const entry = entries[i]!;
      addHold(account, { reservationId, at: now, micros: entry.estimateMicros, expiresAt: entry.expiresAt });
      totals.push(totalsOf(account));
    }
    this.reservations.set(reservationId, held);
    return { ok: true, reservationId, totals };
  }

  settle(reservationId: string, actualMicros: number, now: number): LedgerSettleResult {
    this.checkOpen();
    checkLedgerNow(now);
    checkMicros(actualMicros, 'actualMicros');
    const held = this.reservations.get(reservationId);
    if (held === undefined) return { found: false, totals: [] };
    // Every budget first: a charge past the exact range on one changes none.
    for (const account of held) checkCharge(account, reservationId, actualMicros, now);
    this.reservations.delete(reservationId);
    const totals: LedgerTotals[] = [];
    for (const account of held) {
      if (settleHold(account, reservationId, actualMicros, now)) totals.push(totalsOf(account));
    }
    // Found only if some window still held it (not one dropped, nor a rolling hold expired a window ago).
    return { found: totals.length > 0, totals };
  }

  release(reservationId: string, now: number): LedgerSettleResult {
    this.checkOpen();
    checkLedgerNow(now);
    const held = this.reservations.get(reservationId);
    if (held === undefined) return { found: false, totals: [] };
    this.reservations.delete(reservationId);
    const totals: LedgerTotals[] = [];
    for (const account of held) {
      if (releaseHold(account, reservationId, now)) totals.push(totalsOf(account));
    }
    return { found: totals.length > 0, totals };
  }

  claimThreshold(claim: ThresholdClaim, now: number): ThresholdClaimResult {
    this.checkOpen();
    checkLedgerNow(now);
    checkThresholdClaim(claim);
    const { start, end } = windowKey(claim);
    const account = this.accounts
      .get(claim.budgetId)
      ?.find((a) => a.windowStart === start && a.windowEnd === end);
    if (account === undefined) return { claimed: false, firedAt: undefined };
    const last = account.fired.get(claim.threshold);
    if (!thresholdDue(last, account.rollingMs, now)) return { claimed: false, firedAt: last };
    account.fired.set(claim.threshold, now);
    return { claimed: true, firedAt: now };
  }

  snapshot(now: number): LedgerWindow[] {
    this.checkOpen();
    checkLedgerNow(now);
    const windows: LedgerWindow[] = [];
    for (const list of this.accounts.values()) {
      for (const account of list) {
        if (account.rollingMs !== undefined) pruneRolling(account, now);
        else if (!(account.windowStart <= now && now < account.windowEnd)) continue;
        windows.push(windowOf(account, now));
      }
    }
    return windows.sort((a, b) => (a.budgetId < b.budgetId ? -1 : a.budgetId > b.budgetId ? 1 : 0));
  }

  reset(budgetId?: string): void {
    this.checkOpen();
    const dropped = new Set<Account>();
    for (const [id, list] of this.accounts) {
      if (!matchesBudget(id, budgetId)) continue;
      for (const account of list) dropped.add(account);
      this.accounts.delete(id);
    }
    for (const [id, held] of this.reservations) {
      const kept = held.filter((a) => !dropped.has(a));
      if (kept.length === 0) this.reservations.delete(id);
      else if (kept.length !== held.length) this.reservations.set(id, kept);
    }
  }

  close(): void {
    this.closed = true;
  }

  private checkOpen(): void {
    if (this.closed) throw new StoreUnavailableError('Ledger is closed');
  }

  private accountFor(entry: LedgerEntry): Account {
    const { start, end } = windowKey(entry);
    let list = this.accounts.get(entry.budgetId);
    if (list === undefined) {
      list = [];
      this.accounts.set(entry.budgetId, list);
    }
    for (const account of list)
      if (account.windowStart === start && account.windowEnd === end) return account;
    const account = newAccount(entry.budgetId, start, end, entry.rollingMs, entry.limitMicros);
    // A new calendar window: keep the previous one (a settle may still arrive for it) and drop older
    // ones. Rolling accounts of another length are dropped too (the budget's period changed).
    const kept: Account[] = [];
    for (const a of list) {
      if (a.rollingMs === undefined && entry.rollingMs === undefined && a.windowEnd >= start) kept.push(a);
      // Reservations may still point at a dropped account: with no holds, settling them finds nothing.
      else dropHolds(a);
    }
    kept.push(account);
    this.accounts.set(entry.budgetId, kept);
    return account;
  }
}

function totalsOf(account: Account): LedgerTotals {
  return {
    budgetId: account.budgetId,
    spentMicros: account.spentMicros,
    reservedMicros: account.reservedMicros,
    limitMicros: account.limitMicros,
  };
}

// Rolling: settled spend by its date, holds by the date they leave the window from.
function countedEntries(account: Account, now: number): LogEntry[] {
  const rollingMs = account.rollingMs!;
  const entries: LogEntry[] = [...account.log];
  for (const h of account.holds.values())
    entries.push({ at: rollingHoldDate(h.at, h.expiresAt, rollingMs, now), micros: h.micros });
  return entries;
}

function resetAtOf(account: Account, now: number): number {
  return account.rollingMs === undefined
    ? account.windowEnd
    : rollingResetAt(countedEntries(account, now), account.rollingMs, now);
}

function windowOf(account: Account, now: number): LedgerWindow {
  const { spentMicros, reservedMicros } = reportedTotals(account, now);
  const rolling = account.rollingMs !== undefined;
  return {
    budgetId: account.budgetId,
    windowStart: rolling ? now - account.rollingMs! : account.windowStart,
    windowEnd: rolling ? now : account.windowEnd,
    rollingMs: account.rollingMs,
    spentMicros,
    reservedMicros,
    limitMicros: account.limitMicros,
    remainingMicros: Math.max(0, account.limitMicros - spentMicros - reservedMicros),
    resetAt: resetAtOf(account, now),
  };
}

function refusal(account: Account, entry: LedgerEntry, now: number): LedgerReserveResult {
  const { spentMicros, reservedMicros } = reportedTotals(account, now);
  const retryAt =
    account.rollingMs === undefined
      ? entry.estimateMicros <= entry.limitMicros
        ? account.windowEnd
        : Infinity
      : rollingRetryAt(
          countedEntries(account, now),
          account.rollingMs,
          entry.estimateMicros,
          entry.limitMicros,
          now,
        );
  return {
    ok: false,
    budgetId: entry.budgetId,
    spentMicros,
    reservedMicros,
    limitMicros: entry.limitMicros,
    estimateMicros: entry.estimateMicros,
    resetAt: resetAtOf(account, now),
    retryAt,
  };
}
