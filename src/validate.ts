import { InvalidOptionError } from './errors.js';

// One message shape for every invalid option: Expected `name` to be <what>, got `value` (type).
function describe(value: unknown): string {
  let shown: string;
  if (typeof value === 'string') shown = JSON.stringify(value);
  else if (typeof value === 'function') shown = 'function';
  else if (Array.isArray(value)) shown = value.length === 0 ? '[]' : `[${value.length} items]`;
  else if (typeof value === 'object' && value !== null) {
    // Key names only: a misplaced option is often a headers record, and its values credentials.
    let keys: string[];
    try {
      keys = Object.keys(value);
    } catch {
      keys = [];
    }
    shown = keys.length === 0 ? Object.prototype.toString.call(value) : `{ ${keys.join(', ')} }`;
    if (shown.length > 60) shown = `${shown.slice(0, 57)}...`;
  } else shown = String(value);
  return `\`${shown}\` (${value === null ? 'null' : typeof value})`;
}

export function invalid(option: string, expected: string, value: unknown): InvalidOptionError {
  return new InvalidOptionError(option, `Expected \`${option}\` to be ${expected}, got ${describe(value)}`);
}

export function finiteNumber(
  option: string,
  value: unknown,
  { min = -Infinity, minExclusive = false } = {},
): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || (minExclusive ? value <= min : value < min)) {
    const bound = min === -Infinity ? '' : ` ${minExclusive ? '>' : '>='} ${min}`;
    throw invalid(option, `a finite number${bound}`, value);
  }
  return value;
}

export function integer(option: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw invalid(option, `an integer >= ${min}`, value);
  }
  return value;
}

/** A non-negative integer or Infinity (for "no bound" options such as `maxQueue`). */
export function integerOrInfinity(option: string, value: unknown, min: number): number {
  if (value === Infinity) return value;
  return integer(option, value, min);
}

export function nonEmptyString(option: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw invalid(option, 'a non-empty string', value);
  return value;
}

export function oneOf<T extends string>(option: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalid(option, `one of ${allowed.map((a) => `'${a}'`).join(', ')}`, value);
  }
  return value as T;
}

export function plainObject(option: string, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw invalid(option, 'an object', value);
  return value as Record<string, unknown>;
}

/**
 * Refuse a key of `value` that is not one of `known`, even one set to undefined: a misspelt option
 * would be silently ignored.
 */
export function onlyKnownKeys(path: string, value: Record<string, unknown>, known: Iterable<string>): void {
  const names = [...known];
  for (const key of Object.keys(value)) {
    if (!names.includes(key))
      throw invalid(`${path}.${key}`, `one of the known options (${names.join(', ')})`, value[key]);
  }
}

export function fn(option: string, value: unknown): (...args: never[]) => unknown {
  if (typeof value !== 'function') throw invalid(option, 'a function', value);
  return value as (...args: never[]) => unknown;
}
