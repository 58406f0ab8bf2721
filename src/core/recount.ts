/**
 * Counting a window call from its response: the rule the in-memory gate (`Gate.recount`) and the
 * stores (`Store.recount`) share. A provider counts a request when it arrives, which is no later
 * than its response; a window that counts the call from its response therefore never ends before
 * the provider's. The move is capped, so a slow response (a long generation) costs at most a tenth
 * of the window's throughput.
 */
/** Fixed windows, sliding windows and sliding logs: the limits a recount moves. */
export function countsWindow(algorithm: string): boolean {
  return algorithm === 'fixed-window' || algorithm === 'sliding-window' || algorithm === 'sliding-log';
}

/**
 * Where a call started at `startAt` whose response came at `now` is counted:
 * `min(now, startAt + max(marginMs, intervalMs / 10))`.
 */
export function recountAt(intervalMs: number, startAt: number, marginMs: number, now: number): number {
  return Math.min(now, startAt + Math.max(marginMs, intervalMs / 10));
}
