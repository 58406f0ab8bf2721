/**
 * Exact money: every amount is an integer number of micro-units (1e-6 of the budget's currency unit;
 * for `usd`, 1 micro = $0.000001).
 *
 * Representation: a plain `number` holding a safe integer, not a `bigint`. Integers below 2^53 add
 * and subtract exactly in IEEE doubles, and 2^53 micros is about 9 billion currency units, far above
 * any budget. A number is what SQLite (better-sqlite3) returns for an INTEGER, serializes to JSON,
 * and compares with `<` on the hot path without conversions. Every sum that could leave the safe
 * range is checked (`addMicros`), so an overflow is an error, never a silent loss of precision.
 * In a ledger the sums are a window's `spent + reserved`, kept a safe integer as an invariant:
 * admission already bounds it by the limit (<= MAX_MICROS), releases and pruning only lower it, and
 * the one step that can raise it past the limit, a settle charging more than the estimate, is
 * checked with `addMicros` before anything changes (`checkCharge` in budget.ts, the file ledger's
 * settle). Every total derived from them (spent plus expired holds, the snapshot's remaining, a
 * rolling log's sum) is then a part of an exact sum and needs no check of its own.
 *
 * Amounts come in as numbers in major units (`1.5` = $1.50), strings (`'$1.50'`, `'1.5 usd'`,
 * `'2 EUR'`) or `{ micros }`. A number is read through its shortest decimal representation
 * (`String(1.1)` is `'1.1'`), so `1.1` is exactly 1_100_000 micros, not 1_100_000.0000000002.
 */

import { InvalidCostError } from '../errors.js';
import { invalid } from '../validate.js';

/** Micro-units per currency unit: 1 USD = 1_000_000 micros. */
export const MICROS_PER_UNIT = 1_000_000;

/** The largest amount tollgate represents exactly: Number.MAX_SAFE_INTEGER micros (~9e9 units). */
export const MAX_MICROS = Number.MAX_SAFE_INTEGER;

/**
 * An amount of money as users write it.
 * - `number`: major units (dollars for `usd`), e.g. `0.002`.
 * - `string`: `'0.002'`, `'$0.002'` (implies `usd`), `'0.002 usd'`, `'0.002usd'`, `'5 EUR'`.
 * - `{ micros }`: an exact integer number of micro-units.
 */
export type MoneyInput = number | string | { readonly micros: number };

/**
 * How to treat digits beyond the sixth decimal.
 * - `'exact'` (limits, configured prices): reject them; a budget's limit is never rounded.
 * - `'up'` (costs computed by a function, where float noise is normal: `1234 * 0.000003` is
 *   `0.0037019999999999996`): read the amount at nano precision (9 decimals; smaller fractions are
 *   float noise, not money) and round up to the next micro, so a cost is never under-counted.
 */
export type Rounding = 'exact' | 'up';

let currencies: Set<string> | undefined;

/** ISO 4217 codes the runtime knows (Intl), lower-cased. */
function knownCurrencies(): Set<string> {
  if (currencies === undefined) {
    const list =
      typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('currency') : ['USD', 'EUR'];
    currencies = new Set(list.map((c) => c.toLowerCase()));
  }
  return currencies;
}

/** True when `code` is an ISO 4217 currency code known to the runtime (case-insensitive). */
export function isCurrency(code: string): boolean {
  return /^[a-z]{3}$/i.test(code) && knownCurrencies().has(code.toLowerCase());
}

/** Validate a currency option; returns it lower-cased (`'USD'` -> `'usd'`). */
export function normalizeCurrency(option: string, value: unknown): string {
  if (typeof value !== 'string' || !isCurrency(value)) {
    throw invalid(option, 'an ISO 4217 currency code such as `usd` or `eur`', value);
  }
  return value.toLowerCase();
}

/**
 * Checked addition of two amounts in micros (safe integers): the sum must stay a safe integer, so it
 * is still exact. Otherwise throws `InvalidCostError` whose message starts with `what`.
 */
export function addMicros(a: number, b: number, what = 'A sum of money'): number {
  const sum = a + b;
  if (!Number.isSafeInteger(sum)) {
    throw new InvalidCostError(
      `${what} overflows: ${a} + ${b} micros passes ${MAX_MICROS} micros (about 9 billion units), ` +
        'the largest amount counted exactly',
      'micros',
    );
  }
  return sum;
}

interface Decimal {
  negative: boolean;
  /** All significant digits, no dot. */
  digits: string;
  /** Position of the decimal point counted from the right of `digits` (>= 0 means fraction digits). */
  scale: number;
}

