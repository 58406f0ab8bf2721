import { wrapFetch } from '../adapters/fetch.js';
import type { BudgetGuard, BudgetReservation, BudgetSpend } from '../budget/budget-guard.js';
import { BudgetExceededError } from '../budget/errors.js';
import type { Clock } from '../clock.js';
import {
  type AdaptOptions,
  type AimdState,
  aimdOnRetryAfter,
  aimdOnThrottle,
  aimdOnTick,
  isAtLeastAsTight,
  learnedPolicies,
  roundRatePerSec,
  seedAgeMs,
  verdictFor,
} from '../core/adaptation.js';
import { createLimit } from '../core/create-limit.js';
import type { LimitCore, LimitSpec } from '../core/limit.js';
import { minIntervalMs } from '../core/normalize-limit-spec.js';
import { countsWindow, recountAtMs, recountState } from '../core/recount.js';
import {
  boundServerQuota,
  createServerQuota,
  creditServerQuota,
  inSameWindow,
  lowerAnswer,
  mayBeStale,
  type QuotaAnswer,
  quotaAllowanceAt,
  risesAbove,
  type ServerQuotaState,
  tightenServerQuota,
} from '../core/server-quota.js';
import {
  AbortedError,
  GateClosedError,
  type InvalidCostError,
  type InvalidOptionError,
  QueueFullError,
  QueueTimeoutError,
} from '../errors.js';
import type { HeadersLike } from '../headers/headers-like.js';
import { parseRateLimitHeaders } from '../headers/parse-ratelimit.js';
import { bindsBefore } from '../headers/quota-window.js';
import type { RateLimitObservation } from '../headers/rate-limit-observation.js';
import { invalid, onlyKnownKeys, plainObject } from '../validate.js';
import { deadlineError, throttledError } from './call-errors.js';
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
import { inspectOutcome } from './inspect-outcome.js';
import { buildCores, type GateOptions, validateGateOptions } from './options.js';
import {
  actualUnits,
  checkCapacity,
  checkCost,
  checkInspect,
  checkKey,
  checkMaxQueueTimeMs,
  checkOptionNames,
  checkPriceMicros,
  checkPriority,
  checkSignal,
  ownUnits,
  unitCost,
} from './schedule-options.js';

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
  /** Deadline to start, in ms; overrides the gate's `maxQueueTimeMs`. Retries must also restart before it. */
  maxQueueTimeMs?: number;
  /**
   * Read the provider's answer from `fn`'s result (HTTP adapters set this). The gate then adapts
   * the partition to the response headers, retries throttled responses and settles costs.
   */
  inspect?: (result: never) => Inspection | undefined | Promise<Inspection | undefined>;
  /** Estimated money cost in integer micro-units, reserved on the gate's budgets before the call is queued. */
  priceMicros?: number;
}

/** What a response said, as an adapter reads it. */
export interface Inspection {
  readonly status: number;
  readonly headers: HeadersLike;
  /** Parsed JSON body when the adapter has it cheaply (error responses); feeds body-borne limits. */
  readonly body?: unknown;
  /** HTTP method of the request (retry rules differ for POST/PATCH). @default 'GET' */
  readonly method?: string;
  /** False when the request cannot be sent again (a streamed body). @default true */
  readonly retryable?: boolean;
  /**
   * True when a server acted on the request although this status says it was throttled: a POST
   * answered by a redirect, whose target answered 429. Such a response is the call's result (its
   * price charged), never sent again (a retry would repeat the POST); its pause and its limits
   * still hold the next calls. The fetch and axios adapters set it for a redirected request whose
   * method is not idempotent. @default false
   */
  readonly processed?: boolean;
  /**
   * Units actually used (e.g. tokens from the response's usage): the difference is refunded or
   * charged. A shared gate settles it in its store (`Store.adjust`): more is always charged, less
   * is given back where that is exact (a bucket whose latest take is this call's, a window the call
   * was not recounted in), so a shared limit never under-counts.
   */
  readonly actualCost?: Readonly<Record<string, number>>;
  /** Money actually charged (integer micros), e.g. from a price header; settles the budget. */
  readonly actualPriceMicros?: number;
  /** Release the result before a retry (cancel the response body). */
  readonly discard?: () => void;
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
  /** Levels adaptation added: server quotas (`server-quota`), learned limits, the AIMD rate (`aimd`). */
  readonly adaptive: readonly (LimitStats & { readonly resetAt?: number; readonly ratePerSec?: number })[];
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
  /** Set on calls that observe their outcome (HTTP inspection or a budget). */
  readonly inspect: ScheduleOptions['inspect'];
  budget: BudgetReservation | undefined;
  readonly priceMicros: number;
  attempt: number;
  seq: number;
  /** Units started in its partition up to and including this call, per unit (`cum` at its start). */
  mark: Map<string, number> | undefined;
  /** Units in flight in its partition when it started, itself included, per unit (`inFlightUnits` then). */
  flightMark: Map<string, number> | undefined;
  /** Start number of the partition's latest call when this one's response came in: calls numbered above started after it. */
  arrivedSeq: number;
  /** Its own units at its last start, per unit (read once: a cost record changed later is not). */
  units: readonly (readonly [string, number])[] | undefined;
  /** The limits in force when the call last started (for releasing its permits). */
  gcores: readonly LimitCore[] | undefined;
  kcores: readonly LimitCore[] | undefined;
  /** When the call last started (window limits recount it from its response, see `recount`). */
  startedAt: number;
  /**
   * When its last attempt was released, and the limits in force then (whose window limits
   * recounted it then, see `recount`): `reconcile` settles its units where they are counted.
   */
  releasedAt: number;
  releasedG: readonly LimitCore[] | undefined;
  releasedK: readonly LimitCore[] | undefined;
  /**
   * How many of its partition's adaptive levels (`Partition.extra`, which only grow) there were at
   * its last start: the ones it was charged on, and recounted from its response if they count a window.
   */
  extraCount: number;
  /**
   * Whether its last start was counted in flight (the gate observed completions then): its
   * completion is released on the same terms, whatever `setLimits` did in between.
   */
  observed: boolean;
}

interface Extra {
  ids: string[];
  cores: LimitCore[];
  states: unknown[];
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
  /** Levels adaptation added (server quotas, learned limits, AIMD), with ids like `quota:tokens`. */
  extra: Extra | undefined = undefined;
  shadowE: unknown[] | undefined = undefined;
  /** Predicted start of the last call reserved in the shadow: FIFO, nobody is predicted before it. */
  shadowTail = 0;
  /** Calls started in this partition, and units started per unit (to count what the server had not yet seen). */
  seq = 0;
  cum: Map<string, number> | undefined = undefined;
  /**
   * Calls started and not yet answered, by start number, with the units each was counted with:
   * the server may see one of them after a later call.
   */
  unanswered: Map<number, readonly (readonly [string, number])[]> | undefined = undefined;
  /** Their units, summed per unit (what answers still to come can give back to a server quota). */
  inFlightUnits: Map<string, number> | undefined = undefined;
  firstStartAt = 0;
  aimd: AimdState | undefined = undefined;
  /**
   * The runs of calls between Retry-After pauses (the last two): the calls numbered above `seq`,
   * started from `at` (the end of the pause before them). What the provider accepted in one is the
   * rate it showed (see `roundRatePerSec`).
   */
  rounds: { seq: number; at: number }[] | undefined = undefined;
  /** When its last call started: a round also begins after ROUND_IDLE_MS without a start. */
  lastStartAt = 0;
  /**
   * The rate a Retry-After round showed, applied when its pause ends (`applyRoundCut`) unless a call
   * started after the refused one in the same burst is accepted meanwhile (a refusal that was not
   * the limit: the provider took more). `from`: the AIMD state it was computed from.
   */
  roundCut:
    | { state: AimdState; from: AimdState | undefined; refusedSeq: number; endSeq: number; at: number }
    | undefined = undefined;
  /**
   * Probe of a partition that knows nothing of its provider (no configured limit, nothing learned):
   * 0 not yet, 1 the first inspected call is out (the others wait for its headers), 2 done.
   */
  probe: 0 | 1 | 2 = 0;
  probeUntil = 0;
  /**
   * The end of a wait the gate capped at `maxRetryAfterMs` (the provider asked for longer): the
   * first call started from then on probes again, so one call asks the provider, not the queue.
   */
  reprobeAt: number | undefined = undefined;
  /** Queued calls with a finite deadline, as a min-heap on `deadline` (removed entries skipped lazily). */
  deadlines: Call[] | undefined = undefined;

