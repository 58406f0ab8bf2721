/**
 * The quota a provider just announced: "`remaining` units until `resetAt`". A level the gate adds
 * to a partition from response headers.
 *
 * At `resetAt` the provider's window starts again. When the provider also told its `limit`, the
 * quota renews itself: a fresh allowance of `limit` for another `spanMs` (the window length if
 * stated, else the longest reset span seen), so the calls that waited for the reset do not all
 * rush out at once and draw 429s. Without a limit it says nothing after the reset until the next
 * response tells.
 *
 * Some providers' reset means "full again" rather than "a new window" (OpenAI: "resets to its
 * initial state"; Anthropic: "fully replenished"): their quota is a token bucket. For those the
 * quota refills continuously at `refillPerMs` = (limit - remaining) / reset, up to `limit`,
 * instead of renewing all at once at the reset (which would let a burst through that the
 * provider's bucket refuses).
 */
import type { LimitCore } from './limit.js';

export interface ServerQuotaState {
  /** Units the client may still start before `resetAt`: the server's remaining minus what it had not yet seen. */
  allowance: number;
  /** When the provider's window resets (gate clock ms). */
  resetAt: number;
  /** The provider's quota per window, if it said; enables renewal at the reset. */
  limit: number | undefined;
  /** Length of one window, for renewal: stated window, else the longest reset span observed. 0 = unknown. */
  spanMs: number;
  /** `'spread'` pacing: ms per unit so the allowance lasts until the reset; 0 for `'burst'`. */
  spacingMs: number;
  /** `'spread'` pacing: a renewed window is spread too (even when the last one ended at 0). */
  spread: boolean;
  /** `'spread'` pacing: earliest next start. */
  nextAt: number;
  /** Start number of the call whose response set this state; older responses are stale. */
  seq: number;
  /** > 0: token-bucket semantics, units per ms refilled up to `limit`; 0: window semantics. */
  refillPerMs: number;
  /** When `allowance` was last brought up to date (refill mode). */
  updatedAt: number;
  /** Renewed by the gate at a reset since a response set it: what it holds now is the gate's guess. */
  renewed?: boolean;
  /**
   * The answers whose bounds hold the allowance (see `creditServerQuota`), the binding one at gap
   * 0; undefined when answers of different provider limits (policies) bound it: then nothing is
   * given back.
   */
  bounds?: readonly QuotaBound[] | undefined;
  /** Of the answers seen, the one a newer answer must be clearly below to replace it (`lowerAnswer`). */
  lowest?: QuotaAnswer | undefined;
  /** When the latest answer seen came in (see `mayBeStale`). */
  lastAnsweredAt?: number | undefined;
}

/** What one answer said, for `creditServerQuota`. */
export interface QuotaAnswer {
  /** The provider's remaining (after counting the answered call). */
  readonly remaining: number;
  /** When the answered call started (gate clock ms): the provider counted it no earlier. */
  readonly startedAt: number;
  /** The provider's limit the answer stated. */
  readonly limit: number | undefined;
  /** The answered call's units. */
  readonly units: number;
  /** When the answer came (gate clock ms): a call started since was counted after it. */
  readonly answeredAt: number;
  /** The answered call's start number in its partition. */
  readonly seq?: number;
  /** The partition's latest start number when the answer came in: a call numbered above it started after. */
  readonly arrivedSeq?: number;
}

/** An answer's bound on the allowance: `gap` units above it (every start takes from both). */
export interface QuotaBound extends QuotaAnswer {
  readonly gap: number;
}

/** Allowance at `t` in refill mode: what was left, plus the refill since, up to the limit. */
function refilled(state: ServerQuotaState, t: number): number {
  // units = units + ms * units/ms, capped at the bucket size (the provider's limit).
  return Math.min(
    state.limit ?? Infinity,
    state.allowance + Math.max(0, t - state.updatedAt) * state.refillPerMs,
  );
}

/** What the quota allows at `now` (refilled, in refill mode), before any renewal at a reset. */
export function quotaAllowanceAt(state: ServerQuotaState, now: number): number {
  return state.refillPerMs > 0 ? refilled(state, now) : state.allowance;
}

/** Windows renewed without a fresh response before the quota is considered forgotten (idle). */
const RENEWALS_REMEMBERED = 10;

function renews(state: ServerQuotaState): boolean {
  return state.limit !== undefined && state.spanMs > 0;
}

