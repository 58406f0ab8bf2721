/**
 * Rate-limit response headers as real providers send them, computed from the hidden rules' state.
 * All header writing of the simulated API lives here; formats follow
 * shared/header-vectors/PROVIDERS.md (IETF drafts, X-RateLimit-*, OpenAI, Anthropic).
 */
import type { RuleSnapshot } from './simulated-policy.js';

/**
 * Which family of rate-limit headers to emit on every response:
 * - `none`: no rate-limit headers (Retry-After on 429 still, unless disabled);
 * - `ietf-old`: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds; drafts ≤ 06);
 * - `ietf-structured`: `RateLimit-Policy: "requests";q=60;w=60` and `RateLimit: "requests";r=59;t=1`
 *   (draft-08+ structured-field lists, one item per rule; `t` = seconds until more quota, draft-10);
 * - `x-ratelimit-epoch`: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (epoch seconds, GitHub style);
 * - `openai`: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as Go durations (`6m0s`, `1.5s`, `20ms`);
 * - `anthropic`: `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, resets in RFC 3339.
 */
export type SimulatedHeaderStyle =
  | 'none'
  | 'ietf-old'
  | 'ietf-structured'
  | 'x-ratelimit-epoch'
  | 'openai'
  | 'anthropic';

export const headerStyles: readonly SimulatedHeaderStyle[] = [
  'none',
  'ietf-old',
  'ietf-structured',
  'x-ratelimit-epoch',
  'openai',
  'anthropic',
];

/**
 * Whole seconds covering `ms`, rounded up (a client waiting that long is never early). The 1e-9 s
 * slack keeps float noise such as 1000.0000000001 ms from becoming 2 s.
 */
export function ceilSeconds(ms: number): number {
  return Math.max(0, Math.ceil(ms / 1000 - 1e-9));
}

/**
 * A duration as Go's `time.Duration.String()` prints it, at whole-millisecond precision (rounded up):
 * `0s`, `20ms`, `1.5s`, `2.196s`, `6m0s`, `1h0m0s`.
 */
export function formatGoDuration(ms: number): string {
  const totalMs = Math.max(0, Math.ceil(ms - 1e-6));
  if (totalMs === 0) return '0s';
  if (totalMs < 1000) return `${totalMs}ms`;
  const hours = Math.floor(totalMs / 3_600_000);
  const minutes = Math.floor((totalMs % 3_600_000) / 60_000);
  const secMs = totalMs % 60_000;
  // Seconds with up to three decimals, trailing zeros trimmed (Go prints 1.5s, not 1.500s).
  const fraction = String(secMs % 1000)
    .padStart(3, '0')
    .replace(/0+$/, '');
  const seconds = `${Math.floor(secMs / 1000)}${fraction === '' ? '' : `.${fraction}`}s`;
  if (hours > 0) return `${hours}h${minutes}m${seconds}`;
  if (minutes > 0) return `${minutes}m${seconds}`;
  return seconds;
}

