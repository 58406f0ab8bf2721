import { type Clock, systemClock } from '../clock.js';
import { createLimit } from '../core/create-limit.js';
import { emissionIntervalMs } from '../core/gcra.js';
import type { Algorithm, LimitCore, LimitSpec } from '../core/limit.js';
import type { NormalizedLimitSpec, SpecFor } from '../core/normalize-limit-spec.js';
import { countsWindow, recountAtMs, recountState } from '../core/recount.js';
import { createTokenBucket } from '../core/token-bucket.js';
import { actualUnits, ownUnits, unitCost } from '../gate/schedule-options.js';
import { integer, invalid, onlyKnownKeys, plainObject } from '../validate.js';
import type {
  LearnOptions,
  ReserveOptions,
  Store,
  StoreDecision,
  StoreLevel,
  StorePause,
  StorePauseEvent,
  StoreReservation,
} from './store.js';
import { ownWaitOf, seedAge, startedAtOf, waitBoundOf } from './store.js';

export interface MemoryStoreOptions {
  /** Time source (ms). @default systemClock */
  clock?: Pick<Clock, 'now'>;
  /**
   * How long a learned limit is kept after it was last learned, in ms. Integer >= 1.
   * @default 600_000
   */
  learnedTtlMs?: number;
}

interface Learned {
  readonly spec: string;
  readonly core: LimitCore;
  expiresAt: number;
}

interface PartitionState {
  /** Level key -> state (absent: initial). */
  readonly states: Map<string, unknown>;
  /** Level key -> the core that reads its state. */
  readonly cores: Map<string, LimitCore>;
  /** Scope -> pause end. */
  readonly pauses: Map<string, number>;
  /** Scope -> learned id -> learned limit. */
  readonly learned: Map<string, Map<string, Learned>>;
  /**
   * Level key -> give-backs of older takes of a bucket's chain, waiting for the takes above them
   * (mark -> cost; see `giveBackTake`). Dropped with the level's state.
   */
  readonly waiting: Map<string, Map<number, number>>;
}

/** The longest pause a store keeps (ms, about 31,700 years): 'forever' is that long in Redis too. */
const MAX_PAUSE_MS = 1e15;

const cores = new WeakMap<NormalizedLimitSpec, LimitCore>();
/** Token buckets whose capacity exceeds their burst (`StoreLevel.capacity`): spec -> capacity -> core. */
const widerCores = new WeakMap<NormalizedLimitSpec, Map<number, LimitCore>>();

/**
 * The largest cost `level` admits: its `capacity` when it has one (checked: a token bucket's, an
 * integer >= its burst), else its spec's (`burst` for a token bucket, `limit` otherwise).
 */
export function levelCapacity(level: StoreLevel): number {
  const { spec, capacity } = level;
  const own = spec.algorithm === 'token-bucket' ? spec.burst : spec.limit;
  if (capacity === undefined || capacity === own) return own;
  if (spec.algorithm !== 'token-bucket')
    throw invalid('level.capacity', `omitted (only a token bucket's may exceed its burst)`, capacity);
  return integer('level.capacity', capacity, own);
}

/** The core of a level, built once per spec object (and capacity, for a wider token bucket). */
export function coreOf(level: StoreLevel): LimitCore {
  const spec = level.spec;
  let core = cores.get(spec);
  if (core === undefined) {
    core = createLimit(spec, 'level');
    cores.set(spec, core);
  }
  if (level.capacity === undefined || level.capacity === core.capacity) return core;
  const capacity = levelCapacity(level);
  let byCapacity = widerCores.get(spec);
  if (byCapacity === undefined) {
    byCapacity = new Map();
    widerCores.set(spec, byCapacity);
  }
  let wider = byCapacity.get(capacity);
  if (wider === undefined) {
    wider = createTokenBucket(spec as SpecFor<'token-bucket'>, 'level', capacity);
    byCapacity.set(capacity, wider);
  }
  return wider;
}

/** A level's state name: same id, algorithm, interval and unit share the state (limit may change). */
export function levelName(level: StoreLevel): string {
  const { algorithm, intervalMs, unit } = level.spec;
  return `${level.id}|${algorithm}|${intervalMs}|${unit}`;
}