// Parses '123', '1.50', '.5', '1e-7', '1.5E+21' (what String(number) produces, plus what people type).
function parseDecimal(text: string): Decimal | undefined {
  const m = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (m === null) return undefined;
  const intPart = m[2] ?? '';
  const fracPart = m[3] ?? '';
  if (intPart === '' && fracPart === '') return undefined;
  const exponent = m[4] === undefined ? 0 : Number(m[4]);
  if (!Number.isSafeInteger(exponent) || Math.abs(exponent) > 400) return undefined;
  return { negative: m[1] === '-', digits: intPart + fracPart, scale: fracPart.length - exponent };
}

// Micros from a decimal: value = digits * 10^-scale units = digits * 10^(6 - scale) micros.
// Returns undefined when rounding is 'exact' and the value has nonzero digits below 1 micro.
function decimalToMicros(d: Decimal, rounding: Rounding): bigint | undefined {
  const shift = 6 - d.scale;
  const digits = BigInt(d.digits);
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  // More than 6 fraction digits: split into whole micros and the remainder below one micro.
  const divisor = 10n ** BigInt(-shift);
  const whole = digits / divisor;
  const remainder = digits % divisor;
  if (remainder === 0n) return whole;
  if (rounding === 'exact') return undefined;
  // Read at nano precision: the remainder in nanos (1 micro = 1000 nanos) is truncated, so float
  // noise such as the ...0000000001 in 0.30000000000000004 does not add a micro; any real nano
  // left over rounds the amount up to the next micro (never under-count a cost).
  const nanos = (remainder * 1000n) / divisor;
  return nanos === 0n ? whole : whole + 1n;
}

function describeNumberProblem(value: number): string | undefined {
  if (Number.isNaN(value)) return 'NaN';
  if (!Number.isFinite(value)) return 'not finite';
  if (value < 0) return 'negative';
  return undefined;
}

/**
 * Convert a number of major units (dollars) to micros, exactly from its decimal representation.
 * Returns `undefined` for NaN, ±Infinity, negative values, values too large to be exact, or (with
 * `'exact'`) more than 6 decimals.
 */
export function unitsToMicros(value: number, rounding: Rounding = 'exact'): number | undefined {
  if (describeNumberProblem(value) !== undefined) return undefined;
  const d = parseDecimal(String(value));
  if (d === undefined) return undefined;
  const micros = decimalToMicros(d, rounding);
  if (micros === undefined || micros > BigInt(MAX_MICROS)) return undefined;
  return Number(micros);
}

/** An amount parsed from user input, with the currency it named (if it named one). */
export interface ParsedMoney {
  readonly micros: number;
  readonly currency: string | undefined;
}

const moneyText = /^\s*(\$)?\s*([0-9][0-9_,]*(?:\.[0-9_]*)?|\.[0-9_]+)\s*([a-zA-Z]{3})?\s*$/;

// A comma is a digit-group separator only where one stands: after a leading group of 1-3 digits
// that does not start with 0, then groups of exactly 3 ('1,000', '12,345.67'), or, as written in
// India, groups of 2 before the last group of 3 ('1,00,000', '12,34,567.50'). Any other comma
// ('0,5', '1,00', '1,0000', '0,042') is refused rather than dropped: in much of the world it is the
// decimal mark, and dropping it would read '0,5' as 5 and '0,0042' as 42.
const groupedInteger = /^(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[1-9][0-9]?(?:,[0-9]{2})+,[0-9]{3})$/;

/**
 * Parse an amount. Throws `InvalidOptionError` naming `option` (e.g. `budget.limit`) when it is not a
 * finite, non-negative amount in a known currency, or has more than 6 decimals with `'exact'`.
 */
