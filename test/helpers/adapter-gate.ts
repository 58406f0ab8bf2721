import type { PauseEvent } from '../../src/gate/events.js';
import type { Gate } from '../../src/gate/gate.js';

/** A start time on a minute boundary, on the Unix-epoch scale (headers carry absolute times). */
export const T0 = 1_800_000_000_000;

/** The next pause the gate announces. */
export function nextPause(gate: Gate): Promise<PauseEvent> {
  return new Promise((resolve) => {
    const dispose = gate.onPause((event) => {
      dispose();
      resolve(event);
    });
  });
}

/**
 * Let pending I/O callbacks and promise chains run (mock responses, the gate's inspection). Not a
 * sleep: no time passes on the gate's manual clock, so nothing waiting for it can start.
 */
export async function ticks(rounds = 10): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** The rejection of `promise` (fails the test if it resolves). */
export async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}