/**
 * Units a sliding log counts at `now` from its takes up to `now` (reservations ahead left out: the
 * provider has not seen them); for other limits `Infinity` (their state is not topped up).
 */
function loggedUpTo(core: LimitCore, state: unknown, now: number): number {
  if (core.algorithm !== 'sliding-log') return Number.POSITIVE_INFINITY;
  const log = state as readonly number[];
  const intervalMs = core.spec.intervalMs;
  let units = 0;
  for (let i = 1; i + 1 < log.length; i += 2) {
    if (log[i]! + intervalMs > now && log[i]! <= now) units += log[i + 1]!;
  }
  return units;
}

/** A learned limit's id within its scope: one per unit and window. */
export function learnedId(spec: NormalizedLimitSpec): string {
  return `${spec.algorithm}|${spec.unit}|${spec.intervalMs}`;
}

/** Short algorithm names, as the Redis scripts read them. */
export const algorithmCodes: Readonly<Record<Algorithm, string>> = {
  'token-bucket': 'tb',
  'leaky-bucket': 'lb',
  'fixed-window': 'fw',
  'sliding-log': 'sl',
  'sliding-window': 'sw',
  concurrency: 'cc',
};

/** The spec string stored for a learned limit (the Redis store keeps the same text). */
export function learnedSpecText(spec: NormalizedLimitSpec): string {
  return `${algorithmCodes[spec.algorithm]} ${spec.limit} ${spec.intervalMs} ${spec.burst} ${encodeURIComponent(spec.unit)}`;
}

// What of each reservation is settled for good: 'untimed' (its permits were given back), 'timed'
// (its call ran and was recounted), 'all'. A second refund or recount changes nothing.
const settled = new WeakMap<StoreReservation, 'untimed' | 'timed' | 'all'>();
// Reservations whose timed levels were given back: nothing of them is adjusted after.
const refundedTimed = new WeakSet<StoreReservation>();

/** Which levels a refund touches now; undefined when nothing is left to refund. */
export function claimRefund(
  reservation: StoreReservation,
  which: 'all' | 'untimed',
): 'all' | 'untimed' | 'timed' | undefined {
  const done = settled.get(reservation);
  if (done === 'all' || done === which) return undefined;
  if (which === 'untimed') {
    settled.set(reservation, done === 'timed' ? 'all' : 'untimed');
    return 'untimed';
  }
  settled.set(reservation, 'all');
  // One part already settled: only the other is left.
  if (done === 'timed') return 'untimed';
  refundedTimed.add(reservation);
  return done === 'untimed' ? 'timed' : 'all';
}

/**
 * A refund of `part` failed (the store did not answer): its permits may be given back again, as
 * the shared gate does when the store answers again. Leases are keyed by the reservation, so a
 * refund that did run after all is not given back twice. Its timed part stays settled (counted:
 * the safe side).
 */
export function releasePermitsClaim(reservation: StoreReservation, part: 'all' | 'untimed' | 'timed'): void {
  if (part === 'timed') return;
  const done = settled.get(reservation);
  if (done === 'all') settled.set(reservation, 'timed');
  else if (done === 'untimed') settled.delete(reservation);
}

/** True the first time `reservation` is recounted, unless its timed levels were refunded. */
export function claimRecount(reservation: StoreReservation): boolean {
  const done = settled.get(reservation);
  if (done === 'all' || done === 'timed') return false;
  settled.set(reservation, done === 'untimed' ? 'all' : 'timed');
  return true;
}

// Reservations whose actual units were settled (see `Store.adjust`): once each.
const adjusted = new WeakSet<StoreReservation>();

/**
 * True the first time `reservation` is adjusted, unless its timed levels were refunded. Checks the
 * arguments first (a bad one is named and claims nothing).
 */
