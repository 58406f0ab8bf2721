/**
 * The quota a provider just announced: "`remaining` units until `resetAt`". A level the gate adds
 * to a partition from response headers.
 *
 * At `resetAt` the provider's window starts again. When the provider also told its `limit`, the
 * quota renews itself: a fresh allowance of `limit` for another `spanMs` (the window length if
 * stated, else the longest reset span seen), so the calls that waited for the reset do not all
 * rush out at once and draw 429s. Without a limit it says nothing after the reset until the next
 * response tells.
 *
 * Some providers' reset means "full again" rather than "a new window" (OpenAI: "resets to its
 * initial state"; Anthropic: "fully replenished"): their quota is a token bucket. For those the
 * quota refills continuously at `refillPerMs` = (limit - remaining) / reset, up to `limit`,
 * instead of renewing all at once at the reset (which would let a burst through that the
 * provider's bucket refuses).
 */
import type { LimitCore } from './limit.js';

export interface ServerQuotaState {
  /** Units the client may still start before `resetAt`: the server's remaining minus what it had not yet seen. */
  allowance: number;
  /** When the provider's window resets (gate clock ms). */
  resetAt: number;
  /** The provider's quota per window, if it said; enables renewal at the reset. */
  limit: number | undefined;
  /** Length of one window, for renewal: stated window, else the longest reset span observed. 0 = unknown. */
  spanMs: number;
  /** `'spread'` pacing: ms per unit so the allowance lasts until the reset; 0 for `'burst'`. */
  spacingMs: number;
  /** `'spread'` pacing: a renewed window is spread too (even when the last one ended at 0). */
  spread: boolean;
  /** `'spread'` pacing: earliest next start. */
  nextAt: number;
  /** Start number of the call whose response set this state; older responses are stale. */
  seq: number;
  /** > 0: token-bucket semantics, units per ms refilled up to `limit`; 0: window semantics. */
  refillPerMs: number;
  /** When `allowance` was last brought up to date (refill mode). */
  updatedAt: number;
  /** Renewed by the gate at a reset since a response set it: what it holds now is the gate's guess. */
  renewed?: boolean;
}

/** Allowance at `t` in refill mode: what was left, plus the refill since, up to the limit. */
function refilled(state: ServerQuotaState, t: number): number {
  // units = units + ms * units/ms, capped at the bucket size (the provider's limit).
  return Math.min(
    state.limit ?? Infinity,
    state.allowance + Math.max(0, t - state.updatedAt) * state.refillPerMs,
  );
}

/** Windows renewed without a fresh response before the quota is considered forgotten (idle). */
const RENEWALS_REMEMBERED = 10;

function renews(state: ServerQuotaState): boolean {
  return state.limit !== undefined && state.spanMs > 0;
}

/** The reset of the window containing `now`, when the quota renews: resetAt + k·span > now. */
function renewedResetAt(state: ServerQuotaState, now: number): number {
  // k whole windows have passed since resetAt; the current one ends one span after the last.
  const k = Math.floor((now - state.resetAt) / state.spanMs) + 1;
  return state.resetAt + k * state.spanMs;
}

/** Roll an expired, renewable quota forward to the window containing `now` (mutates). */
function roll(state: ServerQuotaState, now: number): void {
  if (now < state.resetAt || !renews(state)) return;
  state.resetAt = renewedResetAt(state, now);
  state.allowance = state.limit!;
  state.renewed = true;
  state.spacingMs = state.spread ? state.spanMs / state.limit! : 0;
}

/** Resets are stated to the second (X-RateLimit-Reset, delta seconds): closer than this is one reset. */
const RESET_RESOLUTION_MS = 1000;

/**
 * Whether an answer with reset `resetAt`, read at `now`, is about the window `state` describes:
 * the window stated by the provider (not one the gate renewed), not over, and the answer's reset
 * not clearly later. Window semantics only: a refilling quota has no windows.
 */
export function inSameWindow(state: ServerQuotaState, resetAt: number, now: number): boolean {
  return (
    state.refillPerMs === 0 &&
    state.renewed !== true &&
    now < state.resetAt &&
    resetAt <= state.resetAt + RESET_RESOLUTION_MS
  );
}

/**
 * What a response to an older call says, when a newer one already set the quota (mutates).
 *
 * The provider may have seen the older call after the newer one, so its answer can be the later
 * news: its `bound` (remaining minus everything the provider may not have seen then) holds until
 * the window ends, and so does the later of the two resets. It only ever tightens the quota: an
 * older answer never lends what a newer one took away. In a window already over (`now` past the
 * reset, or renewed by the gate since) it says nothing.
 */
