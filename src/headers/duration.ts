import { type Decimal, parseDecimal, scaleCeil, trimOws } from './decimal.js';

/**
 * Go `time.Duration` strings (OpenAI's `x-ratelimit-reset-*`, oxy's `X-Retry-In`) and protobuf
 * Duration JSON (Google's `RetryInfo.retryDelay`, `"57.238747106s"`, which is a Go duration too).
 *
 * Grammar (rule P7): `(\d+(\.\d+)?(ns|us|µs|μs|ms|s|m|h))+` or the bare `0`. `ms` is one unit,
 * never minutes-then-seconds; `6m0` (a trailing number without a unit) is invalid. A sign is
 * rejected: a negative duration is no wait at all, and Go prints none for the values we read.
 */

// Nanoseconds per unit. Longest unit names first so `ms` is not read as `m` + `s`.
const nanosPerUnit: ReadonlyArray<readonly [string, bigint]> = [
  ['ns', 1n],
  ['us', 1_000n],
  ['µs', 1_000n], // U+00B5 micro sign, as Go prints it
  ['μs', 1_000n], // U+03BC Greek mu, which Go also accepts
  ['ms', 1_000_000n],
  ['h', 3_600_000_000_000n],
  ['m', 60_000_000_000n],
  ['s', 1_000_000_000n],
];

const nanosPerMs = 1_000_000n;

// Go's own durations are at most ~20 characters ("2562047h47m16.854775807s"); anything much longer
// is not a duration, and refusing it bounds the scan.
const maxDurationChars = 64;

const termPattern = /(\d+(?:\.\d+)?)(ns|us|µs|μs|ms|h|m|s)/y;

/**
 * Whole milliseconds (rounded up, P3) for a Go or protobuf duration, or undefined when the text is
 * not one. `6m0s` -> 360000, `1.5s` -> 1500, `20ms` -> 20, `0` -> 0, `57.238747106s` -> 57239.
 */
export function parseDuration(value: string): number | undefined {
  // A non-string is no duration: untyped callers' `5` or null must not read as 0 ("no wait").
  if (typeof value !== 'string') return undefined;
  const text = trimOws(value);
  if (text === '0') return 0;
  if (text.length === 0 || text.length > maxDurationChars) return undefined;
  // Sum the terms in nanoseconds, keeping fractions exact: term = number * nanosPerUnit, and the
  // number is units / 10^scale, so the sum is carried over the common denominator 10^maxScale.
  let totalUnits = 0n;
  let totalScale = 0;
  termPattern.lastIndex = 0;
  while (termPattern.lastIndex < text.length) {
    const at = termPattern.lastIndex;
    const match = termPattern.exec(text);
    if (match === null || match.index !== at) return undefined;
    const number = parseDecimal(match[1] ?? '');
    const perUnit = nanosPerUnit.find(([unit]) => unit === match[2])?.[1];
    if (number === undefined || perUnit === undefined) return undefined;
    const term: Decimal = { units: number.units * perUnit, scale: number.scale };
    [totalUnits, totalScale] = addScaled(totalUnits, totalScale, term);
  }
  // ns -> ms: divide by 10^6, rounding up.
  return scaleCeil({ units: totalUnits, scale: totalScale }, 1n, nanosPerMs);
}

function addScaled(units: bigint, scale: number, term: Decimal): [bigint, number] {
  if (term.scale === scale) return [units + term.units, scale];
  if (term.scale > scale) return [units * 10n ** BigInt(term.scale - scale) + term.units, term.scale];
  return [units + term.units * 10n ** BigInt(scale - term.scale), scale];
}