export function claimAdjust(
  reservation: StoreReservation,
  units: unknown,
  recountMarginMs: unknown,
): boolean {
  if (actualUnits(units) === undefined) throw invalid('units', 'an object of units used, by unit', units);
  if (recountMarginMs !== undefined && (typeof recountMarginMs !== 'number' || !(recountMarginMs >= 0)))
    throw invalid('recountMarginMs', 'a number >= 0, or undefined', recountMarginMs);
  if (adjusted.has(reservation) || refundedTimed.has(reservation)) return false;
  adjusted.add(reservation);
  return true;
}

/**
 * What a level of a reservation is charged (positive) or given back (negative) for `used` units
 * instead of `cost`: 0 when `used` is missing, negative or not finite, or when nothing can be
 * given back exactly (a window of a recounted call: the estimate moved). More is capped at what the
 * level can ever admit.
 */
export function adjustment(
  used: number | undefined,
  cost: number,
  capacity: number,
  recountedWindow: boolean,
): number {
  if (typeof used !== 'number' || !Number.isFinite(used) || used < 0 || !Number.isFinite(cost)) return 0;
  if (used > cost) return Math.min(used - cost, capacity);
  return recountedWindow ? 0 : used - cost;
}

let nextId = 0;

/**
 * The store of one process: the TypeScript cores on plain in-memory state. Answers synchronously.
 * The default store of a shared gate built without Redis, and the reference the Redis store is
 * checked against. Idle state is dropped as it is touched (the equivalent of Redis TTLs).
 */
export class MemoryStore implements Store {
  private readonly clock: Pick<Clock, 'now'>;
  readonly learnedTtlMs: number;
  private readonly partitions = new Map<string, PartitionState>();
  private readonly listeners = new Set<(event: StorePauseEvent) => void>();
  /** Claimed probes by partition and scope (see `Store.claimProbe`). */
  private readonly probes = new Map<string, { holder: string; expiresAt: number }>();

  constructor(options: MemoryStoreOptions = {}) {
    const o = plainObject('options', options);
    onlyKnownKeys('options', o, ['clock', 'learnedTtlMs']);
    const clock = o['clock'] ?? systemClock;
    if (typeof (clock as Clock | null)?.now !== 'function')
      throw invalid('clock', 'an object with a now() method', clock);
    this.clock = clock as Pick<Clock, 'now'>;
    this.learnedTtlMs = integer('learnedTtlMs', o['learnedTtlMs'] ?? 600_000, 1);
  }

  /** Partitions holding state after dropping what is idle (for tests of cleanup). */
  get size(): number {
    this.prune(this.clock.now());
    return this.partitions.size;
  }

  /** Drop every idle state, ended pause, expired learned limit and probe (what TTLs do in Redis). O(state). */
  prune(now: number): void {
    for (const [name, probe] of this.probes) if (probe.expiresAt <= now) this.probes.delete(name);
    for (const [partition, p] of this.partitions) {
      for (const [scope, learned] of p.learned) {
        for (const [id, entry] of learned) if (entry.expiresAt <= now) learned.delete(id);
        if (learned.size === 0) p.learned.delete(scope);
      }
      for (const [name, state] of p.states) {
        const core = this.coreFor(p, name);
        if (core === undefined || core.isIdle(state, now)) {
          p.states.delete(name);
          p.cores.delete(name);
          p.waiting.delete(name);
        }
      }
      this.dropIfEmpty(partition, p, now);
    }
  }

  reserve(
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    options?: ReserveOptions,
  ): StoreDecision {
    return this.reserveAt(partition, levels, costs, maxWaitMs, this.clock.now(), options);
  }

