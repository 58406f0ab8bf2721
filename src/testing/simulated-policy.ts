/**
 * The pure admission core of the simulated API: the server's hidden limits as arithmetic on state
 * plus an explicit `now` (ms). No timers, no I/O, no clock reads; the server passes each request's
 * arrival time. Times given to `admitAt`/`takeAt` must not decrease (the server serializes arrivals).
 *
 * A refused request does not consume quota: only `admitAt` that returns `ok: true` (or `takeAt`)
 * records anything.
 */
import { finiteNumber, integer, invalid, plainObject } from '../validate.js';
import {
  normalizePolicy,
  type SimulatedPolicyOption,
  type SimulatedRule,
  type SimulatedUnit,
} from './policy-spec.js';

/** Units one request costs. `requests` defaults to 1, `tokens` to 0. */
export interface SimulatedCost {
  readonly requests?: number;
  readonly tokens?: number;
}

/** A refusal is a value: `retryAfterMs` is how long until every rule admits this cost (Infinity: never). */
export type SimulatedAdmission =
  | { readonly ok: true }
  | { readonly ok: false; readonly retryAfterMs: number; readonly rule: string };

/** What one rule looks like at `now`, the raw material of rate-limit headers. */
export interface RuleSnapshot {
  readonly name: string;
  readonly unit: SimulatedUnit;
  readonly kind: SimulatedRule['kind'];
  /** Units per window (the configured `limit`, not the burst). */
  readonly limit: number;
  /** Token bucket only: the bucket's size (burst), which refill-style headers report as their limit. */
  readonly capacity?: number;
  readonly windowMs: number;
  /** Whole units that could be taken now. */
  readonly remaining: number;
  /**
   * ms until the rule is back to its initial state: token bucket full again; sliding log empty
   * (newest entry expired); fixed window: the end of the current window (even when nothing was used,
   * as providers counting calendar windows report it).
   */
  readonly resetMs: number;
  /**
   * ms until `remaining` next grows (0 when nothing is used): the next whole token, the oldest
   * log entry expiring, or the end of the fixed window.
   */
  readonly nextMs: number;
}

// Token-bucket levels are floats; a request arriving exactly when its tokens have refilled may see
// 0.9999999999 of 1 because of rounding in rate * elapsed. Admit within this slack (in units).
const epsilonUnits = 1e-9;

interface RuleState {
  readonly rule: SimulatedRule;
  /** Earliest time >= now at which `units` fit (Infinity when `units` exceeds the capacity). */
  earliestAt(units: number, now: number): number;
  /** Record `units` as taken at `at` (no check). */
  take(units: number, at: number): void;
  snapshotAt(now: number): RuleSnapshot;
}

class TokenBucketState implements RuleState {
  // Units per ms: `limit` units refill over `intervalMs`.
  private readonly ratePerMs: number;
  private tokens: number;
  private last = -Infinity;

  constructor(readonly rule: SimulatedRule) {
    this.ratePerMs = rule.limit / rule.intervalMs;
    this.tokens = rule.burst;
  }

  private levelAt(now: number): number {
    // A time before the last take refills nothing (elapsed clamps to 0).
    const elapsedMs = Math.max(0, now - this.last);
    return Math.min(this.rule.burst, this.tokens + elapsedMs * this.ratePerMs);
  }

  earliestAt(units: number, now: number): number {
    if (units > this.rule.capacity) return Infinity;
    const level = this.levelAt(now);
    if (level + epsilonUnits >= units) return now;
    // The missing units refill at ratePerMs: (units - level) / ratePerMs ms from now.
    return now + (units - level) / this.ratePerMs;
  }

  take(units: number, at: number): void {
    this.tokens = this.levelAt(at) - units;
    this.last = Math.max(this.last, at);
  }

  snapshotAt(now: number): RuleSnapshot {
    const { rule } = this;
    const level = this.levelAt(now);
    const whole = Math.max(0, Math.floor(level + epsilonUnits));
    const full = level + epsilonUnits >= rule.burst;
    return {
      name: rule.name,
      unit: rule.unit,
      kind: rule.kind,
      limit: rule.limit,
      capacity: rule.burst,
      windowMs: rule.intervalMs,
      remaining: whole,
      // Time to refill (burst - level) units at ratePerMs.
      resetMs: full ? 0 : (rule.burst - level) / this.ratePerMs,
      // Time until the level reaches the next whole unit above the current one.
      nextMs: full ? 0 : Math.max(0, (Math.min(rule.burst, whole + 1) - level) / this.ratePerMs),
    };
  }
}

class FixedWindowState implements RuleState {
  private windowIndex = -Infinity;
  private used = 0;

  constructor(readonly rule: SimulatedRule) {}