export function parseMoney(option: string, value: unknown, rounding: Rounding = 'exact'): ParsedMoney {
  const expected =
    rounding === 'exact'
      ? 'a finite amount >= 0 with at most 6 decimals (number of units, `"$1.50"`, `"1.5 usd"` or `{ micros }`)'
      : 'a finite amount >= 0 (number of units, `"$1.50"`, `"1.5 usd"` or `{ micros }`)';
  if (typeof value === 'number') {
    const micros = unitsToMicros(value, rounding);
    if (micros === undefined) throw invalid(option, expected, value);
    return { micros, currency: undefined };
  }
  if (typeof value === 'string') {
    const m = moneyText.exec(value);
    if (m === null) throw invalid(option, expected, value);
    const dollarSign = m[1] !== undefined;
    const code = m[3]?.toLowerCase();
    if (code !== undefined && !isCurrency(code)) {
      throw invalid(option, `${expected} in a known ISO 4217 currency (unknown \`${m[3]}\`)`, value);
    }
    if (dollarSign && code !== undefined && code !== 'usd') throw invalid(option, expected, value);
    // Separators people type ('1,000.50', '1_000') are dropped; the dot is the only decimal mark.
    const number = m[2] ?? '';
    const dot = number.indexOf('.');
    const integerPart = dot === -1 ? number : number.slice(0, dot);
    if (integerPart.includes(',') && !groupedInteger.test(integerPart)) {
      throw invalid(
        option,
        `${expected}; a comma only between digit groups (\`1,000.50\`, \`1,00,000\`), the decimal mark is \`.\``,
        value,
      );
    }
    const d = parseDecimal(number.replace(/[_,]/g, ''));
    const micros = d === undefined ? undefined : decimalToMicros(d, rounding);
    if (micros === undefined || micros > BigInt(MAX_MICROS)) throw invalid(option, expected, value);
    return { micros: Number(micros), currency: dollarSign ? 'usd' : code };
  }
  if (typeof value === 'object' && value !== null && 'micros' in value) {
    const micros = (value as { micros: unknown }).micros;
    if (typeof micros !== 'number' || !Number.isSafeInteger(micros) || micros < 0) {
      throw invalid(`${option}.micros`, 'an integer >= 0', micros);
    }
    return { micros, currency: undefined };
  }
  throw invalid(option, expected, value);
}

/**
 * Convert a cost computed at run time (a price function's result) to micros, rounding up.
 * Anything but a finite, non-negative amount is an `InvalidCostError`: the call is not sent.
 */
export function costToMicros(value: unknown, what: string, currency: string): number {
  if (typeof value === 'number') {
    const problem = describeNumberProblem(value);
    const micros = problem === undefined ? unitsToMicros(value, 'up') : undefined;
    if (micros === undefined) {
      throw new InvalidCostError(
        `${what} must be a finite amount >= 0, got ${problem ?? String(value)}`,
        currency,
      );
    }
    return micros;
  }
  try {
    const parsed = parseMoney(what, value, 'up');
    if (parsed.currency !== undefined && parsed.currency !== currency) {
      throw new InvalidCostError(
        `${what} is in ${parsed.currency.toUpperCase()} but the budget counts ${currency.toUpperCase()}`,
        currency,
      );
    }
    return parsed.micros;
  } catch (error) {
    if (error instanceof InvalidCostError) throw error;
    throw new InvalidCostError(`${(error as Error).message}`, currency);
  }
}

/**
 * Check an amount already in micros (the hot-path form): a safe integer >= 0.
 * Throws `InvalidCostError` otherwise.
 */
export function checkMicros(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidCostError(
      `${what} must be an integer number of micro-units >= 0, got ${typeof value === 'number' ? String(value) : typeof value}`,
      'micros',
    );
  }
  return value;
}

/**
 * An exact amount scaled to `places` decimals (`'0.15'`, 9 -> 150_000_000n), for prices finer than a
 * micro (a price per token). Undefined for NaN, Infinity, negatives, garbage, or finer digits.
 */
export function unitsToScaled(value: number | string, places: number): bigint | undefined {
  if (typeof value === 'number' && describeNumberProblem(value) !== undefined) return undefined;
  const text = typeof value === 'number' ? String(value) : value.trim().replace(/^\$\s*/, '');
  const d = parseDecimal(text);
  if (d === undefined || d.negative) return undefined;
  const shift = places - d.scale;
  const digits = BigInt(d.digits);
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  const divisor = 10n ** BigInt(-shift);
  return digits % divisor === 0n ? digits / divisor : undefined;
}

/**
 * Format micros for people: `'$1.50'`, `'$0.000123'`, `'12.30 EUR'`. At least 2 decimals, at most 6,
 * no trailing zeros beyond the second. Exact (integer arithmetic, no float division).
 */
export function formatMicros(micros: number, currency = 'usd'): string {
  if (!Number.isFinite(micros)) return String(micros);
  const negative = micros < 0;
  const abs = Math.abs(Math.trunc(micros));
  const whole = Math.trunc(abs / MICROS_PER_UNIT);
  let fraction = String(abs % MICROS_PER_UNIT).padStart(6, '0');
  while (fraction.length > 2 && fraction.endsWith('0')) fraction = fraction.slice(0, -1);
  const amount = `${negative ? '-' : ''}${currency === 'usd' ? '$' : ''}${whole}.${fraction}`;
  return currency === 'usd' ? amount : `${amount} ${currency.toUpperCase()}`;
}