  reserveAt(
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    now: number,
    options?: ReserveOptions,
  ): StoreDecision {
    const ownWaitMs = ownWaitOf(options);
    const maxWait = waitBoundOf(maxWaitMs);
    const scope = options?.scope ?? '';
    const p = this.partitions.get(partition);
    let from = now;
    // The start the shared levels allow (see ReserveOptions.ownFrom): the partition's pause is
    // shared, the scope's is the call's own.
    let sharedAt = now;
    if (p !== undefined) {
      from = Math.max(from, this.pauseOf(p, '', now));
      sharedAt = from;
      if (scope !== '') from = Math.max(from, this.pauseOf(p, scope, now));
    }
    // Every level the call passes: the given ones, then the learned ones of its scope.
    const cores: LimitCore[] = [];
    const names: string[] = [];
    const charges: number[] = [];
    for (let i = 0; i < levels.length; i++) {
      cores.push(coreOf(levels[i]!));
      names.push(levelName(levels[i]!));
      charges.push(costs[i]!);
    }
    const learnedIds: string[] = [];
    const learned = p?.learned.get(scope);
    if (learned !== undefined) {
      for (const [id, entry] of learned) {
        if (entry.expiresAt <= now) {
          learned.delete(id);
          continue;
        }
        cores.push(entry.core);
        names.push(`L:${scope}:${id}`);
        charges.push(Math.min(unitCost(options?.units, entry.core.unit), entry.core.capacity));
        learnedIds.push(id);
      }
    }
    const states: unknown[] = [];
    let startAt = from;
    const ownFrom = options?.ownFrom ?? Infinity;
    const sharedFrom = sharedAt;
    let blocked: 'concurrency' | 'capacity' | undefined;
    for (let i = 0; i < cores.length; i++) {
      const cost = charges[i]!;
      if (cost === 0) continue;
      const core = cores[i]!;
      const state = p?.states.get(names[i]!) ?? core.initial(now);
      states[i] = state;
      const at = core.earliestAt(state, cost, from);
      if (at === Infinity) blocked = core.timed ? 'capacity' : 'concurrency';
      else {
        if (at > startAt) startAt = at;
        if (i < ownFrom) {
          // From the shared pause only: the scope's pause holds this call, not the shared levels.
          const sharedStart = from === sharedFrom ? at : core.earliestAt(state, cost, sharedFrom);
          if (sharedStart > sharedAt) sharedAt = sharedStart;
        }
      }
    }
    if (blocked !== undefined) return { ok: false, retryAfterMs: Infinity, reason: blocked, serverNow: now };
    const ownHolds = startAt > sharedAt;
    if (startAt - now > maxWait || (ownHolds && startAt - now > ownWaitMs)) {
      const refusal = { ok: false, retryAfterMs: startAt - now, reason: 'wait', serverNow: now } as const;
      return options?.ownFrom === undefined ? refusal : { ...refusal, shared: !ownHolds };
    }
    const part = p ?? this.partitionOf(partition);
    const marks: string[] = [];
    const learnedCharged: { id: string; cost: number; mark: string }[] = [];
    for (let i = 0; i < cores.length; i++) {
      const cost = charges[i]!;
      let mark = '';
      if (cost !== 0) {
        const core = cores[i]!;
        // Window and log states are updated in place: keep the stored state apart from `initial`.
        const state = core.take(states[i], cost, startAt);
        if (typeof state === 'number' && core.timed) mark = String(state);
        this.put(part, names[i]!, core, state, now);
      }
      if (i < levels.length) marks.push(mark);
      // Every learned level in force, cost 0 too: what the call used there is settled by adjust.
      else learnedCharged.push({ id: learnedIds[i - levels.length]!, cost, mark });
    }
    this.dropIfEmpty(partition, part, now);
    return {
      ok: true,
      startAt,
      serverNow: now,
      id: `m${++nextId}`,
      partition,
      scope,
      levels,
      costs,
      marks,
      learned: learnedCharged,
    };
  }

  refund(reservation: StoreReservation, which: 'all' | 'untimed' = 'all'): void {
    this.refundAt(reservation, this.clock.now(), which);
  }

  refundAt(reservation: StoreReservation, now: number, which: 'all' | 'untimed' = 'all'): void {
    const part = claimRefund(reservation, which);
    if (part === undefined) return;
    const p = this.partitions.get(reservation.partition);
    if (p === undefined) return;
    const at = reservation.startAt;
    const give = (core: LimitCore, name: string, cost: number, mark: string | number) => {
      if (cost === 0 || (part === 'untimed' && core.timed) || (part === 'timed' && !core.timed)) return;
      const state = p.states.get(name);
      if (state !== undefined) this.giveBackTake(p, name, core, state, cost, at, mark, now);
    };
    this.eachLevel(p, reservation, give);
    this.dropIfEmpty(reservation.partition, p, now);
  }

