/**
 * Typed events as `onX(listener) => dispose` properties (cockatiel style). An event with no
 * listener costs one property read at the emit site and nothing else.
 */
export type Listener<T> = (event: T) => void;
export type Dispose = () => void;

export class Emitter<T> {
  /** Undefined while nobody listens, so emit sites can test it cheaply. */
  listeners: Listener<T>[] | undefined;

  /** Subscribe; the returned function unsubscribes (idempotent). */
  readonly on = (listener: Listener<T>): Dispose => {
    if (typeof listener !== 'function') throw new TypeError('Expected a listener function');
    this.listeners = this.listeners ? [...this.listeners, listener] : [listener];
    return () => {
      if (!this.listeners) return;
      const rest = this.listeners.filter((l) => l !== listener);
      this.listeners = rest.length > 0 ? rest : undefined;
    };
  };

  emit(event: T): void {
    const listeners = this.listeners;
    if (!listeners) return;
    for (const listener of listeners) {
      try {
        listener(event);
      } catch (error) {
        // A listener's bug must not break the gate or lose a call; surface it asynchronously.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }
}

export interface QueuedEvent {
  key: string | undefined;
  /** Predicted wait before the call starts, in ms (Infinity when a concurrency limit makes it unpredictable). */
  predictedWaitMs: number;
  queued: number;
}

export interface StartEvent {
  key: string | undefined;
  /** Time the call spent queued, in ms. */
  waitedMs: number;
}

export interface RefusedEvent {
  key: string | undefined;
  /** The typed error the call was rejected with (QueueFullError, QueueTimeoutError, AbortedError, ...). */
  error: Error & { code: string };
}

export interface PauseEvent {
  /** Undefined for a gate-wide pause. */
  key: string | undefined;
  /** Nothing in the partition starts before this time (gate clock, ms). */
  untilMs: number;
  reason: string;
}

export interface ResumeEvent {
  key: string | undefined;
}

export interface LimitsChangedEvent {
  key: string | undefined;
  reason: string;
}
