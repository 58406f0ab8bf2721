/**
 * Counting a window call from its response: the rule the in-memory gate (`Gate.recount`) and the
 * stores (`Store.recount`) share. A provider counts a request when it arrives, which is no later
 * than its response; a window that counts the call from its response therefore never ends before
 * the provider's. The move is capped, so a slow response (a long generation) costs at most a tenth
 * of the window's throughput.
 */
import type { LimitCore } from './limit.js';

/** Fixed windows, sliding windows and sliding logs: the limits a recount moves. */
export function countsWindow(algorithm: string): boolean {
  return algorithm === 'fixed-window' || algorithm === 'sliding-window' || algorithm === 'sliding-log';
}

/**
 * `state` of the window limit `core` with a call of `cost`, taken at `startAt`, counted where its
 * response (at `now`) puts it instead: `min(now, startedAt + max(marginMs, intervalMs / 10))`, where
 * `startedAt` is when the call really started (no earlier than `startAt`; a shared gate may start a
 * window call after its reserved start). Answers `state` itself when that is no later than `startAt`.
 */
export function recountState<S>(
  core: LimitCore<S>,
  state: S,
  cost: number,
  startAt: number,
  marginMs: number,
  now: number,
  startedAt = startAt,
): S {
  const at = recountAtMs(core, startAt, marginMs, now, startedAt);
  if (!(at > startAt)) return state;
  return core.take(core.refund(state, cost, startAt, now), cost, at);
}

/**
 * Where `recountState` counts a call of the window limit `core` taken at `startAt`, started at
 * `startedAt` and answered at `now`: `min(now, max(startAt, startedAt) + max(marginMs, intervalMs /
 * 10))`, or `startAt` when that is no later. A later refund or charge of the same call applies there.
 */
export function recountAtMs(
  core: Pick<LimitCore, 'spec'>,
  startAt: number,
  marginMs: number,
  now: number,
  startedAt = startAt,
): number {
  const from = Math.max(startAt, startedAt);
  return Math.max(startAt, Math.min(now, from + Math.max(marginMs, core.spec.intervalMs / 10)));
}