  recount(reservation: StoreReservation, marginMs: number, startedAt?: number): void {
    this.recountAt(reservation, marginMs, this.clock.now(), startedAt);
  }

  recountAt(reservation: StoreReservation, marginMs: number, now: number, startedAt?: number): void {
    if (typeof marginMs !== 'number' || !(marginMs >= 0))
      throw invalid('marginMs', 'a number >= 0', marginMs);
    const from = startedAtOf(reservation, startedAt);
    if (!claimRecount(reservation)) return;
    const p = this.partitionOf(reservation.partition);
    const { levels, costs, startAt } = reservation;
    for (let i = 0; i < levels.length; i++) {
      const spec = levels[i]!.spec;
      const cost = costs[i]!;
      if (cost === 0 || !countsWindow(spec.algorithm)) continue;
      const name = levelName(levels[i]!);
      const core = coreOf(levels[i]!);
      // A state dropped as idle (prune, as a TTL in Redis) is the initial one: the call is still
      // counted where its response puts it.
      const state = p.states.get(name) ?? core.initial(now);
      this.put(p, name, core, recountState(core, state, cost, startAt, marginMs, now, from), now);
    }
    // Learned limits are windows (sliding logs): the same move, while the limit is still known.
    const learned = p.learned.get(reservation.scope);
    for (const { id, cost } of reservation.learned) {
      const entry = learned?.get(id);
      if (entry === undefined || cost === 0 || !countsWindow(entry.core.spec.algorithm)) continue;
      const name = `L:${reservation.scope}:${id}`;
      const state = p.states.get(name) ?? entry.core.initial(now);
      this.put(p, name, entry.core, recountState(entry.core, state, cost, startAt, marginMs, now, from), now);
    }
    this.dropIfEmpty(reservation.partition, p, now);
  }

  adjust(
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs?: number,
    startedAt?: number,
  ): void {
    this.adjustAt(reservation, units, recountMarginMs, this.clock.now(), startedAt);
  }

  adjustAt(
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs: number | undefined,
    now: number,
    startedAt?: number,
  ): void {
    const from = startedAtOf(reservation, startedAt);
    if (!claimAdjust(reservation, units, recountMarginMs)) return;
    // Recounted first (unless it was): what it used beyond the estimate goes where the estimate goes.
    if (recountMarginMs !== undefined) this.recountAt(reservation, recountMarginMs, now, from);
    const p = this.partitionOf(reservation.partition);
    const startAt = reservation.startAt;
    const settle = (core: LimitCore, name: string, cost: number, mark: string | number) => {
      if (!core.timed) return;
      // A window is charged where a recount puts the call, and keeps the estimate it moved there.
      const recounted = recountMarginMs !== undefined && countsWindow(core.algorithm);
      const delta = adjustment(ownUnits(units, core.unit), cost, core.capacity, recounted);
      if (delta === 0) return;
      const at = recounted ? recountAtMs(core, startAt, recountMarginMs!, now, from) : startAt;
      const state = p.states.get(name);
      if (delta > 0) {
        this.put(p, name, core, core.take(state ?? core.initial(now), delta, at), now);
        return;
      }
      if (state !== undefined) this.giveBackTake(p, name, core, state, -delta, at, mark, now);
    };
    this.eachLevel(p, reservation, settle);
    this.dropIfEmpty(reservation.partition, p, now);
  }

