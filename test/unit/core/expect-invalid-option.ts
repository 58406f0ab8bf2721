import { expect } from 'vitest';
import { InvalidOptionError } from '../../../src/errors.js';

/** Asserts `fn` throws an `InvalidOptionError` (code `ERR_INVALID_OPTION`) naming `option`, with `message`. */
export function expectInvalidOption(fn: () => unknown, option: string, message: string): void {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(InvalidOptionError);
  const error = thrown as InvalidOptionError;
  expect({ code: error.code, option: error.option, message: error.message }).toEqual({
    code: 'ERR_INVALID_OPTION',
    option,
    message,
  });
}
