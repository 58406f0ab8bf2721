import { InvalidCostError } from '../errors.js';
import { invalid } from '../validate.js';
import type { ScheduleOptions } from './gate.js';

// Checks of the per-call options of `schedule`, shared by the in-memory gate and the shared gate
// (same messages, same error classes). Each takes the value as given (or as defaulted by its
// caller) and returns it typed; none allocates, so `Gate.schedule` can call them per call.
// Not exported from index.ts: internal to the gates.

const optionNames = new Set([
  'cost',
  'key',
  'priority',
  'signal',
  'maxQueueTimeMs',
  'inspect',
  'priceMicros',
]);

/** Every option named is one `schedule` knows: a misspelled `cots` must not run at the default cost. */
export function checkOptionNames(options: object): void {
  for (const name in options) {
    if (!optionNames.has(name))
      throw invalid(
        `options.${name}`,
        `one of the known options (${[...optionNames].join(', ')})`,
        (options as Record<string, unknown>)[name],
      );
  }
}

export function checkPriority(priority: unknown): number {
  if (!Number.isSafeInteger(priority)) throw invalid('priority', 'an integer', priority);
  return priority as number;
}

export function checkMaxQueueTimeMs(maxQueueTimeMs: unknown): number {
  if (typeof maxQueueTimeMs !== 'number' || Number.isNaN(maxQueueTimeMs) || maxQueueTimeMs < 0) {
    throw invalid('maxQueueTimeMs', 'a number >= 0', maxQueueTimeMs);
  }
  return maxQueueTimeMs;
}

/**
 * An AbortSignal, or anything shaped like one (another realm's, a polyfill's): the gate listens to
 * it while the call is queued, so it must take listeners. An object with only `aborted` was let
 * into the queue, whose listener then threw: the call rejected with a TypeError but stayed queued,
 * holding every call behind it and `close()` forever.
 */
export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (
    signal !== undefined &&
    (typeof signal !== 'object' ||
      signal === null ||
      !('aborted' in signal) ||
      typeof (signal as AbortSignal).addEventListener !== 'function' ||
      typeof (signal as AbortSignal).removeEventListener !== 'function')
  ) {
    throw invalid('signal', 'an AbortSignal', signal);
  }
  return signal as AbortSignal | undefined;
}

export function checkKey(key: unknown): string | undefined {
  if (key !== undefined && typeof key !== 'string') throw invalid('key', 'a string', key);
  return key as string | undefined;
}

export function checkInspect(inspect: unknown): ScheduleOptions['inspect'] {
  if (inspect !== undefined && typeof inspect !== 'function') throw invalid('inspect', 'a function', inspect);
  return inspect as ScheduleOptions['inspect'];
}

export function checkPriceMicros(priceMicros: unknown): number {
  if (!Number.isSafeInteger(priceMicros) || (priceMicros as number) < 0) {
    throw new InvalidCostError(
      `Expected \`priceMicros\` to be an integer >= 0, got \`${String(priceMicros)}\``,
    );
  }
  return priceMicros as number;
}

/** Throws `InvalidCostError` unless `cost` is a finite number >= 0 or a record of them (one per unit). */
export function checkCost(cost: unknown): asserts cost is NonNullable<ScheduleOptions['cost']> {
  if (typeof cost === 'number') {
    if (!Number.isFinite(cost) || cost < 0) {
      throw new InvalidCostError(`Expected \`cost\` to be a finite number >= 0, got \`${cost}\``);
    }
    return;
  }
  if (typeof cost !== 'object' || cost === null || Array.isArray(cost)) {
    throw new InvalidCostError(
      `Expected \`cost\` to be a number or a record of units, got \`${String(cost)}\``,
    );
  }
  const record = cost as Record<string, unknown>;
  for (const unit of Object.keys(record)) {
    const value = record[unit];
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      throw new InvalidCostError(
        `Expected \`cost.${unit}\` to be a finite number >= 0, got \`${String(value)}\``,
        unit,
      );
    }
  }
}

/**
 * Units of `unit` a call costs, from its cost as given (requests default to 1, other units to 0).
 * Only the record's own properties count: a unit named `constructor` or `toString` would otherwise
 * read the inherited method (and `__proto__` the prototype) as its cost.
 */
export function unitCost(cost: ScheduleOptions['cost'], unit: string): number {
  if (cost === undefined) return unit === 'requests' ? 1 : 0;
  if (typeof cost === 'number') return unit === 'requests' ? cost : 0;
  return ownUnits(cost, unit) ?? (unit === 'requests' ? 1 : 0);
}

/**
 * An inspection's `actualCost` when it is a record of units (its counts are checked per limit), or
 * undefined for anything else (null, a number, an array): garbage changes nothing.
 */
export function actualUnits(value: unknown): Readonly<Record<string, number>> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Readonly<Record<string, number>>)
    : undefined;
}

/** `record[unit]` when it is the record's own property, else undefined (whatever the unit's name). */
export function ownUnits(record: Readonly<Record<string, number>>, unit: string): number | undefined {
  return Object.hasOwn(record, unit) ? record[unit] : undefined;
}

/** `units` of a call, unless they exceed what a limit can ever admit (its `capacity`). */
export function checkCapacity(units: number, unit: string, algorithm: string, capacity: number): number {
  if (units > capacity) {
    throw new InvalidCostError(
      `Cost ${units} ${unit} exceeds what the ${algorithm} limit can ever admit (${capacity})`,
      unit,
    );
  }
  return units;
}
