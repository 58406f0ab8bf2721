/**
 * A number strictly greater than `x`, at most a couple of ulps above it (Infinity and NaN are
 * returned as is). Used to nudge a computed time until the admission check that defines it agrees,
 * so a time returned by `earliestAt` is admitted by a check at that very time.
 */
export function nextUp(x: number): number {
  // |x|·ε is at least one ulp of x (an ulp lies between |x|·ε/2 and |x|·ε), so the sum moves;
  // near 0 (and for subnormals, where the product underflows) step by the smallest double.
  const step = Math.abs(x) * Number.EPSILON;
  return x + (step > 0 ? step : Number.MIN_VALUE);
}