  /**
   * Give back `cost` taken at `at` from the level `name` in `state`. A bucket (a `mark`: the TAT
   * its take left) gives back only its latest take (see `Store.refund`); an older take of its chain
   * (the TAT above the mark) waits in `waiting` until the takes above it are given back, then goes
   * too: processes giving back interleaved takes (at a pause) may do so in any order. Marks match
   * within `near` (a TAT given back is (x + c·T) - c·T, which may miss x by a few ulps). The twin of
   * the Lua `refund` (redis-scripts.ts), operation for operation (the Lua one also drops entries
   * it cannot read, which only another writer of its keys could leave).
   */
  private giveBackTake(
    p: PartitionState,
    name: string,
    core: LimitCore,
    state: unknown,
    cost: number,
    at: number,
    mark: string | number,
    now: number,
  ): void {
    if (mark === '') {
      this.put(p, name, core, core.refund(state, cost, at, now), now);
      return;
    }
    let tat = state as number;
    const taken = Number(mark);
    if (Number.isNaN(tat) || Number.isNaN(taken)) return;
    // near (ms): 1e-13 of the TAT (hundreds of ulps), at most a 16th of T. Marks of costs below 1/8
    // may lie that close: a take may then match as the latest one take early, which leaves the TAT
    // low by at most near (under 1/16 unit) until the take above it goes; never more in all.
    const emissionMs = emissionIntervalMs(core.spec.limit, core.spec.intervalMs);
    const near = Math.min(Math.abs(tat) * 1e-13, emissionMs / 16);
    // Above the TAT: given back already (or its state was dropped).
    if (taken > tat + near) return;
    const waiting = p.waiting.get(name);
    if (taken < tat - near) {
      if (waiting === undefined) p.waiting.set(name, new Map([[taken, cost]]));
      else waiting.set(taken, cost);
      return;
    }
    tat = core.refund(tat, cost, at, now) as number;
    if (waiting !== undefined) {
      for (const m of [...waiting.keys()].sort((x, y) => y - x)) {
        if (m < tat - near) break;
        const below = waiting.get(m)!;
        waiting.delete(m);
        // Above the TAT: its chain is gone (a state dropped); at it: now the latest, it goes too.
        if (m <= tat + near) tat = core.refund(tat, below, at, now) as number;
      }
      if (waiting.size === 0) p.waiting.delete(name);
    }
    this.put(p, name, core, tat, now);
  }

  /**
   * Each level of `reservation` with its core, state name, cost and mark: its given levels, then its
   * learned ones still known (past their expiry too: their state outlives them, and counts again
   * when they are learned again).
   */
  private eachLevel(
    p: PartitionState,
    reservation: StoreReservation,
    visit: (core: LimitCore, name: string, cost: number, mark: string | number) => void,
  ): void {
    reservation.levels.forEach((level, i) => {
      visit(coreOf(level), levelName(level), reservation.costs[i]!, reservation.marks[i]!);
    });
    const learned = p.learned.get(reservation.scope);
    for (const { id, cost, mark } of reservation.learned) {
      const entry = learned?.get(id);
      if (entry !== undefined) visit(entry.core, `L:${reservation.scope}:${id}`, cost, mark);
    }
  }

  pause(partition: string, untilMs: number, scope = ''): StorePause {
    return this.pauseAt(partition, untilMs, this.clock.now(), scope);
  }

  pauseFor(partition: string, durationMs: number, scope = ''): StorePause {
    const now = this.clock.now();
    return this.pauseAt(partition, now + durationMs, now, scope);
  }

  /** `pause` at an explicit now. */
  pauseAt(partition: string, untilMs: number, now: number, scope = ''): StorePause {
    // As the Redis store: 'forever' (or more than 1e15 ms) lasts 1e15 ms, about 31,700 years.
    if (untilMs > now + MAX_PAUSE_MS) untilMs = now + MAX_PAUSE_MS;
    const p = this.partitionOf(partition);
    const current = this.pauseOf(p, scope, now);
    if (current >= untilMs) return { untilMs: current, serverNow: now };
    if (untilMs <= now) return { untilMs: current, serverNow: now };
    p.pauses.set(scope, untilMs);
    const event = { partition, pauseId: this.pauseId(partition, scope), untilMs, serverNow: now };
    for (const listener of this.listeners) listener(event);
    return { untilMs, serverNow: now };
  }

  pausedUntil(partition: string, scope = ''): StorePause {
    const now = this.clock.now();
    const p = this.partitions.get(partition);
    return { untilMs: p === undefined ? 0 : this.pauseOf(p, scope, now), serverNow: now };
  }

