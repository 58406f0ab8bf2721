import { describe, expect, it } from 'vitest';
import {
  addMicros,
  checkMicros,
  costToMicros,
  formatMicros,
  normalizeCurrency,
  parseMoney,
  unitsToMicros,
  unitsToScaled,
} from '../../../src/budget/money.js';
import { InvalidCostError, InvalidOptionError, isTollgateError } from '../../../src/errors.js';

describe('unitsToMicros', () => {
  it.each([
    [1.1, 1_100_000],
    [0.1, 100_000],
    [0.3, 300_000],
    [1.5, 1_500_000],
    [0.000001, 1],
    [1e-6, 1],
    [123.456789, 123_456_789],
    [0, 0],
    [-0, 0],
    [5, 5_000_000],
    [9_000_000_000, 9_000_000_000_000_000],
  ])('%s units is exactly %s micros', (units, micros) => {
    expect(unitsToMicros(units)).toBe(micros);
  });

  it('reads a number from its decimal form, not its binary expansion (8.2 * 1e6 is 8199999.999999999)', () => {
    expect(8.2 * 1e6).not.toBe(8_200_000);
    expect(Math.floor(1.005 * 1e6)).toBe(1_004_999);
    expect(unitsToMicros(8.2)).toBe(8_200_000);
    expect(unitsToMicros(1.005)).toBe(1_005_000);
  });

  it.each([[Number.NaN], [Infinity], [-Infinity], [-0.01], [-1], [1e-7], [0.1 + 0.2], [1e16]])(
    'rejects %s in exact mode',
    (units) => {
      expect(unitsToMicros(units, 'exact')).toBeUndefined();
    },
  );

  it.each([
    // float noise below a nano is dropped...
    [0.1 + 0.2, 300_000],
    [1234 * 0.000003, 3_702],
    [0.1 * 3, 300_000],
    // ...a real fraction of a micro rounds up: never under-count a cost
    [1.5e-7, 1],
    [0.0000015, 2],
    [2.0000001, 2_000_001],
  ])('rounds %s up to %s micros in up mode', (units, micros) => {
    expect(unitsToMicros(units, 'up')).toBe(micros);
  });
});

describe('summing micros is exact where floats drift', () => {
  it('ten times 0.1 is exactly 1.0', () => {
    let floats = 0;
    let micros = 0;
    for (let i = 0; i < 10; i++) {
      floats += 0.1;
      micros = addMicros(micros, unitsToMicros(0.1)!);
    }
    expect(floats).not.toBe(1);
    expect(micros).toBe(1_000_000);
  });

  it('0.1 + 0.2 equals 0.3 in micros', () => {
    expect(unitsToMicros(0.1)! + unitsToMicros(0.2)!).toBe(unitsToMicros(0.3));
  });

  it('a sum that leaves the safe-integer range throws instead of losing precision', () => {
    expect(() => addMicros(Number.MAX_SAFE_INTEGER, 1)).toThrow(InvalidCostError);
    expect(() => addMicros(Number.MAX_SAFE_INTEGER, 1, 'Settling r1')).toThrow(
      /^Settling r1 overflows: 9007199254740991 \+ 1 micros/,
    );
    expect(addMicros(Number.MAX_SAFE_INTEGER - 1, 1)).toBe(Number.MAX_SAFE_INTEGER);
  });
});

