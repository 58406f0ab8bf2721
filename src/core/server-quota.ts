/**
 * The quota a provider just announced: "`remaining` units until `resetAt`". A level the gate adds
 * to a partition from response headers. Once `resetAt` passes the quota says nothing any more
 * (the next response will tell), so it admits everything and counts as idle.
 */
import type { LimitCore } from './limit.js';

export interface ServerQuotaState {
  /** Units the client may still start before `resetAt`: the server's remaining minus what it had not yet seen. */
  allowance: number;
  /** When the provider's window resets (gate clock ms). */
  resetAt: number;
  /** `'spread'` pacing: ms per unit so the allowance lasts until the reset; 0 for `'burst'`. */
  spacingMs: number;
  /** `'spread'` pacing: earliest next start. */
  nextAt: number;
  /** Start number of the call whose response set this state; older responses are stale. */
  seq: number;
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
      spacingMs: 0,
      nextAt: now,
      seq: 0,
    }),
    earliestAt(state: ServerQuotaState, cost: number, now: number): number {
      if (now >= state.resetAt) return now;
      if (cost > state.allowance) return state.resetAt;
      return Math.max(state.nextAt, now);
    },
    take(state: ServerQuotaState, cost: number, at: number): ServerQuotaState {
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
    available: (state: ServerQuotaState, now: number) =>
      now >= state.resetAt ? Number.POSITIVE_INFINITY : Math.max(0, Math.floor(state.allowance)),
    isIdle: (state: ServerQuotaState, now: number) => now >= state.resetAt,
    clone: (state: ServerQuotaState): ServerQuotaState => ({ ...state }),
  });
}
