/**
 * Exact decimal arithmetic for header values (rule P3).
 *
 * `64.57 * 1000` is `64569.99999999999` and `4.07 * 1000` is `4070.0000000000005` in IEEE-754, so
 * `Math.floor` and `Math.ceil` on floats are wrong in opposite directions. A header's decimal text is
 * therefore read into an integer count of 10^-scale units (a BigInt) and every conversion to whole
 * milliseconds is an integer division rounded up.
 */

/** `units / 10^scale`, exactly. */
export interface Decimal {
  readonly units: bigint;
  readonly scale: number;
}

// A longer numeral is garbage for every header we read (the largest meaningful value, an epoch in
// ms with a fraction, has ~20 digits); refusing it early bounds the BigInt work on hostile input.
const maxDecimalChars = 48;

const decimalPattern = /^(-?)(\d+)(?:\.(\d+))?$/;

/**
 * Reads `123`, `1.5`, `-2`, `0.000` exactly. No exponent, no `+`, no leading `.`, no units, no
 * surrounding whitespace (callers trim OWS first). Returns undefined for anything else.
 */
export function parseDecimal(text: string): Decimal | undefined {
  if (text.length === 0 || text.length > maxDecimalChars) return undefined;
  const match = decimalPattern.exec(text);
  if (match === null) return undefined;
  const [, sign = '', whole = '', fraction = ''] = match;
  const units = BigInt(whole + fraction);
  return { units: sign === '-' ? -units : units, scale: fraction.length };
}

/** A non-negative decimal, or undefined (negative values are invalid in every header we read). */
export function parseNonNegativeDecimal(text: string): Decimal | undefined {
  const value = parseDecimal(text);
  return value === undefined || value.units < 0n ? undefined : value;
}

/**
 * The exact decimal a JSON number stands for. JSON bodies arrive already parsed, so `64.57` is the
 * double nearest 64.57; `String(n)` gives the shortest text that round-trips to that double
 * (`"64.57"`), which is the value the server wrote. Exponent forms (`1e+21`, `1.5e-7`) are expanded.
 */
export function decimalFromNumber(value: number): Decimal | undefined {
  if (!Number.isFinite(value)) return undefined;
  const text = String(value);
  const exponentAt = text.search(/e/i);
  if (exponentAt === -1) return parseDecimal(text);
  const mantissa = parseDecimal(text.slice(0, exponentAt));
  const exponent = Number(text.slice(exponentAt + 1));
  if (mantissa === undefined || !Number.isInteger(exponent)) return undefined;
  // m * 10^e = units / 10^(scale - e)
  const scale = mantissa.scale - exponent;
  return scale >= 0
    ? { units: mantissa.units, scale }
    : { units: mantissa.units * 10n ** BigInt(-scale), scale: 0 };
}

/** A decimal from a header string or a JSON number; undefined for other types. */
export function decimalFrom(value: unknown): Decimal | undefined {
  if (typeof value === 'number') return decimalFromNumber(value);
  if (typeof value === 'string') return parseDecimal(trimOws(value));
  return undefined;
}

/** `a - b`, exactly. */
export function subtractDecimal(a: Decimal, b: Decimal): Decimal {
  const scale = Math.max(a.scale, b.scale);
  const units = a.units * 10n ** BigInt(scale - a.scale) - b.units * 10n ** BigInt(scale - b.scale);
  return { units, scale };
}

/**
 * `ceil(value * multiplier / divisor)` as a safe integer, or undefined when the result is not a safe
 * integer. With `multiplier = 1000n` this is seconds -> whole ms rounded up (P3).
 */
export function scaleCeil(value: Decimal, multiplier: bigint, divisor = 1n): number | undefined {
  // value * m / d = units * m / (10^scale * d); ceiling division on integers.
  const numerator = value.units * multiplier;
  const denominator = 10n ** BigInt(value.scale) * divisor;
  let quotient = numerator / denominator; // truncates toward zero
  if (numerator % denominator !== 0n && numerator > 0n) quotient += 1n;
  return toSafeNumber(quotient);
}

/** `floor(value)` as a safe integer, or undefined. Counts (`599.0`) are floored (P12). */
export function floorToInteger(value: Decimal): number | undefined {
  const denominator = 10n ** BigInt(value.scale);
  let quotient = value.units / denominator;
  if (value.units % denominator !== 0n && value.units < 0n) quotient -= 1n;
  return toSafeNumber(quotient);
}

/** Exact comparison of a decimal with an integer: negative, zero or positive like `a - b`. */
export function compareDecimal(value: Decimal, integer: bigint): number {
  const scaled = integer * 10n ** BigInt(value.scale);
  return value.units < scaled ? -1 : value.units > scaled ? 1 : 0;
}

/** Decimal seconds (`"64.57"`, `64.57`) -> whole ms rounded up; undefined if negative or invalid. */
export function secondsToMs(value: string | number): number | undefined {
  const decimal = decimalFrom(value);
  return decimal === undefined || decimal.units < 0n ? undefined : scaleCeil(decimal, 1000n);
}

function toSafeNumber(value: bigint): number | undefined {
  return value > BigInt(Number.MAX_SAFE_INTEGER) || value < -BigInt(Number.MAX_SAFE_INTEGER)
    ? undefined
    : Number(value);
}

/** Strips RFC 9110 optional whitespace (SP / HTAB) from both ends; other characters are kept. */
export function trimOws(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isOws(text.charCodeAt(start))) start++;
  while (end > start && isOws(text.charCodeAt(end - 1))) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

function isOws(code: number): boolean {
  return code === 0x20 || code === 0x09;
}