  /**
   * Observed calls started and not yet released: a window limit recounts each from its response,
   * so the partition's state is not idle (not swept) while one runs.
   */
  running = 0;

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

/** Earliest time >= `from` at which the adaptive levels admit a call of `cost`. */
function extraEarliest(extra: Extra, states: unknown[], cost: ScheduleOptions['cost'], from: number): number {
  let t = from;
  for (let i = 0; i < extra.cores.length; i++) {
    const core = extra.cores[i]!;
    const units = unitCost(cost, core.unit);
    // A level learned after the call was queued may be smaller than its cost: it could never admit
    // it (a wait of Infinity). It does not hold the call; the provider answers, as for a quota.
    if (units !== 0 && units <= core.capacity) t = Math.max(t, core.earliestAt(states[i], units, from));
  }
  return t;
}

function extraCommit(extra: Extra, states: unknown[], cost: ScheduleOptions['cost'], at: number): void {
  for (let i = 0; i < extra.cores.length; i++) {
    const core = extra.cores[i]!;
    const units = unitCost(cost, core.unit);
    if (units !== 0) states[i] = core.take(states[i], units, at);
  }
}

// One server-quota core per unit, shared by every partition (the core is stateless).
const quotaCores = new Map<string, LimitCore<ServerQuotaState>>();
function quotaCore(unit: string): LimitCore<ServerQuotaState> {
  let core = quotaCores.get(unit);
  if (core === undefined) {
    core = createServerQuota(unit);
    quotaCores.set(unit, core);
  }
  return core;
}

// AIMD rate as a leaky bucket: emission interval 1000/rate ms. limit 1000 keeps capacity for costs > 1.
// intervalMs (ms per 1000 units) = 1000 units × 1000 ms/s / rate (units/s), at least the shortest
// interval a limit accepts: the rate is capped at 1e6/s, far above any provider's.
function aimdCore(ratePerSec: number): LimitCore {
  return createLimit(
    {
      algorithm: 'leaky-bucket',
      limit: 1000,
      intervalMs: Math.max(minIntervalMs, (1000 * 1000) / ratePerSec),
    },
    'aimd',
  );
}

const RECENT_STARTS = 32;
/** A Retry-After round also begins after this long without a start (the provider's windows have passed). */
const ROUND_IDLE_MS = 60_000;
// How long the calls of an unknown partition wait for the first response's headers at most.
export const PROBE_TIMEOUT_MS = 2_000;

/** Header families whose reset is a full refill (a token bucket), not the end of a window. */
const REFILL_SOURCES = new Set(['openai', 'anthropic']);

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
function carriesState(previous: LimitCore, next: LimitCore): boolean {
  if (previous.algorithm !== next.algorithm || previous.unit !== next.unit) return false;
  switch (next.algorithm) {
    case 'token-bucket':
    case 'leaky-bucket':
    case 'sliding-log':
    case 'concurrency':
      return true;
    default:
      return previous.spec.intervalMs === next.spec.intervalMs;
  }
}

function carryState(previous: LimitCore, state: unknown, next: LimitCore, now: number): unknown {
  return carriesState(previous, next) ? state : next.initial(now);
}

function heapPush(heap: Call[], call: Call): void {
  heap.push(call);
  let i = heap.length - 1;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (heap[parent]!.deadline <= call.deadline) break;
    heap[i] = heap[parent]!;
    i = parent;
  }
  heap[i] = call;
}

