import type { Inspection, ScheduleOptions } from './gate.js';

/**
 * Read a call's outcome with its `inspect` hook and hand the inspection to `next`: at once, or when
 * the promise (any thenable) the hook returned settles. A hook that throws or rejects says nothing
 * (`undefined`): an unreadable response never breaks the call. Shared by the in-memory gate and the
 * shared gate.
 */
export function inspectOutcome(
  inspect: ScheduleOptions['inspect'],
  value: unknown,
  next: (inspection: Inspection | undefined) => void,
): void {
  let inspection: unknown;
  try {
    inspection = inspect?.(value as never);
  } catch {
    inspection = undefined;
  }
  if (typeof (inspection as { then?: unknown } | null)?.then === 'function') {
    (inspection as PromiseLike<unknown>).then(
      (answer) => next(readable(answer)),
      () => next(undefined),
    );
  } else {
    next(readable(inspection));
  }
}

/** An inspection the gates can read, or `undefined` for anything but an object (null included). */
function readable(inspection: unknown): Inspection | undefined {
  return typeof inspection === 'object' && inspection !== null ? (inspection as Inspection) : undefined;
}
