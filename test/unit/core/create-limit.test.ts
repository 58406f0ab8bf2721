import { describe, expect, it } from 'vitest';
import { createLimit } from '../../../src/core/create-limit.js';
import { algorithms } from '../../../src/core/limit.js';
import { expectInvalidOption } from './expect-invalid-option.js';

describe('createLimit', () => {
  it('builds every algorithm with its defaults filled in, frozen', () => {
    for (const algorithm of algorithms) {
      const core = createLimit({ algorithm, limit: 5, intervalMs: 1000 });
      expect(core.algorithm).toBe(algorithm);
      expect(core.unit).toBe('requests');
      expect(core.spec).toEqual({
        algorithm,
        limit: 5,
        intervalMs: algorithm === 'concurrency' ? 0 : 1000,
        burst: algorithm === 'token-bucket' ? 5 : 0,
        unit: 'requests',
      });
      expect(Object.isFrozen(core)).toBe(true);
      expect(Object.isFrozen(core.spec)).toBe(true);
    }
  });

  // Found by review: with epoch-scale times (~1.7e12 ms) an interval of 1e-4 ms put window indexes
  // past 2^53, where `index + 1 === index`, and the second call at the same instant looped forever.
  it('rejects an intervalMs below 1 ms for every timed algorithm, naming the option and the value', () => {
    for (const algorithm of algorithms.filter((a) => a !== 'concurrency')) {
      for (const intervalMs of [1e-4, 1e-6, 1e-9, 0.5, 0.999]) {
        expectInvalidOption(
          () => createLimit({ algorithm, limit: 1, intervalMs }, 'limits[2]'),
          'limits[2].intervalMs',
          `Expected \`limits[2].intervalMs\` to be a finite number >= 1, got \`${intervalMs}\` (number)`,
        );
      }
      expect(createLimit({ algorithm, limit: 1, intervalMs: 1 }).spec.intervalMs).toBe(1);
    }
  });

  it('accepts its own normalized spec again', () => {
    for (const algorithm of algorithms) {
      const core = createLimit({ algorithm, limit: 5, intervalMs: 1000, unit: 'tokens' });
      expect(createLimit(core.spec).spec).toEqual(core.spec);
    }
  });

  it('keeps a given burst and unit', () => {
    const core = createLimit({
      algorithm: 'token-bucket',
      limit: 5,
      intervalMs: 1000,
      burst: 12,
      unit: 'tokens',
    });
    expect(core.spec).toEqual({
      algorithm: 'token-bucket',
      limit: 5,
      intervalMs: 1000,
      burst: 12,
      unit: 'tokens',
    });
    expect(core.capacity).toBe(12);
    expect(core.unit).toBe('tokens');
  });

  it('treats an option set to undefined as omitted', () => {
    const core = createLimit({
      algorithm: 'token-bucket',
      limit: 5,
      intervalMs: 1000,
      burst: undefined,
      unit: undefined,
    });
    expect(core.spec.burst).toBe(5);
  });

  it('names the given option path in errors', () => {
    expectInvalidOption(
      () =>
        createLimit({ algorithm: 'token-bucket', limit: 5, intervalMs: 1000, burst: 0 }, 'perKey.limits[2]'),
      'perKey.limits[2].burst',
      'Expected `perKey.limits[2].burst` to be an integer >= 1, got `0` (number)',
    );
  });

  const oneOfAlgorithms =
    "one of 'token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-log', 'sliding-window', 'concurrency'";
  it.each([
    ['not an object', 42, 'limits[0]', 'Expected `limits[0]` to be an object, got `42` (number)'],
    ['an array', [], 'limits[0]', 'Expected `limits[0]` to be an object, got `[]` (object)'],
    [
      'no algorithm',
      { limit: 5, intervalMs: 1000 },
      'limits[0].algorithm',
      `Expected \`limits[0].algorithm\` to be ${oneOfAlgorithms}, got \`undefined\` (undefined)`,
    ],
    [
      'an unknown algorithm',
      { algorithm: 'token_bucket', limit: 5, intervalMs: 1000 },
      'limits[0].algorithm',
      `Expected \`limits[0].algorithm\` to be ${oneOfAlgorithms}, got \`"token_bucket"\` (string)`,
    ],
    [
      'a negative limit',
      { algorithm: 'fixed-window', limit: -5, intervalMs: 1000 },
      'limits[0].limit',
      'Expected `limits[0].limit` to be an integer >= 1, got `-5` (number)',
    ],
    [
      'a zero limit',
      { algorithm: 'fixed-window', limit: 0, intervalMs: 1000 },
      'limits[0].limit',
      'Expected `limits[0].limit` to be an integer >= 1, got `0` (number)',
    ],
    [
      'a NaN limit',
      { algorithm: 'sliding-log', limit: Number.NaN, intervalMs: 1000 },
      'limits[0].limit',
      'Expected `limits[0].limit` to be an integer >= 1, got `NaN` (number)',
    ],
    [
      'a string limit',
      { algorithm: 'sliding-log', limit: '5', intervalMs: 1000 },
      'limits[0].limit',
      'Expected `limits[0].limit` to be an integer >= 1, got `"5"` (string)',
    ],
    [
      'a missing intervalMs',
      { algorithm: 'token-bucket', limit: 5 },
      'limits[0].intervalMs',
      'Expected `limits[0].intervalMs` to be a finite number >= 1, got `undefined` (undefined)',
    ],
    [
      'an Infinity intervalMs',
      { algorithm: 'sliding-window', limit: 5, intervalMs: Infinity },
      'limits[0].intervalMs',
      'Expected `limits[0].intervalMs` to be a finite number >= 1, got `Infinity` (number)',
    ],
    [
      'a negative intervalMs',
      { algorithm: 'leaky-bucket', limit: 5, intervalMs: -1000 },
      'limits[0].intervalMs',
      'Expected `limits[0].intervalMs` to be a finite number >= 1, got `-1000` (number)',
    ],
    [
      'a zero burst',
      { algorithm: 'token-bucket', limit: 5, intervalMs: 1000, burst: 0 },
      'limits[0].burst',
      'Expected `limits[0].burst` to be an integer >= 1, got `0` (number)',
    ],
    [
      'an Infinity burst',
      { algorithm: 'token-bucket', limit: 5, intervalMs: 1000, burst: Infinity },
      'limits[0].burst',
      'Expected `limits[0].burst` to be an integer >= 1, got `Infinity` (number)',
    ],
    [
      'a burst on a leaky bucket',
      { algorithm: 'leaky-bucket', limit: 5, intervalMs: 1000, burst: 5 },
      'limits[0].burst',
      "Expected `limits[0].burst` to be omitted (only 'token-bucket' has a burst; 'leaky-bucket' does not), got `5` (number)",
    ],
    [
      'an empty unit',
      { algorithm: 'token-bucket', limit: 5, intervalMs: 1000, unit: '' },
      'limits[0].unit',
      'Expected `limits[0].unit` to be a non-empty string, got `""` (string)',
    ],
    [
      'a non-string unit',
      { algorithm: 'token-bucket', limit: 5, intervalMs: 1000, unit: 7 },
      'limits[0].unit',
      'Expected `limits[0].unit` to be a non-empty string, got `7` (number)',
    ],
    [
      'an unknown key',
      { algorithm: 'token-bucket', limit: 5, intervalMS: 1000 },
      'limits[0].intervalMS',
      'Expected `limits[0].intervalMS` to be omitted (not a limit option; known: algorithm, limit, intervalMs, burst, unit), got `1000` (number)',
    ],
  ])('rejects %s', (_name, spec, option, message) => {
    expectInvalidOption(() => createLimit(spec), option, message);
  });
});