/** The reset of the window containing `now`, when the quota renews: resetAt + k·span > now. */
function renewedResetAt(state: ServerQuotaState, now: number): number {
  // k whole windows have passed since resetAt; the current one ends one span after the last.
  const k = Math.floor((now - state.resetAt) / state.spanMs) + 1;
  return state.resetAt + k * state.spanMs;
}

/** Roll an expired, renewable quota forward to the window containing `now` (mutates). */
function roll(state: ServerQuotaState, now: number): void {
  if (now < state.resetAt || !renews(state)) return;
  state.resetAt = renewedResetAt(state, now);
  state.allowance = state.limit!;
  state.renewed = true;
  state.spacingMs = state.spread ? state.spanMs / state.limit! : 0;
}

/** Resets are stated to the second (X-RateLimit-Reset, delta seconds): closer than this is one reset. */
const RESET_RESOLUTION_MS = 1000;

/**
 * Whether an answer with reset `resetAt`, read at `now`, is about the window `state` describes:
 * the window stated by the provider (not one the gate renewed), not over, and the answer's reset
 * not clearly later. Window semantics only: a refilling quota has no windows.
 */
export function inSameWindow(state: ServerQuotaState, resetAt: number, now: number): boolean {
  return (
    state.refillPerMs === 0 &&
    state.renewed !== true &&
    now < state.resetAt &&
    resetAt <= state.resetAt + RESET_RESOLUTION_MS
  );
}

/**
 * Whether `answer` proves the provider's window reset since `state` was told (window semantics):
 * it says more is left than an answer of the same limit that came in before its call started.
 * That call was counted after that answer's, and in one window a later count leaves less, never
 * more (other clients only lower it). A provider whose remaining does not move proves nothing.
 */
export function risesAbove(state: ServerQuotaState, answer: QuotaAnswer): boolean {
  if (state.refillPerMs > 0 || state.renewed === true) return false;
  const seen = state.bounds === undefined ? [state.lowest] : [state.lowest, ...state.bounds];
  return seen.some(
    (earlier) =>
      earlier !== undefined &&
      earlier.limit === answer.limit &&
      earlier.arrivedSeq !== undefined &&
      answer.seq !== undefined &&
      answer.seq > earlier.arrivedSeq &&
      answer.remaining > earlier.remaining,
  );
}

/**
 * What a response to an older call says, when a newer one already set the quota (mutates).
 *
 * The provider may have seen the older call after the newer one, so its answer can be the later
 * news: its `bound` (remaining minus everything the provider may not have seen then) holds until
 * the window ends, and so does the later of the two resets. It only ever tightens the quota: an
 * older answer never lends what a newer one took away (it gives back only what it proves was
 * counted, before: `creditServerQuota`). In a window already over (`now` past the reset, or
 * renewed by the gate since) it says nothing.
 */
export function tightenServerQuota(
  state: ServerQuotaState,
  bound: number,
  resetAt: number,
  spanMs: number,
  now: number,
  answer: QuotaAnswer,
  inFlight: number,
): void {
  if (state.refillPerMs > 0) {
    state.allowance = refilled(state, now);
    state.updatedAt = Math.max(state.updatedAt, now);
  } else {
    // After the reset (renewed or about to be), or with a reset already past or clearly before
    // the quota's, an older answer is from the window before.
    if (now >= state.resetAt || state.renewed === true) return;
    if (resetAt <= now || resetAt < state.resetAt - RESET_RESOLUTION_MS) return;
  }
  boundServerQuota(state, bound, answer, inFlight);
  if (resetAt > state.resetAt) state.resetAt = resetAt;
  if (spanMs > state.spanMs) state.spanMs = spanMs;
  // spread: what is left lasts until the reset (ms per unit).
  if (state.spacingMs > 0 && state.allowance > 0)
    state.spacingMs = Math.max(state.spacingMs, (state.resetAt - now) / state.allowance);
}

/**
 * Whether the provider counted the call of an answer saying `remaining`, costing `units`, before
 * the call of `earlier`. Counting a call lowers what is left by its units. Had it come after, it
 * would say at most `earlier.remaining - units`, plus what the provider refilled between the two
 * counts (no later than now, no earlier than `earlier`'s start), and never below 0. Had it come
 * before, it would say `earlier.remaining + earlier.units` or more, unless the provider refilled
 * in between: only that is taken as proof (a refill in between only withholds a credit), so a
 * provider whose remaining does not move (stale, rounded) proves nothing.
 */