export function tightenServerQuota(
  state: ServerQuotaState,
  bound: number,
  resetAt: number,
  spanMs: number,
  now: number,
): void {
  if (state.refillPerMs > 0) {
    state.allowance = Math.min(refilled(state, now), bound);
    state.updatedAt = Math.max(state.updatedAt, now);
  } else {
    // After the reset (renewed or about to be), or with a reset already past or clearly before
    // the quota's, an older answer is from the window before.
    if (now >= state.resetAt || state.renewed === true) return;
    if (resetAt <= now || resetAt < state.resetAt - RESET_RESOLUTION_MS) return;
    state.allowance = Math.min(state.allowance, bound);
  }
  if (resetAt > state.resetAt) state.resetAt = resetAt;
  if (spanMs > state.spanMs) state.spanMs = spanMs;
  // spread: what is left lasts until the reset (ms per unit).
  if (state.spacingMs > 0 && state.allowance > 0)
    state.spacingMs = Math.max(state.spacingMs, (state.resetAt - now) / state.allowance);
}

export function createServerQuota(unit: string): LimitCore<ServerQuotaState> {
  const spec = Object.freeze({
    algorithm: 'fixed-window' as const,
    limit: 1,
    intervalMs: 1,
    burst: 0,
    unit,
  });
  return Object.freeze({
    algorithm: 'server-quota' as const,
    unit,
    // A call never costs more than a quota "can ever admit": it waits for the reset instead.
    capacity: Number.POSITIVE_INFINITY,
    timed: true,
    creditsLateStart: false,
    spec,
    initial: (now: number): ServerQuotaState => ({
      allowance: 0,
      resetAt: now,
      limit: undefined,
      spanMs: 0,
      spacingMs: 0,
      spread: false,
      nextAt: now,
      seq: 0,
      refillPerMs: 0,
      updatedAt: now,
    }),
    earliestAt(state: ServerQuotaState, cost: number, now: number): number {
      if (state.refillPerMs > 0) {
        const tokens = refilled(state, now);
        // A cost above the provider's bucket never fits: let it go and let the provider answer.
        if (cost <= tokens || cost > (state.limit ?? Infinity)) return Math.max(state.nextAt, now);
        // ms = missing units / (units per ms)
        return now + (cost - tokens) / state.refillPerMs;
      }
      let allowance = state.allowance;
      let resetAt = state.resetAt;
      if (now >= resetAt) {
        if (!renews(state)) return now;
        resetAt = renewedResetAt(state, now);
        allowance = state.limit!;
      }
      if (cost > allowance) {
        // Wait for the reset; a renewing quota of a smaller limit than the cost never fits: let it go then.
        return resetAt;
      }
      return Math.max(state.nextAt, now);
    },
    take(state: ServerQuotaState, cost: number, at: number): ServerQuotaState {
      if (state.refillPerMs > 0) {
        state.allowance = refilled(state, at) - cost;
        state.updatedAt = Math.max(state.updatedAt, at);
        if (state.spacingMs > 0) state.nextAt = Math.max(state.nextAt, at) + cost * state.spacingMs;
        return state;
      }
      roll(state, at);
      if (at >= state.resetAt) return state;
      state.allowance -= cost;
      // spacing is ms per unit, so cost units push the next start cost * spacing later.
      if (state.spacingMs > 0) state.nextAt = Math.max(state.nextAt, at) + cost * state.spacingMs;
      return state;
    },
    refund(state: ServerQuotaState, cost: number): ServerQuotaState {
      state.allowance += cost;
      return state;
    },
    available: (state: ServerQuotaState, now: number) => {
      if (state.refillPerMs > 0) return Math.max(0, Math.floor(refilled(state, now)));
      if (now < state.resetAt) return Math.max(0, Math.floor(state.allowance));
      return renews(state) ? state.limit! : Number.POSITIVE_INFINITY;
    },
    isIdle: (state: ServerQuotaState, now: number) =>
      state.refillPerMs > 0
        ? refilled(state, now) >= (state.limit ?? 0) && now >= state.nextAt
        : now >= state.resetAt + (renews(state) ? RENEWALS_REMEMBERED * state.spanMs : 0),
    clone: (state: ServerQuotaState): ServerQuotaState => ({ ...state }),
  });
}
