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

/** Real time: monotonic milliseconds on the Unix-epoch scale, Node timers. */
export const systemClock: Clock = {
  now: () => origin + performance.now(),
  setTimeout: (fn, delayMs) => setTimeout(fn, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};
