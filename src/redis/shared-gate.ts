import { randomUUID } from 'node:crypto';
import type { BudgetReservation } from '../budget/budget-guard.js';
import { BudgetExceededError } from '../budget/errors.js';
import type { Clock } from '../clock.js';
import {
  type AdaptOptions,
  bindingFor,
  isAtLeastAsTight,
  learnedPolicies,
  seedAgeMs,
  type Verdict,
  verdictFor,
} from '../core/adaptation.js';
import { createLimit } from '../core/create-limit.js';
import type { LimitCore } from '../core/limit.js';
import { countsWindow } from '../core/recount.js';
import {
  AbortedError,
  GateClosedError,
  InvalidCostError,
  QueueFullError,
  RateLimitedError,
  StoreUnavailableError,
  TollgateError,
} from '../errors.js';
import { deadlineError, throttledError } from '../gate/call-errors.js';
import { type Dispose, Emitter, type Listener, type RefusedEvent, type StartEvent } from '../gate/events.js';
import {
  createGate,
  type Gate,
  type GateStats,
  type Inspection,
  PROBE_TIMEOUT_MS,
  type ScheduleOptions,
} from '../gate/gate.js';
import { inspectOutcome } from '../gate/inspect-outcome.js';
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
  unitCost,
} from '../gate/schedule-options.js';
import { parseRateLimitHeaders } from '../headers/parse-ratelimit.js';
import type { RateLimitObservation } from '../headers/rate-limit-observation.js';
import { invalid, onlyKnownKeys, plainObject } from '../validate.js';
import { levelCapacity } from './memory-store.js';
import { RoundPace } from './round-pace.js';
import {
  type FailurePolicy,
  type NormalizedSharedGateOptions,
  type SharedBudget,
  type SharedGateOptions,
  shareOf,
  validateSharedGateOptions,
} from './shared-gate-options.js';
import {
  isPromise,
  type MaybePromise,
  type Store,
  type StoreDecision,
  type StoreLevel,
  type StorePauseEvent,
  type StoreRefusal,
  type StoreReservation,
} from './store.js';
import { type HeapEntry, TimerHeap } from './timer-heap.js';

/** The store stopped answering: calls now follow the failure policy. */
export interface StoreDownEvent {
  readonly error: unknown;
  readonly policy: FailurePolicy;
}

/** The store answers again: new calls are shared through it again. */
export interface StoreUpEvent {
  /** How long it was down, in ms (gate clock). */
  readonly downForMs: number;
}

/** A pause the gate applies to its waiting calls (set here or by another process). */
export interface SharedPauseEvent {
  /**
   * The key paused; undefined for the calls without a key, or for a gate-wide pause. A pause heard
   * of a key this gate does not know (yet) is not reported: it holds none of its calls (it is read
   * when the key comes), and cannot be told from another process's marks.
   */
  readonly key: string | undefined;
  /** Nothing held by it starts before this time (gate clock, ms). */
  readonly untilMs: number;
  readonly reason: string;
}

export interface SharedGateStats {
  /**
   * Calls of this process waiting for their start (reserving, holding a reservation, retrying, or
   * queued in the local fallback).
   */
  readonly queued: number;
  /** Calls of this process started and not yet settled. */
  readonly inFlight: number;
  /** Calls this process started (through the store, fail-open, or the local fallback). */
  readonly started: number;
  /** False while the store is down and the failure policy applies. */
  readonly storeUp: boolean;
  readonly failure: FailurePolicy;
  /** Calls that went through the local fallback gate so far. */
  readonly fallbackCalls: number;
  /** Slots given back because the call reached them later than `lateToleranceMs`. */
  readonly lateReserves: number;
  /** The local fallback gate's own stats (`local` policy only). */
  readonly fallback: GateStats | undefined;
  readonly closed: boolean;
}

// A local start this close to a pause's end is left alone: store and local clocks round differently.
const PAUSE_SLACK_MS = 5;
// A call found late past lateToleranceMs reserves again at most this often, then starts anyway (a
// process late on every timer must still make progress; its deadline bounds the wait).
const MAX_LATE_RESERVES = 3;
/**
 * The longest the answers handled in one run share one clock reading (see `answersCameAt`): the
 * time the calls started before them took (their functions run at once) is forgiven up to this.
 */
const ANSWERS_SPAN_MS = 50;
/** At most this many window calls of one key ask the store at once (see `SharedGate.mayAsk`). */
const MAX_TURNS = 8;
/** A gate whose key's probe another gate holds asks for it again this often (ms). */
const PROBE_RETRY_MS = 50;
/**
 * The scope of a key's reprobe mark, after its own scope: a pause written there holds no call (no
 * key's scope ends so, short of a key holding this text) and says, to every process that hears it,
 * that the key's pause ending then was capped at `maxRetryAfterMs` (see `KeyInfo.reprobeAt`).
 */
const REPROBE_SCOPE = '\u0000reprobe';
/**
 * The scope of a key's pace mark (as `REPROBE_SCOPE`): the key's provider refused a call with a
 * Retry-After alone, and the round it measured ends when the pause does (see `RoundPace`).
 */
const PACE_SCOPE = '\u0000pace';
/**
 * Past this many keys, a new key sweeps the records of keys with nothing waiting (see `sweepInfos`);
 * as many pauses and marks heard of keys not known here are kept (see `SharedGate.unknownPauses`).
 */
const MAX_KEYS = 10_000;
/** A key whose pace changed within this long is kept when keys are swept (as the in-memory gate keeps AIMD). */
const PACE_KEEP_MS = 60_000;
// The clock offset is re-estimated from a fresh sample when the best one is older than this (ms).
const OFFSET_SAMPLE_MS = 5_000;
// Learned limits are written again at most this often per key and window (the store keeps them alive).
const LEARN_REFRESH_MS = 60_000;
// Partitions of a gate with gate-wide limits all live under this store partition (one hash slot).
const GATE_PARTITION = '~gate';
/** The abort reason of a call taken back from the local fallback (see returnFromFallback). */
const RETURNED = Symbol('returned to the store');
const DEFAULT_KEY = '~default';

interface KeyInfo {
  readonly key: string | undefined;
  readonly partition: string;
  /** Scope of this key's pauses and learned limits inside the partition. */
  readonly scope: string;
  readonly levels: readonly StoreLevel[];
  /** Pauses that hold this key's calls: the partition's own, and its scope's. */
  readonly pauseIds: readonly string[];
  /** The pause this key's throttled responses set. */
  readonly ownPauseId: string;
  /** Indexes of concurrency levels (their permits are given back when a call finishes). */
  readonly untimed: readonly number[];
  /** Indexes of window levels (a call that ran is recounted from its response, see `Store.recount`). */
  readonly windows: readonly number[];
  /** Indexes of token and leaky bucket levels (their slots are spaced: a late start matters). */
  readonly buckets: readonly number[];
  /**
   * With gate-wide limits, the index of the key's first own level (the gate-wide ones come first;
   * learned limits follow the key's): see `SharedCall.ownWaits` and `waitInLine`.
   */
  readonly ownFrom: number | undefined;
  queued: number;
  learned: Map<string, { limit: number; at: number }> | undefined;
  /**
   * The key has limits learned from its provider's responses (here or, as a reservation showed, by
   * another process): windows, so its calls are recounted and ask the store in turns.
   */
  learnedWindows: boolean;
  /**
   * Probe of a key that knows nothing of its provider (no configured limit, nothing learned here):
   * 0 not yet, 1 its first inspected call (`prober`) is out and the others wait for its response
   * until `probeUntil` (`probeWaiters`), 2 done.
   */
  probe: 0 | 1 | 2;
  prober: SharedCall | undefined;
  probeUntil: number;
  probeWaiters: SharedCall[] | undefined;
  /** This gate holds the store's probe of the key (see `Store.claimProbe`); a claim is on its way. */
  probeClaimed: boolean;
  claiming: boolean;
  /**
   * The end of a wait capped at `maxRetryAfterMs` (the provider asked for longer), set here or
   * heard from another process (its reprobe mark, `markId`): the first inspected call to go from
   * then on probes again (one among the gates on the store, see `claimProbe`), and the key's other
   * calls wait for its answer, rather than the queues all going into the 429 the provider announced.
   */
  reprobeAt: number | undefined;
  /** The probe out (`probe` 1) is such a reprobe. */
  reprobing: boolean;
  /** The pause id of the key's reprobe mark (see `REPROBE_SCOPE`). */
  readonly markId: string;
  /**
   * When the reprobe and pace marks this gate wrote for the key end (gate clock, 0: none): written
   * again when the store answers after an outage (see `catchUpStore`).
   */
  reprobeMarkUntil: number;
  paceMarkUntil: number;
  /**
   * The key's pace after Retry-After refusals that said nothing else (see `RoundPace`): only for a
   * key with no configured limit (and AIMD on); unused while it has learned limits.
   */
  readonly pace: RoundPace | undefined;
  /** The pause id of the key's pace mark (see `PACE_SCOPE`), with `pace`. */
  readonly paceId: string | undefined;
  /**
   * The calls of the key holding a slot of its pace (`SharedCall.paceAt`), in priority and then
   * schedule order (`goesBefore`), which is the order of their slots (see `bookPace`).
   */
  paced: SharedCall[];
  /**
   * Calls of this key holding a turn to ask the store (window calls, and calls that wait for their
   * key's own limit, `ownWaits`; see `mayAsk`), and how many may.
   */
  asking: number;
  width: number;
  /** The call holding a turn while it waits for the slot the store named (the others wait behind). */
  head: SharedCall | undefined;
  /** Calls waiting for a turn, in priority and then schedule order (`goesBefore`) from `behindHead`. */
  behind: SharedCall[];
  behindHead: number;
  /** `pump` is running further up the stack (a synchronous store answers inside `submit`). */
  pumping: boolean;
}

interface SharedCall extends HeapEntry {
  readonly fn: () => unknown;
  readonly cost: ScheduleOptions['cost'];
  readonly costs: readonly number[];
  readonly units: Readonly<Record<string, number>> | undefined;
  readonly info: KeyInfo;
  readonly priority: number;
  readonly enqueuedAt: number;
  readonly deadline: number;
  readonly maxQueueTimeMs: number;
  readonly signal: AbortSignal | undefined;
  readonly inspect: ScheduleOptions['inspect'];
  readonly priceMicros: number;
  readonly hasUntimed: boolean;
  /**
   * The call is charged on a window level, configured or learned: recount it when it finishes
   * (arrivalMarginMs > 0). Set when it is scheduled, or when its key has learned limits (see submit).
   */
  recounts: boolean;
  /**
   * The call is charged on gate-wide levels and on its key's bucket levels: it is reserved ahead
   * only when the gate-wide levels decide its start (`ReserveOptions.ownFrom`). When its key's
   * limit alone holds it, it waits for that without a reservation, in its key's turns (see
   * `mayAsk`), so a slow key's calls never take the gate-wide slots far ahead of other keys' calls.
   */
  readonly ownWaits: boolean;
  /** The call is charged on gate-wide levels. */
  readonly gateWide: boolean;
  /** Its last reserve asked for a start ahead (not only one due now, see `asksWhenDue`). */
  reservedAhead: boolean;
  /** The call waits in the gate-wide line (see `waitInLine`). */
  inLine: boolean;
  /** The call was let out of the gate-wide line and asks the store (see `releaseLine`). */
  released: boolean;
  /**
   * A late start must reserve again: the call is charged on a bucket level, or on a window level
   * that is not recounted (a recount counts a late call from its response anyway).
   */
  lateMatters: boolean;
  /** The call holds a turn to ask the store (see `mayAsk`). */
  turn: boolean;
  onAbort: (() => void) | undefined;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  budget: BudgetReservation | undefined;
  reservation: StoreReservation | undefined;
  state: 'reserving' | 'waiting' | 'retrying' | 'running' | 'done';
  attempt: number;
  /** The reservation's start on the store's clock (replanning order). */
  storeStartAt: number;
  /** Order in which the store's answers granted reservations (its takes' order, one connection). */
  takenSeq: number;
  /**
   * When it started, on the store's clock (estimated): a window call may start after its reserved
   * start (it does not reserve again when late), and its recount is capped from its real start.
   */
  startedStoreAt: number;
  /** Gate clock when the reservation was sent (for the clock offset). */
  sentAt: number;
  /** Times this call gave back a slot it reached too late. */
  lateReserves: number;
  /** Called when the call finishes (the fallback's stand-in for it then gives its permits back). */
  onReleased: (() => void) | undefined;
  /** Its index in `runningViaStore`, -1 when not there. */
  runningIndex: number;
  /** It asked the store again at its deadline (once: see `fire`). */
  askedAtDeadline: boolean;
  /** Its number in its key's pace rounds when it started (0: not counted, see `RoundPace.started`). */
  paceSeq: number;
  /** The slot its key's pace booked for it (gate clock), while it waits for it (in `KeyInfo.paced`). */
  paceAt: number | undefined;
}

let seq = 0;

/**
 * Whether `a` goes before `b` among calls waiting in this gate: higher priority first, then
 * schedule order (as the in-memory gate's queue).
 */
function goesBefore(a: SharedCall, b: SharedCall): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq);
}

function settleValue<T>(
  value: MaybePromise<T>,
  onValue: (v: T) => void,
  onError: (e: unknown) => void,
): void {
  if (isPromise(value)) {
    value.then(onValue, onError);
    return;
  }
  onValue(value);
}

/** The reservation holds concurrency permits. */
function holdsPermits(reservation: StoreReservation): boolean {
  return reservation.levels.some(
    (level, i) => level.spec.algorithm === 'concurrency' && reservation.costs[i] !== 0,
  );
}

/** A call of the key waits for a slot the store named, or for a turn. */
function keyHeld(info: KeyInfo): boolean {
  return info.head !== undefined || info.behindHead < info.behind.length;
}

/** See `SharedCall.ownWaits`. */
function ownWaits(info: KeyInfo, costs: readonly number[]): boolean {
  const ownFrom = info.ownFrom;
  if (ownFrom === undefined) return false;
  let shared = false;
  for (let i = 0; i < ownFrom; i++) if (costs[i] !== 0) shared = true;
  return shared && info.buckets.some((i) => i >= ownFrom && costs[i] !== 0);
}

/**
 * The store level of a core: its spec, and its capacity when that exceeds the spec's burst (a token
 * bucket kept on the safe side by `arrivalMarginMs`, whose spec carries the smaller burst).
 */
function levelOf(id: string, core: LimitCore): StoreLevel {
  const spec = core.spec;
  return spec.algorithm === 'token-bucket' && core.capacity !== spec.burst
    ? { id, spec, capacity: core.capacity }
    : { id, spec };
}

