import type { Clock } from '../../src/clock.js';

interface Timer {
  id: number;
  at: number;
  fn: () => void;
}

/**
 * A clock that moves only when told. Timers fire in time order (ties in creation order) as
 * `advance`/`advanceTo` passes them, each with `now()` equal to its own due time.
 */
export class ManualClock implements Clock {
  private current: number;
  private nextId = 1;
  private timers: Timer[] = [];

  constructor(start = 0) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  setTimeout(fn: () => void, delayMs: number): unknown {
    const timer = { id: this.nextId++, at: this.current + Math.max(0, delayMs), fn };
    this.timers.push(timer);
    return timer.id;
  }

  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t.id !== handle);
  }

  /** Number of timers armed and not yet fired. */
  get pendingTimers(): number {
    return this.timers.length;
  }

  /** The due time of the earliest armed timer, or undefined. */
  nextTimerAt(): number | undefined {
    let min: number | undefined;
    for (const t of this.timers) if (min === undefined || t.at < min) min = t.at;
    return min;
  }

  /** Move time forward by `ms`, firing due timers in order. */
  advance(ms: number): void {
    this.advanceTo(this.current + ms);
  }

  advanceTo(target: number): void {
    for (;;) {
      let next: Timer | undefined;
      for (const t of this.timers) if (t.at <= target && (next === undefined || t.at < next.at)) next = t;
      if (next === undefined) break;
      this.timers = this.timers.filter((t) => t !== next);
      if (next.at > this.current) this.current = next.at;
      next.fn();
    }
    if (target > this.current) this.current = target;
  }

  /**
   * The event loop stalls until `target`: time jumps there first, then the timers due by then fire,
   * late, each seeing `now()` equal to `target`.
   */
  stallUntil(target: number): void {
    if (target > this.current) this.current = target;
    this.advanceTo(target);
  }

  /** Fire timers until none is left (or `maxSteps` fired); returns the number fired. */
  runAll(maxSteps = 1_000_000): number {
    let fired = 0;
    while (this.timers.length > 0 && fired < maxSteps) {
      const at = this.nextTimerAt()!;
      this.advanceTo(at);
      fired++;
    }
    return fired;
  }
}