  pauseId(partition: string, scope = ''): string {
    return `${partition}\u0000${scope}`;
  }

  onPause(listener: (event: StorePauseEvent) => void): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  learn(partition: string, spec: LimitSpec, options?: LearnOptions): boolean {
    return this.learnAt(partition, spec, this.clock.now(), options);
  }

  learnAt(partition: string, spec: LimitSpec, now: number, options?: LearnOptions): boolean {
    const core = createLimit(spec, 'spec');
    if (!core.timed) throw invalid('spec.algorithm', 'a timed algorithm (not concurrency)', spec.algorithm);
    const scope = options?.scope ?? '';
    const p = this.partitionOf(partition);
    let learned = p.learned.get(scope);
    if (learned === undefined) {
      learned = new Map();
      p.learned.set(scope, learned);
    }
    const id = learnedId(core.spec);
    const text = learnedSpecText(core.spec);
    const previous = learned.get(id);
    const live = previous !== undefined && previous.expiresAt > now;
    learned.set(id, { spec: text, core, expiresAt: now + this.learnedTtlMs });
    const seed = Math.min(options?.seedUnits ?? 0, core.capacity);
    if (seed > 0) {
      const name = `L:${scope}:${id}`;
      const state = p.states.get(name) ?? core.initial(now);
      // A known limit (learned by another process first, or changed) is topped up to what the
      // provider says is used (as LEARN_LUA: a sliding log's takes up to now; other states stay).
      const missing = live ? seed - loggedUpTo(core, state, now) : seed;
      if (missing > 0) this.put(p, name, core, core.take(state, missing, now - seedAge(options)), now);
    }
    return !(live && previous.spec === text);
  }

  claimProbe(partition: string, holder: string, ttlMs: number, scope = ''): boolean {
    if (typeof ttlMs !== 'number' || !(ttlMs >= 1) || !Number.isFinite(ttlMs))
      throw invalid('ttlMs', 'a finite number of ms >= 1', ttlMs);
    const now = this.clock.now();
    const name = `${partition}\u0000${scope}`;
    const current = this.probes.get(name);
    if (current !== undefined && current.expiresAt > now && current.holder !== holder) return false;
    this.probes.set(name, { holder, expiresAt: now + ttlMs });
    return true;
  }

  releaseProbe(partition: string, holder: string, scope = ''): void {
    const name = `${partition}\u0000${scope}`;
    if (this.probes.get(name)?.holder === holder) this.probes.delete(name);
  }

  time(): number {
    return this.clock.now();
  }

  close(): void {
    this.partitions.clear();
    this.listeners.clear();
    this.probes.clear();
  }

  private partitionOf(partition: string): PartitionState {
    let p = this.partitions.get(partition);
    if (p === undefined) {
      p = { states: new Map(), cores: new Map(), pauses: new Map(), learned: new Map(), waiting: new Map() };
      this.partitions.set(partition, p);
    }
    return p;
  }

  private coreFor(p: PartitionState, name: string): LimitCore | undefined {
    return p.cores.get(name);
  }

  private pauseOf(p: PartitionState, scope: string, now: number): number {
    const until = p.pauses.get(scope);
    if (until === undefined) return 0;
    if (until <= now) {
      p.pauses.delete(scope);
      return 0;
    }
    return until;
  }

  /** Store a state, or drop it when idle (what a TTL does in Redis). */
  private put(p: PartitionState, name: string, core: LimitCore, state: unknown, now: number): void {
    if (core.isIdle(state, now)) {
      p.states.delete(name);
      p.cores.delete(name);
      p.waiting.delete(name);
    } else {
      p.states.set(name, state);
      p.cores.set(name, core);
    }
  }

  private dropIfEmpty(partition: string, p: PartitionState, now: number): void {
    for (const scope of p.pauses.keys()) this.pauseOf(p, scope, now);
    for (const [scope, learned] of p.learned) if (learned.size === 0) p.learned.delete(scope);
    if (p.states.size === 0 && p.pauses.size === 0 && p.learned.size === 0) this.partitions.delete(partition);
  }
}