  // Windows are aligned to multiples of intervalMs on the epoch scale: window k is [k*I, (k+1)*I).
  private indexAt(now: number): number {
    return Math.max(this.windowIndex, Math.floor(now / this.rule.intervalMs));
  }

  private usedAt(now: number): number {
    return this.indexAt(now) === this.windowIndex ? this.used : 0;
  }

  // The first instant of window `index`. index * I can round so that floor(t / I) gives index - 1
  // when I is not an integer; step up to the next float until it does not.
  private startOf(index: number): number {
    let t = index * this.rule.intervalMs;
    while (Math.floor(t / this.rule.intervalMs) < index)
      t += Math.max(Number.MIN_VALUE, Math.abs(t) * Number.EPSILON);
    return t;
  }

  earliestAt(units: number, now: number): number {
    if (units > this.rule.capacity) return Infinity;
    if (this.usedAt(now) + units <= this.rule.limit) return now;
    return this.startOf(this.indexAt(now) + 1);
  }

  take(units: number, at: number): void {
    const index = this.indexAt(at);
    if (index !== this.windowIndex) {
      this.windowIndex = index;
      this.used = 0;
    }
    this.used += units;
  }

  snapshotAt(now: number): RuleSnapshot {
    const { rule } = this;
    const used = this.usedAt(now);
    const endMs = this.startOf(this.indexAt(now) + 1) - now;
    return {
      name: rule.name,
      unit: rule.unit,
      kind: rule.kind,
      limit: rule.limit,
      windowMs: rule.intervalMs,
      remaining: Math.max(0, rule.limit - used),
      resetMs: endMs,
      nextMs: used === 0 ? 0 : endMs,
    };
  }
}

class SlidingLogState implements RuleState {
  // Entry i counts in every window (t - I, t] with times[i] > t - I, i.e. until t = times[i] + I.
  // Comparisons use `times[i] + I <= now` (not `times[i] <= now - I`) so that the expiry time this
  // class returns, times[i] + I, is exactly the first instant the entry no longer counts.
  private times: number[] = [];
  private units: number[] = [];
  private head = 0;
  private sum = 0;

  constructor(readonly rule: SimulatedRule) {}

  private firstLiveAt(now: number): { index: number; inWindow: number } {
    let index = this.head;
    let inWindow = this.sum;
    while (index < this.times.length && this.times[index]! + this.rule.intervalMs <= now) {
      inWindow -= this.units[index]!;
      index++;
    }
    return { index, inWindow };
  }

  earliestAt(units: number, now: number): number {
    if (units > this.rule.capacity) return Infinity;
    let { index, inWindow } = this.firstLiveAt(now);
    let at = now;
    // Wait for the oldest entries to expire, one by one, until the cost fits.
    while (inWindow + units > this.rule.limit && index < this.times.length) {
      inWindow -= this.units[index]!;
      at = this.times[index]! + this.rule.intervalMs;
      index++;
    }
    return at;
  }

  take(units: number, at: number): void {
    const { index, inWindow } = this.firstLiveAt(at);
    this.head = index;
    this.sum = inWindow;
    // Drop the expired prefix now and then, so the log holds about one window of entries.
    if (this.head > 1024 && this.head * 2 > this.times.length) {
      this.times = this.times.slice(this.head);
      this.units = this.units.slice(this.head);
      this.head = 0;
    }
    if (units === 0) return;
    this.times.push(at);
    this.units.push(units);
    this.sum += units;
  }

  snapshotAt(now: number): RuleSnapshot {
    const { rule } = this;
    const { index, inWindow } = this.firstLiveAt(now);
    const live = index < this.times.length;
    return {
      name: rule.name,
      unit: rule.unit,
      kind: rule.kind,
      limit: rule.limit,
      windowMs: rule.intervalMs,
      remaining: Math.max(0, rule.limit - inWindow),
      resetMs: live ? this.times[this.times.length - 1]! + rule.intervalMs - now : 0,
      nextMs: live ? this.times[index]! + rule.intervalMs - now : 0,
    };
  }
}

function stateFor(rule: SimulatedRule): RuleState {
  switch (rule.kind) {
    case 'token-bucket':
      return new TokenBucketState(rule);
    case 'fixed-window':
      return new FixedWindowState(rule);
    case 'sliding-window':
      return new SlidingLogState(rule);
  }
}

function unitsOf(cost: SimulatedCost, unit: SimulatedUnit): number {
  return unit === 'requests' ? (cost.requests ?? 1) : (cost.tokens ?? 0);
}

/**
 * The server's hidden limits: every rule must admit a request, all or nothing. A rule's state
 * starts fresh (token buckets full, windows empty).
 *
 * @example
 * const p = new SimulatedPolicy({ kind: 'sliding-window', limit: 2, intervalMs: 1000 });
 * p.admitAt({}, 0); p.admitAt({}, 10);
 * p.admitAt({}, 20); // { ok: false, retryAfterMs: 980, rule: 'requests' }
 */