describe('parseMoney', () => {
  it.each([
    ['$1.50', 1_500_000, 'usd'],
    ['1.5usd', 1_500_000, 'usd'],
    ['1.5 USD', 1_500_000, 'usd'],
    [' 2 eur ', 2_000_000, 'eur'],
    ['0.000001', 1, undefined],
    ['.5', 500_000, undefined],
    ['1,000.25', 1_000_250_000, undefined],
    ['$0', 0, 'usd'],
  ])('%j -> %s micros (%s)', (text, micros, currency) => {
    expect(parseMoney('limit', text)).toEqual({ micros, currency });
  });

  it('accepts { micros } as an exact integer', () => {
    expect(parseMoney('limit', { micros: 42 })).toEqual({ micros: 42, currency: undefined });
  });

  it.each([
    ['-1'],
    ['$-1'],
    ['abc'],
    [''],
    ['1.5 xyz'],
    ['$1.5 eur'],
    ['0.0000001'],
    [Number.NaN],
    [Infinity],
    [-2],
    [null],
    [{ micros: 1.5 }],
    [{ micros: -1 }],
    [[1]],
  ])('rejects %j with an InvalidOptionError naming the option', (value) => {
    const error = (() => {
      try {
        parseMoney('budget.limit', value);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as InvalidOptionError).message).toMatch(/Expected `budget\.limit(\.micros)?` to be/);
  });

  it.each([
    ['1,000', 1_000_000_000],
    ['12,345.67', 12_345_670_000],
    ['$1,000,000.50', 1_000_000_500_000],
    ['999,999 eur', 999_999_000_000],
    // Indian digit grouping: groups of 2 before the last group of 3.
    ['10,00,000 INR', 1_000_000_000_000],
    ['1,00,000.50 inr', 100_000_500_000],
    ['12,34,567', 1_234_567_000_000],
  ])('reads a comma as a digit-group separator where one stands: %j', (text, micros) => {
    expect(parseMoney('limit', text).micros).toBe(micros);
  });

  it.each([
    ['0,5 EUR'],
    ['0,0042'],
    ['0,042'],
    ['1,00'],
    ['1,0000'],
    ['1,000,00'],
    ['12,34.5'],
    ['1234,567'],
    ['1,,000'],
    ['1,000,'],
  ])('refuses a comma anywhere else (a decimal comma is never dropped): %j', (text) => {
    const make = () => parseMoney('budget.limit', text);
    expect(make).toThrow(InvalidOptionError);
    expect(make).toThrow(/Expected `budget\.limit` to be .*a comma only between digit groups/);
    expect(make).toThrow(JSON.stringify(text));
  });

  it('a price with a decimal comma is an InvalidCostError naming the field, not 1000 times the price', () => {
    expect(() => costToMicros('0,0042', 'costModel.actual result', 'usd')).toThrow(InvalidCostError);
    expect(() => costToMicros('0,0042', 'costModel.actual result', 'usd')).toThrow(
      /`costModel\.actual result`.*"0,0042"/,
    );
  });

  it('names an unknown currency in the message', () => {
    expect(() => parseMoney('budget.limit', '5 xyz')).toThrow(/unknown `xyz`/);
  });
});

describe('currencies', () => {
  it('normalizes known ISO 4217 codes to lower case', () => {
    expect(normalizeCurrency('currency', 'USD')).toBe('usd');
    expect(normalizeCurrency('currency', 'jpy')).toBe('jpy');
  });
  it.each([['dollars'], ['xyz'], [''], [1]])('rejects %j', (value) => {
    expect(() => normalizeCurrency('budget.currency', value)).toThrow(
      /Expected `budget.currency` to be an ISO 4217/,
    );
  });
});

describe('costToMicros (results of cost functions)', () => {
  it.each([[Number.NaN], [Infinity], [-1], ['-1'], ['garbage'], [undefined], [null], [{}]])(
    'rejects %j with InvalidCostError',
    (value) => {
      expect(() => costToMicros(value, 'estimate', 'usd')).toThrow(InvalidCostError);
      try {
        costToMicros(value, 'estimate', 'usd');
      } catch (e) {
        expect(isTollgateError(e) && e.code).toBe('ERR_INVALID_COST');
      }
    },
  );
  it('rejects an amount in another currency', () => {
    expect(() => costToMicros('1 eur', 'estimate', 'usd')).toThrow(/EUR but the budget counts USD/);
  });
  it('accepts numbers, strings and micros', () => {
    expect(costToMicros(0.002, 'e', 'usd')).toBe(2000);
    expect(costToMicros('$0.002', 'e', 'usd')).toBe(2000);
    expect(costToMicros({ micros: 7 }, 'e', 'usd')).toBe(7);
  });
});

describe('checkMicros', () => {
  it.each([[1.5], [-1], [Number.NaN], [Infinity], ['5'], [2 ** 53]])('rejects %j', (value) => {
    expect(() => checkMicros(value, 'estimateMicros')).toThrow(InvalidCostError);
  });
});

describe('unitsToScaled', () => {
  it('keeps prices finer than a micro exactly', () => {
    expect(unitsToScaled('0.00000015', 9)).toBe(150n);
    expect(unitsToScaled(0.15, 9)).toBe(150_000_000n);
    expect(unitsToScaled('$3', 9)).toBe(3_000_000_000n);
    expect(unitsToScaled('0.0000000001', 9)).toBeUndefined();
    expect(unitsToScaled(-1, 9)).toBeUndefined();
  });
});

describe('formatMicros', () => {
  it.each([
    [1_500_000, 'usd', '$1.50'],
    [123, 'usd', '$0.000123'],
    [0, 'usd', '$0.00'],
    [12_300_000, 'eur', '12.30 EUR'],
    [1_000_000_001, 'usd', '$1000.000001'],
    [-2_500_000, 'usd', '-$2.50'],
  ])('%s %s -> %s', (micros, currency, text) => {
    expect(formatMicros(micros, currency)).toBe(text);
  });
});
