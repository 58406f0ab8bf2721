import type { Clock } from '../clock.js';
import type { LimitCore, LimitSpec } from '../core/limit.js';
import {
  AbortedError,
  GateClosedError,
  InvalidCostError,
  type InvalidOptionError,
  QueueFullError,
  QueueTimeoutError,
} from '../errors.js';
import { invalid } from '../validate.js';
import { CallQueue, type QueueEntry } from './call-queue.js';
import {
  type Dispose,
  Emitter,
  type LimitsChangedEvent,
  type Listener,
  type PauseEvent,
  type QueuedEvent,
  type RefusedEvent,
  type ResumeEvent,
  type StartEvent,
} from './events.js';
import { buildCores, type GateOptions, validateGateOptions } from './options.js';

/** Per-call options of `gate.schedule`. */
export interface ScheduleOptions {
  /**
   * What the call consumes: a number of requests, or a record of units (`{ requests: 1, tokens: 1200 }`).
   * In a record, `requests` defaults to 1; other units default to 0.
   * @default 1
   */
  cost?: number | Readonly<Record<string, number>>;
  /** Partition key (host, hashed API key, endpoint, tenant). Calls without a key share the default partition. */
  key?: string;
  /** Higher starts first; FIFO among equals. Integer. @default 0 */
  priority?: number;
  /** Aborting removes a queued call (rejecting it with `AbortedError`) and frees what it held. */
  signal?: AbortSignal;
  /** Deadline to start, in ms; overrides the gate's `maxQueueTimeMs`. */
  maxQueueTimeMs?: number;
}

export interface LimitStats {
  readonly algorithm: string;
  readonly unit: string;
  readonly limit: number;
  readonly intervalMs: number;
  /** Units that could be taken now. */
  readonly available: number;
}

export interface PartitionStats {
  readonly key: string | undefined;
  readonly queued: number;
  /** Gate clock ms; 0 when not paused. */
  readonly pausedUntil: number;
  readonly limits: readonly LimitStats[];
}

export interface GateStats {
  /** Calls waiting in all queues. */
  readonly queued: number;
  /**
   * Calls started and not yet settled. Counted only when the gate observes completions (it has a
   * concurrency limit); otherwise undefined, because observing every call would cost the hot path.
   */
  readonly inFlight: number | undefined;
  /** Calls started since the gate was created. */
  readonly started: number;
  /** Partitions in memory (the default one included); idle keys are dropped. */
  readonly partitions: number;
  /** Gate-wide pause (gate clock ms), 0 when none. */
  readonly pausedUntil: number;
  readonly closed: boolean;
  /** The gate-wide limits. */
  readonly limits: readonly LimitStats[];
  /** The partition asked for with `stats(key)`, or the default partition. */
  readonly partition: PartitionStats;
}

export interface CloseOptions {
  /**
   * What happens to queued calls: `'run'` lets them start as the limits allow (the returned promise
   * settles when they have); `'reject'` rejects them at once with `GateClosedError`.
   * @default 'run'
   */
  queued?: 'run' | 'reject';
}

// Timer lateness credited to GCRA limits (token/leaky bucket): a start recorded at its scheduled
// time rather than at the moment the timer fired, so lateness is not carried forward into the
// rate. Capped so an event loop stalled for seconds cannot buy a burst.
const MAX_LATE_CREDIT_MS = 4;
// Incremental sweep of idle keys: entries examined per new key inserted (amortized O(1)).
const SWEEP_STEPS = 2;

interface Call extends QueueEntry {
  readonly fn: () => unknown;
  /** The cost as the caller gave it, to recompute the per-limit costs when the limits change. */
  readonly cost: ScheduleOptions['cost'];
  gcosts: readonly number[];
  kcosts: readonly number[];
  readonly partition: Partition;
  readonly enqueuedAt: number;
  readonly deadline: number;
  readonly maxQueueTimeMs: number;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** One key's state: its limits, its queue, its pause, its timer. */
class Partition {
  readonly key: string | undefined;
  keyStates: unknown[];
  queue: CallQueue<Call> | undefined = undefined;
  /** Limit states with every queued call reserved in order: predicts the start of the next call at the tail. */
  shadowG: unknown[] | undefined = undefined;
  shadowK: unknown[] | undefined = undefined;
  timer: unknown = undefined;
  timerAt = 0;
  pausedUntil = 0;
  /** Head is waiting for a per-key concurrency permit. */
  waitingKey = false;
  onTimer: (() => void) | undefined = undefined;