export class SimulatedPolicy {
  readonly rules: readonly SimulatedRule[];
  private states: RuleState[];

  constructor(policy: SimulatedPolicyOption) {
    this.rules = normalizePolicy(policy);
    this.states = this.rules.map(stateFor);
  }

  /** Back to the initial state (full buckets, empty windows). */
  reset(): void {
    this.states = this.rules.map(stateFor);
  }

  /** The name of a rule that can never admit `cost` (it exceeds its capacity), if any. */
  tooLargeFor(cost: SimulatedCost): string | undefined {
    return this.rules.find((r) => unitsOf(cost, r.unit) > r.capacity)?.name;
  }

  /**
   * Earliest time >= `now` at which every rule admits `cost`. Each rule's availability only grows
   * with time while nothing is taken, so the joint earliest time is the latest of the rules' own.
   */
  earliestAt(cost: SimulatedCost, now: number): number {
    let at = now;
    for (const s of this.states) at = Math.max(at, s.earliestAt(unitsOf(cost, s.rule.unit), now));
    return at;
  }

  /** Admit `cost` at `now` if every rule has room (and record it), else refuse without recording. */
  admitAt(cost: SimulatedCost, now: number): SimulatedAdmission {
    let at = now;
    let binding: string | undefined;
    for (const s of this.states) {
      const ruleAt = s.earliestAt(unitsOf(cost, s.rule.unit), now);
      if (ruleAt > at) {
        at = ruleAt;
        binding = s.rule.name;
      }
    }
    if (binding !== undefined) return { ok: false, retryAfterMs: at - now, rule: binding };
    this.takeAt(cost, now);
    return { ok: true };
  }

  /** Record `cost` at `at` without checking (a reservation at a time `earliestAt` returned). */
  takeAt(cost: SimulatedCost, at: number): void {
    for (const s of this.states) s.take(unitsOf(cost, s.rule.unit), at);
  }

  /** Each rule's limit, remaining and reset times at `now`. */
  snapshotAt(now: number): RuleSnapshot[] {
    return this.states.map((s) => s.snapshotAt(now));
  }
}

/** A batch a client wants to send: `requests` calls costing `tokensPerRequest` tokens each. */
export interface SimulatedWorkload {
  /** Number of requests. Integer >= 0. */
  requests: number;
  /**
   * Tokens each request costs (for `tokens` rules). Integer >= 0.
   * @default 0
   */
  tokensPerRequest?: number;
  /**
   * Epoch-scale ms at which the first request arrives. Matters only for fixed windows, which are
   * aligned to multiples of `intervalMs`: a client starting late in a window gets a second full
   * window one interval sooner.
   * @default 0, a window boundary (the client starts exactly when a window opens)
   */
  startAt?: number;
}

/**
 * The least wall time, in ms, from the first request's arrival to the last one's, for a client that
 * sends `workload` against the hidden `policy` starting from a fresh state. Computed by sending each
 * request at the earliest instant every rule admits it (greedy is optimal here: admitting a request
 * earlier never delays any later one). For one rule and c units per request (c = 1 for requests)
 * this comes to:
 * - token bucket (rate r = limit/interval, burst b): max(0, (N·c − b) / r);
 * - sliding window: (⌈N / ⌊limit/c⌋⌉ − 1) · interval;
 * - fixed window, starting on a window boundary: (⌈N / ⌊limit/c⌋⌉ − 1) · interval; starting at
 *   `startAt` mid-window, the first window is cut short and the figure is smaller;
 * - none: 0.
 * Several rules (requests and tokens) are combined by the same greedy schedule.
 */
export function physicalMinimumMs(policy: SimulatedPolicyOption, workload: SimulatedWorkload): number {
  const sim = new SimulatedPolicy(policy);
  const w = plainObject('workload', workload);
  const n = integer('workload.requests', w['requests'], 0);
  const tokens =
    w['tokensPerRequest'] === undefined ? 0 : integer('workload.tokensPerRequest', w['tokensPerRequest'], 0);
  const startAt = w['startAt'] === undefined ? 0 : finiteNumber('workload.startAt', w['startAt']);
  const cost: SimulatedCost = { requests: 1, tokens };
  const tooSmall = sim.tooLargeFor(cost);
  if (tooSmall !== undefined) {
    throw invalid('workload.tokensPerRequest', `at most the capacity of rule \`${tooSmall}\``, tokens);
  }
  let at = startAt;
  for (let i = 0; i < n; i++) {
    at = sim.earliestAt(cost, at);
    sim.takeAt(cost, at);
  }
  // The first request arrives at startAt; the answer is the span to the last arrival.
  return n === 0 ? 0 : at - startAt;
}
