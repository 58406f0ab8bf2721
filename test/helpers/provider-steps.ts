import fc from 'fast-check';

/**
 * One step of a simulated provider's life in the quota property tests: calls scheduled, a started
 * call counted (in any order), a counted call answered (in any order), time passing.
 */
export type ProviderStep =
  | { kind: 'schedule'; count: number }
  | { kind: 'count'; pick: number }
  | { kind: 'answer'; pick: number }
  | { kind: 'tick'; ms: number };

/** Random steps, counts and answers twice as likely as the rest; ticks of 1 to `maxTickMs`. */
export function providerSteps(maxTickMs: number): fc.Arbitrary<ProviderStep> {
  return fc.oneof(
    fc.record({ kind: fc.constant('schedule' as const), count: fc.integer({ min: 1, max: 6 }) }),
    fc.record({ kind: fc.constant('count' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('count' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('answer' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('answer' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: maxTickMs }) }),
  );
}