  constructor(key: string | undefined, keyStates: unknown[]) {
    this.key = key;
    this.keyStates = keyStates;
  }
}

function fits(
  cores: readonly LimitCore[],
  states: unknown[],
  costs: readonly number[],
  now: number,
): boolean {
  for (let i = 0; i < cores.length; i++) {
    const cost = costs[i]!;
    if (cost !== 0 && cores[i]!.earliestAt(states[i], cost, now) > now) return false;
  }
  return true;
}

function commit(cores: readonly LimitCore[], states: unknown[], costs: readonly number[], at: number): void {
  for (let i = 0; i < cores.length; i++) {
    const cost = costs[i]!;
    if (cost !== 0) states[i] = cores[i]!.take(states[i], cost, at);
  }
}

function initialStates(cores: readonly LimitCore[], now: number): unknown[] {
  return cores.map((core) => core.initial(now));
}

function limitStats(cores: readonly LimitCore[], states: unknown[], now: number): LimitStats[] {
  return cores.map((core, i) => ({
    algorithm: core.algorithm,
    unit: core.unit,
    limit: core.spec.limit,
    intervalMs: core.spec.intervalMs,
    available: core.available(states[i], now),
  }));
}

// A state survives a limit change when it still means the same thing under the new spec: GCRA's
// theoretical arrival time and the sliding log's timestamps are independent of the numbers, the
// in-flight count must survive (or releases would under-count), window counts need the same window.
function carryState(previous: LimitCore, state: unknown, next: LimitCore, now: number): unknown {
  if (previous.algorithm !== next.algorithm || previous.unit !== next.unit) return next.initial(now);
  switch (next.algorithm) {
    case 'token-bucket':
    case 'leaky-bucket':
    case 'sliding-log':
    case 'concurrency':
      return state;
    default:
      return previous.spec.intervalMs === next.spec.intervalMs ? state : next.initial(now);
  }
}

/**
 * The gate: a bounded queue per partition draining through every limit that applies. Create it with
 * `createGate(options)`.
 */
export class Gate {
  readonly onQueued: (listener: Listener<QueuedEvent>) => Dispose;
  readonly onStart: (listener: Listener<StartEvent>) => Dispose;
  readonly onRefused: (listener: Listener<RefusedEvent>) => Dispose;
  readonly onPause: (listener: Listener<PauseEvent>) => Dispose;
  readonly onResume: (listener: Listener<ResumeEvent>) => Dispose;
  readonly onLimitsChanged: (listener: Listener<LimitsChangedEvent>) => Dispose;
  /** Fires when the last queued call has started (or been refused) and nothing waits. */
  readonly onIdle: (listener: Listener<undefined>) => Dispose;

  private readonly clock: Clock;
  private readonly maxQueue: number;
  private readonly maxQueueTimeMs: number;
  private globalCores: readonly LimitCore[];
  private keyCores: readonly LimitCore[];
  private readonly globalStates: unknown[];
  /** Per-key partitions; a key whose only state is one GCRA number is stored as that number. */
  private readonly partitions = new Map<string, Partition | number>();
  private readonly defaultPartition: Partition;
  private compact: boolean;
  private observe: boolean;
  private defaultG: number[];
  private defaultK: number[];
  private pausedUntil = 0;
  private queuedTotal = 0;
  private inFlight = 0;
  private started = 0;
  private closed = false;
  private closeWaiters: (() => void)[] = [];
  private readonly globalWaiters = new Set<Partition>();
  private sweepIterator: Iterator<[string, Partition | number]> | undefined = undefined;

  private readonly queuedEvents = new Emitter<QueuedEvent>();
  private readonly startEvents = new Emitter<StartEvent>();
  private readonly refusedEvents = new Emitter<RefusedEvent>();
  private readonly pauseEvents = new Emitter<PauseEvent>();
  private readonly resumeEvents = new Emitter<ResumeEvent>();
  private readonly limitsEvents = new Emitter<LimitsChangedEvent>();
  private readonly idleEvents = new Emitter<undefined>();

  constructor(options?: GateOptions) {
    const o = validateGateOptions(options);
    this.clock = o.clock;
    this.maxQueue = o.maxQueue;
    this.maxQueueTimeMs = o.maxQueueTimeMs;
    this.globalCores = o.globalCores;
    this.keyCores = o.keyCores;
    const now = this.clock.now();
    this.globalStates = initialStates(this.globalCores, now);
    this.defaultPartition = new Partition(undefined, initialStates(this.keyCores, now));
    this.compact = false;
    this.observe = false;
    this.defaultG = [];
    this.defaultK = [];
    this.configure();
    this.onQueued = this.queuedEvents.on;
    this.onStart = this.startEvents.on;
    this.onRefused = this.refusedEvents.on;
    this.onPause = this.pauseEvents.on;
    this.onResume = this.resumeEvents.on;
    this.onLimitsChanged = this.limitsEvents.on;
    this.onIdle = this.idleEvents.on;
  }