/** Run a store write whose failure only matters as a sign the store is down. */
function quietly(run: () => MaybePromise<unknown>, onError: (error: unknown) => void): void {
  try {
    const result = run();
    if (isPromise(result)) result.catch(onError);
  } catch (error) {
    onError(error);
  }
}

/**
 * A gate whose limits, pauses and learned limits are shared by every process on the same store
 * (Redis). Each call is reserved in the store (one round trip: the store answers the start time
 * granted) and waits locally, under one timer for the whole gate. Create it with `createSharedGate`.
 */
export class SharedGate {
  readonly onStoreDown: (listener: Listener<StoreDownEvent>) => Dispose;
  readonly onStoreUp: (listener: Listener<StoreUpEvent>) => Dispose;
  readonly onStart: (listener: Listener<StartEvent>) => Dispose;
  readonly onRefused: (listener: Listener<RefusedEvent>) => Dispose;
  readonly onPause: (listener: Listener<SharedPauseEvent>) => Dispose;
  /** The store decisions are made in. */
  readonly store: Store;

  private readonly o: NormalizedSharedGateOptions;
  private readonly clock: Clock;
  private readonly adapt: AdaptOptions | false;
  private readonly budget: SharedBudget | undefined;
  private readonly allCores: readonly LimitCore[];
  /** Who this gate is when it claims a probe in the store (random: never derived from a key). */
  private readonly probeHolder = randomUUID();
  private readonly globalLevels: readonly StoreLevel[];
  private readonly keyInfos = new Map<string, KeyInfo>();
  /** The keys known here by the pause id of their reprobe mark (see `KeyInfo.markId`). */
  private readonly marks = new Map<string, KeyInfo>();
  /** The keys known here with a pace, by the pause id of their pace mark (see `KeyInfo.paceId`). */
  private readonly paceMarks = new Map<string, KeyInfo>();
  /** The keys known here by the id of their own pause (`KeyInfo.ownPauseId`): a pause heard names its key. */
  private readonly pauseOwners = new Map<string, KeyInfo>();
  /** The pause that holds every key, with gate-wide limits (their partition's own). */
  private readonly gateWidePauseId: string | undefined;
  /**
   * Pauses heard of keys not known here (never seen, or swept), by pause id: their ends (gate
   * clock). Such a pause cannot be told from a key's reprobe or pace mark (a Redis pause id is a
   * digest), so each is kept, not applied or reported, and read when its key comes (`heardBefore`):
   * at most MAX_KEYS, the oldest heard dropped (another process's keys would grow it without bound).
   */
  private readonly unknownPauses = new Map<string, number>();
  private readonly defaultInfo: KeyInfo;
  private readonly heap = new TimerHeap<SharedCall>();
  /**
   * The gate has seen a priority other than 0: from then on no call is reserved ahead (see
   * `asksWhenDue`), so calls wait here in priority order rather than in the store in arrival order.
   */
  private prioritized = false;
  /** Calls whose slot, reserved ahead before the gate saw priorities, goes back this tick. */
  private returning: SharedCall[] | undefined = undefined;
  /** Reservations granted so far (see `SharedCall.takenSeq`). */
  private takes = 0;
  /**
   * The gate-wide line (see `waitInLine`): window calls on gate-wide levels held by them, in
   * priority and then schedule order from `lineFirst`, and the one that speaks for them at the store.
   */
  private line: SharedCall[] = [];
  private lineFirst = 0;
  private lineAsker: SharedCall | undefined = undefined;
  /** Calls let out of the line and asking (`SharedCall.released`), and how many may at once. */
  private lineReleased = 0;
  private lineWidth = 1;
  private releasingLine = false;
  private timer: unknown = undefined;
  private timerAt = 0;
  private readonly onTimer = () => {
    this.timer = undefined;
    this.fire();
  };
  private readonly localPauses = new Map<string, number>();
  /** Store clock minus gate clock (ms), from the answer with the shortest round trip lately. */
  private offsetMs = Number.NaN;
  private offsetRttMs = Infinity;
  private offsetAt = 0;
  private readonly disposePauses: () => void;
  private fallback: Gate | undefined = undefined;
  /** The fallback's share of the gate-wide and per-key limits (its capacities, for `catchUpStore`). */
  private fallbackCores: { readonly global: readonly LimitCore[]; readonly key: readonly LimitCore[] } = {
    global: [],
    key: [],
  };
  /**
   * Calls running on a store reservation, for the fallback to count when the store goes down. An
   * array with swap-removal (each call knows its index): a Set churned 20,000 times a second
   * tripled the shared gate's p99 at 1 ms ticks (bench/redis.ts, 1.0 -> 4.3 ms).
   */
  private readonly runningViaStore: SharedCall[] = [];
  private fallbackCalls = 0;
  private lateReserves = 0;
  private up = true;
  private downSince = 0;
  private probeTimer: unknown = undefined;
  /** Permits of calls that finished while the store was down: given back when it answers. */
  private unrefunded: StoreReservation[] = [];
  /**
   * Slots reserved ahead by calls that went to the local fallback when the store went down (with
   * the order the store granted them): given back when it answers, latest first.
   */
  private abandonedSlots: { reservation: StoreReservation; takenSeq: number }[] = [];
  private queuedTotal = 0;
  private inFlight = 0;
  /** Calls handed to the local fallback that it has not started yet. */
  private fallbackQueued = 0;
  /**
   * Those calls, each with what takes it back out of the fallback: when the store answers again
   * they return to it (left there, they would drain at the local share on top of the whole quota
   * the store grants from then on).
   */
  private readonly inFallbackQueue = new Map<SharedCall, AbortController>();
  /**
   * Calls running in the fallback on a gate with concurrency limits, with the store's permits they
   * take when it answers again (until they finish, the store must count them: it would otherwise
   * grant every permit to new calls while these still run).
   */
  private readonly runningInFallback = new Map<
    SharedCall,
    { permits?: StoreReservation; asked: boolean; done: boolean }
  >();
  /**
   * Calls holding a budget reservation, counted from the reserve's request until the ledger has
   * answered its settle or release (an async inspection, or a Redis round trip, ends after the
   * call left `inFlight`): `close()` waits for none, as the in-memory gate does.
   */
  private budgetHeld = 0;
  private started = 0;
  private closed = false;
  /** `close({ queued: 'reject' })` was called: a call that has not started is refused wherever it is. */
  private rejectQueued = false;
  private closeWaiters: (() => void)[] = [];

  private readonly storeDownEvents = new Emitter<StoreDownEvent>();
  private readonly storeUpEvents = new Emitter<StoreUpEvent>();
  private readonly startEvents = new Emitter<StartEvent>();
  private readonly refusedEvents = new Emitter<RefusedEvent>();
  private readonly pauseEvents = new Emitter<SharedPauseEvent>();

  constructor(options: SharedGateOptions) {
    const o = validateSharedGateOptions(options);
    // A call that does not fit its budget is refused here; a guard asking to wait for room would
    // be ignored silently (and its retryAt is on the guard's clock, not the gate's): refuse it now.
    if ((o.budget as { onExceeded?: unknown } | undefined)?.onExceeded === 'wait') {
      if (o.ownsStore)
        quietly(
          () => o.store.close(),
          () => {},
        );
      throw invalid(
        'budget.onExceeded',
        "'refuse' in a shared gate (a call that does not fit its budget is refused, never held until room comes)",
        'wait',
      );
    }
    this.o = o;
    this.store = o.store;
    this.clock = o.clock;
    this.adapt = o.adapt;
    this.budget = o.budget;
    this.allCores = [...o.globalCores, ...o.keyCores];
    this.globalLevels = o.globalCores.map((core, i) => levelOf(`g${i}`, core));
    this.gateWidePauseId = o.globalCores.length > 0 ? this.store.pauseId(GATE_PARTITION, '') : undefined;
    this.defaultInfo = this.makeInfo(undefined);
    this.know(this.defaultInfo);
    this.onStoreDown = this.storeDownEvents.on;
    this.onStoreUp = this.storeUpEvents.on;
    this.onStart = this.startEvents.on;
    this.onRefused = this.refusedEvents.on;
    this.onPause = this.pauseEvents.on;
    this.disposePauses = this.store.onPause((event) => this.heardPause(event));
    if (o.failure === 'local') {
      // The fallback applies the same arrival margin to its share of each configured limit.
      const scale = (cores: readonly LimitCore[]) => cores.map((core) => shareOf(core, o.localShare));
      const global = scale(o.globalCores);
      const perKey = scale(o.keyCores);
      this.fallbackCores = {
        global: global.map((spec) => createLimit(spec)),
        key: perKey.map((spec) => createLimit(spec)),
      };
      this.fallback = createGate({
        limits: global,
        perKey,
        maxQueue: o.maxQueue,
        clock: o.clock,
        arrivalMarginMs: o.arrivalMarginMs,
        random: o.random,
        ...(o.adaptInput === undefined ? {} : { adapt: o.adaptInput }),
      });
      // A 429 answered to a call of the fallback pauses this gate (and, once the store answers,
      // every process) as one answered through the store does.
      this.fallback.onPause((event) => {
        if (event.reason === 'shared') return;
        const info = event.key === undefined ? this.defaultInfo : this.infoFor(event.key);
        this.sharedPause(info, event.untilMs - this.clock.now(), event.reason, false);
      });
    }
  }