/** An RFC 3339 UTC timestamp at whole seconds, rounded up: `2025-08-21T12:40:59Z`. */
export function formatRfc3339(epochMs: number): string {
  return new Date(Math.ceil(epochMs / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/**
 * The binding rule among `snapshots` (PROVIDERS.md P9): within `unit` when given, else among
 * request-unit rules when there are any; the lowest remaining wins, ties go to the later reset.
 */
export function bindingRule(
  snapshots: readonly RuleSnapshot[],
  unit?: RuleSnapshot['unit'],
): RuleSnapshot | undefined {
  let pool = snapshots.filter((s) => s.unit === (unit ?? 'requests'));
  if (unit === undefined && pool.length === 0) pool = [...snapshots];
  let best: RuleSnapshot | undefined;
  for (const s of pool) {
    if (
      best === undefined ||
      s.remaining < best.remaining ||
      (s.remaining === best.remaining && s.resetMs > best.resetMs)
    ) {
      best = s;
    }
  }
  return best;
}

/** The rate-limit headers of `style` for the rules at `nowMs` (epoch-scale ms). Empty without rules. */
export function rateLimitHeaders(
  style: SimulatedHeaderStyle,
  snapshots: readonly RuleSnapshot[],
  nowMs: number,
): Record<string, string> {
  const headers: Record<string, string> = {};
  switch (style) {
    case 'none':
      return headers;
    case 'ietf-old': {
      const b = bindingRule(snapshots);
      if (b === undefined) return headers;
      headers['RateLimit-Limit'] = String(b.limit);
      headers['RateLimit-Remaining'] = String(b.remaining);
      headers['RateLimit-Reset'] = String(ceilSeconds(b.resetMs));
      return headers;
    }
    case 'ietf-structured': {
      if (snapshots.length === 0) return headers;
      // `w` must be a positive sf-integer of seconds: a window that is not a whole number of seconds
      // is rounded up (claiming the same quota over a longer window understates the rate, never overstates).
      headers['RateLimit-Policy'] = snapshots
        .map(
          (s) =>
            `"${s.name}";q=${s.limit};w=${Math.max(1, ceilSeconds(s.windowMs))}${s.unit === 'tokens' ? ';qu="tokens"' : ''}`,
        )
        .join(', ');
      headers['RateLimit'] = snapshots
        .map((s) => `"${s.name}";r=${s.remaining};t=${ceilSeconds(s.nextMs)}`)
        .join(', ');
      return headers;
    }
    case 'x-ratelimit-epoch': {
      const b = bindingRule(snapshots);
      if (b === undefined) return headers;
      headers['X-RateLimit-Limit'] = String(b.limit);
      headers['X-RateLimit-Remaining'] = String(b.remaining);
      // Epoch seconds of the reset instant, rounded up.
      headers['X-RateLimit-Reset'] = String(Math.ceil((nowMs + b.resetMs) / 1000));
      return headers;
    }
    case 'openai':
      for (const unit of ['requests', 'tokens'] as const) {
        const b = bindingRule(snapshots, unit);
        if (b === undefined) continue;
        // OpenAI's reset is "back to its initial state": its limit is the bucket's size.
        headers[`x-ratelimit-limit-${unit}`] = String(b.capacity ?? b.limit);
        headers[`x-ratelimit-remaining-${unit}`] = String(b.remaining);
        headers[`x-ratelimit-reset-${unit}`] = formatGoDuration(b.resetMs);
      }
      return headers;
    case 'anthropic':
      for (const unit of ['requests', 'tokens'] as const) {
        const b = bindingRule(snapshots, unit);
        if (b === undefined) continue;
        // Anthropic's bucket is "fully replenished" at the reset: its limit is the bucket's size.
        headers[`anthropic-ratelimit-${unit}-limit`] = String(b.capacity ?? b.limit);
        headers[`anthropic-ratelimit-${unit}-remaining`] = String(b.remaining);
        headers[`anthropic-ratelimit-${unit}-reset`] = formatRfc3339(nowMs + b.resetMs);
      }
      return headers;
  }
}

// Values a careful parser must drop without crashing or waiting forever (PROVIDERS.md §3, §4).
const garbageValues = [
  'NaN',
  '-1',
  '1e999',
  'soon',
  '',
  '12abc',
  '6m0',
  '2025-13-45T99:99:99Z',
  '"requests";r=fifty;t=2.5',
  '99999999999999999999999',
  'Infinity',
  '0x10',
];

const fallbackSnapshot: RuleSnapshot = {
  name: 'requests',
  unit: 'requests',
  kind: 'fixed-window',
  limit: 1,
  windowMs: 1000,
  remaining: 1,
  resetMs: 0,
  nextMs: 0,
};

/**
 * The header names of `style` with garbage values, rotating through a list of malformed forms by
 * `seed`. Style `none` (or no rules) uses the X-RateLimit names so the garbage is still seen.
 */
export function garbageRateLimitHeaders(
  style: SimulatedHeaderStyle,
  snapshots: readonly RuleSnapshot[],
  nowMs: number,
  seed: number,
): Record<string, string> {
  const real = rateLimitHeaders(
    style === 'none' ? 'x-ratelimit-epoch' : style,
    snapshots.length === 0 ? [fallbackSnapshot] : snapshots,
    nowMs,
  );
  const out: Record<string, string> = {};
  Object.keys(real).forEach((name, i) => {
    out[name] = garbageValues[(seed + i) % garbageValues.length]!;
  });
  return out;
}