  /** Derived settings, recomputed whenever the limits change. */
  private configure(): void {
    const key = this.keyCores;
    this.compact = key.length === 1 && key[0]!.creditsLateStart;
    this.observe = this.globalCores.some((c) => !c.timed) || key.some((c) => !c.timed);
    this.defaultG = this.globalCores.map((c) => (c.unit === 'requests' ? 1 : 0));
    this.defaultK = key.map((c) => (c.unit === 'requests' ? 1 : 0));
  }

  /**
   * Run `fn` when every limit that applies admits it. Resolves or rejects with `fn`'s outcome, or
   * rejects with a typed error without calling `fn` (queue full, deadline unreachable, aborted,
   * gate closed, invalid cost).
   */
  schedule<T>(fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>> {
    if (this.closed) return Promise.reject(new GateClosedError());
    if (typeof fn !== 'function') return Promise.reject(invalid('fn', 'a function', fn));
    const now = this.clock.now();
    if (options === undefined) {
      return this.submit(
        fn,
        undefined,
        this.defaultPartition,
        this.defaultG,
        this.defaultK,
        0,
        this.maxQueueTimeMs,
        undefined,
        now,
      );
    }
    let gcosts = this.defaultG;
    let kcosts = this.defaultK;
    let priority = 0;
    let maxQueueTimeMs = this.maxQueueTimeMs;
    try {
      const { cost, key } = options;
      if (cost !== undefined) {
        gcosts = this.costsFor(cost, this.globalCores);
        kcosts = this.costsFor(cost, this.keyCores);
      }
      if (options.priority !== undefined) {
        priority = options.priority;
        if (!Number.isSafeInteger(priority)) throw invalid('priority', 'an integer', priority);
      }
      if (options.maxQueueTimeMs !== undefined) {
        maxQueueTimeMs = options.maxQueueTimeMs;
        if (typeof maxQueueTimeMs !== 'number' || Number.isNaN(maxQueueTimeMs) || maxQueueTimeMs < 0) {
          throw invalid('maxQueueTimeMs', 'a number >= 0', maxQueueTimeMs);
        }
      }
      const signal = options.signal;
      if (signal !== undefined && (typeof signal !== 'object' || signal === null || !('aborted' in signal))) {
        throw invalid('signal', 'an AbortSignal', signal);
      }
      if (key === undefined) {
        return this.submit(
          fn,
          options.cost,
          this.defaultPartition,
          gcosts,
          kcosts,
          priority,
          maxQueueTimeMs,
          signal,
          now,
        );
      }
      if (typeof key !== 'string') throw invalid('key', 'a string', key);
      if (signal?.aborted) return Promise.reject(new AbortedError(signal.reason));
      const entry = this.partitions.get(key);
      if (this.compact && typeof entry !== 'object') {
        // Fast path for a key stored as its single GCRA state: admit without creating a partition.
        const core = this.keyCores[0] as LimitCore<number>;
        const state = entry === undefined ? core.initial(now) : entry;
        const kcost = kcosts[0]!;
        if (
          this.pausedUntil <= now &&
          (kcost === 0 || core.earliestAt(state, kcost, now) <= now) &&
          fits(this.globalCores, this.globalStates, gcosts, now)
        ) {
          commit(this.globalCores, this.globalStates, gcosts, now);
          // Sweep before inserting, so the sweep never examines (and drops) the entry being added.
          if (entry === undefined) this.sweep(now);
          this.partitions.set(key, kcost === 0 ? state : core.take(state, kcost, now));
          return this.invoke(fn, this.defaultPartition, gcosts, kcosts) as Promise<Awaited<T>>;
        }
        const partition = new Partition(key, [state]);
        if (entry === undefined) this.sweep(now);
        this.partitions.set(key, partition);
        return this.submit(
          fn,
          options.cost,
          partition,
          gcosts,
          kcosts,
          priority,
          maxQueueTimeMs,
          signal,
          now,
        );
      }
      return this.submit(
        fn,
        options.cost,
        this.partitionFor(key, now),
        gcosts,
        kcosts,
        priority,
        maxQueueTimeMs,
        signal,
        now,
      );
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The gate's clock reading, for computing `pause` times. */
  now(): number {
    return this.clock.now();
  }

  /**
   * Nothing starts before `untilMs` (gate clock) in the partition of `key`, or anywhere when `key`
   * is undefined. Queued calls whose deadline this makes unreachable are rejected at once.
   * A later pause replaces an earlier one only if it ends later.
   */
  pause(untilMs: number, key?: string, reason = 'manual'): void {
    if (typeof untilMs !== 'number' || Number.isNaN(untilMs)) throw invalid('untilMs', 'a number', untilMs);
    const now = this.clock.now();
    if (key === undefined) {
      if (untilMs <= this.pausedUntil) return;
      this.pausedUntil = untilMs;
      this.pauseEvents.emit({ key, untilMs, reason });
      for (const p of this.queuedPartitions()) this.replanAndDrain(p, now);
      return;
    }
    const p = this.partitionFor(key, now);
    if (untilMs <= p.pausedUntil) return;
    p.pausedUntil = untilMs;
    this.pauseEvents.emit({ key, untilMs, reason });
    this.replanAndDrain(p, now);
  }

  /** Pause for `durationMs` from now. */
  pauseFor(durationMs: number, key?: string, reason = 'manual'): void {
    if (typeof durationMs !== 'number' || !(durationMs >= 0))
      throw invalid('durationMs', 'a number >= 0', durationMs);
    this.pause(this.clock.now() + durationMs, key, reason);
  }

  /** Lift a pause (gate-wide when `key` is undefined); queued calls are re-planned earlier. */
  resume(key?: string): void {
    const now = this.clock.now();
    if (key === undefined) {
      if (this.pausedUntil === 0) return;
      this.pausedUntil = 0;
      this.resumeEvents.emit({ key });
      for (const p of this.queuedPartitions()) this.replanAndDrain(p, now);
      return;
    }
    const entry = this.partitions.get(key);
    if (typeof entry !== 'object' || entry.pausedUntil === 0) return;
    entry.pausedUntil = 0;
    this.resumeEvents.emit({ key });
    this.replanAndDrain(entry, now);
  }

  /**
   * Replace the gate-wide limits and/or the per-key limits while running. A limit at the same
   * position with the same algorithm and unit keeps what it has counted (see `carryState`); other
   * limits start full. Queued calls are re-planned at once: they may start earlier, and those whose
   * deadline becomes unreachable are rejected.
   */
  setLimits(update: { limits?: readonly LimitSpec[]; perKey?: readonly LimitSpec[] }): void {
    if (typeof update !== 'object' || update === null) throw invalid('update', 'an object', update);
    const globalCores = update.limits === undefined ? undefined : buildCores(update.limits, 'limits');
    const keyCores = update.perKey === undefined ? undefined : buildCores(update.perKey, 'perKey');
    const now = this.clock.now();
    if (globalCores) {
      const states = globalCores.map((core, i) => {
        const previous = this.globalCores[i];
        return previous ? carryState(previous, this.globalStates[i], core, now) : core.initial(now);
      });
      this.globalStates.length = 0;
      this.globalStates.push(...states);
      this.globalCores = Object.freeze(globalCores);
    }
    if (keyCores) {
      const previousCores = this.keyCores;
      const carry = (states: unknown[]) =>
        keyCores.map((core, i) => {
          const previous = previousCores[i];
          return previous ? carryState(previous, states[i], core, now) : core.initial(now);
        });
      this.defaultPartition.keyStates = carry(this.defaultPartition.keyStates);
      for (const [key, entry] of this.partitions) {
        if (typeof entry === 'object') entry.keyStates = carry(entry.keyStates);
        else this.partitions.set(key, new Partition(key, carry([entry])));
      }
      this.keyCores = Object.freeze(keyCores);
    }
    this.configure();
    this.limitsEvents.emit({ key: undefined, reason: 'setLimits' });
    for (const p of this.queuedPartitions()) {
      // Costs were computed against the old limits: recompute them per call.
      for (const call of p.queue!.entries()) {
        try {
          call.gcosts = call.cost === undefined ? this.defaultG : this.costsFor(call.cost, this.globalCores);
          call.kcosts = call.cost === undefined ? this.defaultK : this.costsFor(call.cost, this.keyCores);
        } catch (error) {
          this.refuse(call, error as InvalidCostError);
        }
      }
      this.replanAndDrain(p, now);
    }
  }

  /** A snapshot for dashboards and tests. `key` selects the partition to detail. */
  stats(key?: string): GateStats {
    const now = this.clock.now();
    let partition: PartitionStats;
    const entry = key === undefined ? this.defaultPartition : this.partitions.get(key);
    if (entry === undefined) {
      partition = {
        key,
        queued: 0,
        pausedUntil: 0,
        limits: limitStats(this.keyCores, initialStates(this.keyCores, now), now),
      };
    } else if (typeof entry === 'number') {
      partition = { key, queued: 0, pausedUntil: 0, limits: limitStats(this.keyCores, [entry], now) };
    } else {
      partition = {
        key,
        queued: entry.queue?.size ?? 0,
        pausedUntil: entry.pausedUntil,
        limits: limitStats(this.keyCores, entry.keyStates, now),
      };
    }
    return {
      queued: this.queuedTotal,
      inFlight: this.observe ? this.inFlight : undefined,
      started: this.started,
      partitions: this.partitions.size + 1,
      pausedUntil: this.pausedUntil,
      closed: this.closed,
      limits: limitStats(this.globalCores, this.globalStates, now),
      partition,
    };
  }

  /**
   * Refuse new calls and settle queued ones (`queued: 'run'` lets them start as the limits allow,
   * `'reject'` rejects them with `GateClosedError`). Resolves when nothing is queued (and, when the
   * gate observes completions, nothing is in flight).
   */
  close(options: CloseOptions = {}): Promise<void> {
    const mode = options.queued ?? 'run';
    if (mode !== 'run' && mode !== 'reject') throw invalid('queued', "'run' or 'reject'", mode);
    this.closed = true;
    if (mode === 'reject') {
      for (const p of this.queuedPartitions()) {
        for (const call of p.queue!.entries()) this.refuse(call, new GateClosedError());
        this.drain(p);
      }
    }
    if (this.settledForClose()) return Promise.resolve();
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  // ---------------------------------------------------------------------------------------------

  private settledForClose(): boolean {
    return this.queuedTotal === 0 && (!this.observe || this.inFlight === 0);
  }

  private maybeSettleClose(): void {
    if (this.closeWaiters.length > 0 && this.settledForClose()) {
      const waiters = this.closeWaiters;
      this.closeWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  private costsFor(cost: unknown, cores: readonly LimitCore[]): number[] {
    if (typeof cost === 'number') {
      if (!Number.isFinite(cost) || cost < 0)
        throw new InvalidCostError(`Expected \`cost\` to be a finite number >= 0, got \`${cost}\``);
      return cores.map((core) => this.checkCapacity(core, core.unit === 'requests' ? cost : 0));
    }
    if (typeof cost !== 'object' || cost === null || Array.isArray(cost)) {
      throw new InvalidCostError(
        `Expected \`cost\` to be a number or a record of units, got \`${String(cost)}\``,
      );
    }
    const record = cost as Record<string, unknown>;
    for (const unit of Object.keys(record)) {
      const value = record[unit];
      if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
        throw new InvalidCostError(
          `Expected \`cost.${unit}\` to be a finite number >= 0, got \`${String(value)}\``,
          unit,
        );
      }
    }
    return cores.map((core) => {
      const value = record[core.unit] as number | undefined;
      return this.checkCapacity(core, value ?? (core.unit === 'requests' ? 1 : 0));
    });
  }

  private checkCapacity(core: LimitCore, cost: number): number {
    if (cost > core.capacity) {
      throw new InvalidCostError(
        `Cost ${cost} ${core.unit} exceeds what the ${core.algorithm} limit can ever admit (${core.capacity})`,
        core.unit,
      );
    }
    return cost;
  }

  private partitionFor(key: string, now: number): Partition {
    const entry = this.partitions.get(key);
    if (typeof entry === 'object') return entry;
    const partition = new Partition(key, entry === undefined ? initialStates(this.keyCores, now) : [entry]);
    if (entry === undefined) this.sweep(now);
    this.partitions.set(key, partition);
    return partition;
  }

  /** Drop a few idle keys per new key, so memory tracks the keys that still hold state. */
  private sweep(now: number): void {
    for (let step = 0; step < SWEEP_STEPS; step++) {
      this.sweepIterator ??= this.partitions.entries();
      const next = this.sweepIterator.next();
      if (next.done) {
        this.sweepIterator = undefined;
        return;
      }
      const [key, entry] = next.value;
      if (this.isIdleEntry(entry, now)) this.partitions.delete(key);
    }
  }

  private isIdleEntry(entry: Partition | number, now: number): boolean {
    const cores = this.keyCores;
    if (typeof entry === 'number') return cores[0]!.isIdle(entry, now);
    if (entry.queue !== undefined || entry.timer !== undefined || entry.pausedUntil > now) return false;
    for (let i = 0; i < cores.length; i++) if (!cores[i]!.isIdle(entry.keyStates[i], now)) return false;
    return true;
  }

  private *queuedPartitions(): IterableIterator<Partition> {
    if (this.defaultPartition.queue) yield this.defaultPartition;
    for (const entry of [...this.partitions.values()])
      if (typeof entry === 'object' && entry.queue) yield entry;
  }

  private submit(
    fn: () => unknown,
    cost: ScheduleOptions['cost'],
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    priority: number,
    maxQueueTimeMs: number,
    signal: AbortSignal | undefined,
    now: number,
  ): Promise<never> {
    if (signal?.aborted) return Promise.reject(new AbortedError(signal.reason));
    if (
      p.queue === undefined &&
      this.pausedUntil <= now &&
      p.pausedUntil <= now &&
      fits(this.globalCores, this.globalStates, gcosts, now) &&
      fits(this.keyCores, p.keyStates, kcosts, now)
    ) {
      commit(this.globalCores, this.globalStates, gcosts, now);
      commit(this.keyCores, p.keyStates, kcosts, now);
      return this.invoke(fn, p, gcosts, kcosts) as Promise<never>;
    }
    return this.enqueue(fn, cost, p, gcosts, kcosts, priority, maxQueueTimeMs, signal, now);
  }

  /** Start `fn`. Completion is observed only when a concurrency limit needs the release. */
  private invoke(
    fn: () => unknown,
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
  ): Promise<unknown> {
    this.started++;
    if (!this.observe) {
      try {
        const result = fn();
        return result instanceof Promise ? result : Promise.resolve(result);
      } catch (error) {
        return Promise.reject(error);
      }
    }
    this.inFlight++;
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(fn());
    } catch (error) {
      result = Promise.reject(error);
    }
    const done = () => this.release(p, gcosts, kcosts);
    result.then(done, done);
    return result;
  }

  private release(p: Partition, gcosts: readonly number[], kcosts: readonly number[]): void {
    this.inFlight--;
    const now = this.clock.now();
    let global = false;
    const gcores = this.globalCores;
    for (let i = 0; i < gcores.length; i++) {
      const core = gcores[i]!;
      if (!core.timed && gcosts[i]) {
        this.globalStates[i] = core.refund(this.globalStates[i], gcosts[i]!, now, now);
        global = true;
      }
    }
    const kcores = this.keyCores;
    let keyed = false;
    for (let i = 0; i < kcores.length; i++) {
      const core = kcores[i]!;
      if (!core.timed && kcosts[i]) {
        p.keyStates[i] = core.refund(p.keyStates[i], kcosts[i]!, now, now);
        keyed = true;
      }
    }
    if (keyed && p.waitingKey) {
      p.waitingKey = false;
      this.drain(p);
    }
    if (global && this.globalWaiters.size > 0) {
      const waiters = [...this.globalWaiters];
      this.globalWaiters.clear();
      for (const waiter of waiters) this.drain(waiter);
    }
    this.maybeSettleClose();
  }

  private enqueue(
    fn: () => unknown,
    cost: ScheduleOptions['cost'],
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    priority: number,
    maxQueueTimeMs: number,
    signal: AbortSignal | undefined,
    now: number,
  ): Promise<never> {
    if (p.queue !== undefined && p.queue.size >= this.maxQueue) {
      const error = new QueueFullError(this.maxQueue, p.key);
      this.refusedEvents.emit({ key: p.key, error });
      return Promise.reject(error);
    }
    const deadline = now + maxQueueTimeMs;
    const from = Math.max(now, this.pausedUntil, p.pausedUntil);
    const queued = p.queue !== undefined && p.queue.size > 0;
    const appending = !queued || priority <= p.queue!.lowestPriority();
    let startAt = from;
    if (appending) {
      // Predict on the shadow (every queued call already reserved in order), before queueing.
      if (p.shadowG === undefined) {
        if (queued) this.replan(p, now);
        else this.rebuildShadow(p);
      }
      startAt = this.predict(p, gcosts, kcosts, from);
      if (startAt > deadline) {
        if (!queued) {
          p.shadowG = undefined;
          p.shadowK = undefined;
        }
        const error = new QueueTimeoutError(startAt - now, maxQueueTimeMs, true);
        this.refusedEvents.emit({ key: p.key, error });
        return Promise.reject(error);
      }
    }
    const queue = p.queue ?? new CallQueue<Call>();
    p.queue = queue;
    let resolve!: (value: unknown) => void;
    let reject!: (error: unknown) => void;
    const promise = new Promise<never>((res, rej) => {
      resolve = res as (value: unknown) => void;
      reject = rej;
    });
    const call: Call = {
      fn,
      cost,
      gcosts,
      kcosts,
      partition: p,
      priority,
      enqueuedAt: now,
      deadline,
      maxQueueTimeMs,
      signal,
      onAbort: undefined,
      resolve,
      reject,
      removed: false,
    };
    queue.push(call);
    this.queuedTotal++;
    if (signal !== undefined) {
      call.onAbort = () => this.abort(call);
      signal.addEventListener('abort', call.onAbort, { once: true });
    }
    if (appending) {
      this.reserveInShadow(p, gcosts, kcosts, startAt);
    } else {
      // A higher priority jumped the queue: every call behind it moves; re-plan them all now.
      this.replan(p, now, call);
      if (call.removed) return promise;
    }
    if (this.queuedEvents.listeners) {
      this.queuedEvents.emit({ key: p.key, predictedWaitMs: startAt - now, queued: queue.size });
    }
    if (queue.peek() === call) this.drain(p);
    return promise;
  }

  private rebuildShadow(p: Partition): void {
    p.shadowG = this.globalStates.map((s, i) => this.globalCores[i]!.clone(s));
    p.shadowK = p.keyStates.map((s, i) => this.keyCores[i]!.clone(s));
  }

  /** Earliest start of a call with these costs behind everything in the shadow (timed limits only). */
  private predict(p: Partition, gcosts: readonly number[], kcosts: readonly number[], from: number): number {
    let t = from;
    const gcores = this.globalCores;
    for (let i = 0; i < gcores.length; i++) {
      const core = gcores[i]!;
      if (core.timed && gcosts[i]) t = Math.max(t, core.earliestAt(p.shadowG![i], gcosts[i]!, from));
    }
    const kcores = this.keyCores;
    for (let i = 0; i < kcores.length; i++) {
      const core = kcores[i]!;
      if (core.timed && kcosts[i]) t = Math.max(t, core.earliestAt(p.shadowK![i], kcosts[i]!, from));
    }
    return t;
  }

  private reserveInShadow(
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    at: number,
  ): void {
    const gcores = this.globalCores;
    for (let i = 0; i < gcores.length; i++) {
      const core = gcores[i]!;
      if (core.timed && gcosts[i]) p.shadowG![i] = core.take(p.shadowG![i], gcosts[i]!, at);
    }
    const kcores = this.keyCores;
    for (let i = 0; i < kcores.length; i++) {
      const core = kcores[i]!;
      if (core.timed && kcosts[i]) p.shadowK![i] = core.take(p.shadowK![i], kcosts[i]!, at);
    }
  }

  /**
   * Predict every queued call's start again, in queue order, from the committed states and the
   * current pause; reject those that can no longer start within their deadline. `fresh` is a call
   * that has just been queued: its refusal counts as predicted (it never waited).
   */
  private replan(p: Partition, now: number, fresh?: Call): void {
    const queue = p.queue;
    if (queue === undefined) return;
    this.rebuildShadow(p);
    const from = Math.max(now, this.pausedUntil, p.pausedUntil);
    for (const call of queue.entries()) {
      const startAt = this.predict(p, call.gcosts, call.kcosts, from);
      if (startAt > call.deadline) {
        this.refuse(
          call,
          new QueueTimeoutError(startAt - call.enqueuedAt, call.maxQueueTimeMs, call === fresh),
          true,
        );
        continue;
      }
      this.reserveInShadow(p, call.gcosts, call.kcosts, startAt);
    }
  }

  private replanAndDrain(p: Partition, now: number): void {
    this.replan(p, now);
    this.drain(p);
  }

  /** Reject a queued call with a typed error and forget it. */
  private refuse(call: Call, error: Error & { code: string }, replanning = false): void {
    const p = call.partition;
    if (!p.queue?.remove(call)) return;
    this.queuedTotal--;
    if (call.onAbort) call.signal!.removeEventListener('abort', call.onAbort);
    if (!replanning) {
      // The shadow still holds this call's units: re-plan before the next prediction.
      p.shadowG = undefined;
      p.shadowK = undefined;
    }
    call.reject(error);
    this.refusedEvents.emit({ key: p.key, error });
  }

  private abort(call: Call): void {
    const p = call.partition;
    const wasHead = p.queue?.peek() === call;
    if (call.removed) return;
    this.refuse(call, new AbortedError(call.signal!.reason));
    if (wasHead || p.queue?.size === 0) this.drain(p);
  }

  private arm(p: Partition, at: number, now: number): void {
    if (p.timer !== undefined) {
      if (p.timerAt === at) return;
      this.clock.clearTimeout(p.timer);
    }
    p.timerAt = at;
    p.onTimer ??= () => {
      p.timer = undefined;
      this.drain(p, true);
    };
    // Node truncates fractional delays; round up so a timer never fires before its time.
    p.timer = this.clock.setTimeout(p.onTimer, Math.max(0, Math.ceil(at - now)));
  }

  /** Start every queued call of `p` that the limits admit now; arm one timer for the next. */
  private drain(p: Partition, fromTimer = false): void {
    const queue = p.queue;
    if (queue === undefined) return;
    const clock = this.clock;
    const now = clock.now();
    if (p.timer !== undefined) {
      clock.clearTimeout(p.timer);
      p.timer = undefined;
    }
    // A start recorded for GCRA limits at the time the timer was due (see MAX_LATE_CREDIT_MS).
    const creditFrom = fromTimer ? Math.min(now, Math.max(p.timerAt, now - MAX_LATE_CREDIT_MS)) : now;
    const gcores = this.globalCores;
    const kcores = this.keyCores;
    const gstates = this.globalStates;
    const kstates = p.keyStates;
    for (;;) {
      const call = queue.peek();
      if (call === undefined) {
        this.partitionEmptied(p);
        return;
      }
      const pausedUntil = Math.max(this.pausedUntil, p.pausedUntil);
      if (pausedUntil > now) {
        if (pausedUntil > call.deadline) {
          this.refuse(call, new QueueTimeoutError(pausedUntil - call.enqueuedAt, call.maxQueueTimeMs, false));
          continue;
        }
        this.arm(p, pausedUntil, now);
        return;
      }
      let startAt = now;
      let blocked: 'global' | 'key' | undefined;
      for (let i = 0; i < gcores.length; i++) {
        const cost = call.gcosts[i]!;
        if (cost === 0) continue;
        const at = gcores[i]!.earliestAt(gstates[i], cost, now);
        if (at === Infinity) blocked = 'global';
        else if (at > startAt) startAt = at;
      }
      for (let i = 0; i < kcores.length; i++) {
        const cost = call.kcosts[i]!;
        if (cost === 0) continue;
        const at = kcores[i]!.earliestAt(kstates[i], cost, now);
        if (at === Infinity) blocked ??= 'key';
        else if (at > startAt) startAt = at;
      }
      if (startAt > now) {
        if (startAt > call.deadline) {
          this.refuse(call, new QueueTimeoutError(startAt - call.enqueuedAt, call.maxQueueTimeMs, false));
          continue;
        }
        this.arm(p, startAt, now);
        return;
      }
      if (blocked !== undefined) {
        if (call.deadline <= now) {
          this.refuse(call, new QueueTimeoutError(now - call.enqueuedAt, call.maxQueueTimeMs, false));
          continue;
        }
        if (blocked === 'global') this.globalWaiters.add(p);
        else p.waitingKey = true;
        // Wake at the head's deadline to refuse it then if no permit came.
        if (call.deadline !== Infinity) this.arm(p, call.deadline, now);
        return;
      }
      queue.shift();
      this.queuedTotal--;
      this.commitStart(gcores, gstates, call.gcosts, now, creditFrom);
      this.commitStart(kcores, kstates, call.kcosts, now, creditFrom);
      if (call.onAbort) call.signal!.removeEventListener('abort', call.onAbort);
      if (this.startEvents.listeners) this.startEvents.emit({ key: p.key, waitedMs: now - call.enqueuedAt });
      call.resolve(this.invoke(call.fn, p, call.gcosts, call.kcosts));
    }
  }

  private commitStart(
    cores: readonly LimitCore[],
    states: unknown[],
    costs: readonly number[],
    now: number,
    creditFrom: number,
  ): void {
    for (let i = 0; i < cores.length; i++) {
      const cost = costs[i]!;
      if (cost === 0) continue;
      const core = cores[i]!;
      // earliestAt(state, cost, creditFrom) is <= now because the cost fits now.
      const at =
        core.creditsLateStart && creditFrom < now ? core.earliestAt(states[i], cost, creditFrom) : now;
      states[i] = core.take(states[i], cost, at);
    }
  }

  private partitionEmptied(p: Partition): void {
    p.queue = undefined;
    p.shadowG = undefined;
    p.shadowK = undefined;
    p.waitingKey = false;
    this.globalWaiters.delete(p);
    if (p.timer !== undefined) {
      this.clock.clearTimeout(p.timer);
      p.timer = undefined;
    }
    if (
      this.compact &&
      p.key !== undefined &&
      p.pausedUntil <= this.clock.now() &&
      this.partitions.get(p.key) === p
    ) {
      this.partitions.set(p.key, p.keyStates[0] as number);
    }
    if (this.queuedTotal === 0) {
      this.idleEvents.emit(undefined);
      this.maybeSettleClose();
    }
  }
}

/** Create a gate. Options are validated here; an invalid one throws `InvalidOptionError` naming it. */
export function createGate(options?: GateOptions): Gate {
  return new Gate(options);
}

export type { InvalidOptionError };