  /**
   * Run `fn` when every shared limit admits it (same options as the in-memory gate's `schedule`).
   * Rejects with a typed error without calling `fn` when it cannot start in time, is aborted, the
   * gate is closed, or the store is down under `fail-closed` (`StoreUnavailableError`).
   * A gate that has seen a `priority` other than 0 reserves no call ahead: calls wait in this gate
   * in priority order and ask the store when due (other processes' calls are served first come,
   * first served).
   */
  schedule<T>(fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<Awaited<T>> {
    if (this.closed) return Promise.reject(new GateClosedError());
    if (typeof fn !== 'function') return Promise.reject(invalid('fn', 'a function', fn));
    const now = this.clock.now();
    const o: ScheduleOptions = options ?? {};
    try {
      checkOptionNames(o);
      const { cost, key, inspect, signal } = o;
      // The in-memory gate's checks and messages, in this gate's order; null options take defaults.
      checkKey(key);
      // `null` is garbage, not "unset": checked as given, like the in-memory gate does.
      const priority = o.priority === undefined ? 0 : checkPriority(o.priority);
      const maxQueueTimeMs =
        o.maxQueueTimeMs === undefined ? this.o.maxQueueTimeMs : checkMaxQueueTimeMs(o.maxQueueTimeMs);
      checkSignal(signal);
      checkInspect(inspect);
      const priceMicros = o.priceMicros === undefined ? 0 : checkPriceMicros(o.priceMicros);
      const info = key === undefined ? this.defaultInfo : this.infoFor(key);
      const costs = this.costsFor(cost, info.levels);
      const recounts = this.o.arrivalMarginMs > 0 && info.windows.some((i) => costs[i] !== 0);
      if (signal?.aborted) return Promise.reject(new AbortedError(signal.reason));
      if (info.queued >= this.o.maxQueue) throw new QueueFullError(this.o.maxQueue, key);
      if (priority !== 0 && !this.prioritized) this.startPrioritizing();
      let resolve!: (value: unknown) => void;
      let reject!: (error: unknown) => void;
      const promise = new Promise<Awaited<T>>((res, rej) => {
        resolve = res as (value: unknown) => void;
        reject = rej;
      });
      const call: SharedCall = {
        fn,
        cost,
        costs,
        units: cost === undefined ? undefined : typeof cost === 'number' ? { requests: cost } : cost,
        info,
        priority,
        enqueuedAt: now,
        deadline: now + maxQueueTimeMs,
        maxQueueTimeMs,
        signal,
        inspect,
        priceMicros,
        hasUntimed: info.untimed.length > 0 && info.untimed.some((i) => costs[i] !== 0),
        recounts,
        ownWaits: ownWaits(info, costs),
        gateWide: info.ownFrom !== undefined && costs.some((c, i) => i < info.ownFrom! && c !== 0),
        inLine: false,
        released: false,
        reservedAhead: false,
        lateMatters: !recounts || info.buckets.some((i) => costs[i] !== 0),
        turn: false,
        onAbort: undefined,
        onReleased: undefined,
        runningIndex: -1,
        askedAtDeadline: false,
        paceSeq: 0,
        paceAt: undefined,
        resolve,
        reject,
        budget: undefined,
        reservation: undefined,
        state: 'reserving',
        attempt: 0,
        storeStartAt: 0,
        takenSeq: 0,
        startedStoreAt: 0,
        sentAt: 0,
        lateReserves: 0,
        at: 0,
        seq: seq++,
        heapIndex: -1,
      };
      info.queued++;
      this.queuedTotal++;
      if (signal !== undefined) {
        call.onAbort = () => this.abort(call);
        signal.addEventListener('abort', call.onAbort, { once: true });
      }
      if (this.budget !== undefined) this.reserveBudget(call, priceMicros);
      else this.submit(call);
      return promise;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** The gate's clock reading (for `pause` times). */
  now(): number {
    return this.clock.now();
  }

  /**
   * Nothing of `key`'s partition starts before `untilMs` (gate clock), in every process sharing the
   * store. Without a key: the default partition (and, when the gate has gate-wide limits, every key).
   */
  pause(untilMs: number, key?: string, reason = 'manual'): void {
    if (typeof untilMs !== 'number' || Number.isNaN(untilMs)) throw invalid('untilMs', 'a number', untilMs);
    const info = key === undefined ? this.defaultInfo : this.infoFor(key);
    const gateWide = key === undefined && this.o.globalCores.length > 0;
    this.sharedPause(info, untilMs - this.clock.now(), reason, gateWide);
  }

  /** Pause for `durationMs` from now. */
  pauseFor(durationMs: number, key?: string, reason = 'manual'): void {
    if (typeof durationMs !== 'number' || !(durationMs >= 0))
      throw invalid('durationMs', 'a number >= 0', durationMs);
    this.pause(this.clock.now() + durationMs, key, reason);
  }

  stats(): SharedGateStats {
    return {
      queued: this.queuedTotal + this.fallbackQueued,
      inFlight: this.inFlight,
      started: this.started,
      storeUp: this.up,
      failure: this.o.failure,
      fallbackCalls: this.fallbackCalls,
      lateReserves: this.lateReserves,
      fallback: this.fallback?.stats(),
      closed: this.closed,
    };
  }

  /**
   * Refuse new calls and settle waiting ones (`'run'`: they start at their reserved times;
   * `'reject'`: rejected with `GateClosedError` and their reservations given back; a call in flight
   * that the provider throttles is retried after `'run'`, not after `'reject'`). Resolves when
   * nothing waits or runs and no call holds a budget reservation (every settle and release of one
   * answered by its ledger, so the ledger may be closed next); then closes the store if the gate
   * opened it.
   */
  async close(options: { queued?: 'run' | 'reject' } = {}): Promise<void> {
    onlyKnownKeys('options', plainObject('options', options), ['queued']);
    const mode = options.queued ?? 'run';
    if (mode !== 'run' && mode !== 'reject') throw invalid('queued', "'run' or 'reject'", mode);
    this.closed = true;
    let fallbackClosed: Promise<void> | undefined;
    if (mode === 'reject') {
      // Calls whose store answer is still in flight are refused when it lands (decided), and calls
      // that would ask again are refused instead (submit).
      this.rejectQueued = true;
      // Calls waiting their turn first: refusing a turn's holder passes it on (see passTurn).
      for (const info of this.allInfos()) {
        for (const call of info.behind.slice(info.behindHead)) this.refuse(call, new GateClosedError());
      }
      for (const call of this.line.slice(this.lineFirst))
        if (call.inLine) this.refuse(call, new GateClosedError());
      for (const call of this.heap.entries()) this.refuse(call, new GateClosedError());
      // Calls queued in the local fallback are refused there (and settle here as refused).
      fallbackClosed = this.fallback?.close({ queued: 'reject' });
    }
    if (!this.settledForClose()) await new Promise<void>((resolve) => this.closeWaiters.push(resolve));
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    if (this.probeTimer !== undefined) this.clock.clearTimeout(this.probeTimer);
    this.disposePauses();
    await (fallbackClosed ?? this.fallback?.close());
    if (this.o.ownsStore) await this.store.close();
  }

  // --- partitions --------------------------------------------------------------------------------

  private makeInfo(key: string | undefined): KeyInfo {
    const name = key ?? DEFAULT_KEY;
    // With gate-wide limits every call must check them atomically with its key's limits: all keys
    // share one store partition (one Redis hash slot) and keys are scopes inside it. Without them,
    // each key is its own partition, so keys spread over a Redis Cluster.
    const gateWide = this.o.globalCores.length > 0;
    const partition = gateWide ? GATE_PARTITION : name;
    const scope = gateWide ? name : '';
    const keyLevels = this.o.keyCores.map((core, i) => levelOf(gateWide ? `k${i}:${name}` : `k${i}`, core));
    const pauseIds = [this.store.pauseId(partition, '')];
    if (scope !== '') pauseIds.push(this.store.pauseId(partition, scope));
    const levels = [...this.globalLevels, ...keyLevels];
    const aimd = this.adapt === false ? false : this.adapt.aimd;
    const pace = levels.length === 0 && aimd !== false ? new RoundPace(aimd) : undefined;
    return {
      key,
      partition,
      scope,
      levels,
      untimed: levels.flatMap((level, i) => (level.spec.algorithm === 'concurrency' ? [i] : [])),
      windows: levels.flatMap((level, i) => (countsWindow(level.spec.algorithm) ? [i] : [])),
      buckets: levels.flatMap((level, i) => {
        const a = level.spec.algorithm;
        return a === 'token-bucket' || a === 'leaky-bucket' ? [i] : [];
      }),
      ownFrom: gateWide ? this.globalLevels.length : undefined,
      pauseIds,
      ownPauseId: this.store.pauseId(partition, scope),
      queued: 0,
      learned: undefined,
      learnedWindows: false,
      probe: 0,
      prober: undefined,
      probeUntil: 0,
      probeWaiters: undefined,
      probeClaimed: false,
      claiming: false,
      reprobeAt: undefined,
      reprobing: false,
      markId: this.store.pauseId(partition, scope + REPROBE_SCOPE),
      reprobeMarkUntil: 0,
      paceMarkUntil: 0,
      pace,
      paceId: pace === undefined ? undefined : this.store.pauseId(partition, scope + PACE_SCOPE),
      paced: [],
      asking: 0,
      width: 1,
      head: undefined,
      behind: [],
      behindHead: 0,
      pumping: false,
    };
  }

  /** Every key's info, the default one first. */
  private allInfos(): KeyInfo[] {
    return [this.defaultInfo, ...this.keyInfos.values()];
  }

  private infoFor(key: string): KeyInfo {
    let info = this.keyInfos.get(key);
    if (info === undefined) {
      if (this.keyInfos.size >= MAX_KEYS) this.sweepInfos();
      info = this.makeInfo(key);
      this.keyInfos.set(key, info);
      this.know(info);
      if (this.unknownPauses.size > 0) this.heardBefore(info);
    }
    return info;
  }

  /** `info`'s pauses and marks, heard from now on, are its own (see `heardPause`). */
  private know(info: KeyInfo): void {
    this.marks.set(info.markId, info);
    if (info.paceId !== undefined) this.paceMarks.set(info.paceId, info);
    this.pauseOwners.set(info.ownPauseId, info);
  }

  /**
   * A key comes (again): what was heard of it before (see `unknownPauses`) applies now. Its reprobe
   * mark, however old (the capped wait is over: its first inspected call probes); its pace mark and
   * its pause while in force (a round another process ended, as `RoundPace.heard`; the pause holds
   * its calls, in the fallback too).
   */
  private heardBefore(info: KeyInfo): void {
    const now = this.clock.now();
    const take = (id: string | undefined) => {
      const until = id === undefined ? undefined : this.unknownPauses.get(id);
      if (until !== undefined) this.unknownPauses.delete(id!);
      return until;
    };
    const mark = take(info.markId);
    if (mark !== undefined) this.reprobeAfter(info, mark);
    const paceUntil = take(info.paceId);
    if (paceUntil !== undefined && paceUntil > now) info.pace!.heard(paceUntil, now);
    const until = take(info.ownPauseId);
    if (until !== undefined && until > now) this.applyPause(info.ownPauseId, until, 'shared', info.key);
  }

  /** Keep a pause heard of a key not known here (see `unknownPauses`): the latest end wins. */
  private keepUnknown(pauseId: string, until: number): void {
    const before = this.unknownPauses.get(pauseId);
    if (before !== undefined) {
      if (before >= until) return;
      // Heard again: the newest now.
      this.unknownPauses.delete(pauseId);
    } else if (this.unknownPauses.size >= MAX_KEYS) {
      // A Map iterates in insertion order: the first is the oldest heard.
      const oldest = this.unknownPauses.keys().next().value;
      if (oldest !== undefined) this.unknownPauses.delete(oldest);
    }
    this.unknownPauses.set(pauseId, until);
  }

  /**
   * Drop keys with nothing waiting (their state lives in the store), but not one whose probe is out
   * (its next call would probe a second time, before the first one's answer) or whose pace changed
   * lately (the next burst would pay for it again). A key due to probe again after a capped wait
   * leaves its mark, and its own pause in force, with those heard of unknown keys (see
   * `heardBefore`): kept whole, such keys were never dropped (a key whose reprobe no call came for
   * stayed for good, and every new key past MAX_KEYS swept them all again).
   */
  private sweepInfos(): void {
    const now = this.clock.now();
    for (const [key, info] of this.keyInfos) {
      const aimd = info.pace?.aimd;
      if (
        info.queued === 0 &&
        info.probe !== 1 &&
        (aimd === undefined || now - aimd.changedAt >= PACE_KEEP_MS)
      ) {
        this.keyInfos.delete(key);
        this.marks.delete(info.markId);
        if (info.paceId !== undefined) this.paceMarks.delete(info.paceId);
        this.pauseOwners.delete(info.ownPauseId);
        if (info.reprobeAt !== undefined) this.keepUnknown(info.markId, info.reprobeAt);
        const until = this.localPauses.get(info.ownPauseId);
        if (until !== undefined) {
          this.localPauses.delete(info.ownPauseId);
          if (until > now) this.keepUnknown(info.ownPauseId, until);
        }
      }
    }
  }

  private costsFor(cost: ScheduleOptions['cost'], levels: readonly StoreLevel[]): number[] {
    if (cost !== undefined) checkCost(cost);
    return levels.map((level) => {
      const spec = level.spec;
      return checkCapacity(unitCost(cost, spec.unit), spec.unit, spec.algorithm, levelCapacity(level));
    });
  }

  // --- the way of one call -------------------------------------------------------------------------

  private reserveBudget(call: SharedCall, priceMicros: number): void {
    // Held from the request on (see budgetHeld): a reservation on its way may land after its call
    // was refused (aborted), and is then given back; close waits for that too.
    this.budgetHeld++;
    let decision: ReturnType<SharedBudget['tryReserve']>;
    try {
      decision = this.budget!.tryReserve(priceMicros, call.info.key);
    } catch (error) {
      this.budgetLetGo();
      this.refuse(call, error as Error & { code: string });
      return;
    }
    settleValue(
      decision,
      (d) => {
        if (!d.ok) {
          this.budgetLetGo();
          this.refuse(call, new BudgetExceededError(d));
          return;
        }
        call.budget = d.reservation;
        if (call.state === 'done') {
          this.releaseBudget(call);
          return;
        }
        this.submit(call);
      },
      (error) => {
        this.budgetLetGo();
        this.refuse(call, toTollgate(error));
      },
    );
  }

  /** Reserve in the store, or apply the failure policy when it is down. */
  private submit(call: SharedCall): void {
    if (call.state === 'done') return;
    if (this.rejectQueued) {
      this.refuse(call, new GateClosedError());
      return;
    }
    if (!this.up) {
      this.failover(call, undefined);
      return;
    }
    if (
      call.inspect !== undefined &&
      (call.info.probe !== 2 || call.info.reprobeAt !== undefined) &&
      this.heldForProbe(call)
    )
      return;
    if (!call.recounts && call.info.learnedWindows && this.o.arrivalMarginMs > 0) {
      // Learned limits are sliding logs: counted from the response, like a configured window.
      call.recounts = true;
      call.lateMatters = call.info.buckets.some((i) => call.costs[i] !== 0);
    }
    // A call its key's own limit may hold asks at once, as any bucket call, unless another call of
    // its key waits for its key's slot (then it waits for a turn behind it).
    const whenDue = this.asksWhenDue(call);
    if ((whenDue || (call.ownWaits && keyHeld(call.info))) && !this.mayAsk(call)) return;
    if (whenDue && call.gateWide && this.lineHolds(call)) return;
    const now = this.clock.now();
    // A paused call asks the store when the pause ends: reserved now, it would take its slot of the
    // gate-wide limits at the pause's end, and every other key's calls would queue behind it. A
    // pause about to end is not waited for, except in a prioritized gate: there a call asking now
    // would take the pause end's slot from the calls of a higher priority waiting for it.
    const pausedUntil = this.localPauses.size === 0 ? 0 : this.pausedUntil(call.info, now);
    if (pausedUntil > now + (this.prioritized ? 0 : PAUSE_SLACK_MS)) {
      this.waitForPause(call, pausedUntil);
      return;
    }
    const pace = call.info.pace;
    if (pace !== undefined && this.heldForPace(call, pace, now)) return;
    call.state = 'reserving';
    call.sentAt = now;
    call.reservedAhead = !whenDue;
    // A call on a window limit reserves only a start that has come (within lateToleranceMs), and
    // otherwise asks again when the store says a slot frees: by then the calls before it are
    // recounted from their responses, which a reservation made ahead of them could not see. (The
    // calls of one key ask in turns, see mayAsk.) So does every call of a gate that has seen
    // priorities (see asksWhenDue).
    const maxWaitMs = Math.max(0, call.deadline - now);
    this.ask(
      () =>
        this.store.reserve(
          call.info.partition,
          call.info.levels,
          call.costs,
          whenDue ? Math.min(maxWaitMs, this.o.lateToleranceMs) : maxWaitMs,
          {
            scope: call.info.scope,
            ...(call.units === undefined ? {} : { units: call.units }),
            ...(call.ownWaits || (whenDue && call.gateWide)
              ? { ownFrom: call.info.ownFrom!, ownWaitMs: this.o.lateToleranceMs }
              : {}),
          },
        ),
      (d) => this.decided(call, d),
      (error) => {
        if (call.state === 'reserving') this.failover(call, error);
      },
    );
  }

  /**
   * Run a store command: its answer goes to `onValue`; a failure, thrown or rejected, marks the
   * store failed and goes to `onFailed`.
   */
  private ask<T>(
    command: () => MaybePromise<T>,
    onValue: (value: T) => void,
    onFailed: (error: unknown) => void,
  ): void {
    let answer: MaybePromise<T>;
    try {
      answer = command();
    } catch (error) {
      this.storeFailed(error);
      onFailed(error);
      return;
    }
    settleValue(answer, onValue, (error) => {
      this.storeFailed(error);
      onFailed(error);
    });
  }

  private decided(call: SharedCall, d: StoreDecision): void {
    // A call asking for the gate-wide line answered: it speaks for the line again only if the
    // gate-wide levels hold it again (waitInLine). A call let out and granted at once shows room
    // beyond one slot (a window that freed several): twice as many ask next time.
    const released = call.released;
    const fromLine = this.stopAsking(call);
    // At full width and still granted, the gate-wide levels no longer bind: the line clears
    // (waitInLine brings it back to one when they hold a call again).
    if (released && d.ok)
      this.lineWidth = this.lineWidth >= MAX_TURNS ? Infinity : Math.min(this.lineWidth * 2, MAX_TURNS);
    this.decide(call, d);
    if (fromLine) this.releaseLine();
  }

  private decide(call: SharedCall, d: StoreDecision): void {
    if (call.state !== 'reserving') {
      // Aborted or closed while the store decided: give the reservation back.
      if (d.ok) this.giveBack(d);
      return;
    }
    if (this.rejectQueued) {
      // Closed with queued: 'reject' while the store decided.
      if (d.ok) this.giveBack(d);
      this.refuse(call, new GateClosedError());
      return;
    }
    const now = this.clock.now();
    if (!d.ok) {
      if (d.reason === 'concurrency') {
        if (call.turn && now < call.deadline) {
          this.waitForSlot(call, Math.min(now + this.o.concurrencyRetryMs, call.deadline));
          return;
        }
        if (now >= call.deadline) {
          this.refuse(call, deadlineError(call, Infinity, false));
          return;
        }
        // Permits are held by calls in other processes: ask again shortly (or at the deadline).
        call.state = 'retrying';
        this.enqueueAt(call, Math.min(now + this.o.concurrencyRetryMs, call.deadline));
        return;
      }
      if (d.reason === 'capacity') {
        this.refuse(call, new InvalidCostError('Cost exceeds what a shared limit can ever admit'));
        return;
      }
      // The store's wait is from its now; the deadline counts from enqueueing.
      const startsAt = now + d.retryAfterMs;
      if (call.turn && startsAt <= call.deadline && d.shared === true && this.asksWhenDue(call)) {
        // Held by the gate-wide levels: wait in the gate-wide line, not at every slot.
        this.waitInLine(call, this.wakeFor(d, now));
        return;
      }
      if (call.ownWaits && d.shared === false && startsAt <= call.deadline) {
        // Its key's own limit holds it: it waits for its key's slot, at the head of its key's
        // calls, or behind the one that does (see waitForSlot).
        if (!call.turn) {
          call.turn = true;
          call.info.asking++;
        }
        this.waitForSlot(call, this.wakeFor(d, now));
        return;
      }
      if (call.turn && startsAt <= call.deadline) {
        // A window call whose slot is ahead, or a call its key's own limit holds (ownWaits): wait
        // for the slot, then ask again (see submit).
        this.waitForSlot(call, Number.isFinite(startsAt) ? startsAt : now + this.o.concurrencyRetryMs);
        return;
      }
      this.refuse(call, deadlineError(call, startsAt, call.attempt === 0));
      return;
    }
    call.reservation = d;
    call.storeStartAt = d.startAt;
    call.takenSeq = ++this.takes;
    if (d.learned.length > 0) {
      call.info.learnedWindows = true;
      // Another gate's probe taught the limits this reservation is counted in: no need to wait for
      // this one's answer (unless it asks whether a capped wait's limit is over: no limit says).
      if (call.info.prober === call && !call.info.reprobing) this.endProbe(call.info, true);
    }
    this.sampleOffset(call.sentAt, now, d.serverNow);
    const localStart = this.toLocal(d.startAt, now, d.serverNow);
    const pausedUntil = this.pausedUntil(call.info, now);
    if (localStart < pausedUntil - PAUSE_SLACK_MS) {
      // A pause this reservation did not see (heard while it was in flight, or set here while the
      // store was down): give the slot back and ask again when the pause ends, not at once (the
      // store would answer the same slot again and again).
      this.giveBack(d);
      call.reservation = undefined;
      this.waitForPause(call, pausedUntil);
      return;
    }
    if (call.reservedAhead && this.prioritized && localStart > now + this.o.lateToleranceMs) {
      // Reserved ahead before the gate saw priorities (its answer was on its way then): it gives
      // its slot back and asks again when due, as the calls reserved by then did.
      this.passTurn(call, false);
      call.state = 'retrying';
      this.returnAhead(call);
      return;
    }
    if (localStart <= now) this.startOrReserveAgain(call, localStart, now, this.answersCameAt(now));
    else {
      call.state = 'waiting';
      this.enqueueAt(call, localStart);
    }
    // The turn passes once the call started or holds its start (not before: with a synchronous
    // store the calls behind would be decided, and could start, ahead of it). A call that reserves
    // again keeps its turn until that answer, and so does one that went to wait in the gate-wide
    // line to reserve again (its turn is its place there).
    if (call.state !== 'reserving' && !call.inLine) this.passTurn(call, true);
  }

  /**
   * When to ask again after `d`, on this gate's clock: its slot on the store's clock, less half the
   * shortest recent round trip, so the request reaches the store at the slot (asked when the
   * refusal's wait has passed here, it would arrive a round trip late, and every slot would slip).
   */
  private wakeFor(d: StoreRefusal, now: number): number {
    if (Number.isNaN(this.offsetMs) || !Number.isFinite(d.retryAfterMs)) return now + d.retryAfterMs;
    const slot = this.toLocal(d.serverNow + d.retryAfterMs, now, d.serverNow);
    return Math.max(now, slot - this.offsetRttMs / 2);
  }

  /**
   * Learn the store's clock from an answer: the store read its clock between `sentAt` and
   * `receivedAt` (gate clock), so `serverNow - midpoint` is the offset within half the round trip.
   * The shortest round trip of the last few seconds wins.
   */
  private sampleOffset(sentAt: number, receivedAt: number, serverNow: number): void {
    const rttMs = receivedAt - sentAt;
    if (rttMs <= this.offsetRttMs || receivedAt - this.offsetAt > OFFSET_SAMPLE_MS) {
      // midpoint (gate ms) = sentAt + rtt / 2
      this.offsetMs = serverNow - (sentAt + rttMs / 2);
      this.offsetRttMs = rttMs;
      this.offsetAt = receivedAt;
    }
  }

  /** A store time on the gate's clock (with the answer's own reading before any estimate exists). */
  private toLocal(storeMs: number, now: number, serverNow: number): number {
    return Number.isNaN(this.offsetMs) ? now + (storeMs - serverNow) : storeMs - this.offsetMs;
  }

  /**
   * When the answers being handled now came in: the clock at the first of them, until the
   * microtasks queued with them have run, for at most ANSWERS_SPAN_MS (then the clock read now
   * starts a new span). The answers of one reply (a batch) are handled one after another, each
   * starting its call, whose function runs at once (fetch: 0.3-0.5 ms); read after them, the clock
   * put a burst's later calls past lateToleranceMs, and from about the 20th each was given back and
   * booked again behind the calls reserved ahead: a shared gate used no burst after a pause (a
   * helper's diagnosis, session 17). Bounded: functions that take long (500 ms each, a review's
   * case) still make the calls after them late. A timer's due calls are judged the same way.
   */
  private answersCameAt(now: number): number {
    if (this.answersAt === undefined) {
      queueMicrotask(() => {
        this.answersAt = undefined;
      });
    } else if (now - this.answersAt <= ANSWERS_SPAN_MS) return this.answersAt;
    this.answersAt = now;
    return now;
  }

  private answersAt: number | undefined = undefined;

  /**
   * Start a call whose slot has come, unless it comes too late: a start later than its slot by more
   * than `lateToleranceMs` (an answer or a timer delayed by a busy event loop) would reach the
   * provider closer to the next process's calls than the limit allows. Such a call gives its slot
   * back and reserves again (a few times at most). Late is measured when its answer came in
   * (`cameAt`, see `answersCameAt`), not after the calls of the same answer started before it.
   */
  private startOrReserveAgain(call: SharedCall, localStart: number, now: number, cameAt = now): void {
    const info = call.info;
    if (
      call.inspect !== undefined &&
      (info.reprobeAt !== undefined || info.reprobing) &&
      this.heldForReprobe(call, now)
    )
      return;
    if (
      call.lateMatters &&
      cameAt - localStart > this.o.lateToleranceMs &&
      call.lateReserves < MAX_LATE_RESERVES
    ) {
      call.lateReserves++;
      this.lateReserves++;
      // Reserving again: it keeps its turn until that answer, as before. The late calls of one tick
      // (a batch's answers, a slow first answer) give their slots back together, latest first: a
      // bucket gives back only its latest take, so in answer order all but the last refund would
      // find a later take and give nothing (1 of 10 cold calls started).
      call.state = 'reserving';
      this.returnAhead(call);
      return;
    }
    this.start(call, now);
  }

  /**
   * A call whose slot has come, of a key whose capped wait is over (its reprobe due, or out), is
   * not its probe: it gives its slot back and asks again, as the probe (see `heldForProbe`) or
   * after the probe's answer. True if so.
   */
  private heldForReprobe(call: SharedCall, now: number): boolean {
    const info = call.info;
    if (info.probe === 1 ? !info.reprobing || call === info.prober : !this.reprobeDue(info, now))
      return false;
    this.passTurn(call, false);
    call.state = 'retrying';
    this.returnAhead(call);
    return true;
  }

  /**
   * `call` reserves only a start that has come and waits here for its turn otherwise, in priority
   * and then schedule order (key turns, the gate-wide line): a window call (see `submit`), and every
   * call once the gate has seen priorities, so that a higher priority can go before calls that came
   * earlier (reserved ahead, they would hold their slots in arrival order).
   */
  private asksWhenDue(call: SharedCall): boolean {
    return call.recounts || this.prioritized;
  }

  /**
   * The gate sees its first priority other than 0: the calls reserved ahead so far give their slots
   * back (latest first: each refund is then of its level's latest take) and ask again in priority
   * and then schedule order, when due (see `asksWhenDue`), with the calls that come from now on.
   */
  private startPrioritizing(): void {
    this.prioritized = true;
    const reserved = this.heap.entries().filter((c) => c.state === 'waiting' && c.reservation !== undefined);
    for (const call of reserved) {
      this.heap.remove(call);
      call.state = 'retrying';
    }
    this.arm();
    this.returnSlots(reserved);
  }

  /**
   * `call` gives back the slot it holds (reserved ahead before the gate saw priorities, or reached
   * too late) and asks again: the slots that land in one tick (a batch's answers) are given back
   * together (see `returnSlots`).
   */
  private returnAhead(call: SharedCall): void {
    if (this.returning === undefined) {
      this.returning = [];
      queueMicrotask(() => {
        const calls = this.returning ?? [];
        this.returning = undefined;
        this.returnSlots(calls);
      });
    }
    this.returning.push(call);
  }

  /**
   * Give the slots of `calls` back, latest first (each refund is then of its level's latest take),
   * and let them ask again, when due, in priority and then schedule order.
   */
  private returnSlots(calls: SharedCall[]): void {
    this.giveBackLatestFirst(calls);
    calls.sort((a, b) => (goesBefore(a, b) ? -1 : 1));
    // 'reserving': a late call, which keeps its turn (refused or aborted meanwhile: 'done').
    for (const call of calls) if (call.state === 'retrying' || call.state === 'reserving') this.submit(call);
  }

  /**
   * Give back the reservations of `calls` (sorted in place), latest first: each refund is then of
   * its level's latest take (exact for buckets).
   */
  private giveBackLatestFirst(calls: SharedCall[]): void {
    // Takes at the same start (a full bucket's burst) in reverse of the order they were granted.
    calls.sort((a, b) => b.storeStartAt - a.storeStartAt || b.takenSeq - a.takenSeq);
    for (const call of calls) {
      if (call.reservation !== undefined) this.giveBack(call.reservation);
      call.reservation = undefined;
    }
  }

  /**
   * Window calls of one key (and calls that wait for their key's own limit, `ownWaits`) ask the
   * store in turns, in priority and then schedule order: `width` of them at a time, doubling (up to
   * `MAX_TURNS`) while the store admits them and back to 1 when it names a later slot. Then one
   * call keeps its turn and waits for that slot; the others wait here without asking
   * (were they all to ask whenever a slot frees, all but one would be refused, at every slot).
   * True: `call` holds a turn; false: it was queued (and asks from `pump` when its turn comes).
   */
  private mayAsk(call: SharedCall): boolean {
    if (call.turn) return true;
    const info = call.info;
    call.state = 'reserving';
    const head = info.head;
    if (head !== undefined && call.deadline < head.at) {
      // The call ahead starts no earlier than its slot, and this one no earlier than that.
      this.refuse(call, deadlineError(call, head.at, call.attempt === 0));
      return false;
    }
    if (info.asking < info.width && info.behindHead === info.behind.length) {
      // Nobody waits for a turn: this one asks at once, as a call that needs no turn does (its
      // deadline is the store's bound: a maxQueueTimeMs of 0 asks for a start now).
      call.turn = true;
      info.asking++;
      return true;
    }
    if (this.prioritized && this.takeTurnInLine(call)) return true;
    this.putBack(call);
    this.pump(info);
    return false;
  }

  /**
   * A call of `call`'s key that `call` goes before holds a turn and waits in the gate-wide line:
   * `call` takes its turn (and asks, joining the line at its own place), and it queues for a turn
   * again. (Otherwise the line, ordered by the calls in it, would let a key's low-priority turn
   * holder out before the higher-priority calls of other keys queued behind theirs.) True if so.
   */
  private takeTurnInLine(call: SharedCall): boolean {
    // A call the line cannot start before its deadline would be refused on joining: it takes nothing.
    const asker = this.lineAsker;
    if (asker !== undefined && call.deadline < asker.at) return false;
    const line = this.line;
    for (let i = line.length - 1; i >= this.lineFirst; i--) {
      const waiting = line[i]!;
      if (!waiting.inLine || waiting.info !== call.info || !goesBefore(call, waiting)) continue;
      // Out of the line for good (it joins again at its place when it has a turn again).
      line.splice(i, 1);
      waiting.inLine = false;
      this.handTurn(waiting, call);
      return true;
    }
    return false;
  }

  /**
   * `from` gives its key's turn to `to` (`info.asking` unchanged) and queues for a turn again; it
   * no longer waits for its key's slot either (the key's head).
   */
  private handTurn(from: SharedCall, to: SharedCall): void {
    const info = from.info;
    if (info.head === from) info.head = undefined;
    from.turn = false;
    to.turn = true;
    from.state = 'reserving';
    this.putBack(from);
  }

  /**
   * Queue `call` for a turn at its place (`goesBefore`: priority, then schedule order; a call put
   * back keeps the place it had).
   */
  private putBack(call: SharedCall): void {
    const info = call.info;
    const behind = info.behind;
    let i = behind.length;
    while (i > info.behindHead && goesBefore(call, behind[i - 1]!)) i--;
    if (i === info.behindHead && i > 0) behind[--info.behindHead] = call;
    else behind.splice(i, 0, call);
  }

  /** Give turns to queued calls while fewer than `width` hold one. */
  private pump(info: KeyInfo): void {
    if (info.pumping) return;
    info.pumping = true;
    while (info.asking < info.width && info.behindHead < info.behind.length) {
      const next = info.behind[info.behindHead++]!;
      if (next.state === 'done') continue;
      if (this.clock.now() > next.deadline) {
        // Its turn came after its deadline (the calls ahead were answered late): too late to ask.
        this.refuse(next, deadlineError(next, Infinity, false));
        continue;
      }
      next.turn = true;
      info.asking++;
      this.submit(next);
    }
    if (info.behindHead === info.behind.length) {
      info.behind = [];
      info.behindHead = 0;
    }
    info.pumping = false;
  }

  /**
   * A call holding a turn was told its slot is later (`at`): it waits for it, keeping its turn,
   * unless another call of its key already does, and then it waits for a turn again. The calls
   * queued behind start no earlier: those whose deadline comes first are refused now.
   */
  private waitForSlot(call: SharedCall, at: number): void {
    const info = call.info;
    info.width = 1;
    if (info.head !== undefined && info.head !== call) {
      call.turn = false;
      info.asking--;
      // It asks again only after the head's turn, so it starts no earlier than the head's slot.
      const startsAt = Math.max(at, info.head.at);
      if (call.deadline < startsAt) {
        this.refuse(call, deadlineError(call, startsAt, call.attempt === 0));
        return;
      }
      this.putBack(call);
      return;
    }
    info.head = call;
    call.state = 'retrying';
    this.enqueueAt(call, at);
    for (let i = info.behindHead; i < info.behind.length; i++) {
      const waiting = info.behind[i]!;
      if (waiting.state !== 'done' && waiting.deadline < at)
        this.refuse(waiting, deadlineError(waiting, at, waiting.attempt === 0));
    }
  }

  /**
   * True when `call` waits for its key's pace (see `RoundPace`), before it asks the store: its slot,
   * booked when it first asks, has not come. Each process paces its own calls at its share.
   */
  private heldForPace(call: SharedCall, pace: RoundPace, now: number): boolean {
    const info = call.info;
    if (info.learnedWindows) {
      // Learned limits govern.
      if (pace.aimd !== undefined) this.dropPace(info, pace, now);
      return false;
    }
    if (pace.update(now)) {
      // A round's rate in force: the calls booked, and this one at its place, are booked again.
      if (call.paceAt === undefined) this.joinPace(call);
      this.rebook(info, pace, now, 0);
    }
    if (pace.aimd === undefined) return false;
    if (call.paceAt === undefined && call.state !== 'done') this.bookPace(call, pace, now);
    // Refused: its slot came after its deadline.
    if (call.state === 'done') return true;
    const at = call.paceAt!;
    if (at > now) {
      this.passTurn(call, false);
      // Passing the turn runs the next call of the key at once: one that goes before this one books
      // its slot ahead (this one's moves later), and its deadline may refuse this one.
      if ((call.state as SharedCall['state']) === 'done') return true;
      call.state = 'retrying';
      this.enqueueAt(call, call.paceAt ?? at);
      return true;
    }
    this.leavePace(call, false);
    // Added to after a quiet second: the calls booked go sooner.
    if (pace.went(now)) this.rebook(info, pace, now, 0);
    return false;
  }

  /** `call` takes its place among the calls of its key holding a slot of its pace: its index. */
  private joinPace(call: SharedCall): number {
    const paced = call.info.paced;
    let i = paced.length;
    while (i > 0 && goesBefore(call, paced[i - 1]!)) i--;
    paced.splice(i, 0, call);
    return i;
  }

  /**
   * `call` books a slot of its key's pace at its place (priority, then schedule order): the next
   * slot when it goes after every call holding one; otherwise the slots from its place on are
   * booked again (the calls after it each go one slot later). So a call held by a pause or a probe
   * (its slot given up) gets back its place before the calls that came after it, and a higher
   * priority goes first.
   */
  private bookPace(call: SharedCall, pace: RoundPace, now: number): void {
    const i = this.joinPace(call);
    if (i < call.info.paced.length - 1) {
      this.rebook(call.info, pace, now, i);
      return;
    }
    const at = pace.book(now);
    call.paceAt = at;
    if (at > call.deadline) this.refusePaced(call, at);
  }

  /**
   * Book again, in their order, the calls of `info` holding a slot of its pace (see `paced`), from
   * the `from`th on: after the slot of the one before it, or from the first slot the pace allows
   * (its rate changed, a pause was heard: not inside the pause). One the new slot puts past its
   * deadline is refused. O(calls of the key).
   */
  private rebook(info: KeyInfo, pace: RoundPace, now: number, from: number): void {
    const paced = info.paced;
    if (from > 0) pace.restartAfter(paced[from - 1]!.paceAt!);
    else pace.restart(this.localPauses.size === 0 ? now : Math.max(now, this.pausedUntil(info, now)));
    const late: { call: SharedCall; at: number }[] = [];
    let kept = from;
    for (let i = from; i < paced.length; i++) {
      const call = paced[i]!;
      const at = pace.book(now);
      if (at > call.deadline) {
        pace.unbook(at);
        call.paceAt = undefined;
        late.push({ call, at });
        continue;
      }
      call.paceAt = at;
      paced[kept++] = call;
      // Waiting for its slot (others hold it while they wait for a turn, or ask now).
      if (call.heapIndex >= 0) {
        this.heap.remove(call);
        call.at = at;
        this.heap.push(call);
      }
    }
    paced.length = kept;
    this.arm();
    for (const { call, at } of late) this.refuse(call, deadlineError(call, at, call.attempt === 0));
  }

  /** `call`'s slot of its key's pace comes after its deadline: refused now. */
  private refusePaced(call: SharedCall, at: number): void {
    this.leavePace(call, true);
    this.refuse(call, deadlineError(call, at, call.attempt === 0));
  }

  /**
   * `call` no longer holds a slot of its key's pace: its slot came (`unbook` false), or it will not
   * go at it (a pause, a probe, refused, the store down): then the slot is free again if it was the
   * last booked.
   */
  private leavePace(call: SharedCall, unbook: boolean): void {
    const at = call.paceAt;
    if (at === undefined) return;
    call.paceAt = undefined;
    const paced = call.info.paced;
    // Usually the first: the call whose slot came.
    if (paced[0] === call) paced.shift();
    else {
      const i = paced.indexOf(call);
      if (i >= 0) paced.splice(i, 1);
    }
    if (unbook) call.info.pace?.unbook(at);
  }

  /** The provider states a quota, or limits were learned: the pace is dropped, and its calls go. */
  private dropPace(info: KeyInfo, pace: RoundPace, now: number): void {
    pace.reset();
    const paced = info.paced;
    info.paced = [];
    for (const call of paced) {
      call.paceAt = undefined;
      if (call.heapIndex >= 0) {
        this.heap.remove(call);
        call.at = now;
        this.heap.push(call);
      }
    }
    this.arm();
  }

  /** A call inside a pause asks the store again when it ends (or is refused if that is too late). */
  private waitForPause(call: SharedCall, until: number): void {
    // A slot of its key's pace inside the pause is given up: it books one after, at its place.
    this.leavePace(call, true);
    this.passTurn(call, false);
    if (until > call.deadline) {
      this.refuse(call, deadlineError(call, until, call.attempt === 0));
      return;
    }
    call.state = 'retrying';
    this.enqueueAt(call, until);
  }

  /**
   * True when `call` waits for its key's probe, as in the in-memory gate: the key knows nothing of
   * its provider (no configured limit, nothing learned here) and its first inspected call is out. A
   * blind burst would draw one 429 per call beyond the provider's unknown limit; the probe's response
   * tells the limits (shared through the store before the others reserve). The others wait at most
   * PROBE_TIMEOUT_MS (as long as the in-memory gate), or until their deadline.
   *
   * One probe among all gates on the store: the first inspected call claims it first, and while
   * another gate holds it, asks again every PROBE_RETRY_MS (by then that probe's answer is learned,
   * and this one's reservation is counted in what it taught). Two probes sent together would each
   * be unseen by the other gate, which would let the provider's first window take one more.
   */
  private heldForProbe(call: SharedCall): boolean {
    const info = call.info;
    const now = this.clock.now();
    if (this.reprobeDue(info, now)) {
      // The first call after a capped wait asks again (configured or learned limits or not).
      info.reprobeAt = undefined;
      info.reprobing = true;
      info.probe = 1;
      info.prober = call;
      info.probeUntil = now + PROBE_TIMEOUT_MS;
      this.holdReserved(info, call);
    } else if (info.probe === 0) {
      if (this.adapt === false || info.levels.length > 0 || info.learned !== undefined) {
        info.probe = 2;
        return false;
      }
      info.probe = 1;
      info.prober = call;
      info.probeUntil = now + PROBE_TIMEOUT_MS;
    }
    // Done, with a reprobe due later (after its capped wait).
    if (info.probe === 2) return false;
    if (now >= info.probeUntil) {
      this.endProbe(info, true);
      return false;
    }
    if (call === info.prober && info.probeClaimed) return false;
    if (call === info.prober && call.askedAtDeadline) {
      // Its one ask at its deadline (see `fire`) cannot take two round trips more (a claim, then
      // a reservation): it is refused, as it would have been without that ask.
      this.refuse(call, deadlineError(call, Infinity, false));
      return true;
    }
    call.state = 'retrying';
    if (call === info.prober) {
      // Waits for the store's probe, at most until the probe's end: the claim's round trip is no
      // more a wait than the reservation's (a maxQueueTimeMs of 0 still probes at once).
      this.enqueueAt(call, info.probeUntil);
      this.claimProbe(info);
      return true;
    }
    this.waitForProbe(call);
    return true;
  }

  /**
   * A wait capped at `maxRetryAfterMs` is over for `info` (see `KeyInfo.reprobeAt`) and no probe is
   * out: the next inspected call probes. Not inside a pause that outlasts it: at that pause's end.
   */
  private reprobeDue(info: KeyInfo, now: number): boolean {
    const at = info.reprobeAt;
    if (at === undefined || now < at || info.probe === 1) return false;
    return this.localPauses.size === 0 || this.pausedUntil(info, now) <= now + PAUSE_SLACK_MS;
  }

  /**
   * A reprobe starts: the key's inspected calls that hold a slot (reserved before it was due, for
   * the capped wait's end or later) give it back, latest first (each refund is then of its level's
   * latest take), and wait for the probe's answer with the others; `prober` goes alone.
   */
  private holdReserved(info: KeyInfo, prober: SharedCall): void {
    const held = this.heap
      .entries()
      .filter((c) => c !== prober && c.info === info && c.state === 'waiting' && c.inspect !== undefined);
    if (held.length === 0) return;
    for (const call of held) this.heap.remove(call);
    this.giveBackLatestFirst(held);
    for (const call of held) this.waitForProbe(call);
  }

  /** `call` waits for its key's probe's answer, at most until the probe's end or its deadline. */
  private waitForProbe(call: SharedCall): void {
    const info = call.info;
    // A slot of its key's pace is given up: it books one after the answer, at its place.
    this.leavePace(call, true);
    call.state = 'retrying';
    this.enqueueAt(call, Math.min(info.probeUntil, call.deadline));
    info.probeWaiters ??= [];
    info.probeWaiters.push(call);
  }

  /**
   * Claim the store's probe for the key's prober, which waits (see `heldForProbe`). One claim at a
   * time per key: its answer serves whichever call is the prober then (a prober that left while it
   * was on its way hands the probe to the next one, or gives a claim won back).
   */
  private claimProbe(info: KeyInfo): void {
    if (info.claiming) return;
    const store = this.store;
    // A store without probe claims (one written before them): each gate probes for itself.
    if (typeof store.claimProbe !== 'function') {
      this.claimed(info, true);
      return;
    }
    info.claiming = true;
    this.ask(
      () => store.claimProbe!(info.partition, this.probeHolder, PROBE_TIMEOUT_MS, info.scope),
      (won) => this.claimed(info, won),
      () => this.claimed(info, undefined),
    );
  }

  /** A probe claim's answer (`undefined`: the store failed, and the prober goes the way of every call). */
  private claimed(info: KeyInfo, won: boolean | undefined): void {
    info.claiming = false;
    const prober = info.prober;
    const waiting =
      info.probe === 1 && prober !== undefined && prober.state === 'retrying' && this.heap.remove(prober);
    if (!waiting) {
      // Nobody waits to probe (the probe ended, or its call left and none took over): give it back.
      if (won === true && !info.probeClaimed) this.releaseProbe(info);
      return;
    }
    if (won === false) {
      // Another gate probes: ask again shortly (its answer is learned by then, or soon).
      const now = this.clock.now();
      this.enqueueAt(prober, Math.min(now + PROBE_RETRY_MS, info.probeUntil, prober.deadline));
      return;
    }
    info.probeClaimed = true;
    this.arm();
    this.submit(prober);
  }

  private releaseProbe(info: KeyInfo): void {
    const store = this.store;
    if (typeof store.releaseProbe !== 'function') return;
    quietly(
      () => store.releaseProbe!(info.partition, this.probeHolder, info.scope),
      (error) => this.storeFailed(error),
    );
  }

  /**
   * The probe of `info` is over: its response came (`answered`), or its call left without being sent
   * (the next call to come probes instead). The store's probe is given back, and the calls that
   * waited for it ask the store, in order.
   */
  private endProbe(info: KeyInfo, answered: boolean): void {
    if (info.probe !== 1) return;
    if (info.reprobing) {
      info.reprobing = false;
      info.probe = 2;
      // Its call left unsent: the next one asks again.
      if (!answered) this.reprobeAfter(info, this.clock.now());
    } else info.probe = answered ? 2 : 0;
    info.prober = undefined;
    if (info.probeClaimed) {
      info.probeClaimed = false;
      this.releaseProbe(info);
    }
    const waiters = info.probeWaiters;
    info.probeWaiters = undefined;
    if (waiters === undefined) return;
    // After what the caller does next (a 429's pause is written to the store before they ask).
    // Higher priorities ask first (the store grants slots in the order it is asked).
    waiters.sort((a, b) => (goesBefore(a, b) ? -1 : 1));
    queueMicrotask(() => {
      for (const call of waiters) {
        if (call.state === 'retrying' && this.heap.remove(call)) this.submit(call);
      }
      this.arm();
    });
  }

  /**
   * True when `call` (a window call on gate-wide levels, holding its key's turn) must wait in the
   * gate-wide line rather than ask: the line holds calls, and `call` is not the one asking for it.
   */
  private lineHolds(call: SharedCall): boolean {
    if (this.lineAsker === undefined && this.lineReleased === 0 && this.lineFirst === this.line.length)
      return false;
    if (call === this.lineAsker || call.released) return false;
    this.joinLine(call);
    // Room among the calls let out: it (or one before it) asks now.
    this.releaseLine();
    return true;
  }

  /**
   * Window calls never reserve ahead, so when the gate-wide levels bind, every key's call that asks
   * is told the same next gate-wide slot: were they all to ask again at that slot, all but one
   * would be refused, at every slot (requests growing with the square of the keys). Instead the
   * first held speaks for the line (`lineAsker`): it waits for the slot and asks; the others of
   * any key wait here, keeping their key's turn, and ask when it is answered (`releaseLine`): one
   * at first, twice as many after each grant (up to `MAX_TURNS`, as a key's turns), one again when
   * the gate-wide levels hold a call. A call joins when they hold it, or when it would ask while
   * the line holds calls. Calls the line cannot start before their deadline are refused now.
   */
  private waitInLine(call: SharedCall, at: number): void {
    if (call.info.head !== undefined && call.info.head !== call) {
      // Another call of its key waits for a slot: this one waits behind it, for its key's turn.
      this.waitForSlot(call, at);
      return;
    }
    if (this.lineAsker !== undefined && this.lineAsker !== call) {
      this.joinLine(call);
      return;
    }
    this.lineAsker = call;
    this.lineWidth = 1;
    this.waitForSlot(call, at);
    for (let i = this.lineFirst; i < this.line.length; i++) {
      const waiting = this.line[i]!;
      if (waiting.inLine && waiting.deadline < at)
        this.refuse(waiting, deadlineError(waiting, at, waiting.attempt === 0));
    }
  }

  /**
   * Queue `call` in the gate-wide line, in priority and then schedule order, or refuse it now when
   * its deadline comes before the slot the line's asker waits for (the line starts nothing before
   * it).
   */
  private joinLine(call: SharedCall): void {
    const asker = this.lineAsker;
    if (asker !== undefined && call.deadline < asker.at) {
      this.refuse(call, deadlineError(call, asker.at, call.attempt === 0));
      return;
    }
    call.state = 'retrying';
    call.inLine = true;
    const line = this.line;
    let i = line.length;
    while (i > this.lineFirst && goesBefore(call, line[i - 1]!)) i--;
    line.splice(i, 0, call);
  }

  /**
   * Let calls out of the line to ask (or refuse them, past their deadline) while nobody waits for a
   * gate-wide slot and fewer than `lineWidth` ask.
   */
  private releaseLine(): void {
    if (this.releasingLine) return;
    this.releasingLine = true;
    while (
      this.lineAsker === undefined &&
      this.lineReleased < this.lineWidth &&
      this.lineFirst < this.line.length
    ) {
      const next = this.line[this.lineFirst++]!;
      if (!next.inLine) continue;
      next.inLine = false;
      if (this.clock.now() > next.deadline) {
        this.refuse(next, deadlineError(next, Infinity, false));
        continue;
      }
      // A call of its key with a higher priority, queued for a turn, goes in its place.
      const asker = this.prioritized ? this.betterOfKey(next) : next;
      asker.released = true;
      this.lineReleased++;
      this.submit(asker);
    }
    if (this.lineFirst === this.line.length) {
      this.line = [];
      this.lineFirst = 0;
    }
    this.releasingLine = false;
  }

  /** `call` leaves the gate-wide line, whatever its place in it (waiting, asking, or speaking for it). */
  private leaveLine(call: SharedCall): void {
    call.inLine = false;
    if (this.stopAsking(call)) this.releaseLine();
  }

  /** `call` no longer asks for the gate-wide line (as its asker, or let out): true if it did. */
  private stopAsking(call: SharedCall): boolean {
    if (call === this.lineAsker) {
      this.lineAsker = undefined;
      return true;
    }
    if (!call.released) return false;
    call.released = false;
    this.lineReleased--;
    return true;
  }

  /** `call` is reserved (`admitted`), refused or gone to the failure policy: its turn passes on. */
  private passTurn(call: SharedCall, admitted: boolean): void {
    if (!call.turn) return;
    this.leaveLine(call);
    const info = call.info;
    call.turn = false;
    info.asking--;
    const wasHead = info.head === call;
    if (wasHead) info.head = undefined;
    // A key its own limit holds admits about one call per slot (more turns would be refused),
    // unless a call that did not wait for a slot was admitted at once: the limit no longer binds.
    const r = call.reservation;
    const opened = !call.ownWaits || (!wasHead && r !== undefined && r.startAt <= r.serverNow);
    if (admitted && opened) info.width = Math.min(info.width * 2, MAX_TURNS);
    this.pump(info);
  }

  private enqueueAt(call: SharedCall, at: number): void {
    call.at = at;
    this.heap.push(call);
    this.arm();
  }

  private arm(): void {
    const head = this.heap.peek();
    if (head === undefined) {
      if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
      this.timer = undefined;
      return;
    }
    if (this.timer !== undefined) {
      if (this.timerAt === head.at) return;
      this.clock.clearTimeout(this.timer);
    }
    this.timerAt = head.at;
    // Node truncates fractional delays; round up so a call never starts before its reserved time.
    this.timer = this.clock.setTimeout(this.onTimer, Math.max(0, Math.ceil(head.at - this.clock.now())));
  }

  private fire(): void {
    const now = this.clock.now();
    for (;;) {
      const head = this.heap.peek();
      if (head === undefined || head.at > now) break;
      this.heap.pop();
      if (head.state === 'waiting') {
        // A timer this late (a stalled event loop) would start the call past its deadline: the
        // in-memory gate refuses it, and so does this one. (A store's round trip is not a wait:
        // an answer that comes after the deadline for a start within it still starts the call.)
        if (now > Math.max(head.deadline, head.at) + this.o.lateToleranceMs)
          this.refuse(head, deadlineError(head, now, false));
        else this.startOrReserveAgain(head, head.at, now, this.answersCameAt(this.clock.now()));
      } else if (head.state === 'retrying') {
        if (now >= head.deadline && !this.mayAskAtDeadline(head, now))
          this.refuse(head, deadlineError(head, Infinity, false));
        else {
          const asker = this.prioritized ? this.bestFor(head) : head;
          if (now >= asker.deadline) asker.askedAtDeadline = true;
          this.submit(asker);
        }
      }
    }
    this.arm();
  }

  /**
   * A call due to ask the store again at its deadline (a concurrency retry, a pause's end, a
   * Retry-After) asks once more then, as the in-memory gate starts a call whose slot comes at its
   * deadline; the timer's own lateness is tolerated as for a reserved start (`lateToleranceMs`).
   * Once only: a call that the answer sends back to wait at its deadline (for its key's probe, say)
   * is refused the next time.
   */
  private mayAskAtDeadline(call: SharedCall, now: number): boolean {
    return !call.askedAtDeadline && call.at >= call.deadline && now <= call.deadline + this.o.lateToleranceMs;
  }

  /**
   * The slot `waiter` waited for has come: the call that asks for it is the best waiting for it
   * (`goesBefore`), as the in-memory gate starts its queue's best call when a slot frees. `waiter`
   * waits for its key's slot (its key's head, the others of its key queued behind it without a
   * turn), for the gate-wide line (its asker, the others in the line keeping their keys' turns), or
   * both. A call of a higher priority that came after it, first behind it or first in the line,
   * takes its place (and its turn, from behind) and asks now; `waiter` waits in its place among
   * them. Answers the call to submit.
   */
  private bestFor(waiter: SharedCall): SharedCall {
    const info = waiter.info;
    const isHead = info.head === waiter;
    const isAsker = this.lineAsker === waiter;
    const fromBehind = isHead ? this.firstQueued(info) : undefined;
    let lineAt = this.lineFirst;
    let fromLine: SharedCall | undefined;
    const now = this.clock.now();
    for (; isAsker && lineAt < this.line.length; lineAt++) {
      const waiting = this.line[lineAt]!;
      if (!waiting.inLine) continue;
      // Its deadline passed while it waited in the line (as releaseLine refuses it).
      if (now > waiting.deadline) this.refuse(waiting, deadlineError(waiting, Infinity, false));
      else {
        fromLine = waiting;
        break;
      }
    }
    const best =
      fromLine !== undefined && (fromBehind === undefined || goesBefore(fromLine, fromBehind))
        ? fromLine
        : fromBehind;
    if (best === undefined || !goesBefore(best, waiter)) return waiter;
    if (best === fromBehind) {
      // Its key's first call queued for a turn (unless its deadline passed: then the next).
      const chosen = this.betterOfKey(waiter);
      if (isAsker && chosen !== waiter) this.lineAsker = chosen;
      return chosen;
    }
    // From the line: it holds its key's turn, and so does the waiter, which joins the line.
    if (isHead) info.head = undefined;
    this.lineAsker = best;
    this.lineFirst = lineAt + 1;
    best.inLine = false;
    this.joinLine(waiter);
    return best;
  }

  /**
   * `holder` holds a turn of its key and is about to ask: the first call queued for a turn of its
   * key takes the turn instead (`info.asking` unchanged) when it goes before `holder`, which queues
   * for a turn again. Answers the call to ask.
   */
  private betterOfKey(holder: SharedCall): SharedCall {
    const info = holder.info;
    const now = this.clock.now();
    for (;;) {
      const best = this.firstQueued(info);
      if (best === undefined || !goesBefore(best, holder)) return holder;
      info.behindHead++;
      if (now > best.deadline) {
        // Its deadline passed while it waited for a turn (as in pump).
        this.refuse(best, deadlineError(best, Infinity, false));
        continue;
      }
      this.handTurn(holder, best);
      return best;
    }
  }

  /** The first call queued for a turn of `info`'s key (aborted or refused ones leave the queue here). */
  private firstQueued(info: KeyInfo): SharedCall | undefined {
    while (info.behind[info.behindHead]?.state === 'done') info.behindHead++;
    return info.behind[info.behindHead];
  }

  private start(call: SharedCall, now: number): void {
    call.state = 'running';
    const pace = call.info.pace;
    if (pace !== undefined) call.paceSeq = pace.started(now);
    call.startedStoreAt = Number.isNaN(this.offsetMs) ? call.storeStartAt : now + this.offsetMs;
    this.dequeued(call);
    if (this.startEvents.listeners)
      this.startEvents.emit({ key: call.info.key, waitedMs: now - call.enqueuedAt });
    this.run(call);
  }

  /** The call left the local queue (started or refused). */
  private dequeued(call: SharedCall): void {
    call.info.queued--;
    this.queuedTotal--;
    if (call.onAbort !== undefined) call.signal!.removeEventListener('abort', call.onAbort);
  }

  private run(call: SharedCall): void {
    this.started++;
    this.inFlight++;
    if (call.reservation !== undefined) {
      call.runningIndex = this.runningViaStore.length;
      this.runningViaStore.push(call);
    }
    call.attempt++;
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(call.fn());
    } catch (error) {
      result = Promise.reject(error);
    }
    result.then(
      (value) => {
        // Its concurrency permits go back, and it leaves inFlight, once its response is read: a 429
        // pauses the key (and the call goes back to reserve) before a call waiting for a permit
        // may start, and close() waits for the retry (see the in-memory gate's `completed`).
        const reservation = call.reservation;
        const untimed = call.hasUntimed;
        this.released(call);
        this.completed(call, value, () => {
          this.letGo(reservation, untimed);
          this.maybeClosed();
        });
      },
      (error: unknown) => {
        this.released(call);
        this.letGo(call.reservation, call.hasUntimed);
        if (call.info.prober === call) this.endProbe(call.info, true);
        // The request may have reached the provider: charge the estimate (never under-count).
        this.settleBudget(call, call.priceMicros);
        this.settle(call, error, false);
      },
    );
  }

  /**
   * The call finished: it leaves the calls running on store slots, and is counted in its window
   * limits from now, its response, instead of from its start (its permits go back in `letGo`) (as the in-memory gate does: a window counted from
   * the response never ends before the provider's, however late the request arrived there).
   */
  private released(call: SharedCall): void {
    if (call.runningIndex !== -1) {
      const last = this.runningViaStore.pop()!;
      if (last !== call) {
        this.runningViaStore[call.runningIndex] = last;
        last.runningIndex = call.runningIndex;
      }
      call.runningIndex = -1;
    }
    call.onReleased?.();
    const reservation = call.reservation;
    if (reservation === undefined) return;
    if (this.recounted(call, reservation)) {
      quietly(
        () => this.store.recount(reservation, this.o.arrivalMarginMs, call.startedStoreAt),
        (error) => this.storeFailed(error),
      );
    }
  }

  /**
   * Whether a call that ran is recounted in its window levels from its response (see released). A
   * call reserved before its key knew of learned limits is recounted in them all the same.
   */
  private recounted(call: SharedCall, reservation: StoreReservation): boolean {
    return call.recounts || (this.o.arrivalMarginMs > 0 && reservation.learned.some((l) => l.cost !== 0));
  }

  /** Settle what the call used (`Inspection.actualCost`) in the store, where it was reserved. */
  private adjustUnits(call: SharedCall, actual: Readonly<Record<string, number>>): void {
    const reservation = call.reservation;
    const store = this.store;
    if (reservation === undefined || typeof store.adjust !== 'function') return;
    // With an arrival margin its window levels count from where a recount puts it (see released):
    // what it used beyond the estimate goes there too, even on a level it was not charged on.
    const margin = this.o.arrivalMarginMs > 0 ? this.o.arrivalMarginMs : undefined;
    quietly(
      () => store.adjust!(reservation, actual, margin, call.startedStoreAt),
      (error) => this.storeFailed(error),
    );
  }

  private completed(call: SharedCall, value: unknown, letGo: () => void): void {
    inspectOutcome(call.inspect, value, (inspection) => {
      try {
        this.afterInspection(call, value, inspection);
      } finally {
        letGo();
      }
    });
  }

  /**
   * The rest of `released`, once the call's response was read (or it failed): out of inFlight, and
   * its concurrency permits given back (from the reservation it ran on: a retry reserves anew).
   */
  private letGo(reservation: StoreReservation | undefined, untimed: boolean): void {
    this.inFlight--;
    if (reservation !== undefined && untimed) this.refundUntimed(reservation);
  }

  private afterInspection(call: SharedCall, value: unknown, inspection: Inspection | undefined): void {
    const adapt = this.adapt;
    // inspectOutcome answers an object or undefined: only its status is left to check.
    const read = inspection !== undefined && typeof inspection.status === 'number';
    // As the in-memory gate: what the response says the call used is settled first.
    const actual = read ? actualUnits(inspection.actualCost) : undefined;
    if (actual !== undefined) this.adjustUnits(call, actual);
    if (!read || adapt === false) {
      if (call.info.prober === call) this.endProbe(call.info, true);
      this.settleBudget(call, inspection?.actualPriceMicros ?? call.priceMicros);
      this.settle(call, value, true);
      return;
    }
    const now = this.clock.now();
    let observation: RateLimitObservation;
    try {
      observation = parseRateLimitHeaders(inspection.status, inspection.headers, {
        now,
        body: inspection.body,
      });
    } catch {
      observation = { policies: [] };
    }
    this.learnFrom(call.info, observation, inspection.status, now);
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
      this.o.random,
    );
    const reason = observation.retryAfterMs !== undefined ? 'retry-after' : 'backoff';
    const pace = call.info.pace;
    if (pace !== undefined && call.paceSeq > 0)
      this.paceFrom(call, pace, observation, inspection.status, verdict, now);
    if (verdict.kind !== 'done') {
      // Every process holds back: the pause is written to the store before the retry is reserved,
      // and before the probe is given back (another gate's prober asks after it). A processed
      // response is the call's result, and its pause still holds the next calls.
      if (verdict.kind === 'refuse' && verdict.reason === 'retry-after-cap')
        this.markReprobe(call.info, verdict.pauseUntil - now);
      this.sharedPause(call.info, verdict.pauseUntil - now, reason, false);
    }
    if (call.info.prober === call) this.endProbe(call.info, true);
    if (verdict.kind === 'done' || inspection.processed === true) {
      this.settleBudget(call, inspection.actualPriceMicros ?? call.priceMicros);
      this.settle(call, value, true);
      return;
    }
    try {
      inspection.discard?.();
    } catch {
      // Releasing a response we drop anyway must not fail the call.
    }
    if (verdict.kind === 'retry' && verdict.pauseUntil <= call.deadline) {
      this.requeue(call);
      return;
    }
    // A throttled response was not processed: charge only what the provider said it charged.
    this.settleBudget(call, inspection.actualPriceMicros ?? 0);
    this.settle(call, throttledError(verdict, call, adapt.maxRetryAfterMs, inspection.status), false);
  }

  /**
   * A throttled call goes back to reserve again (it pays quota again, after the pause); so does a
   * call taken back from the fallback.
   */
  private requeue(call: SharedCall): void {
    if (call.signal?.aborted) {
      this.settleBudget(call, 0);
      this.settle(call, new AbortedError(call.signal.reason), false);
      return;
    }
    call.state = 'reserving';
    call.reservation = undefined;
    call.info.queued++;
    this.queuedTotal++;
    if (call.onAbort !== undefined) call.signal!.addEventListener('abort', call.onAbort, { once: true });
    this.submit(call);
  }

  /**
   * What a response says about its key's pace (see `RoundPace`): a refusal with a Retry-After and no
   * request quota ends a round (the other processes hear it through the pace mark, written before
   * the pause); an answer stating a quota drops the pace.
   */
  private paceFrom(
    call: SharedCall,
    pace: RoundPace,
    observation: RateLimitObservation,
    status: number,
    verdict: Verdict,
    now: number,
  ): void {
    const info = call.info;
    const informed = observation.policies.some(
      (policy) =>
        policy.unit === 'requests' && (policy.remaining !== undefined || policy.limit !== undefined),
    );
    if (informed || info.learnedWindows) {
      if (pace.aimd !== undefined) this.dropPace(info, pace, now);
      return;
    }
    const throttled = status === 429 || status === 529 || observation.throttled === true;
    if (!throttled) pace.accepted(call.paceSeq);
    else if (observation.retryAfterMs !== undefined && verdict.kind !== 'done') {
      if (pace.refused(call.paceSeq, verdict.pauseUntil, now)) {
        const paceScope = info.scope + PACE_SCOPE;
        info.paceMarkUntil = Math.max(info.paceMarkUntil, verdict.pauseUntil);
        quietly(
          () => this.store.pauseFor(info.partition, verdict.pauseUntil - now, paceScope),
          (error) => this.storeFailed(error),
        );
      }
    }
  }

  /** What a response says about the partition's shared limits: learned limits and exhausted quotas. */
  private learnFrom(info: KeyInfo, observation: RateLimitObservation, status: number, now: number): void {
    const adapt = this.adapt as AdaptOptions;
    if (adapt.learn) {
      // Learned limits live learnedTtlMs in the store unless learned again: re-sent well within it.
      const refreshMs = Math.min(LEARN_REFRESH_MS, (this.store.learnedTtlMs ?? Infinity) / 2);
      for (const { policy, spec } of learnedPolicies(observation)) {
        const id = `${spec.unit}|${spec.intervalMs}`;
        const last = info.learned?.get(id);
        // A limit a configured one already holds is not shared, unless it replaces a tighter one
        // learned before (10/s, then 100/s with 50/s configured: the store must not keep 10).
        if (
          this.allCores.some((core) => isAtLeastAsTight(core, spec)) &&
          (last === undefined || last.limit === spec.limit)
        )
          continue;
        info.learned ??= new Map();
        info.learnedWindows = true;
        if (last !== undefined && last.limit === spec.limit && now - last.at < refreshMs) continue;
        info.learned.set(id, { limit: spec.limit, at: now });
        // What the provider counts as used in its window is seeded into the shared limit, from the
        // start of that window (so it leaves at the provider's reset).
        const seedUnits = spec.limit - (policy.remaining ?? spec.limit);
        const seedAge = seedAgeMs(policy, spec);
        quietly(
          () => this.store.learn(info.partition, spec, { scope: info.scope, seedUnits, seedAgeMs: seedAge }),
          (error) => this.storeFailed(error),
        );
      }
    }
    // A request quota at zero pauses everyone until its reset, before any 429 (a 429 pauses anyway).
    const throttled = status === 429 || observation.throttled === true;
    if (!throttled) {
      const binding = bindingFor(observation, 'requests');
      // No longer than maxRetryAfterMs, as a Retry-After: never sleep for a day.
      if (binding?.remaining === 0 && binding.resetMs !== undefined && binding.resetMs > 0) {
        // Spent until a reset past the cap: at the capped reset one call asks again, not the queues.
        if (binding.resetMs > adapt.maxRetryAfterMs) this.markReprobe(info, adapt.maxRetryAfterMs);
        this.sharedPause(info, Math.min(binding.resetMs, adapt.maxRetryAfterMs), 'remaining-0', false);
      }
    }
  }

  // --- pauses --------------------------------------------------------------------------------------

  private pausedUntil(info: KeyInfo, now: number): number {
    let until = 0;
    for (const id of info.pauseIds) {
      const value = this.localPauses.get(id);
      if (value === undefined) continue;
      if (value <= now) this.localPauses.delete(id);
      else if (value > until) until = value;
    }
    return until;
  }

  /** Write a pause to the store (for every process) and apply it here at once. */
  private sharedPause(info: KeyInfo, durationMs: number, reason: string, gateWide: boolean): void {
    if (!(durationMs > 0)) return;
    const now = this.clock.now();
    const scope = gateWide ? '' : info.scope;
    const pauseId = gateWide ? this.store.pauseId(info.partition, '') : info.ownPauseId;
    // Sent before any re-reservation below, on the same connection: Redis applies it first.
    quietly(
      () => this.store.pauseFor(info.partition, durationMs, scope),
      (error) => this.storeFailed(error),
    );
    this.applyPause(pauseId, now + durationMs, reason, gateWide ? undefined : info.key);
  }

  /**
   * A wait of `info`'s key is capped at `maxRetryAfterMs` and ends in `durationMs`: every process
   * hears its reprobe mark (see `REPROBE_SCOPE`), written before the pause it marks.
   */
  private markReprobe(info: KeyInfo, durationMs: number): void {
    if (!(durationMs > 0)) return;
    info.reprobeMarkUntil = Math.max(info.reprobeMarkUntil, this.clock.now() + durationMs);
    quietly(
      () => this.store.pauseFor(info.partition, durationMs, info.scope + REPROBE_SCOPE),
      (error) => this.storeFailed(error),
    );
    this.reprobeAfter(info, this.clock.now() + durationMs);
  }

  /** The first inspected call of `info`'s key to go from `at` on probes again (the latest mark wins). */
  private reprobeAfter(info: KeyInfo, at: number): void {
    info.reprobeAt = Math.max(info.reprobeAt ?? at, at);
  }

  /** A pause set by any process (our own included, echoed by the store). */
  private heardPause(event: StorePauseEvent): void {
    const now = this.clock.now();
    // Store time to gate time (before any offset estimate, with the message's own reading: the
    // message is late, so the local end errs late, never a start inside the pause).
    const untilLocal = this.toLocal(event.untilMs, now, event.serverNow);
    const id = event.pauseId;
    // A known key's reprobe mark holds nothing: its pause ending then was capped.
    const marked = this.marks.get(id);
    if (marked !== undefined) {
      this.reprobeAfter(marked, untilLocal);
      return;
    }
    // A pace mark: another process's round ended (ours, echoed, finds nothing started since).
    const paced = this.paceMarks.get(id);
    if (paced !== undefined) {
      paced.pace!.heard(untilLocal, now);
      return;
    }
    const owner = this.pauseOwners.get(id);
    if (owner !== undefined || id === this.gateWidePauseId)
      this.applyPause(id, untilLocal, 'shared', owner?.key);
    // A key not known here: a pause or a mark, read when the key comes.
    else this.keepUnknown(id, untilLocal);
  }

  /**
   * Hold the local fallback's calls too: it starts calls while the store is down, and must not
   * start them inside a pause this gate knows. The fallback has no default-key pause of its own: a
   * pause of calls without a key holds all of it (more than needed, never less).
   */
  private pauseFallback(pauseId: string, untilLocal: number): void {
    if (this.fallback === undefined) return;
    for (const info of this.allInfos()) if (this.pauseFallbackOf(info, pauseId, untilLocal) === 'all') return;
  }

  /**
   * Hold `info`'s calls in the fallback until `untilLocal` if `pauseId` holds them: 'all' when that
   * pause holds every call of the fallback.
   */
  private pauseFallbackOf(info: KeyInfo, pauseId: string, untilLocal: number): 'all' | 'key' | 'none' {
    const i = info.pauseIds.indexOf(pauseId);
    if (i === -1) return 'none';
    // With gate-wide limits every key is a scope of one partition, whose own pause holds them all.
    if (info.key === undefined || (i === 0 && this.o.globalCores.length > 0)) {
      this.fallback!.pause(untilLocal, undefined, 'shared');
      return 'all';
    }
    this.fallback!.pause(untilLocal, info.key, 'shared');
    return 'key';
  }

  /**
   * Hold every waiting call the pause covers: give back its reservation and reserve again after it.
   * `key`: the key it pauses (undefined: the calls without a key, or every key for a gate-wide pause).
   */
  private applyPause(pauseId: string, untilLocal: number, reason: string, key: string | undefined): void {
    if ((this.localPauses.get(pauseId) ?? 0) >= untilLocal - PAUSE_SLACK_MS) return;
    this.localPauses.set(pauseId, untilLocal);
    this.pauseFallback(pauseId, untilLocal);
    // The calls holding slots of a key's pace book them again from the pause's end, in their order
    // (at their slots inside it, each would give its slot up and book after the calls booked later).
    const owner = this.pauseOwners.get(pauseId);
    if (owner?.pace !== undefined && owner.paced.length > 0)
      this.rebook(owner, owner.pace, this.clock.now(), 0);
    // Every call waiting on a slot of the partition, those due after the pause too: a bucket gives
    // back only its latest take, so the slots inside the pause come back only if the later ones do
    // first. Kept, they held the bucket booked past the pause: it came out of every pause without
    // its burst, paced at the limit into the next 429 (34 ok/s against 61 for the in-memory gate,
    // a token bucket at a sliding window's limit, 80 in flight; diagnosis, session 16).
    const held = this.heap
      .entries()
      .filter((c) => c.state === 'waiting' && c.info.pauseIds.includes(pauseId));
    if (this.pauseEvents.listeners) this.pauseEvents.emit({ key, untilMs: untilLocal, reason });
    if (held.length === 0) return;
    for (const call of held) this.heap.remove(call);
    this.arm();
    this.giveBackLatestFirst(held);
    // Each asks the store again when the pause ends (see submit).
    for (let i = held.length - 1; i >= 0; i--) this.waitForPause(held[i]!, untilLocal);
  }

  // --- store failures --------------------------------------------------------------------------------

  private storeFailed(error: unknown): void {
    if (!this.up) return;
    this.up = false;
    this.downSince = this.clock.now();
    this.storeDownEvents.emit({ error, policy: this.o.failure });
    // Closing: no recovery to watch for, but the calls still queued take the policy now (not one
    // command timeout each, in turn).
    if (!this.closed) this.probe();
    this.countRunningInFallback();
    // After the code that noticed the failure has settled its own call.
    queueMicrotask(() => this.failWaiting(error));
  }

  /**
   * The store is down: calls waiting to ask it (for their key's turn, or to ask again at a slot or
   * for a permit) take the failure policy now, in priority and then schedule order, as new calls
   * do, rather than when their turn or timer comes. Calls holding a reservation keep it and start at its time.
   */
  private failWaiting(error: unknown): void {
    if (this.up) return;
    // A set: a call's place in the line may be there twice (see leaveLine), and it fails over once.
    const waiting = new Set<SharedCall>();
    for (const info of this.allInfos()) {
      for (let i = info.behindHead; i < info.behind.length; i++) waiting.add(info.behind[i]!);
      info.behind = [];
      info.behindHead = 0;
    }
    for (let i = this.lineFirst; i < this.line.length; i++)
      if (this.line[i]!.inLine) waiting.add(this.line[i]!);
    this.line = [];
    this.lineFirst = 0;
    const local = this.o.failure === 'local';
    for (const call of this.heap.entries()) {
      if (call.state === 'waiting' && local && call.reservation !== undefined) {
        // Reserved ahead: started at its slot, it would run on top of the local share the fallback
        // grants from now on (twice the share in the outage's first seconds). It goes to the
        // fallback too; its slot stays taken in the store until it answers again.
        this.abandonedSlots.push({ reservation: call.reservation, takenSeq: call.takenSeq });
        call.reservation = undefined;
      } else if (call.state !== 'retrying') continue;
      this.heap.remove(call);
      waiting.add(call);
    }
    this.arm();
    const ordered = [...waiting].sort((a, b) => (goesBefore(a, b) ? -1 : 1));
    const now = this.clock.now();
    for (const call of ordered) {
      if (call.state === 'done' || call.state === 'running') continue;
      // One whose deadline passed while it waited is refused, as it would have been at its turn.
      if (now > call.deadline) this.refuse(call, deadlineError(call, Infinity, false));
      else this.failover(call, error);
    }
  }

  private probe(): void {
    if (this.closed) return;
    this.probeTimer = this.clock.setTimeout(() => {
      this.probeTimer = undefined;
      let answer: MaybePromise<unknown>;
      try {
        answer = this.store.writable ? this.store.writable() : this.store.time();
      } catch {
        this.probe();
        return;
      }
      settleValue(
        answer,
        () => {
          if (this.up || this.closed) return;
          this.up = true;
          this.storeUpEvents.emit({ downForMs: this.clock.now() - this.downSince });
          this.catchUpStore();
          this.returnFromFallback();
        },
        () => this.probe(),
      );
    }, this.o.recoveryProbeMs);
  }

  /**
   * The fallback starts from nothing, but this process's calls running on store reservations still
   * hold their share of the limits: each gets a stand-in in the fallback, first in line, that holds
   * its place (and its permits) until the call finishes.
   */
  private countRunningInFallback(): void {
    const fallback = this.fallback;
    if (fallback === undefined) return;
    for (const call of this.runningViaStore) {
      const finished = new Promise<void>((resolve) => {
        // A second outage while it still runs: both stand-ins end with it.
        const before = call.onReleased;
        call.onReleased = () => {
          before?.();
          resolve();
        };
      });
      const options: ScheduleOptions = {
        priority: Number.MAX_SAFE_INTEGER,
        ...(call.info.key === undefined ? {} : { key: call.info.key }),
        ...(call.cost === undefined ? {} : { cost: call.cost }),
      };
      fallback.schedule(() => finished, options).catch(() => {});
    }
  }

  /**
   * The store answers again, but it has not counted what the fallback started: each limit's units
   * the fallback has taken (its share's capacity less what it has left) are taken in the store now,
   * so the calls that follow leave room for them.
   */
  private chargeFallbackUsage(): void {
    const fallback = this.fallback;
    if (fallback === undefined) return;
    const used = (cores: readonly LimitCore[], stats: readonly { available: number }[]) =>
      cores.map((core, i) =>
        core.timed ? Math.max(0, Math.ceil(core.capacity - (stats[i]?.available ?? core.capacity))) : 0,
      );
    const global = used(this.fallbackCores.global, fallback.stats().limits);
    this.allInfos().forEach((info, n) => {
      const keyUsed = used(this.fallbackCores.key, fallback.stats(info.key).partition.limits);
      // The gate-wide levels once (with the first key), every key's own levels.
      const costs = [...(n === 0 ? global : global.map(() => 0)), ...keyUsed];
      if (costs.length === info.levels.length) this.takeInStore(info, costs);
    });
  }

  /**
   * The store answers again: give back the permits of calls that finished while it was down (held
   * for a lease otherwise, for every process), and write the pauses still in force here (a 429
   * seen while it was down) so that no process, this one included, starts inside them, with the
   * reprobe and pace marks this gate wrote that are still in force (written while the store was
   * down, or lost with it: a restarted Redis; the processes that missed them would send their
   * queues at the pause's end), before the pauses, as when first written.
   */
  private catchUpStore(): void {
    const abandoned = this.abandonedSlots;
    this.abandonedSlots = [];
    // Latest first, each then its level's latest take (see giveBackLatestFirst).
    abandoned.sort((a, b) => b.reservation.startAt - a.reservation.startAt || b.takenSeq - a.takenSeq);
    for (const { reservation } of abandoned) this.giveBack(reservation);
    this.chargeFallbackUsage();
    this.permitsForFallbackCalls();
    const refunds = this.unrefunded;
    this.unrefunded = [];
    for (const reservation of refunds) this.refundUntimed(reservation);
    const now = this.clock.now();
    for (const info of this.allInfos()) {
      for (const [until, scope] of [
        [info.reprobeMarkUntil, REPROBE_SCOPE],
        [info.paceMarkUntil, PACE_SCOPE],
      ] as const) {
        if (until <= now) continue;
        quietly(
          () => this.store.pauseFor(info.partition, until - now, info.scope + scope),
          (error) => this.storeFailed(error),
        );
      }
    }
    const written = new Set<string>();
    for (const info of this.allInfos()) {
      info.pauseIds.forEach((pauseId, i) => {
        const until = this.localPauses.get(pauseId);
        if (until === undefined || until <= now || written.has(pauseId)) return;
        written.add(pauseId);
        quietly(
          () => this.store.pauseFor(info.partition, until - now, i === 0 ? '' : info.scope),
          (error) => this.storeFailed(error),
        );
      });
    }
  }

  /**
   * The store answers again: each call still running in the fallback takes its concurrency permits
   * there, given back when it finishes (see `runningInFallback`). A limit already full keeps none.
   */
  private permitsForFallbackCalls(): void {
    for (const [call, entry] of this.runningInFallback) {
      // Asked at an earlier recovery (a second outage since): it holds them, or the answer is due.
      if (entry.asked) continue;
      const costs = call.costs.map((cost, i) => (call.info.untimed.includes(i) ? cost : 0));
      if (costs.every((c) => c === 0)) continue;
      entry.asked = true;
      const failed = (error: unknown) => {
        entry.asked = false;
        this.storeFailed(error);
      };
      let decision: MaybePromise<StoreDecision>;
      try {
        decision = this.store.reserve(call.info.partition, call.info.levels, costs, 0, {
          scope: call.info.scope,
        });
      } catch (error) {
        failed(error);
        continue;
      }
      settleValue(
        decision,
        (d) => {
          // Not granted (a full limit): asked again at the next recovery, if it still runs.
          if (!d.ok) entry.asked = false;
          else if (entry.done) this.refundUntimed(d);
          else entry.permits = d;
        },
        failed,
      );
    }
  }

  /** A call that ran in the fallback finished: the permits it took in the store go back. */
  private leftFallbackRun(call: SharedCall): void {
    const entry = this.runningInFallback.get(call);
    if (entry === undefined) return;
    this.runningInFallback.delete(call);
    entry.done = true;
    if (entry.permits !== undefined) this.refundUntimed(entry.permits);
  }

  /** Give back a finished call's permits; kept for the store's recovery when it is down. */
  private refundUntimed(reservation: StoreReservation): void {
    quietly(
      () => this.store.refund(reservation, 'untimed'),
      (error) => {
        this.unrefunded.push(reservation);
        this.storeFailed(error);
      },
    );
  }

  /** The store is down (or failed this call): apply the failure policy. */
  private failover(call: SharedCall, error: unknown): void {
    if (this.rejectQueued) {
      this.refuse(call, new GateClosedError());
      return;
    }
    if (call.info.prober === call) this.endProbe(call.info, false);
    this.leavePace(call, true);
    // The turn passes after the call took the policy: the calls it passes to (its key's, the
    // gate-wide line's) meet the failure next, and reach the fallback after it.
    const policy = this.o.failure;
    if (policy === 'fail-closed') {
      this.refuse(
        call,
        error instanceof StoreUnavailableError
          ? error
          : new StoreUnavailableError('The shared store is unavailable (failure policy fail-closed)', {
              cause: error,
            }),
      );
      return;
    }
    if (policy === 'fail-open') {
      call.state = 'running';
      this.dequeued(call);
      this.run(call);
    } else this.toFallback(call);
    this.passTurn(call, false);
  }

  /**
   * Take units the store has not counted (what the fallback started) on `info`'s levels, whenever
   * the store places them: they were spent already, so later calls start after them.
   */
  private takeInStore(info: KeyInfo, costs: readonly number[]): void {
    if (costs.every((c) => c === 0)) return;
    quietly(
      () => this.store.reserve(info.partition, info.levels, costs, Infinity, { scope: info.scope }),
      (error) => this.storeFailed(error),
    );
  }

  /**
   * The store answers again: the calls the fallback has not started go back to the store, in their
   * order (the fallback refuses them as aborted, and `toFallback` hands them back to `submit`).
   */
  private returnFromFallback(): void {
    if (this.inFallbackQueue.size === 0) return;
    const waiting = [...this.inFallbackQueue.values()];
    this.inFallbackQueue.clear();
    for (const back of waiting) back.abort(RETURNED);
  }

  /** `local`: the call goes through the in-memory gate holding `localShare` of the quota. */
  private toFallback(call: SharedCall): void {
    call.state = 'running';
    this.dequeued(call);
    this.fallbackCalls++;
    // Queued in the fallback until it starts the call: counted as queued here until then.
    this.fallbackQueued++;
    const back = new AbortController();
    this.inFallbackQueue.set(call, back);
    let sent = false;
    let seen: Inspection | undefined;
    const fn = () => {
      if (!sent) {
        this.fallbackQueued--;
        this.inFallbackQueue.delete(call);
        this.started++;
        this.inFlight++;
        if (call.info.untimed.length > 0) this.runningInFallback.set(call, { asked: false, done: false });
      }
      sent = true;
      // Started by the fallback after the store came back: counted there too.
      if (this.up)
        this.takeInStore(
          call.info,
          call.costs.map((cost, i) => (call.info.untimed.includes(i) ? 0 : cost)),
        );
      return call.fn();
    };
    const inspect = call.inspect;
    const options: ScheduleOptions = {
      priority: call.priority,
      maxQueueTimeMs: Math.max(0, call.deadline - this.clock.now()),
      ...(call.info.key === undefined ? {} : { key: call.info.key }),
      ...(call.cost === undefined ? {} : { cost: call.cost }),
      signal: call.signal === undefined ? back.signal : AbortSignal.any([call.signal, back.signal]),
      ...(inspect === undefined
        ? {}
        : {
            inspect: (value: never) => {
              const result = inspect(value);
              if (isPromise(result))
                return result.then((r) => {
                  seen = r;
                  return r;
                });
              seen = result;
              return result;
            },
          }),
    };
    this.fallback!.schedule(fn, options).then(
      (value) => {
        this.leftFallback(sent);
        this.leftFallbackRun(call);
        this.settleBudget(call, seen?.actualPriceMicros ?? call.priceMicros);
        this.settle(call, value, true);
      },
      (error: unknown) => {
        this.leftFallback(sent);
        this.leftFallbackRun(call);
        this.inFallbackQueue.delete(call);
        if (!sent && back.signal.aborted) {
          // Taken back (the store answers again): asked of the store, with the budget it holds
          // (closing meanwhile: submit runs or refuses it as close() says).
          this.requeue(call);
          return;
        }
        const rateLimited = error instanceof RateLimitedError;
        if (!sent) this.releaseBudget(call);
        else this.settleBudget(call, rateLimited ? (seen?.actualPriceMicros ?? 0) : call.priceMicros);
        this.settle(call, error, false);
      },
    );
  }

  /** A call handed to the fallback settled: it ran there (`sent`), or was refused while queued. */
  private leftFallback(sent: boolean): void {
    if (sent) this.inFlight--;
    else this.fallbackQueued--;
  }

  // --- settling --------------------------------------------------------------------------------------

  private abort(call: SharedCall): void {
    if (call.state === 'running' || call.state === 'done') return;
    this.refuse(call, new AbortedError(call.signal!.reason));
  }

  /** Reject a call that has not started: free its place, its reservation and its budget. */
  private refuse(call: SharedCall, error: Error & { code?: string }): void {
    if (call.state === 'running' || call.state === 'done') return;
    // Done from here: passing its turn can start the next call of its key, whose fn may abort this
    // one, which must not be refused (and dequeued) a second time.
    call.state = 'done';
    // Its slot of its key's pace is freed first: the call its turn passes to may book one.
    this.leavePace(call, true);
    this.passTurn(call, false);
    if (call.info.prober === call) this.endProbe(call.info, false);
    if (call.heapIndex >= 0) {
      this.heap.remove(call);
      this.arm();
    }
    if (call.reservation !== undefined) this.giveBack(call.reservation);
    call.reservation = undefined;
    this.dequeued(call);
    this.releaseBudget(call);
    call.reject(error);
    this.refusedEvents.emit({ key: call.info.key, error: toTollgate(error) });
    this.maybeClosed();
  }

  private settle(call: SharedCall, outcome: unknown, ok: boolean): void {
    call.state = 'done';
    if (ok) call.resolve(outcome);
    else call.reject(outcome);
    this.maybeClosed();
  }

  private giveBack(reservation: StoreReservation): void {
    quietly(
      () => this.store.refund(reservation),
      (error) => {
        // Its permits would stay taken (for every process, until their lease ends): given back
        // when the store answers again (`catchUpStore`). Its slots stay counted, the safe side.
        if (holdsPermits(reservation)) this.unrefunded.push(reservation);
        this.storeFailed(error);
      },
    );
  }

  private releaseBudget(call: SharedCall): void {
    const reservation = call.budget;
    if (reservation === undefined) return;
    call.budget = undefined;
    this.untilAnswered(
      () => this.budget!.release(reservation),
      () => {},
    );
  }

  private settleBudget(call: SharedCall, actualMicros: number): void {
    const reservation = call.budget;
    if (reservation === undefined) return;
    call.budget = undefined;
    const budget = this.budget!;
    // An invalid actual price (or one past the exact range: InvalidCostError, thrown or rejected)
    // must not lose the result: settle at the estimate, as reserved.
    const atEstimate = () => {
      // Still held until this settle is answered too (counted before the first one lets go).
      this.budgetHeld++;
      this.untilAnswered(
        () => budget.settle(reservation, reservation.estimateMicros),
        () => {
          // An unreachable ledger keeps the reservation, which counts at its estimate when it expires.
        },
      );
    };
    this.untilAnswered(
      () => budget.settle(reservation, actualMicros),
      (error) => {
        if (error instanceof InvalidCostError) atEstimate();
      },
    );
  }

  /**
   * Settle or release a reservation in the ledger: it counts as held (`budgetHeld`) until the
   * ledger answered, so that after `close()` the application may close the ledger (a Redis ledger's
   * settle still in flight would be cut off). A failure goes to `onError`, never further.
   */
  private untilAnswered(run: () => MaybePromise<unknown>, onError: (error: unknown) => void): void {
    const failed = (error: unknown) => {
      onError(error);
      this.budgetLetGo();
    };
    try {
      const result = run();
      if (isPromise(result)) result.then(() => this.budgetLetGo(), failed);
      else this.budgetLetGo();
    } catch (error) {
      failed(error);
    }
  }

  /** A reservation was settled, given back or refused: `close()` may be waiting for it. */
  private budgetLetGo(): void {
    this.budgetHeld--;
    this.maybeClosed();
  }

  private settledForClose(): boolean {
    // budgetHeld: an async inspection (a body read for its price) or a ledger answer ends after
    // its call left inFlight; the in-memory gate waits for its budget too.
    return (
      this.queuedTotal === 0 && this.fallbackQueued === 0 && this.inFlight === 0 && this.budgetHeld === 0
    );
  }

  private maybeClosed(): void {
    if (this.closeWaiters.length > 0 && this.settledForClose()) {
      const waiters = this.closeWaiters;
      this.closeWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }
}

function toTollgate(error: unknown): Error & { code: string } {
  if (error instanceof TollgateError) return error;
  return new StoreUnavailableError(error instanceof Error ? error.message : String(error), { cause: error });
}

/**
 * Create a gate shared through Redis (or any `Store`). Options are validated here; an invalid one
 * throws `InvalidOptionError` naming it.
 *
 * @example
 * const gate = createSharedGate({ redis: 'redis://127.0.0.1:6379', limits: [windowSafe(60, 1000)] });
 * await gate.schedule(() => fetch(url));
 * await gate.close(); // its Redis connection keeps the process up until then
 */
export function createSharedGate(options: SharedGateOptions): SharedGate {
  return new SharedGate(options);
}