function heapPop(heap: Call[]): void {
  const last = heap.pop()!;
  if (heap.length === 0) return;
  let i = 0;
  for (;;) {
    const left = 2 * i + 1;
    if (left >= heap.length) break;
    const right = left + 1;
    const child = right < heap.length && heap[right]!.deadline < heap[left]!.deadline ? right : left;
    if (heap[child]!.deadline >= last.deadline) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = last;
}

/** The earliest deadline of a call still queued (not started, not refused). */
function nextDeadline(heap: Call[] | undefined): number {
  if (heap === undefined) return Infinity;
  while (heap.length > 0 && heap[0]!.removed) heapPop(heap);
  return heap.length > 0 ? heap[0]!.deadline : Infinity;
}

/**
 * Which previous limit each new limit continues: concurrency limits by unit (the k-th concurrency
 * limit of a unit continues the k-th one, wherever they sit: in-flight counts must follow), the
 * others by position when algorithm and unit are the same.
 */
function matchPrevious(previous: readonly LimitCore[], next: readonly LimitCore[]): (number | undefined)[] {
  const seen = new Map<string, number>();
  return next.map((core, i) => {
    if (core.timed) {
      const old = previous[i];
      return old?.timed && old.algorithm === core.algorithm && old.unit === core.unit ? i : undefined;
    }
    const occurrence = seen.get(core.unit) ?? 0;
    seen.set(core.unit, occurrence + 1);
    let count = 0;
    for (let j = 0; j < previous.length; j++) {
      if (!previous[j]!.timed && previous[j]!.unit === core.unit && count++ === occurrence) return j;
    }
    return undefined;
  });
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
  private readonly adapt: AdaptOptions | false;
  private readonly budget: BudgetGuard | undefined;
  private readonly ownsBudget: boolean;
  private readonly defaultPriceMicros: number;
  private readonly random: () => number;
  private readonly arrivalMarginMs: number;
  private readonly maxQueue: number;
  private readonly maxQueueTimeMs: number;
  private globalCores: readonly LimitCore[];
  private keyCores: readonly LimitCore[];
  private readonly globalStates: unknown[];
  /** Per-key partitions; a key whose only state is one GCRA number is stored as that number. */
  private readonly partitions = new Map<string, Partition | number>();
  private readonly defaultPartition: Partition;
  /**
   * Where a call of a key stored as one GCRA number (`compact`) starts: such a key has no partition,
   * and nothing of its calls is counted per partition (no server quota, no window to recount, no
   * per-key permit), so this one's state is never read. Not the default partition, whose server
   * quota and rounds describe the unkeyed calls only.
   */
  private readonly compactPartition = new Partition(undefined, []);
  private compact: boolean;
  private observe: boolean;
  /** Window limits count calls from their response (arrivalMarginMs > 0 and a window limit is set). */
  private recounts: boolean;
  private defaultG: number[];
  private defaultK: number[];
  private pausedUntil = 0;
  private queuedTotal = 0;
  private inFlight = 0;
  /** Calls holding a budget reservation (the gate's own ledger closes only when none does). */
  private budgetHeld = 0;
  /** Calls waiting for budget room (`onExceeded: 'wait'`): each can be refused by `close`. */
  private readonly budgetWaits = new Set<(error: Error & { code: string }) => void>();
  private started = 0;
  private closed = false;
  /** `close({ queued: 'reject' })` was called: nothing goes back to a queue (a throttled call is not retried). */
  private rejectQueued = false;
  private closeWaiters: (() => void)[] = [];
  private readonly globalWaiters = new Set<Partition>();
  /**
   * A limit replaced by setLimits -> the one that carries its count on (in-flight count, TAT, log
   * or window counts; see `carriesState`): a call releases or settles there what it took.
   */
  private readonly successor = new WeakMap<LimitCore, LimitCore>();
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
    this.adapt = o.adapt;
    this.budget = o.budget;
    this.ownsBudget = o.ownsBudget;
    this.defaultPriceMicros = o.defaultPriceMicros;
    this.random = o.random;
    this.arrivalMarginMs = o.arrivalMarginMs;
    this.maxQueue = o.maxQueue;
    this.maxQueueTimeMs = o.maxQueueTimeMs;
    this.globalCores = o.globalCores;
    this.keyCores = o.keyCores;
    const now = this.clock.now();
    this.globalStates = initialStates(this.globalCores, now);
    this.defaultPartition = new Partition(undefined, initialStates(this.keyCores, now));
    this.compact = false;
    this.observe = false;
    this.recounts = false;
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
    const windowed = (core: LimitCore) => countsWindow(core.algorithm);
    this.recounts = this.arrivalMarginMs > 0 && (this.globalCores.some(windowed) || key.some(windowed));
    this.observe = this.recounts || this.globalCores.some((c) => !c.timed) || key.some((c) => !c.timed);
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
    return this.admit(fn, options);
  }

  /** `schedule` without the closed check (a call that waited for budget room is not a new call). */
  private admit<T>(fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>> {
    if (typeof fn !== 'function') return Promise.reject(invalid('fn', 'a function', fn));
    const now = this.clock.now();
    if (options === undefined && this.budget === undefined) {
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
    const o: ScheduleOptions = options ?? {};
    let gcosts = this.defaultG;
    let kcosts = this.defaultK;
    let priority = 0;
    let maxQueueTimeMs = this.maxQueueTimeMs;
    try {
      checkOptionNames(o);
      const { cost, key, inspect } = o;
      if (cost !== undefined) {
        gcosts = this.costsFor(cost, this.globalCores);
        kcosts = this.costsFor(cost, this.keyCores);
      }
      // Checked in this order (the first invalid option is the one reported); unset options keep
      // the gate's defaults.
      if (o.priority !== undefined) priority = checkPriority(o.priority);
      if (o.maxQueueTimeMs !== undefined) maxQueueTimeMs = checkMaxQueueTimeMs(o.maxQueueTimeMs);
      const signal = checkSignal(o.signal);
      checkKey(key);
      checkInspect(inspect);
      if (o.priceMicros !== undefined) checkPriceMicros(o.priceMicros);
      if (signal?.aborted) return Promise.reject(new AbortedError(signal.reason));
      if (inspect !== undefined || this.budget !== undefined) {
        const p = key === undefined ? this.defaultPartition : this.partitionFor(key, now);
        return this.submitObserved(fn, o, p, gcosts, kcosts, priority, maxQueueTimeMs, now);
      }
      if (key === undefined) {
        return this.submit(
          fn,
          cost,
          this.defaultPartition,
          gcosts,
          kcosts,
          priority,
          maxQueueTimeMs,
          signal,
          now,
        );
      }
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
          return this.invoke(fn, this.compactPartition, gcosts, kcosts, cost, now) as Promise<Awaited<T>>;
        }
        const partition = new Partition(key, [state]);
        if (entry === undefined) this.sweep(now);
        this.partitions.set(key, partition);
        return this.submit(fn, cost, partition, gcosts, kcosts, priority, maxQueueTimeMs, signal, now);
      }
      return this.submit(
        fn,
        cost,
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

  /** Spend per budget (and key) in its current window; empty without budgets. */
  spend(): BudgetSpend[] {
    return this.budget?.spend(this.clock.now()) ?? [];
  }

  private fetchFn: typeof fetch | undefined = undefined;

  /**
   * A drop-in `fetch` through this gate (global fetch underneath; partition key = the URL's
   * origin). Per-request options go in `init.tollgate`. For another fetch implementation or other
   * options, use `wrapFetch(gate, options)`.
   */
  get fetch(): typeof fetch {
    this.fetchFn ??= wrapFetch(this);
    return this.fetchFn;
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
    this.pausePartition(this.partitionFor(key, now), untilMs, reason, now);
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
    onlyKnownKeys('update', plainObject('update', update), ['limits', 'perKey']);
    const margin = this.arrivalMarginMs;
    const globalCores = update.limits === undefined ? undefined : buildCores(update.limits, 'limits', margin);
    const keyCores = update.perKey === undefined ? undefined : buildCores(update.perKey, 'perKey', margin);
    const now = this.clock.now();
    if (globalCores) {
      const match = matchPrevious(this.globalCores, globalCores);
      const states = globalCores.map((core, i) => {
        const previous = match[i] === undefined ? undefined : this.globalCores[match[i]!];
        if (previous !== undefined && carriesState(previous, core)) this.successor.set(previous, core);
        return previous ? carryState(previous, this.globalStates[match[i]!], core, now) : core.initial(now);
      });
      this.globalStates.length = 0;
      this.globalStates.push(...states);
      this.globalCores = Object.freeze(globalCores);
    }
    if (keyCores) {
      const previousCores = this.keyCores;
      const match = matchPrevious(previousCores, keyCores);
      keyCores.forEach((core, i) => {
        const previous = match[i] === undefined ? undefined : previousCores[match[i]!];
        if (previous !== undefined && carriesState(previous, core)) this.successor.set(previous, core);
      });
      const carry = (states: unknown[]) =>
        keyCores.map((core, i) => {
          const previous = match[i] === undefined ? undefined : previousCores[match[i]!];
          return previous ? carryState(previous, states[match[i]!], core, now) : core.initial(now);
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
        adaptive: [],
      };
    } else if (typeof entry === 'number') {
      partition = {
        key,
        queued: 0,
        pausedUntil: 0,
        limits: limitStats(this.keyCores, [entry], now),
        adaptive: [],
      };
    } else {
      const extra = entry.extra;
      partition = {
        key,
        queued: entry.queue?.size ?? 0,
        pausedUntil: entry.pausedUntil,
        limits: limitStats(this.keyCores, entry.keyStates, now),
        adaptive: extra
          ? limitStats(extra.cores, extra.states, now).map((stats, i) => {
              const core = extra.cores[i]!;
              if (core.algorithm === 'server-quota') {
                return { ...stats, resetAt: (extra.states[i] as ServerQuotaState).resetAt };
              }
              if (extra.ids[i] === 'aimd') return { ...stats, ratePerSec: entry.aimd?.ratePerSec ?? 0 };
              return stats;
            })
          : [],
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
   * `'reject'` rejects them with `GateClosedError`; calls waiting for budget room count as queued,
   * and so does a call in flight that the provider throttles: `'run'` retries it as before).
   * Resolves when nothing is queued, no call holds a budget reservation and, when the gate observes
   * completions, nothing is in flight.
   */
  close(options: CloseOptions = {}): Promise<void> {
    onlyKnownKeys('options', plainObject('options', options), ['queued']);
    const mode = options.queued ?? 'run';
    if (mode !== 'run' && mode !== 'reject') throw invalid('queued', "'run' or 'reject'", mode);
    this.closed = true;
    if (mode === 'reject') {
      this.rejectQueued = true;
      for (const refuse of [...this.budgetWaits]) refuse(new GateClosedError());
      for (const p of this.queuedPartitions()) {
        for (const call of p.queue!.entries()) this.refuse(call, new GateClosedError());
        this.drain(p);
      }
    }
    const settled = this.settledForClose()
      ? Promise.resolve()
      : new Promise<void>((resolve) => this.closeWaiters.push(resolve));
    return settled.then(() => {
      if (this.ownsBudget) this.budget?.close();
    });
  }

  // ---------------------------------------------------------------------------------------------

  private settledForClose(): boolean {
    // inFlight counts only calls started while the gate observed completions (see Call.observed).
    return (
      this.queuedTotal === 0 && this.inFlight === 0 && this.budgetHeld === 0 && this.budgetWaits.size === 0
    );
  }

  private maybeSettleClose(): void {
    if (this.closeWaiters.length > 0 && this.settledForClose()) {
      const waiters = this.closeWaiters;
      this.closeWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  private costsFor(cost: unknown, cores: readonly LimitCore[]): number[] {
    checkCost(cost);
    return cores.map((core) =>
      checkCapacity(unitCost(cost, core.unit), core.unit, core.algorithm, core.capacity),
    );
  }

  private partitionFor(key: string, now: number): Partition {
    const entry = this.partitions.get(key);
    if (typeof entry === 'object') return entry;
    const partition = new Partition(key, entry === undefined ? initialStates(this.keyCores, now) : [entry]);
    // Sweep before inserting, so the sweep never examines (and drops) the entry being added.
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
    // Calls in flight are still counted (recounted from their response, or unanswered yet).
    if (entry.running > 0 || (entry.unanswered !== undefined && entry.unanswered.size > 0)) return false;
    for (let i = 0; i < cores.length; i++) if (!cores[i]!.isIdle(entry.keyStates[i], now)) return false;
    const extra = entry.extra;
    if (extra)
      for (let i = 0; i < extra.cores.length; i++)
        if (!extra.cores[i]!.isIdle(extra.states[i], now)) return false;
    // Keep what AIMD learned for a minute after its last change, or the next burst pays for it again.
    if (entry.aimd !== undefined && now - entry.aimd.changedAt < 60_000) return false;
    return true;
  }

  private *queuedPartitions(): IterableIterator<Partition> {
    if (this.defaultPartition.queue) yield this.defaultPartition;
    for (const entry of [...this.partitions.values()]) {
      if (typeof entry === 'object' && entry.queue) yield entry;
    }
  }

  private paused(p: Partition, now: number): boolean {
    return this.pausedUntil > now || p.pausedUntil > now;
  }

  private fitsAll(
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    cost: ScheduleOptions['cost'],
    now: number,
  ): boolean {
    return (
      fits(this.globalCores, this.globalStates, gcosts, now) &&
      fits(this.keyCores, p.keyStates, kcosts, now) &&
      (p.extra === undefined || extraEarliest(p.extra, p.extra.states, cost, now) <= now)
    );
  }

  private commitAll(
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    cost: ScheduleOptions['cost'],
    now: number,
  ): void {
    commit(this.globalCores, this.globalStates, gcosts, now);
    commit(this.keyCores, p.keyStates, kcosts, now);
    if (p.extra !== undefined) extraCommit(p.extra, p.extra.states, cost, now);
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
    if (p.queue === undefined && !this.paused(p, now) && this.fitsAll(p, gcosts, kcosts, cost, now)) {
      this.commitAll(p, gcosts, kcosts, cost, now);
      return this.invoke(fn, p, gcosts, kcosts, cost, now) as Promise<never>;
    }
    const { call, promise } = this.makeCall(
      fn,
      cost,
      p,
      gcosts,
      kcosts,
      priority,
      maxQueueTimeMs,
      signal,
      now,
    );
    this.enqueue(call, now);
    return promise;
  }

  /** The path of calls whose outcome the gate reads (HTTP inspection) or charges (a budget). */
  private submitObserved(
    fn: () => unknown,
    o: ScheduleOptions,
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    priority: number,
    maxQueueTimeMs: number,
    now: number,
  ): Promise<never> {
    const priceMicros = o.priceMicros ?? this.defaultPriceMicros;
    let reservation: BudgetReservation | undefined;
    if (this.budget !== undefined) {
      // Step 2 of a call's way: the estimate is reserved before anything is queued or sent.
      const decision = this.budget.tryReserve(priceMicros, p.key, now);
      if (!decision.ok) {
        if (
          this.budget.onExceeded === 'wait' &&
          Number.isFinite(decision.retryAt) &&
          decision.retryAt - now <= maxQueueTimeMs
        ) {
          return this.waitForBudget(fn, o, decision.retryAt, maxQueueTimeMs, now);
        }
        const error = new BudgetExceededError(decision);
        this.refusedEvents.emit({ key: p.key, error });
        return Promise.reject(error);
      }
      reservation = decision.reservation;
    }
    const { call, promise } = this.makeCall(
      fn,
      o.cost,
      p,
      gcosts,
      kcosts,
      priority,
      maxQueueTimeMs,
      o.signal,
      now,
    );
    (call as { inspect: ScheduleOptions['inspect'] }).inspect = o.inspect;
    (call as { priceMicros: number }).priceMicros = priceMicros;
    call.budget = reservation;
    if (reservation !== undefined) this.budgetHeld++;
    if (
      p.queue === undefined &&
      !this.paused(p, now) &&
      !this.probing(p, call, now) &&
      this.fitsAll(p, gcosts, kcosts, o.cost, now)
    ) {
      this.commitAll(p, gcosts, kcosts, o.cost, now);
      this.startCall(call, now);
    } else {
      this.enqueue(call, now);
    }
    return promise;
  }

  /** `onExceeded: 'wait'`: wait (one timer) until the budget has room, then schedule as new. */
  private waitForBudget(
    fn: () => unknown,
    o: ScheduleOptions,
    retryAt: number,
    maxQueueTimeMs: number,
    now: number,
  ): Promise<never> {
    return new Promise((resolve, reject) => {
      const signal = o.signal;
      // Refuse the waiting call (abort, close): it never reaches a queue.
      const refuse = (error: Error & { code: string }) => {
        this.clock.clearTimeout(handle);
        this.budgetWaits.delete(refuse);
        signal?.removeEventListener('abort', onAbort);
        reject(error);
        this.refusedEvents.emit({ key: o.key, error });
        this.maybeSettleClose();
      };
      const onAbort = () => refuse(new AbortedError(signal!.reason));
      const handle = this.clock.setTimeout(
        () => {
          this.budgetWaits.delete(refuse);
          signal?.removeEventListener('abort', onAbort);
          const waited = this.clock.now() - now;
          // The wait judged from when the timer was due: it fires in whole ms, rounded up, and
          // lateness up to MAX_LATE_CREDIT_MS counts as on time (as for queued calls, see drain).
          if (Math.max(retryAt - now, waited - MAX_LATE_CREDIT_MS) > maxQueueTimeMs) {
            // The timer fired after the deadline (a busy event loop): too late to start.
            refuse(new QueueTimeoutError(waited, maxQueueTimeMs, false));
            return;
          }
          // Scheduled as new, with what is left of its deadline (also after close({queued:'run'})).
          const leftMs = Math.max(0, maxQueueTimeMs - waited);
          resolve(this.admit(fn, { ...o, maxQueueTimeMs: leftMs }) as Promise<never>);
          this.maybeSettleClose();
        },
        Math.max(0, Math.ceil(retryAt - now)),
      );
      this.budgetWaits.add(refuse);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private makeCall(
    fn: () => unknown,
    cost: ScheduleOptions['cost'],
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    priority: number,
    maxQueueTimeMs: number,
    signal: AbortSignal | undefined,
    now: number,
  ): { call: Call; promise: Promise<never> } {
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
      deadline: now + maxQueueTimeMs,
      maxQueueTimeMs,
      signal,
      onAbort: undefined,
      resolve,
      reject,
      removed: false,
      inspect: undefined,
      budget: undefined,
      priceMicros: 0,
      attempt: 0,
      seq: 0,
      mark: undefined,
      flightMark: undefined,
      arrivedSeq: 0,
      units: undefined,
      gcores: undefined,
      kcores: undefined,
      startedAt: 0,
      releasedAt: 0,
      releasedG: undefined,
      releasedK: undefined,
      extraCount: 0,
      observed: false,
    };
    return { call, promise };
  }

  /** Start a plain call. Completion is observed only when a concurrency limit needs the release. */
  private invoke(
    fn: () => unknown,
    p: Partition,
    gcosts: readonly number[],
    kcosts: readonly number[],
    cost: ScheduleOptions['cost'],
    now: number,
  ): Promise<unknown> {
    this.started++;
    // Not inspected, but the server counts it all the same: unanswered until it settles.
    let answered: (() => void) | undefined;
    if (p.cum !== undefined) {
      this.countStart(p, cost, now);
      const seq = p.seq;
      answered = () => answer(p, seq);
    }
    if (!this.observe) {
      let result: Promise<unknown>;
      try {
        const value = fn();
        result = value instanceof Promise ? value : Promise.resolve(value);
      } catch (error) {
        result = Promise.reject(error);
      }
      if (answered !== undefined) result.then(answered, answered);
      return result;
    }
    this.inFlight++;
    p.running++;
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(fn());
    } catch (error) {
      result = Promise.reject(error);
    }
    const gcores = this.globalCores;
    const kcores = this.keyCores;
    const done = () => {
      answered?.();
      this.release(p, gcores, gcosts, kcores, kcosts, now);
    };
    result.then(done, done);
    return result;
  }

  /** Count a start in a partition that listens to its provider (what the server may not have seen yet). */
  private countStart(
    p: Partition,
    cost: ScheduleOptions['cost'],
    now: number,
  ): readonly (readonly [string, number])[] {
    // After a long idle spell the provider's windows have passed: a new round (see roundRate).
    if (p.seq > 0 && now - p.lastStartAt > ROUND_IDLE_MS) this.newRound(p, now);
    p.lastStartAt = now;
    p.seq++;
    if (p.seq === 1) p.firstStartAt = now;
    // The units are read once: a caller changing its cost object later changes nothing here.
    const units = unitsOf(cost);
    const cum = p.cum!;
    for (const [unit, n] of units) cum.set(unit, (cum.get(unit) ?? 0) + n);
    p.unanswered ??= new Map();
    p.unanswered.set(p.seq, units);
    p.inFlightUnits ??= new Map();
    for (const [unit, n] of units) p.inFlightUnits.set(unit, (p.inFlightUnits.get(unit) ?? 0) + n);
    return units;
  }

  /** Units the provider may have counted after `call`: started after it, or in flight when it started. */
  private notSurelySeenBy(p: Partition, call: Call, unit: string): number {
    const started = (p.cum?.get(unit) ?? 0) - (call.mark?.get(unit) ?? 0);
    const inFlight = (call.flightMark?.get(unit) ?? 0) - unitsOfUnit(call.units, unit);
    return started + Math.max(0, inFlight);
  }

  /**
   * Units of `unit` the server may not have seen when it answered `call`: every call started
   * after it, and every call started before it that is still unanswered (the server may see an
   * earlier call after a later one: a new connection takes longer than a reused one). A call
   * answered already is taken as seen: the server answers in the order it counts.
   */
  private unseenBy(p: Partition, call: Call, unit: string): number {
    let unseen = (p.cum?.get(unit) ?? 0) - (call.mark?.get(unit) ?? 0);
    for (const [seq, units] of p.unanswered ?? []) {
      // Start numbers only grow and the map keeps insertion order: the rest started after.
      if (seq >= call.seq) break;
      for (const [u, n] of units) if (u === unit) unseen += n;
    }
    return unseen;
  }

  /**
   * A call finished: give its concurrency permits back. `gcores`/`kcores` are the limits in force
   * when it started; after `setLimits` a permit goes back to the limit that took over its count
   * (see `successor`), or nowhere if that limit is gone.
   */
  private release(
    p: Partition,
    gcores: readonly LimitCore[],
    gcosts: readonly number[],
    kcores: readonly LimitCore[],
    kcosts: readonly number[],
    startedAt: number,
  ): void {
    const now = this.clock.now();
    if (this.recounts) this.recount(p, gcores, gcosts, kcores, kcosts, startedAt, now);
    this.returnPermits(p, gcores, gcosts, kcores, kcosts, now);
  }

  /** The permit half of `release`: the call no longer counts in flight, and the calls its permits held may start. */
  private returnPermits(
    p: Partition,
    gcores: readonly LimitCore[],
    gcosts: readonly number[],
    kcores: readonly LimitCore[],
    kcosts: readonly number[],
    now: number,
  ): void {
    this.inFlight--;
    p.running--;
    const global = this.refundPermits(gcores, gcosts, this.globalCores, this.globalStates, now);
    const keyed = this.refundPermits(kcores, kcosts, this.keyCores, p.keyStates, now);
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

  /**
   * Give back the concurrency permits a call took (`costs` on `cores`, the limits when it started)
   * to the limits of `current` that carry their counts now; `states` are those limits' states.
   * True when a permit went back.
   */
  private refundPermits(
    cores: readonly LimitCore[],
    costs: readonly number[],
    current: readonly LimitCore[],
    states: unknown[],
    now: number,
  ): boolean {
    let refunded = false;
    for (let i = 0; i < cores.length; i++) {
      if (cores[i]!.timed || !costs[i]) continue;
      const j = this.currentIndex(cores[i]!, current);
      if (j < 0) continue;
      states[j] = current[j]!.refund(states[j], costs[i]!, now, now);
      refunded = true;
    }
    return refunded;
  }

  /**
   * True while `call` must wait for the probe: its partition knows nothing of the provider (no
   * configured limit, nothing learned from a response) and the first inspected call is out. A
   * blind burst would draw one 429 per call beyond the provider's unknown limit.
   */
  private probing(p: Partition, call: Call, now: number): boolean {
    if (p.probe !== 1 || call.inspect === undefined) return false;
    if (now >= p.probeUntil) {
      p.probe = 2;
      return false;
    }
    return true;
  }

  /** The first inspected call of an unknown partition is its probe. */
  private startProbe(p: Partition, now: number): void {
    if (p.reprobeAt !== undefined && now >= p.reprobeAt && p.probe !== 1) {
      p.reprobeAt = undefined;
      p.probe = 1;
      p.probeUntil = now + PROBE_TIMEOUT_MS;
      return;
    }
    if (
      p.probe === 0 &&
      this.adapt !== false &&
      p.extra === undefined &&
      this.globalCores.length === 0 &&
      this.keyCores.length === 0
    ) {
      p.probe = 1;
      p.probeUntil = now + PROBE_TIMEOUT_MS;
    }
  }

  /** A wait capped at `maxRetryAfterMs` ends at `at`: the first call started then probes again. */
  private reprobeAfter(p: Partition, at: number): void {
    p.reprobeAt = Math.max(p.reprobeAt ?? at, at);
  }

  /** The probe's answer (or failure) arrived: release the calls held behind it. */
  private endProbe(p: Partition): void {
    if (p.probe !== 1) return;
    p.probe = 2;
    if (p.queue !== undefined) this.drain(p);
  }

  /**
   * `recount` for the learned limits (`Partition.extra`) a call of `cost` was charged on at
   * `startedAt` (the first `count`: they only grow): a learned limit is the provider's own window,
   * which counted the call when it arrived, so it needs the same move as a configured one (without
   * it, a call that reached the provider late shares its window with the calls a window later).
   * Levels learned since its start took nothing from it.
   */
  private recountLearned(
    p: Partition,
    cost: ScheduleOptions['cost'],
    count: number,
    startedAt: number,
    now: number,
  ): void {
    const extra = p.extra;
    const margin = this.arrivalMarginMs;
    if (extra === undefined || count === 0 || margin <= 0) return;
    for (let i = 0; i < count; i++) {
      const core = extra.cores[i]!;
      const units = unitCost(cost, core.unit);
      if (units === 0 || !countsWindow(core.algorithm)) continue;
      extra.states[i] = recountState(core, extra.states[i], units, startedAt, margin, now);
      if (p.shadowE !== undefined)
        p.shadowE[i] = recountState(core, p.shadowE[i], units, startedAt, margin, now);
    }
  }

  /**
   * Move a settled call's entries in window limits from its start to the moment it settled: the
   * provider counted the request when it arrived, which is no later than its response, so a window
   * counted from the response never ends before the provider's does. A token bucket needs no such
   * move (its margin is in its burst); a window would otherwise need a margin as long as the
   * slowest arrival. The move is capped at `max(arrivalMarginMs, intervalMs / 10)` after the start,
   * so a slow response (a long generation) costs at most a tenth of the window's throughput. The
   * partition's shadow gets the same move, so predictions of later calls see it.
   */
  private recount(
    p: Partition,
    gcores: readonly LimitCore[],
    gcosts: readonly number[],
    kcores: readonly LimitCore[],
    kcosts: readonly number[],
    startedAt: number,
    now: number,
  ): void {
    const margin = this.arrivalMarginMs;
    const move = (core: LimitCore, state: unknown, cost: number): unknown =>
      recountState(core, state, cost, startedAt, margin, now);
    for (let i = 0; i < gcores.length; i++) {
      const core = gcores[i]!;
      if (!gcosts[i] || !countsWindow(core.algorithm) || this.globalCores[i] !== core) continue;
      this.globalStates[i] = move(core, this.globalStates[i], gcosts[i]!);
      if (p.shadowG !== undefined) p.shadowG[i] = move(core, p.shadowG[i], gcosts[i]!);
    }
    for (let i = 0; i < kcores.length; i++) {
      const core = kcores[i]!;
      if (!kcosts[i] || !countsWindow(core.algorithm) || this.keyCores[i] !== core) continue;
      p.keyStates[i] = move(core, p.keyStates[i], kcosts[i]!);
      if (p.shadowK !== undefined) p.shadowK[i] = move(core, p.shadowK[i], kcosts[i]!);
    }
  }

  /** Where `core`'s count lives now: its index in `cores`, following `setLimits` replacements. */
  private currentIndex(core: LimitCore, cores: readonly LimitCore[]): number {
    let current: LimitCore | undefined = core;
    for (let hops = 0; current !== undefined && hops < 64; hops++) {
      const index = cores.indexOf(current);
      if (index >= 0) return index;
      current = this.successor.get(current);
    }
    return -1;
  }

  /** Reject a call that never made it into a queue. */
  private rejectCall(call: Call, error: Error & { code: string }): void {
    if (call.budget !== undefined) {
      const reservation = call.budget;
      call.budget = undefined;
      this.budgetHeld--;
      try {
        this.budget!.release(reservation);
      } catch {
        // A ledger closed or failing under us must not keep the call from settling.
      }
    }
    call.reject(error);
    this.refusedEvents.emit({ key: call.partition.key, error });
    if (this.closed) this.maybeSettleClose();
  }

  private enqueue(call: Call, now: number): void {
    const p = call.partition;
    if (p.queue !== undefined && p.queue.size >= this.maxQueue) {
      this.rejectCall(call, new QueueFullError(this.maxQueue, p.key));
      return;
    }
    const from = Math.max(now, this.pausedUntil, p.pausedUntil);
    const queued = p.queue !== undefined && p.queue.size > 0;
    const appending = !queued || call.priority <= p.queue!.lowestPriority();
    let startAt = from;
    if (appending) {
      // Predict on the shadow (every queued call already reserved in order), before queueing.
      if (p.shadowG === undefined) {
        if (queued) this.replan(p, now);
        else this.rebuildShadow(p);
      }
      startAt = this.predict(p, call, from);
      if (startAt > call.deadline) {
        if (!queued) this.dropShadow(p);
        this.rejectCall(call, new QueueTimeoutError(startAt - now, call.maxQueueTimeMs, true));
        return;
      }
    }
    const queue = this.queueCall(p, call, false);
    if (appending) {
      this.reserveInShadow(p, call, startAt);
    } else {
      // A higher priority jumped the queue: every call behind it moves; re-plan them all now.
      this.replan(p, now, call);
      if (call.removed) {
        // The re-plan may have refused every call: let drain re-arm or clear the partition.
        this.drain(p);
        return;
      }
    }
    if (this.queuedEvents.listeners) {
      this.queuedEvents.emit({ key: p.key, predictedWaitMs: startAt - now, queued: queue.size });
    }
    if (queue.peek() === call) this.drain(p);
    else if (call.deadline !== Infinity && (p.timer === undefined || call.deadline < p.timerAt)) {
      // Behind a waiting head: the one timer must also wake for this call's deadline.
      this.arm(p, call.deadline, now);
    }
  }

  /**
   * Put `call` in its partition's queue (at the head for a throttled call going back) and count and
   * watch it (queued total, abort, deadline) until it leaves.
   */
  private queueCall(p: Partition, call: Call, atHead: boolean): CallQueue<Call> {
    const queue = p.queue ?? new CallQueue<Call>();
    p.queue = queue;
    if (atHead) queue.unshift(call);
    else queue.push(call);
    this.queuedTotal++;
    this.listenForAbort(call);
    this.trackDeadline(p, call);
    return queue;
  }

  private trackDeadline(p: Partition, call: Call): void {
    if (call.deadline === Infinity) return;
    const heap = p.deadlines ?? [];
    p.deadlines = heap;
    heapPush(heap, call);
  }

  /**
   * Refuse every queued call whose deadline has come while it still waits (the head was handled by
   * the caller), then arm the partition's one timer for `wakeAt` or the next deadline, whichever
   * is first: a call behind a blocked head is refused when its deadline passes, never started late.
   */
  private waitUntil(p: Partition, wakeAt: number, now: number): void {
    const heap = p.deadlines;
    if (heap !== undefined) {
      while (heap.length > 0 && (heap[0]!.removed || heap[0]!.deadline <= now)) {
        const call = heap[0]!;
        heapPop(heap);
        if (!call.removed) this.refuse(call, deadlineError(call, now, false));
      }
      if (p.queue?.peek() === undefined) {
        this.drain(p);
        return;
      }
    }
    const at = Math.min(wakeAt, nextDeadline(heap));
    if (at !== Infinity) this.arm(p, at, now);
  }

  private listenForAbort(call: Call): void {
    if (call.signal === undefined) return;
    call.onAbort ??= () => this.abort(call);
    call.signal.addEventListener('abort', call.onAbort, { once: true });
  }

  private dropShadow(p: Partition): void {
    p.shadowG = undefined;
    p.shadowK = undefined;
    p.shadowE = undefined;
  }

  private rebuildShadow(p: Partition): void {
    p.shadowTail = 0;
    p.shadowG = this.globalStates.map((s, i) => this.globalCores[i]!.clone(s));
    p.shadowK = p.keyStates.map((s, i) => this.keyCores[i]!.clone(s));
    p.shadowE = p.extra?.states.map((s, i) => p.extra!.cores[i]!.clone(s));
  }

  /** Earliest start of `call` behind everything in the shadow (timed limits only). */
  private predict(p: Partition, call: Call, from: number): number {
    // No barging: a call starts no earlier than the one queued ahead of it.
    let t = Math.max(from, p.shadowTail);
    const { gcosts, kcosts } = call;
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
    if (p.extra !== undefined && p.shadowE !== undefined)
      t = Math.max(t, extraEarliest(p.extra, p.shadowE, call.cost, from));
    return t;
  }

  private reserveInShadow(p: Partition, call: Call, at: number): void {
    p.shadowTail = at;
    const { gcosts, kcosts } = call;
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
    if (p.extra !== undefined && p.shadowE !== undefined) extraCommit(p.extra, p.shadowE, call.cost, at);
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
      const startAt = this.predict(p, call, from);
      if (startAt > call.deadline) {
        this.refuse(call, deadlineError(call, startAt, call === fresh), true);
        continue;
      }
      this.reserveInShadow(p, call, startAt);
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
    // The shadow still holds this call's units: re-plan before the next prediction.
    if (!replanning) this.dropShadow(p);
    this.rejectCall(call, error);
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

  private pausePartition(p: Partition, untilMs: number, reason: string, now: number): void {
    if (untilMs <= p.pausedUntil) return;
    p.pausedUntil = untilMs;
    this.pauseEvents.emit({ key: p.key, untilMs, reason });
    this.replanAndDrain(p, now);
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
    if (p.roundCut !== undefined && now >= p.roundCut.at) this.applyRoundCut(p, now);
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
          this.refuse(call, deadlineError(call, pausedUntil, false));
          continue;
        }
        this.waitUntil(p, pausedUntil, now);
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
      if (p.extra !== undefined)
        startAt = Math.max(startAt, extraEarliest(p.extra, p.extra.states, call.cost, now));
      if (startAt > now) {
        if (startAt > call.deadline) {
          this.refuse(call, deadlineError(call, startAt, false));
          continue;
        }
        this.waitUntil(p, startAt, now);
        return;
      }
      if (this.probing(p, call, now)) {
        // The first response of this partition is on its way: learn its limits before sending more.
        this.waitUntil(p, p.probeUntil, now);
        return;
      }
      if (blocked !== undefined) {
        if (call.deadline <= now) {
          this.refuse(call, deadlineError(call, now, false));
          continue;
        }
        if (blocked === 'global') this.globalWaiters.add(p);
        else p.waitingKey = true;
        // No start time to wait for: wake at the next deadline (the head's or another call's).
        this.waitUntil(p, Infinity, now);
        return;
      }
      if (call.deadline < now && !(creditFrom < now && this.fitsBy(p, call, creditFrom) <= call.deadline)) {
        // Never start a call after its deadline (a late timer or a long synchronous task). Except
        // for a timer's own rounding: timers fire in whole ms, rounded up, so a call predicted to
        // start by its deadline (an exact time) fires after it. Its start is then judged from when
        // the timer was due (with the lateness GCRA is credited, MAX_LATE_CREDIT_MS at most).
        this.refuse(call, deadlineError(call, now, false));
        continue;
      }
      queue.shift();
      this.queuedTotal--;
      this.commitStart(gcores, gstates, call.gcosts, now, creditFrom);
      this.commitStart(kcores, kstates, call.kcosts, now, creditFrom);
      if (p.extra !== undefined) extraCommit(p.extra, p.extra.states, call.cost, now);
      if (call.onAbort) call.signal!.removeEventListener('abort', call.onAbort);
      if (this.startEvents.listeners) this.startEvents.emit({ key: p.key, waitedMs: now - call.enqueuedAt });
      if (p.aimd !== undefined && this.adapt !== false && this.adapt.aimd !== false && queue.size > 0) {
        // The gate is the bottleneck (calls wait): AIMD may add to the rate after a quiet second.
        const next = aimdOnTick(p.aimd, true, now, this.adapt.aimd);
        if (next !== p.aimd) this.setAimd(p, next, now);
      }
      this.startCall(call, now);
    }
  }

  /** Earliest time >= `from` at which every limit of `p` admits `call` (as `predict`, on the states). */
  private fitsBy(p: Partition, call: Call, from: number): number {
    let t = from;
    const { gcosts, kcosts } = call;
    const gcores = this.globalCores;
    for (let i = 0; i < gcores.length; i++)
      if (gcosts[i]) t = Math.max(t, gcores[i]!.earliestAt(this.globalStates[i], gcosts[i]!, from));
    const kcores = this.keyCores;
    for (let i = 0; i < kcores.length; i++)
      if (kcosts[i]) t = Math.max(t, kcores[i]!.earliestAt(p.keyStates[i], kcosts[i]!, from));
    if (p.extra !== undefined) t = Math.max(t, extraEarliest(p.extra, p.extra.states, call.cost, from));
    return t;
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
    p.deadlines = undefined;
    this.dropShadow(p);
    p.waitingKey = false;
    this.globalWaiters.delete(p);
    if (p.timer !== undefined) {
      this.clock.clearTimeout(p.timer);
      p.timer = undefined;
    }
    if (
      this.compact &&
      p.key !== undefined &&
      p.extra === undefined &&
      p.cum === undefined &&
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

  // --- calls whose outcome the gate reads --------------------------------------------------------

  /** Run a dequeued or admitted call (its units are committed). */
  private startCall(call: Call, now: number): void {
    const p = call.partition;
    if (call.inspect === undefined && call.budget === undefined) {
      call.resolve(this.invoke(call.fn, p, call.gcosts, call.kcosts, call.cost, now));
      return;
    }
    this.started++;
    call.attempt++;
    call.gcores = this.globalCores;
    call.kcores = this.keyCores;
    call.startedAt = now;
    call.extraCount = p.extra?.ids.length ?? 0;
    if (call.inspect !== undefined) this.startProbe(p, now);
    p.cum ??= new Map();
    call.units = this.countStart(p, call.cost, now);
    call.seq = p.seq;
    call.mark = new Map(p.cum);
    call.flightMark = new Map(p.inFlightUnits);
    call.observed = this.observe;
    if (call.observed) {
      this.inFlight++;
      p.running++;
    }
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(call.fn());
    } catch (error) {
      result = Promise.reject(error);
    }
    result.then(
      (value) => this.completed(call, value),
      (error) => this.failed(call, error),
    );
  }

  /** The call's answer (or failure) is in: the server has counted it. */
  private answered(call: Call): void {
    call.arrivedSeq = call.partition.seq;
    answer(call.partition, call.seq);
  }

  private failed(call: Call, error: unknown): void {
    this.answered(call);
    if (call.observed)
      this.release(call.partition, call.gcores!, call.gcosts, call.kcores!, call.kcosts, call.startedAt);
    this.recountLearned(call.partition, call.cost, call.extraCount, call.startedAt, this.clock.now());
    this.endProbe(call.partition);
    // The request may have reached the provider: charge the estimate (never under-count).
    this.settleBudget(call, call.priceMicros);
    call.reject(error);
  }

  private completed(call: Call, value: unknown): void {
    this.answered(call);
    const p = call.partition;
    // The learned window limits it was charged on count it from now (see `reconcile`).
    const now = this.clock.now();
    call.releasedAt = now;
    this.recountLearned(p, call.cost, call.extraCount, call.startedAt, now);
    if (!call.observed) {
      call.releasedG = undefined;
      call.releasedK = undefined;
      inspectOutcome(call.inspect, value, (inspection) => this.afterInspection(call, value, inspection));
      return;
    }
    // The terms it started on (a retry started from the inspection overwrites the call's).
    const { gcores, gcosts, kcores, kcosts } = call;
    if (this.recounts) this.recount(p, gcores!, gcosts, kcores!, kcosts, call.startedAt, now);
    // The window limits of these that were in force then have recounted it (see `reconcile`).
    call.releasedG = this.globalCores;
    call.releasedK = this.keyCores;
    // Its permits go back once its response has been read: a 429 pauses the partition (and the
    // call goes back to the head) before a call waiting for the permit may start, or that call
    // went out into the pause and overtook the retry.
    inspectOutcome(call.inspect, value, (inspection) => {
      try {
        this.afterInspection(call, value, inspection);
      } finally {
        this.returnPermits(p, gcores!, gcosts, kcores!, kcosts, this.clock.now());
      }
    });
  }

  private afterInspection(call: Call, value: unknown, inspection: Inspection | undefined): void {
    // inspectOutcome answers an object or undefined: only its status is left to check.
    if (inspection === undefined || typeof inspection.status !== 'number') {
      this.endProbe(call.partition);
      this.finish(call, value, undefined);
      return;
    }
    const p = call.partition;
    const now = this.clock.now();
    const actual = actualUnits(inspection.actualCost);
    if (actual !== undefined) this.reconcile(call, actual, now);
    const adapt = this.adapt;
    if (adapt === false) {
      this.finish(call, value, inspection);
      return;
    }
    let observation: RateLimitObservation;
    try {
      observation = parseRateLimitHeaders(inspection.status, inspection.headers, {
        now,
        body: inspection.body,
        preferReceiveTime: true,
      });
    } catch {
      // Hostile input never breaks a call: an unreadable response says nothing.
      observation = { policies: [] };
    }
    this.learnFrom(p, call, observation, inspection.status, now, adapt);
    const verdict = verdictFor(
      {
        status: inspection.status,
        method: inspection.method,
        observation,
        attempt: call.attempt,
        // After close({ queued: 'run' }) a retry is queued work finishing; after 'reject' there is none.
        retryable: inspection.retryable !== false && !this.rejectQueued,
      },
      adapt,
      now,
      this.random,
    );
    if (verdict.kind === 'done') {
      this.endProbe(p);
      this.finish(call, value, inspection);
      return;
    }
    const reason = observation.retryAfterMs !== undefined ? 'retry-after' : 'backoff';
    if (verdict.kind === 'refuse' && verdict.reason === 'retry-after-cap')
      this.reprobeAfter(p, verdict.pauseUntil);
    // Pause before the probe releases the calls held behind it: a probe answered 429 must not let
    // them all out into the same 429.
    this.pausePartition(p, verdict.pauseUntil, reason, now);
    this.endProbe(p);
    if (inspection.processed === true) {
      this.finish(call, value, inspection);
      return;
    }
    discard(inspection);
    if (verdict.kind === 'retry' && verdict.pauseUntil <= call.deadline) {
      this.requeue(call, now);
      return;
    }
    // A throttled response was not processed: charge only what the provider said it charged.
    this.settleBudget(call, inspection.actualPriceMicros ?? 0);
    call.reject(
      // The last response (its body released) is the cause, for callers who want its headers.
      throttledError(verdict, call, adapt.maxRetryAfterMs, inspection.status, { cause: value }),
    );
  }

  private finish(call: Call, value: unknown, inspection: Inspection | undefined): void {
    this.settleBudget(call, inspection?.actualPriceMicros ?? call.priceMicros);
    call.resolve(value);
  }

  private settleBudget(call: Call, actualMicros: number): void {
    if (call.budget === undefined) return;
    const reservation = call.budget;
    call.budget = undefined;
    this.budgetHeld--;
    try {
      this.budget!.settle(reservation, actualMicros);
    } catch {
      // An invalid actual (NaN, negative) from a price header must not lose the call's result:
      // keep the estimate, which is what was reserved. A ledger closed or failing under us must
      // not either: the call settles all the same.
      try {
        this.budget!.settle(reservation, reservation.estimateMicros);
      } catch {}
    }
    if (this.closed) this.maybeSettleClose();
  }

  /**
   * Settle the units a call actually used: refund the difference or charge the extra. Both apply
   * where the call was counted: on the limits it started under (after `setLimits`, the limit that
   * carries each one's count now, or none if it is gone; a limit added since took nothing from
   * it), at its start, or, for a window limit that recounted it from its response, at that time.
   * A refund at `now` would come off the window the call finished in, not the one it was counted
   * in, and let that window admit more than its limit.
   */
  private reconcile(call: Call, actual: Readonly<Record<string, number>>, now: number): void {
    const p = call.partition;
    const startedAt = call.startedAt;
    const margin = this.arrivalMarginMs;
    const adjust = (core: LimitCore, state: unknown, estimated: number, at: number): unknown => {
      const used = ownUnits(actual, core.unit);
      if (!core.timed || used === undefined || !Number.isFinite(used) || used < 0) return state;
      // Never NaN into a state: an estimate that is not a count leaves the limit as it is.
      if (!Number.isFinite(estimated) || estimated < 0 || used === estimated) return state;
      return used < estimated
        ? core.refund(state, estimated - used, at, now)
        : core.take(state, Math.min(used - estimated, core.capacity), at);
    };
    const settle = (
      cores: readonly LimitCore[],
      costs: readonly number[],
      released: readonly LimitCore[] | undefined,
      current: readonly LimitCore[],
      states: unknown[],
    ): void => {
      for (let i = 0; i < cores.length; i++) {
        const core = cores[i]!;
        if (!core.timed) continue;
        const j = this.currentIndex(core, current);
        if (j < 0) continue;
        // A level it cost nothing on was not moved, but what it used there would have been.
        const recounted = margin > 0 && countsWindow(core.algorithm) && released?.[i] === core;
        const at = recounted ? recountAtMs(core, startedAt, margin, call.releasedAt) : startedAt;
        states[j] = adjust(current[j]!, states[j], costs[i]!, at);
      }
    };
    settle(call.gcores ?? [], call.gcosts, call.releasedG, this.globalCores, this.globalStates);
    settle(call.kcores ?? [], call.kcosts, call.releasedK, this.keyCores, p.keyStates);
    p.extra?.cores.forEach((core, i) => {
      const recounted = margin > 0 && i < call.extraCount && countsWindow(core.algorithm);
      const at = recounted ? recountAtMs(core, startedAt, margin, call.releasedAt) : startedAt;
      p.extra!.states[i] = adjust(core, p.extra!.states[i], unitCost(call.cost, core.unit), at);
    });
    if (p.queue !== undefined) this.replanAndDrain(p, now);
  }

  /** Put a throttled call back at the head of its queue: it pays quota again when it restarts. */
  private requeue(call: Call, now: number): void {
    const p = call.partition;
    if (call.signal?.aborted) {
      this.rejectCall(call, new AbortedError(call.signal.reason));
      return;
    }
    this.queueCall(p, call, true);
    this.replanAndDrain(p, now);
  }

  /** Apply what a response says about the partition's limits. */
  private learnFrom(
    p: Partition,
    call: Call,
    observation: RateLimitObservation,
    status: number,
    now: number,
    adapt: AdaptOptions,
  ): void {
    let changed = false;
    // Server quotas: "remaining units until reset", minus what we sent after this call.
    const units = new Set<string>();
    for (const policy of observation.policies) {
      if (policy.remaining !== undefined && policy.resetMs !== undefined) units.add(policy.unit);
    }
    for (const unit of units) {
      let policy: (typeof observation.policies)[number] | undefined;
      for (const candidate of observation.policies) {
        if (candidate.unit !== unit || candidate.remaining === undefined || candidate.resetMs === undefined)
          continue;
        // The lowest remaining; of two spent to 0, the one that resets later (P9).
        if (policy === undefined || bindsBefore(candidate, policy)) policy = candidate;
      }
      const id = `quota:${unit}`;
      const index = p.extra?.ids.indexOf(id) ?? -1;
      const previous = index >= 0 ? (p.extra!.states[index] as ServerQuotaState) : undefined;
      // What the provider had not seen when it answered (see `unseenBy`). Subtracted, the rest is
      // an upper bound on what is left now (until the reset).
      const allowance = policy!.remaining! - this.unseenBy(p, call, unit);
      const answer: QuotaAnswer = {
        remaining: policy!.remaining!,
        startedAt: call.startedAt,
        limit: policy!.limit,
        units: unitsOfUnit(call.units, unit),
        answeredAt: now,
        seq: call.seq,
        arrivedSeq: call.arrivedSeq,
      };
      // A reset further away than maxRetryAfterMs holds calls no longer than that cap, as a
      // Retry-After does (never sleep for a day): then the next call asks the provider again, and
      // its answer (a 429 past the cap refuses it with RateLimitedError) decides. Such a quota is
      // not renewed at its capped reset: that would send a whole window at once.
      const capped = policy!.resetMs! > adapt.maxRetryAfterMs;
      const resetAt = now + Math.min(policy!.resetMs!, adapt.maxRetryAfterMs);
      // Spent until a reset past the cap: at the capped reset one call asks again, not the queue.
      if (capped && allowance <= 0) this.reprobeAfter(p, resetAt);
      // The window to renew with: stated, else the longest reset span seen (a response early in a
      // window shows nearly all of it).
      const spanMs = capped ? 0 : (policy!.windowMs ?? Math.max(previous?.spanMs ?? 0, policy!.resetMs!));
      // The answers the quota rests on held this call's units as possibly unseen: it gives them
      // back if it shows the provider counted it before them.
      if (previous !== undefined) creditServerQuota(previous, answer, resetAt, now);
      // A response to an older call than the one that set the quota may still be later news (the
      // provider may have seen that call last): it can only tighten the quota.
      if (previous !== undefined && previous.seq > call.seq) {
        tightenServerQuota(
          previous,
          allowance,
          resetAt,
          spanMs,
          now,
          answer,
          p.inFlightUnits?.get(unit) ?? 0,
        );
        this.dropShadow(p);
        changed = true;
        continue;
      }
      // Providers whose reset means "full again" are token buckets: refill continuously. Not past
      // the cap: a refill spread over the far reset held the next call for that long (a unit every
      // 48 minutes for 10 over 8000 h); the capped reset holds it instead, as for other providers.
      const refillPerMs = capped
        ? 0
        : REFILL_SOURCES.has(policy!.source) && policy!.limit !== undefined && policy!.resetMs! > 0
          ? Math.max(0, policy!.limit - policy!.remaining!) / policy!.resetMs!
          : (previous?.refillPerMs ?? 0);
      // In the window the quota already describes, or in the bucket it refills, the lower of the
      // two holds: the provider may have counted a call after this one whose answer came back first.
      // Remaining that rose above an answer that came in before this call started proves the
      // provider's window reset in between (counted later in one window, it says less, never
      // more): this answer opens a new window instead of being held to the old one's bound.
      const opens = previous !== undefined && risesAbove(previous, answer);
      const inWindow = previous !== undefined && !opens && inSameWindow(previous, resetAt, now);
      const same =
        inWindow ||
        (refillPerMs > 0 && (previous?.refillPerMs ?? 0) > 0 && mayBeStale(previous!, answer, now));
      // A new window rests on this answer alone, so nothing may be lent out that it did not
      // surely see: every call started after it, and every call in flight when it started
      // (answered since or not: the provider may have counted it after this one).
      const opened = opens ? policy!.remaining! - this.notSurelySeenBy(p, call, unit) : allowance;
      const held = same ? quotaAllowanceAt(previous!, now) : opened;
      const left = Math.min(held, opened);
      const state: ServerQuotaState = {
        allowance: left,
        // An answer that came in after this call started may be from a later window still: its
        // reset holds too.
        resetAt:
          inWindow || (opens && (previous!.lastAnsweredAt ?? -Infinity) > call.startedAt)
            ? Math.max(previous!.resetAt, resetAt)
            : resetAt,
        limit: capped ? undefined : policy!.limit,
        spanMs,
        // spread: ms per unit so what is left lasts until the reset; no call held longer than the
        // cap (a far reset spread 10 units over 8000 h: one every 48 minutes).
        spacingMs:
          adapt.pacing === 'spread' && left > 0
            ? Math.min(policy!.resetMs! / left, adapt.maxRetryAfterMs)
            : 0,
        spread: adapt.pacing === 'spread',
        nextAt: previous?.nextAt ?? now,
        seq: call.seq,
        refillPerMs,
        updatedAt: now,
        bounds: [{ ...answer, gap: 0 }],
        lowest: opens ? answer : lowerAnswer(previous?.lowest, answer, refillPerMs),
        lastAnsweredAt: Math.max(previous?.lastAnsweredAt ?? -Infinity, now),
      };
      if (same) {
        // As the answers it rests on say (see `creditServerQuota`).
        state.allowance = held;
        state.bounds = previous!.bounds;
        boundServerQuota(state, allowance, answer, p.inFlightUnits?.get(unit) ?? 0);
      }
      this.setExtra(p, id, quotaCore(unit), state);
      changed = true;
    }
    if (adapt.learn) {
      for (const { policy, spec } of learnedPolicies(observation)) {
        if ([...this.globalCores, ...this.keyCores].some((core) => isAtLeastAsTight(core, spec))) continue;
        const id = `learned:${spec.unit}:${spec.intervalMs}`;
        const index = p.extra?.ids.indexOf(id) ?? -1;
        if (index >= 0 && p.extra!.cores[index]!.spec.limit === spec.limit) continue;
        let core: LimitCore;
        try {
          core = createLimit(spec, 'learned');
        } catch {
          continue;
        }
        let state = index >= 0 ? p.extra!.states[index] : core.initial(now);
        if (index < 0) {
          // Calls sent before the limit was known count in its first window: what the server
          // says is used, counted from the start of the provider's window (so it leaves at the
          // provider's reset, not a whole window from now), plus what we sent after this call
          // that it had not yet seen, counted now.
          const unseen = this.unseenBy(p, call, spec.unit!);
          const used = Math.min(spec.limit - (policy.remaining ?? spec.limit), core.capacity);
          if (used > 0) state = core.take(state, used, now - seedAgeMs(policy, spec));
          const recent = Math.min(unseen, core.capacity - Math.max(used, 0));
          if (recent > 0) state = core.take(state, recent, now);
        }
        this.setExtra(p, id, core, state);
        this.limitsEvents.emit({
          key: p.key,
          reason: `learned ${spec.limit} ${spec.unit} per ${spec.intervalMs} ms`,
        });
        changed = true;
      }
    }
    const throttled = status === 429 || observation.throttled === true;
    const informed = observation.policies.some(
      (policy) =>
        policy.unit === 'requests' && (policy.remaining !== undefined || policy.limit !== undefined),
    );
    // AIMD when the provider states no quota. With nothing at all, the usual decrease; with a
    // Retry-After alone, the rate the provider showed before it refused (a Retry-After says when,
    // not how fast: after the pause the whole queue would go again, into the same 429s).
    if (throttled && !informed && adapt.aimd !== false) {
      if (observation.retryAfterMs === undefined) {
        const next = aimdOnThrottle(p.aimd, this.recentRate(p, now), call.seq, p.seq, now, adapt.aimd);
        if (next !== undefined && next !== p.aimd) {
          this.setAimd(p, next, now);
          changed = true;
        }
      } else {
        const pauseUntil = now + Math.min(observation.retryAfterMs, adapt.maxRetryAfterMs);
        const rate = this.roundRate(p, call.seq, pauseUntil);
        const next = aimdOnRetryAfter(p.aimd, rate, call.seq, p.seq, now, adapt.aimd);
        // Kept for the pause's end (nothing starts before it); the lowest of a round's refusals.
        const cut = p.roundCut;
        if (
          next !== undefined &&
          next !== p.aimd &&
          (cut === undefined || next.ratePerSec < cut.state.ratePerSec)
        )
          p.roundCut = {
            state: next,
            from: p.aimd,
            refusedSeq: Math.min(call.seq, cut?.refusedSeq ?? call.seq),
            endSeq: p.seq,
            at: pauseUntil,
          };
      }
    } else if (
      !throttled &&
      p.roundCut !== undefined &&
      call.seq > p.roundCut.refusedSeq &&
      call.seq <= p.roundCut.endSeq
    ) {
      // A call started after the refused one, in the same run, was accepted: not the limit.
      p.roundCut = undefined;
    }
    if (changed && p.queue !== undefined) this.replanAndDrain(p, now);
  }

  /**
   * The rate the provider showed in the round `callSeq` started in, now that it refused that call
   * until `pauseUntil` (the calls started before it in its round were accepted, as far as we know);
   * then the next round starts after the pause, with the calls started from now on.
   */
  private roundRate(p: Partition, callSeq: number, pauseUntil: number): number | undefined {
    // No round yet: the first one began with the partition's first call (newRound stores it).
    const rounds = p.rounds ?? [{ seq: 0, at: p.firstStartAt }];
    let rate: number | undefined;
    for (let i = rounds.length - 1; i >= 0; i--) {
      const round = rounds[i]!;
      if (round.seq >= callSeq) continue;
      // The calls numbered round.seq + 1 ... callSeq - 1 went before it in its round.
      rate = roundRatePerSec(callSeq - round.seq - 1, round.at, pauseUntil);
      break;
    }
    this.newRound(p, pauseUntil);
    return rate;
  }

  /** A new round begins at `at` with the calls started from now on (numbered above `p.seq`). */
  private newRound(p: Partition, at: number): void {
    p.rounds ??= [{ seq: 0, at: p.firstStartAt }];
    const rounds = p.rounds;
    const last = rounds[rounds.length - 1]!;
    if (last.seq === p.seq) last.at = Math.max(last.at, at);
    else {
      rounds.push({ seq: p.seq, at });
      if (rounds.length > 2) rounds.shift();
    }
  }

  /** The pause of a Retry-After round has ended: its rate takes effect (see `Partition.roundCut`). */
  private applyRoundCut(p: Partition, now: number): void {
    const cut = p.roundCut!;
    p.roundCut = undefined;
    // Another decrease since (a 429 without a Retry-After) keeps the lower of the two.
    if (p.aimd !== cut.from && p.aimd !== undefined && p.aimd.ratePerSec <= cut.state.ratePerSec) return;
    this.setAimd(p, { ...cut.state, changedAt: now }, now);
  }

  /** Calls per second this partition started recently: AIMD's starting point. */
  private recentRate(p: Partition, now: number): number {
    const elapsedSec = Math.max(1, (now - p.firstStartAt) / 1000);
    return Math.max(1, Math.min(p.seq, RECENT_STARTS * 1000) / elapsedSec);
  }

  private setAimd(p: Partition, state: AimdState, now: number): void {
    p.aimd = state;
    const index = p.extra?.ids.indexOf('aimd') ?? -1;
    // Keep the leaky bucket's theoretical arrival time: only the spacing changes.
    const carried = index >= 0 ? p.extra!.states[index] : now;
    this.setExtra(p, 'aimd', aimdCore(state.ratePerSec), carried);
    this.limitsEvents.emit({ key: p.key, reason: `aimd ${state.ratePerSec.toFixed(2)}/s` });
  }

  private setExtra(p: Partition, id: string, core: LimitCore, state: unknown): void {
    const extra = p.extra ?? { ids: [], cores: [], states: [] };
    p.extra = extra;
    const index = extra.ids.indexOf(id);
    if (index >= 0) {
      extra.cores[index] = core;
      extra.states[index] = state;
    } else {
      extra.ids.push(id);
      extra.cores.push(core);
      extra.states.push(state);
    }
    this.dropShadow(p);
  }
}

function discard(inspection: Inspection): void {
  try {
    inspection.discard?.();
  } catch {
    // Releasing a response we drop anyway must not fail the call.
  }
}

/** Create a gate. Options are validated here; an invalid one throws `InvalidOptionError` naming it. */
export function createGate(options?: GateOptions): Gate {
  return new Gate(options);
}

export type { InvalidOptionError };

/** The call started `seq`-th in `p` is answered (or failed): the server has counted it. */
function answer(p: Partition, seq: number): void {
  const units = p.unanswered?.get(seq);
  if (units === undefined) return;
  p.unanswered!.delete(seq);
  for (const [unit, n] of units) p.inFlightUnits!.set(unit, p.inFlightUnits!.get(unit)! - n);
}

/** The units of `unit` in a call's `units` (see `unitsOf`). */
function unitsOfUnit(units: readonly (readonly [string, number])[] | undefined, unit: string): number {
  let n = 0;
  for (const [u, count] of units ?? []) if (u === unit) n += count;
  return n;
}

/** The units a call of `cost` counts, per unit (`requests` always, then the cost's own units). */
function unitsOf(cost: ScheduleOptions['cost']): (readonly [string, number])[] {
  const units: (readonly [string, number])[] = [['requests', unitCost(cost, 'requests')]];
  if (typeof cost === 'object') {
    for (const unit of Object.keys(cost)) if (unit !== 'requests') units.push([unit, cost[unit]!]);
  }
  return units;
}