function countedBefore(
  earlier: QuotaAnswer,
  remaining: number,
  units: number,
  refillPerMs: number,
  now: number,
): boolean {
  // units = units/ms * ms
  const refill = refillPerMs * Math.max(0, now - earlier.startedAt);
  return (
    remaining >= earlier.remaining + earlier.units &&
    remaining > Math.max(0, earlier.remaining - units + refill)
  );
}

/**
 * Whether an answer to a newer call than the quota's may still be older news (refill mode): the
 * provider may have counted its call before the one the quota rests on, whose answer came back
 * first. Only an answer that says clearly less was left than every answer seen (by that call's
 * units, beyond what the provider may have refilled since) is surely later, and replaces the
 * quota; any other only bounds it.
 */
export function mayBeStale(state: ServerQuotaState, answer: QuotaAnswer, now: number): boolean {
  const lowest = state.lowest;
  if (lowest === undefined || lowest.limit !== answer.limit) return true;
  // A call started after every answer seen came in was counted after all of them.
  if (answer.startedAt > (state.lastAnsweredAt ?? Infinity)) return false;
  // units = units/ms * ms
  const refill = state.refillPerMs * Math.max(0, now - lowest.startedAt);
  return answer.remaining >= lowest.remaining + lowest.units - refill;
}

/**
 * Of two answers, the one a later answer must say clearly less than to be surely later news (see
 * `mayBeStale`): the lower remaining plus units, counting what the provider refilled since each
 * started (`refillPerMs`).
 */
export function lowerAnswer(a: QuotaAnswer | undefined, b: QuotaAnswer, refillPerMs: number): QuotaAnswer {
  if (a === undefined || a.limit !== b.limit) return b;
  // The threshold at any time t is remaining + units - refillPerMs * (t - startedAt).
  const key = (x: QuotaAnswer) => x.remaining + x.units + refillPerMs * x.startedAt;
  return key(b) <= key(a) ? b : a;
}

/** Bounds kept per quota; beyond, the two loosest merge into one (credited as both allow). */
const MAX_BOUNDS = 128;

/**
 * A new upper bound on the allowance, from `answer` (mutates): the lowest bound holds. The others
 * are kept while credits can still make them the lowest: only the `inFlight` units (calls not yet
 * answered) can be credited, each once, and every later start takes from all bounds alike.
 */
export function boundServerQuota(
  state: ServerQuotaState,
  bound: number,
  answer: QuotaAnswer,
  inFlight: number,
): void {
  state.lowest = lowerAnswer(state.lowest, answer, state.refillPerMs);
  state.lastAnsweredAt = Math.max(state.lastAnsweredAt ?? -Infinity, answer.answeredAt);
  const bounds = state.bounds;
  if (bounds === undefined || bounds.some((b) => b.limit !== answer.limit)) {
    // Answers of different policies of a unit are not comparable: no credits from now on.
    state.allowance = Math.min(state.allowance, bound);
    state.bounds = undefined;
    return;
  }
  // lift > 0: the new bound is the lowest, the others are that much further above it.
  const lift = Math.max(0, state.allowance - bound);
  // A sum of fractional units may drift below 0: the lowest bound (gap 0) always stays.
  const reach = Math.max(0, inFlight);
  const next: QuotaBound[] = [];
  for (const b of bounds) if (b.gap + lift <= reach) next.push({ ...b, gap: b.gap + lift });
  if (bound - state.allowance + lift <= reach) next.push({ ...answer, gap: bound - state.allowance + lift });
  state.allowance -= lift;
  next.sort((x, y) => x.gap - y.gap);
  while (next.length > MAX_BOUNDS) {
    const loosest = next.pop()!;
    const other = next.pop()!;
    // The lower of the two holds; it is credited only for a call counted before both answers.
    next.push({
      gap: other.gap,
      remaining: Math.max(loosest.remaining, other.remaining),
      units: Math.max(loosest.units, other.units),
      answeredAt: Math.max(loosest.answeredAt, other.answeredAt),
      startedAt: Math.min(loosest.startedAt, other.startedAt),
      limit: answer.limit,
    });
  }
  state.bounds = next;
}

/**
 * A call's answer, before its own bound applies (mutates). Every answer the quota rests on came
 * in earlier and subtracted this call's `units` as possibly unseen: it was unanswered then. Each bound whose answer this one shows the provider counted later (see
 * `countedBefore`) subtracted them for nothing and gets them back; the allowance rises as far as
 * the lowest bound then allows. Any doubt gives nothing back: another window, another policy of
 * the unit, a quota the gate renewed.
 */
