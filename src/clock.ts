/**
 * The only module that reads real time. Everything else takes `now` as a parameter or a `Clock`.
 */
export interface Clock {
  /** Milliseconds on a monotonic scale. Fractions allowed. */
  now(): number;
  /** Schedule `fn` after `delayMs`. The returned handle is passed back to `clearTimeout`. */
  setTimeout(fn: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

// performance.now() is monotonic; adding the time origin puts it on the Unix-epoch scale, so
// windows align to wall-clock seconds and minutes (as providers count them) and absolute times from
// headers convert with one subtraction, while an NTP step after start cannot move the clock backwards.
const origin = performance.timeOrigin;

/**
 * The longest delay a Node timer keeps (about 24.8 days): a longer one fires after 1 ms instead,
 * and a timer re-armed for the same far moment would then fire every millisecond.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Real time: monotonic milliseconds on the Unix-epoch scale, Node timers. A delay beyond what a
 * Node timer keeps fires at that bound, early: every user of a clock re-checks the time when its
 * timer fires and arms again for what is still ahead.
 */
export const systemClock: Clock = {
  now: () => origin + performance.now(),
  setTimeout: (fn, delayMs) => setTimeout(fn, Math.min(delayMs, MAX_TIMER_MS)),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};