export function creditServerQuota(
  state: ServerQuotaState,
  answer: QuotaAnswer,
  resetAt: number,
  now: number,
): void {
  const units = answer.units;
  const bounds = state.bounds;
  if (bounds === undefined || bounds.length === 0 || !(units > 0) || !Number.isFinite(units)) return;
  if (bounds.some((b) => b.limit !== answer.limit)) return;
  const refillPerMs = state.refillPerMs;
  if (refillPerMs === 0) {
    if (state.renewed === true || now >= state.resetAt) return;
    if (Math.abs(resetAt - state.resetAt) > RESET_RESOLUTION_MS) return;
  }
  const gaps = bounds.map(
    (b) => b.gap + (countedBefore(b, answer.remaining, units, refillPerMs, now) ? units : 0),
  );
  const lift = Math.min(...gaps);
  if (!(lift > 0)) return;
  if (refillPerMs > 0) {
    state.allowance = refilled(state, now);
    state.updatedAt = Math.max(state.updatedAt, now);
  }
  state.allowance = Math.min(state.limit ?? Infinity, state.allowance + lift);
  state.bounds = bounds.map((b, i) => ({ ...b, gap: gaps[i]! - lift }));
}

export function createServerQuota(unit: string): LimitCore<ServerQuotaState> {
  const spec = Object.freeze({
    algorithm: 'fixed-window' as const,
    limit: 1,
    intervalMs: 1,
    burst: 0,
    unit,
  });
  return Object.freeze({
    algorithm: 'server-quota' as const,
    unit,
    // A call never costs more than a quota "can ever admit": it waits for the reset instead.
    capacity: Number.POSITIVE_INFINITY,
    timed: true,
    creditsLateStart: false,
    spec,
    initial: (now: number): ServerQuotaState => ({
      allowance: 0,
      resetAt: now,
      limit: undefined,
      spanMs: 0,
      spacingMs: 0,
      spread: false,
      nextAt: now,
      seq: 0,
      refillPerMs: 0,
      updatedAt: now,
    }),
    earliestAt(state: ServerQuotaState, cost: number, now: number): number {
      if (state.refillPerMs > 0) {
        const tokens = refilled(state, now);
        // A cost above the provider's bucket never fits: let it go and let the provider answer.
        if (cost <= tokens || cost > (state.limit ?? Infinity)) return Math.max(state.nextAt, now);
        // ms = missing units / (units per ms)
        return now + (cost - tokens) / state.refillPerMs;
      }
      let allowance = state.allowance;
      let resetAt = state.resetAt;
      if (now >= resetAt) {
        if (!renews(state)) return now;
        resetAt = renewedResetAt(state, now);
        allowance = state.limit!;
        // A renewing quota of a smaller limit than the cost never fits: let it go now (waiting for
        // the next renewal would wait forever) and let the provider answer.
        if (cost > allowance) return Math.max(state.nextAt, now);
      }
      // Wait for the reset.
      if (cost > allowance) return resetAt;
      return Math.max(state.nextAt, now);
    },
    take(state: ServerQuotaState, cost: number, at: number): ServerQuotaState {
      if (state.refillPerMs > 0) {
        state.allowance = refilled(state, at) - cost;
        state.updatedAt = Math.max(state.updatedAt, at);
        if (state.spacingMs > 0) state.nextAt = Math.max(state.nextAt, at) + cost * state.spacingMs;
        return state;
      }
      roll(state, at);
      if (at >= state.resetAt) return state;
      state.allowance -= cost;
      // spacing is ms per unit, so cost units push the next start cost * spacing later.
      if (state.spacingMs > 0) state.nextAt = Math.max(state.nextAt, at) + cost * state.spacingMs;
      return state;
    },
    refund(state: ServerQuotaState, cost: number): ServerQuotaState {
      state.allowance += cost;
      return state;
    },
    available: (state: ServerQuotaState, now: number) => {
      if (state.refillPerMs > 0) return Math.max(0, Math.floor(refilled(state, now)));
      if (now < state.resetAt) return Math.max(0, Math.floor(state.allowance));
      return renews(state) ? state.limit! : Number.POSITIVE_INFINITY;
    },
    isIdle: (state: ServerQuotaState, now: number) =>
      state.refillPerMs > 0
        ? refilled(state, now) >= (state.limit ?? 0) && now >= state.nextAt
        : now >= state.resetAt + (renews(state) ? RENEWALS_REMEMBERED * state.spanMs : 0),
    clone: (state: ServerQuotaState): ServerQuotaState => ({ ...state }),
  });
}
