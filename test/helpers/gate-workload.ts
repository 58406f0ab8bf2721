import fc from 'fast-check';
import type { LimitSpec } from '../../src/core/limit.js';
import { isTollgateError, type QueueTimeoutError } from '../../src/errors.js';
import { createGate, type ScheduleOptions } from '../../src/gate/gate.js';
import { ManualClock } from './manual-clock.js';

// Random gate workloads for the gate's property tests: arbitraries for configs and scripts, a runner
// that plays a script against a gate on a manual clock and records what happened to every call, and
// the per-limit cost arithmetic the checks need (a mirror of the documented cost rules).
//
// Every time the runner produces is an integer (integer start, integer clock moves, pauses and
// deadlines), so the gate arms its timers from integer times: a timer for a fractional start time
// fires at the next integer ms (the gate rounds delays up), which is the only timer lateness here.

/** Let promise reactions run (no time passes on the manual clock). */
export const flush = (): Promise<void> => new Promise<void>((resolve) => setImmediate(resolve));

/** Index 0 is "no key" (the default partition). */
export const KEYS: readonly (string | undefined)[] = [undefined, 'a', 'b', 'c'];

/** The tollgate codes with which the gate refuses a call without calling its fn. */
export const REFUSAL_CODES: ReadonlySet<string> = new Set([
  'ERR_QUEUE_FULL',
  'ERR_QUEUE_TIMEOUT',
  'ERR_ABORTED',
  'ERR_GATE_CLOSED',
  'ERR_INVALID_COST',
]);

export interface GateConfig {
  limits: LimitSpec[];
  perKey: LimitSpec[];
}

// ---------------------------------------------------------------------------------------------
// Cost arithmetic (as documented on ScheduleOptions.cost)

/** What a call of `cost` (the schedule option) costs in `unit`: requests default to 1, others to 0. */
export function unitCost(cost: ScheduleOptions['cost'], unit: string): number {
  if (cost === undefined) return unit === 'requests' ? 1 : 0;
  if (typeof cost === 'number') return unit === 'requests' ? cost : 0;
  return cost[unit] ?? (unit === 'requests' ? 1 : 0);
}

/** The largest cost one call may have under `spec` (token bucket: burst; others: limit). */
export function capacityOf(spec: LimitSpec): number {
  return spec.algorithm === 'token-bucket' ? (spec.burst ?? spec.limit) : spec.limit;
}

/** The smallest capacity among the limits counting `unit`, or undefined when none does. */
export function capFor(config: GateConfig, unit: string): number | undefined {
  let cap: number | undefined;
  for (const spec of [...config.limits, ...config.perKey]) {
    if ((spec.unit ?? 'requests') !== unit) continue;
    const c = capacityOf(spec);
    cap = cap === undefined ? c : Math.min(cap, c);
  }
  return cap;
}

// ---------------------------------------------------------------------------------------------
// Arbitraries

const unit01 = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });

export const TIMED_ALGORITHMS = [
  'token-bucket',
  'leaky-bucket',
  'fixed-window',
  'sliding-log',
  'sliding-window',
] as const;

const intervalArb = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 10, max: 1000 }) },
  { weight: 1, arbitrary: fc.double({ min: 5, max: 500, noNaN: true }) },
);

/** A time-based limit: small limit, random interval (sometimes fractional), sometimes in tokens. */
export const timedLimitArb: fc.Arbitrary<LimitSpec> = fc
  .record({
    algorithm: fc.constantFrom(...TIMED_ALGORITHMS),
    limit: fc.integer({ min: 1, max: 5 }),
    intervalMs: intervalArb,
    burst: fc.option(fc.integer({ min: 1, max: 6 }), { nil: undefined }),
    tokens: fc.oneof(
      { weight: 3, arbitrary: fc.constant(false) },
      { weight: 1, arbitrary: fc.constant(true) },
    ),
  })
  .map(({ algorithm, limit, intervalMs, burst, tokens }) => {
    // A tokens limit counts ten times as many units as a requests limit.
    const scale = tokens ? 10 : 1;
    const spec: LimitSpec = { algorithm, limit: limit * scale, intervalMs };
    if (algorithm === 'token-bucket' && burst !== undefined) spec.burst = burst * scale;
    if (tokens) spec.unit = 'tokens';
    return spec;
  });

/**
 * A time-based limit whose every admission time is an integer ms for integer inputs: GCRA with an
 * integer emission interval, fixed windows and sliding logs of an integer interval. (Used where
 * predictions must match actual starts to the ms.)
 */
export const integralLimitArb: fc.Arbitrary<LimitSpec> = fc
  .record({
    algorithm: fc.constantFrom('token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-log'),
    limit: fc.integer({ min: 1, max: 5 }),
    emissionMs: fc.integer({ min: 1, max: 200 }),
    intervalMs: fc.integer({ min: 10, max: 1000 }),
    burst: fc.option(fc.integer({ min: 1, max: 6 }), { nil: undefined }),
    tokens: fc.oneof(
      { weight: 3, arbitrary: fc.constant(false) },
      { weight: 1, arbitrary: fc.constant(true) },
    ),
  })
  .map(({ algorithm, limit, emissionMs, intervalMs, burst, tokens }) => {
    const scale = tokens ? 10 : 1;
    const units = limit * scale;
    const gcra = algorithm === 'token-bucket' || algorithm === 'leaky-bucket';
    // GCRA: intervalMs = units × emissionMs, so the emission interval intervalMs / units is an integer.
    const spec: LimitSpec = { algorithm, limit: units, intervalMs: gcra ? units * emissionMs : intervalMs };
    if (algorithm === 'token-bucket' && burst !== undefined) spec.burst = burst * scale;
    if (tokens) spec.unit = 'tokens';
    return spec;
  });

const concurrencyArb: fc.Arbitrary<LimitSpec> = fc
  .record({
    limit: fc.integer({ min: 1, max: 3 }),
    tokens: fc.oneof(
      { weight: 4, arbitrary: fc.constant(false) },
      { weight: 1, arbitrary: fc.constant(true) },
    ),
  })
  .map(({ limit, tokens }) =>
    tokens
      ? { algorithm: 'concurrency' as const, limit: limit * 10, unit: 'tokens' }
      : { algorithm: 'concurrency' as const, limit },
  );

function sometimes<T>(arb: fc.Arbitrary<T>, weight: number): fc.Arbitrary<T | undefined> {
  return fc.oneof({ weight: 10 - weight, arbitrary: fc.constant(undefined) }, { weight, arbitrary: arb });
}

/** Insert `extra` (if any) into `specs` at position `at` modulo the length + 1. */
function insertAt(specs: LimitSpec[], extra: LimitSpec | undefined, at: number): LimitSpec[] {
  if (extra === undefined) return specs;
  const i = at % (specs.length + 1);
  return [...specs.slice(0, i), extra, ...specs.slice(i)];
}

/** 1-2 global time-based limits and 0-1 per-key ones; sometimes a concurrency limit at either level. */
export const configArb: fc.Arbitrary<GateConfig> = fc
  .record({
    global: fc.array(timedLimitArb, { minLength: 1, maxLength: 2 }),
    perKey: fc.array(timedLimitArb, { minLength: 0, maxLength: 1 }),
    globalConcurrency: sometimes(concurrencyArb, 3),
    keyConcurrency: sometimes(concurrencyArb, 2),
    at: fc.nat(5),
  })
  .map(({ global, perKey, globalConcurrency, keyConcurrency, at }) => ({
    limits: insertAt(global, globalConcurrency, at),
    perKey: insertAt(perKey, keyConcurrency, at),
  }));

export interface CostGen {
  /** `default`: no cost option; `number`: a number of requests; `record`: `{ tokens, requests? }`. */
  form: 'default' | 'number' | 'record';
  /** Fractions of the capacity (0..1), turned into integer costs against the limits at schedule time. */
  requests: number;
  tokens: number;
  withRequests: boolean;
  /** One more than the capacity of some unit: must be refused with ERR_INVALID_COST. */
  over: boolean;
}

export const costGenArb: fc.Arbitrary<CostGen> = fc.record({
  form: fc.constantFrom('default', 'default', 'number', 'record'),
  requests: unit01,
  tokens: unit01,
  withRequests: fc.boolean(),
  over: fc.oneof({ weight: 30, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
});

/** Turn a CostGen into a schedule `cost` option under `config`. */
export function costFor(gen: CostGen, config: GateConfig): ScheduleOptions['cost'] {
  const capRequests = capFor(config, 'requests');
  const capTokens = capFor(config, 'tokens');
  if (gen.over) {
    if (capTokens !== undefined && gen.form === 'record') return { tokens: capTokens + 1 };
    if (capRequests !== undefined) return capRequests + 1;
  }
  // n in 0..cap (0 is a legal cost); cap 3 stands in for a unit no limit counts.
  const pick = (u: number, cap: number | undefined) => Math.floor(u * ((cap ?? 3) + 1));
  if (gen.form === 'default') return undefined;
  if (gen.form === 'number') return pick(gen.requests, capRequests);
  const cost: Record<string, number> = { tokens: pick(gen.tokens, capTokens) };
  if (gen.withRequests) cost['requests'] = pick(gen.requests, capRequests);
  return cost;
}

export type Step =
  | {
      kind: 'schedule';
      cost: CostGen;
      priority: number;
      /** Index into KEYS. */
      key: number;
      maxQueueTimeMs: number | undefined;
      abortable: boolean;
      /** `async`: returns a promise the script settles with `finish`; `sync`: returns a value; `throw`: throws. */
      fn: 'async' | 'sync' | 'throw';
      /** How many such calls to schedule back to back. */
      repeat: number;
    }
  | { kind: 'abort'; pick: number }
  | { kind: 'advance'; ms: number }
  | { kind: 'pause'; key: number; ms: number }
  | { kind: 'resume'; key: number }
  | { kind: 'finish'; pick: number; count: number; fail: boolean }
  | { kind: 'setLimits'; which: 'limits' | 'perKey' | 'both'; config: GateConfig }
  | { kind: 'close'; queued: 'run' | 'reject' };

const scheduleArb: fc.Arbitrary<Step> = fc.record({
  kind: fc.constant('schedule' as const),
  cost: costGenArb,
  priority: fc.constantFrom(0, 0, 0, 1, 2),
  key: fc.nat(3),
  maxQueueTimeMs: fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 50 }) },
    { weight: 2, arbitrary: fc.integer({ min: 0, max: 1500 }) },
  ),
  abortable: fc.boolean(),
  fn: fc.constantFrom('async', 'async', 'async', 'sync', 'throw'),
  repeat: fc.oneof(
    { weight: 3, arbitrary: fc.constant(1) },
    { weight: 1, arbitrary: fc.integer({ min: 2, max: 5 }) },
  ),
});

const advanceArb: fc.Arbitrary<Step> = fc.record({
  kind: fc.constant('advance' as const),
  ms: fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min: 0, max: 20 }) },
    { weight: 2, arbitrary: fc.integer({ min: 0, max: 300 }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 2000 }) },
  ),
});

export interface StepOptions {
  /** Include setLimits steps (another random config for the global limits, the per-key ones, or both). */
  setLimits: boolean;
  /** Sometimes close the gate (queued: 'run' or 'reject') in the second half of the script. */
  close: boolean;
}

export function stepArb(options: StepOptions): fc.Arbitrary<Step> {
  const arbs: fc.WeightedArbitrary<Step>[] = [
    { weight: 30, arbitrary: scheduleArb },
    { weight: 15, arbitrary: advanceArb },
    {
      weight: 9,
      arbitrary: fc.record({
        kind: fc.constant('finish' as const),
        pick: unit01,
        count: fc.integer({ min: 1, max: 3 }),
        fail: fc.oneof(
          { weight: 4, arbitrary: fc.constant(false) },
          { weight: 1, arbitrary: fc.constant(true) },
        ),
      }),
    },
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('abort' as const), pick: unit01 }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('pause' as const),
        key: fc.nat(3),
        ms: fc.integer({ min: 0, max: 2000 }),
      }),
    },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('resume' as const), key: fc.nat(3) }) },
  ];
  if (options.setLimits) {
    arbs.push({
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('setLimits' as const),
        which: fc.constantFrom('limits', 'perKey', 'both'),
        config: configArb,
      }),
    });
  }
  return fc.oneof(...arbs);
}

export interface Workload {
  startMs: number;
  config: GateConfig;
  maxQueue: number | undefined;
  maxQueueTimeMs: number | undefined;
  steps: Step[];
}

export function workloadArb(options: StepOptions = { setLimits: true, close: true }): fc.Arbitrary<Workload> {
  return fc
    .record({
      startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 1_000_000 })),
      config: configArb,
      maxQueue: sometimes(fc.integer({ min: 1, max: 4 }), 2),
      maxQueueTimeMs: sometimes(fc.integer({ min: 0, max: 3000 }), 2),
      steps: fc.array(stepArb(options), { minLength: 1, maxLength: 40, size: 'large' }),
      close: sometimes(
        fc.record({ at: unit01, queued: fc.constantFrom<'run' | 'reject'>('run', 'reject') }),
        2,
      ),
    })
    .map(({ close, steps, ...rest }) => {
      if (!options.close || close === undefined) return { ...rest, steps };
      // Close somewhere in the second half of the script: later schedules are refused ERR_GATE_CLOSED.
      const at = Math.floor(steps.length * (0.5 + close.at / 2));
      const closeStep: Step = { kind: 'close', queued: close.queued };
      return { ...rest, steps: [...steps.slice(0, at), closeStep, ...steps.slice(at)] };
    });
}

// ---------------------------------------------------------------------------------------------
// The runner

/** A manual clock that also remembers which callback each pending timer will run. */
export class TrackingClock extends ManualClock {
  readonly armed = new Map<unknown, () => void>();

  override setTimeout(fn: () => void, delayMs: number): unknown {
    let handle: unknown;
    const fire = () => {
      this.armed.delete(handle);
      fn();
    };
    handle = super.setTimeout(fire, delayMs);
    this.armed.set(handle, fn);
    return handle;
  }

  override clearTimeout(handle: unknown): void {
    this.armed.delete(handle);
    super.clearTimeout(handle);
  }
}

export interface CallRecord {
  /** Schedule order. */
  readonly id: number;
  readonly key: string | undefined;
  readonly priority: number;
  readonly scheduledAt: number;
  /** The effective deadline to start (scheduledAt + effective maxQueueTimeMs); Infinity when none. */
  readonly deadline: number;
  readonly maxQueueTimeMs: number;
  readonly cost: ScheduleOptions['cost'];
  readonly fnKind: 'async' | 'sync' | 'throw';
  readonly controller: AbortController | undefined;
  /** The value the fn resolves with and the error it throws or rejects with. */
  readonly value: string;
  readonly error: Error;
  fnCalls: number;
  startAt: number | undefined;
  /** Position of the start in the sequence of events (schedules, starts, finishes, refusals). */
  startEv: number | undefined;
  /** Index of the limits in force at the start (into RunTrace.configs). */
  startSegment: number | undefined;
  /** Position of the finish (the fn's promise settled by the script, or a sync fn returning). */
  finishEv: number | undefined;
  /** How the fn finished: true = value, false = error. */
  finishedOk: boolean | undefined;
  finish: ((ok: boolean) => void) | undefined;
  settleCount: number;
  outcome: { ok: true; value: unknown } | { ok: false; error: unknown } | undefined;
  /** Gate clock time of the refusal (onRefused), or the schedule time for a refusal without an event. */
  rejectedAt: number | undefined;
  /** Positions of the schedule() call and of the refusal in the same sequence. */
  scheduleEv: number;
  rejectedEv: number | undefined;
}

export interface StepSnapshot {
  step: number;
  now: number;
  pendingTimers: number;
  /** Distinct callbacks among the pending timers (one per partition holding a timer). */
  timerCallbacks: number;
  queuedPartitions: number;
  statsQueued: number;
  sumPartitionQueued: number;
  modelQueued: number;
}

export interface RunTrace {
  workload: Workload;
  calls: CallRecord[];
  /** Limits in force, one entry per segment (a setLimits starts a new one). */
  configs: GateConfig[];
  snapshots: StepSnapshot[];
  closed: boolean;
  closeSettled: boolean;
  /** Left over after the final drain (should all be 0). */
  final: { pendingTimers: number; queued: number; inFlight: number | undefined; started: number };
}

function queueTimeMsFor(step: number | undefined, gateDefault: number | undefined): number {
  return step ?? gateDefault ?? Infinity;
}

/** Play `workload` against a fresh gate on a manual clock; then resume, drain, finish everything. */
export async function runWorkload(workload: Workload): Promise<RunTrace> {
  const clock = new TrackingClock(workload.startMs);
  const options: Parameters<typeof createGate>[0] = {
    clock,
    limits: workload.config.limits,
    perKey: workload.config.perKey,
  };
  if (workload.maxQueue !== undefined) options.maxQueue = workload.maxQueue;
  if (workload.maxQueueTimeMs !== undefined) options.maxQueueTimeMs = workload.maxQueueTimeMs;
  const gate = createGate(options);
  // One sequence numbers schedules, starts, finishes and refusals, to order events of one instant.
  let ev = 0;
  const refusedAt = new Map<unknown, { at: number; ev: number }>();
  gate.onRefused((event) => refusedAt.set(event.error, { at: clock.now(), ev: ev++ }));

  const calls: CallRecord[] = [];
  const configs: GateConfig[] = [workload.config];
  const snapshots: StepSnapshot[] = [];
  let closed = false;
  let closeSettled = false;

  const schedule = (step: Extract<Step, { kind: 'schedule' }>) => {
    const config = configs[configs.length - 1]!;
    const cost = costFor(step.cost, config);
    const controller = step.abortable ? new AbortController() : undefined;
    const key = KEYS[step.key];
    const maxQueueTimeMs = queueTimeMsFor(step.maxQueueTimeMs, workload.maxQueueTimeMs);
    const id = calls.length;
    const rec: CallRecord = {
      id,
      key,
      priority: step.priority,
      scheduledAt: clock.now(),
      deadline: clock.now() + maxQueueTimeMs,
      maxQueueTimeMs,
      cost,
      fnKind: step.fn,
      controller,
      value: `value-${id}`,
      error: new Error(`fn-error-${id}`),
      fnCalls: 0,
      startAt: undefined,
      startEv: undefined,
      startSegment: undefined,
      finishEv: undefined,
      finishedOk: undefined,
      finish: undefined,
      settleCount: 0,
      outcome: undefined,
      rejectedAt: undefined,
      scheduleEv: ev++,
      rejectedEv: undefined,
    };
    calls.push(rec);
    const fn = () => {
      rec.fnCalls++;
      if (rec.fnCalls > 1) return rec.value;
      rec.startAt = clock.now();
      rec.startEv = ev++;
      rec.startSegment = configs.length - 1;
      if (rec.fnKind === 'sync') {
        rec.finishEv = ev++;
        rec.finishedOk = true;
        return rec.value;
      }
      if (rec.fnKind === 'throw') {
        rec.finishEv = ev++;
        rec.finishedOk = false;
        throw rec.error;
      }
      return new Promise<string>((resolve, reject) => {
        rec.finish = (ok) => {
          rec.finish = undefined;
          rec.finishEv = ev++;
          rec.finishedOk = ok;
          if (ok) resolve(rec.value);
          else reject(rec.error);
        };
      });
    };
    const opts: ScheduleOptions = { priority: step.priority };
    if (cost !== undefined) opts.cost = cost;
    if (key !== undefined) opts.key = key;
    if (step.maxQueueTimeMs !== undefined) opts.maxQueueTimeMs = step.maxQueueTimeMs;
    if (controller !== undefined) opts.signal = controller.signal;
    // Every other call with nothing but defaults goes through `schedule(fn)` (no options object).
    const bare = Object.keys(opts).length === 1 && step.priority === 0 && id % 2 === 0;
    gate.schedule(fn, bare ? undefined : opts).then(
      (value) => {
        rec.settleCount++;
        rec.outcome = { ok: true, value };
      },
      (error: unknown) => {
        rec.settleCount++;
        rec.outcome = { ok: false, error };
        const refusal = refusedAt.get(error);
        rec.rejectedAt = refusal?.at ?? rec.scheduledAt;
        rec.rejectedEv = refusal?.ev ?? rec.scheduleEv;
      },
    );
  };

  const inFlight = () => calls.filter((c) => c.finish !== undefined);

  const snapshot = (step: number) => {
    let queuedPartitions = 0;
    let sumPartitionQueued = 0;
    for (const key of KEYS) {
      const queued = gate.stats(key).partition.queued;
      sumPartitionQueued += queued;
      if (queued > 0) queuedPartitions++;
    }
    snapshots.push({
      step,
      now: clock.now(),
      pendingTimers: clock.pendingTimers,
      timerCallbacks: new Set(clock.armed.values()).size,
      queuedPartitions,
      statsQueued: gate.stats().queued,
      sumPartitionQueued,
      modelQueued: calls.filter((c) => c.settleCount === 0 && c.fnCalls === 0).length,
    });
  };

  for (let i = 0; i < workload.steps.length; i++) {
    const step = workload.steps[i]!;
    switch (step.kind) {
      case 'schedule':
        for (let n = 0; n < step.repeat; n++) schedule(step);
        break;
      case 'abort': {
        // Mostly a call still queued; sometimes one that has started or settled (a no-op).
        const abortable = calls.filter(
          (c) =>
            c.controller !== undefined &&
            !c.controller.signal.aborted &&
            (step.pick < 0.2 || (c.fnCalls === 0 && c.settleCount === 0)),
        );
        const target = abortable[Math.floor(step.pick * abortable.length)];
        if (target !== undefined) target.controller!.abort(new Error(`abort-${target.id}`));
        break;
      }
      case 'advance':
        clock.advance(step.ms);
        break;
      case 'pause':
        gate.pause(clock.now() + step.ms, KEYS[step.key]);
        break;
      case 'resume':
        gate.resume(KEYS[step.key]);
        break;
      case 'finish': {
        const running = inFlight();
        const from = Math.floor(step.pick * running.length);
        for (const rec of running.slice(from, from + step.count)) rec.finish!(!step.fail);
        break;
      }
      case 'setLimits': {
        const current = configs[configs.length - 1]!;
        const next: GateConfig = {
          limits: step.which === 'perKey' ? current.limits : step.config.limits,
          perKey: step.which === 'limits' ? current.perKey : step.config.perKey,
        };
        // The new segment begins before re-planning, which may start calls at once.
        configs.push(next);
        if (step.which === 'limits') gate.setLimits({ limits: next.limits });
        else if (step.which === 'perKey') gate.setLimits({ perKey: next.perKey });
        else gate.setLimits({ limits: next.limits, perKey: next.perKey });
        break;
      }
      case 'close':
        if (!closed) {
          closed = true;
          gate.close({ queued: step.queued }).then(() => {
            closeSettled = true;
          });
        }
        break;
    }
    await flush();
    snapshot(i);
  }

  // Wind down: lift every pause, then alternate running the timers and finishing what is in flight
  // until nothing changes.
  gate.resume();
  for (const key of KEYS) if (key !== undefined) gate.resume(key);
  await flush();
  for (let round = 0; round < 10_000; round++) {
    const fired = clock.runAll();
    await flush();
    const running = inFlight();
    for (const rec of running) rec.finish!(true);
    await flush();
    if (fired === 0 && running.length === 0) break;
  }
  snapshot(workload.steps.length);
  const stats = gate.stats();
  return {
    workload,
    calls,
    configs,
    snapshots,
    closed,
    closeSettled,
    final: {
      pendingTimers: clock.pendingTimers,
      queued: stats.queued,
      inFlight: stats.inFlight,
      started: stats.started,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Checks. Each returns a description of the first violation, or undefined.

/** The calls started while the limits of `segment` were in force, in start order. */
function startsFor(calls: readonly CallRecord[], segment: number): CallRecord[] {
  return calls
    .filter((c) => c.startSegment === segment)
    .sort((a, b) => (a.startEv as number) - (b.startEv as number));
}

const describeCall = (c: CallRecord) =>
  `#${c.id}(key=${c.key ?? '-'}, prio=${c.priority}, cost=${JSON.stringify(c.cost)}, scheduled@${c.scheduledAt}, start@${c.startAt})`;

/**
 * GCRA limits record a start credited to the time its timer was due, which on this clock is less
 * than 1 ms before the timer fired (the gate rounds delays up to whole ms): a start observed at `a`
 * may count at any time in (a - 1, a].
 */
export const GCRA_CREDIT_MS = 1;

/** Check one limit's promise over `starts` (already the starts it governs: one segment, one partition). */
export function checkLimit(spec: LimitSpec, starts: readonly CallRecord[]): string | undefined {
  const unit = spec.unit ?? 'requests';
  const taken = starts
    .map((c) => ({ at: c.startAt as number, cost: unitCost(c.cost, unit), call: c }))
    .filter((t) => t.cost > 0);
  const { limit } = spec;
  const intervalMs = spec.intervalMs ?? 0;
  const eps = 1e-9;
  switch (spec.algorithm) {
    case 'token-bucket': {
      const burst = spec.burst ?? limit;
      const ratePerMs = limit / intervalMs;
      for (let i = 0; i < taken.length; i++) {
        let units = 0;
        for (let j = i; j < taken.length; j++) {
          units += taken[j]!.cost;
          // Starts observed in [a_i, a_j] count within a span shorter than a_j - a_i + credit.
          const bound = burst + ratePerMs * (taken[j]!.at - taken[i]!.at + GCRA_CREDIT_MS);
          if (units > bound + eps * Math.max(1, bound)) {
            return `token bucket ${JSON.stringify(spec)}: ${units} units started in [${taken[i]!.at}, ${taken[j]!.at}] > ${bound}`;
          }
        }
      }
      return undefined;
    }
    case 'leaky-bucket': {
      const emissionMs = intervalMs / limit;
      for (let i = 0; i < taken.length; i++) {
        let units = 0;
        for (let j = i + 1; j < taken.length; j++) {
          units += taken[j - 1]!.cost;
          // Everything started from i up to j - 1 must have drained before j starts.
          const gap = taken[j]!.at - taken[i]!.at;
          const need = units * emissionMs - GCRA_CREDIT_MS;
          if (gap < need - eps * Math.max(1, Math.abs(need))) {
            return `leaky bucket ${JSON.stringify(spec)}: ${describeCall(taken[j]!.call)} only ${gap} ms after ${describeCall(taken[i]!.call)}, needs ${need}`;
          }
        }
      }
      return undefined;
    }
    case 'fixed-window':
    case 'sliding-window': {
      const perWindow = new Map<number, number>();
      for (const t of taken) {
        const window = Math.floor(t.at / intervalMs);
        const units = (perWindow.get(window) ?? 0) + t.cost;
        perWindow.set(window, units);
        if (units > limit) {
          return `${spec.algorithm} ${JSON.stringify(spec)}: ${units} units in aligned window ${window} (at ${t.at})`;
        }
      }
      return undefined;
    }
    case 'sliding-log': {
      for (const end of taken) {
        let units = 0;
        // An entry at t counts at x while t <= x < t + intervalMs (the core's own test).
        for (const t of taken) if (t.at <= end.at && t.at + intervalMs > end.at) units += t.cost;
        if (units > limit) {
          return `sliding log ${JSON.stringify(spec)}: ${units} units in the window ending at ${end.at}`;
        }
      }
      return undefined;
    }
    case 'concurrency': {
      for (const s of starts) {
        if (unitCost(s.cost, unit) === 0) continue;
        const at = s.startEv as number;
        let units = 0;
        for (const c of starts) {
          if ((c.startEv as number) <= at && (c.finishEv === undefined || c.finishEv > at)) {
            units += unitCost(c.cost, unit);
          }
        }
        if (units > limit) {
          return `concurrency ${JSON.stringify(spec)}: ${units} units in flight when ${describeCall(s)} started`;
        }
      }
      return undefined;
    }
  }
}

/** (a) Every limit's promise over the actual starts, segment by segment (limits in force at the start). */
export function checkLimits(trace: RunTrace): string | undefined {
  for (let segment = 0; segment < trace.configs.length; segment++) {
    const config = trace.configs[segment]!;
    const starts = startsFor(trace.calls, segment);
    for (const spec of config.limits) {
      const problem = checkLimit(spec, starts);
      if (problem) return `segment ${segment}, global ${problem}`;
    }
    for (const key of KEYS) {
      const partition = starts.filter((c) => c.key === key);
      for (const spec of config.perKey) {
        const problem = checkLimit(spec, partition);
        if (problem) return `segment ${segment}, key ${key ?? '(default)'}: per-key ${problem}`;
      }
    }
  }
  return undefined;
}

/** (b) Every call settles exactly once, with its fn's outcome or a refusal that never called fn. */
export function checkSettlement(trace: RunTrace): string | undefined {
  let fnCalled = 0;
  for (const c of trace.calls) {
    if (c.fnCalls > 1) return `${describeCall(c)}: fn called ${c.fnCalls} times`;
    fnCalled += c.fnCalls;
    if (c.settleCount !== 1) return `${describeCall(c)}: settled ${c.settleCount} times`;
    const outcome = c.outcome!;
    if (c.fnCalls === 1) {
      if (c.finishedOk === undefined) return `${describeCall(c)}: fn never finished (left in flight)`;
      if (c.finishedOk) {
        if (!outcome.ok || outcome.value !== c.value)
          return `${describeCall(c)}: fn returned ${c.value}, call settled with ${JSON.stringify(outcome)}`;
      } else if (outcome.ok || outcome.error !== c.error) {
        return `${describeCall(c)}: fn failed, call settled with ${String(outcome.ok ? outcome.value : outcome.error)}`;
      }
    } else {
      if (outcome.ok) return `${describeCall(c)}: resolved without calling fn`;
      const error = outcome.error;
      if (!isTollgateError(error) || !REFUSAL_CODES.has(error.code)) {
        return `${describeCall(c)}: refused with ${String(error)} (${isTollgateError(error) ? error.code : 'not a tollgate error'})`;
      }
    }
  }
  if (trace.closed && !trace.closeSettled) return 'close() never resolved';
  const { final } = trace;
  if (final.queued !== 0) return `${final.queued} calls still queued at the end`;
  if (final.inFlight !== undefined && final.inFlight !== 0)
    return `stats().inFlight ${final.inFlight} at the end`;
  if (final.started !== fnCalled) return `stats().started ${final.started} but ${fnCalled} fns were called`;
  return undefined;
}

/**
 * (c) Queue order: within one partition, a call A scheduled before a call B with
 * A.priority >= B.priority never starts after B (both started). This is FIFO among equal
 * priorities and "no barging": B arrived while A was queued or A had already started.
 */
export function checkOrder(trace: RunTrace): string | undefined {
  const started = trace.calls.filter((c) => c.startEv !== undefined);
  for (const a of started) {
    for (const b of started) {
      if (a.id < b.id && a.key === b.key && a.priority >= b.priority && a.startEv! > b.startEv!) {
        return `${describeCall(b)} started before ${describeCall(a)}`;
      }
    }
  }
  return undefined;
}

const isQueueTimeout = (c: CallRecord, predicted: boolean): boolean =>
  c.outcome !== undefined &&
  !c.outcome.ok &&
  isTollgateError(c.outcome.error) &&
  c.outcome.error.code === 'ERR_QUEUE_TIMEOUT' &&
  (c.outcome.error as QueueTimeoutError).predicted === predicted;

/**
 * (e) Timers: after every step, no partition holds two timers (distinct callbacks = pending timers),
 * no more timers than partitions with queued work, none when nothing is queued; the gate's queued
 * counts agree with each other and with the calls neither started nor settled.
 */
export function checkTimers(trace: RunTrace): string | undefined {
  for (const s of trace.snapshots) {
    const at = `after step ${s.step} (t=${s.now})`;
    if (s.timerCallbacks !== s.pendingTimers)
      return `${at}: ${s.pendingTimers} timers for ${s.timerCallbacks} partitions`;
    if (s.pendingTimers > s.queuedPartitions)
      return `${at}: ${s.pendingTimers} timers armed, ${s.queuedPartitions} partitions with queued calls`;
    if (s.statsQueued !== s.sumPartitionQueued)
      return `${at}: stats().queued ${s.statsQueued} but partitions hold ${s.sumPartitionQueued}`;
    if (s.statsQueued !== s.modelQueued)
      return `${at}: stats().queued ${s.statsQueued} but ${s.modelQueued} calls are neither started nor settled`;
  }
  return undefined;
}

/**
 * (f) Deadlines: a predicted QueueTimeoutError is raised at schedule time with predictedWaitMs >
 * maxQueueTimeMs (the call's own); no call starts after its deadline; no call is refused for its
 * deadline after that deadline has passed.
 */
export function checkDeadlines(trace: RunTrace): string | undefined {
  for (const c of trace.calls) {
    if (c.startAt !== undefined && c.startAt > c.deadline) {
      return `${describeCall(c)} started at ${c.startAt}, after its deadline ${c.deadline} (maxQueueTimeMs ${c.maxQueueTimeMs})`;
    }
  }
  for (const c of trace.calls) {
    const outcome = c.outcome;
    if (outcome === undefined || outcome.ok || !isTollgateError(outcome.error)) continue;
    if (outcome.error.code !== 'ERR_QUEUE_TIMEOUT') continue;
    const error = outcome.error as QueueTimeoutError;
    if (error.maxQueueTimeMs !== c.maxQueueTimeMs)
      return `${describeCall(c)}: error says maxQueueTimeMs ${error.maxQueueTimeMs}, call had ${c.maxQueueTimeMs}`;
    if (error.predicted) {
      if (!(error.predictedWaitMs > c.maxQueueTimeMs))
        return `${describeCall(c)}: predicted refusal with predictedWaitMs ${error.predictedWaitMs} <= maxQueueTimeMs ${c.maxQueueTimeMs}`;
      if (c.rejectedAt !== c.scheduledAt)
        return `${describeCall(c)}: predicted refusal at ${c.rejectedAt}, not at schedule time`;
    }
    if (c.rejectedAt! > c.deadline) {
      return `${describeCall(c)}: refused for its deadline ${c.deadline} only at ${c.rejectedAt}`;
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// (f) Calm workloads: nothing may take back a start the gate has promised.

/**
 * Workloads where the gate has promised every accepted call a start within its deadline and nothing
 * may take it back: no pause, no setLimits, no close, no concurrency limit, one priority, and no
 * contention between partitions for a global limit (all calls in one partition, or per-key limits
 * only: a prediction covers what is queued in the call's own partition). The limits put every
 * admission on a whole ms (`integralLimitArb`): a start due at a fractional time fires at the next
 * whole ms, and window limits count it there, so queued calls slip behind their predictions (up to
 * 1 ms per call queued ahead), which is timer lateness, not a broken promise.
 */
export function calmWorkloadArb(): fc.Arbitrary<Workload> {
  return fc
    .record({
      workload: workloadArb({ setLimits: false, close: false }),
      single: fc.boolean(),
      key: fc.nat(3),
      integralGlobal: fc.array(integralLimitArb, { minLength: 1, maxLength: 2 }),
      integralPerKey: fc.array(integralLimitArb, { minLength: 0, maxLength: 1 }),
    })
    .map(({ workload, single, key, integralGlobal, integralPerKey }) => {
      const config: GateConfig = single
        ? { limits: integralGlobal, perKey: integralPerKey }
        : { limits: [], perKey: [...integralPerKey, ...integralGlobal] };
      const steps = workload.steps
        .filter((step) => step.kind !== 'pause' && step.kind !== 'resume')
        .map((step) =>
          step.kind === 'schedule' ? { ...step, priority: 0, key: single ? key : step.key } : step,
        );
      return { ...workload, config, steps };
    });
}

/**
 * (f, calm workloads) An accepted call is never refused for its deadline later: every
 * ERR_QUEUE_TIMEOUT is a prediction made at schedule time.
 */
export function checkAcceptedStart(trace: RunTrace): string | undefined {
  for (const c of trace.calls) {
    if (isQueueTimeout(c, false)) {
      return `${describeCall(c)}: accepted with deadline ${c.deadline}, then refused at ${c.rejectedAt} (${String((c.outcome as { error: unknown }).error)})`;
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// (d) Abort workloads: deterministic scripts where the aborted calls can be left out.

export interface AbortCall {
  cost: CostGen;
  priority: number;
  key: number;
  maxQueueTimeMs: number | undefined;
  /** `now`: aborted right after schedule(); `instant`: at the end of its instant (before the clock moves). */
  abort: 'none' | 'now' | 'instant';
}

export interface AbortWorkload {
  startMs: number;
  /** `single`: global (and per-key) limits, every call in one partition; `many`: per-key limits only. */
  mode: 'single' | 'many';
  /**
   * True: limits whose admissions fall on whole ms (predictions then match the actual starts exactly)
   * and deadlines are used. False: any time-based limits, fractional intervals, no deadlines.
   */
  integral: boolean;
  singleKey: number;
  config: GateConfig;
  instants: { gapMs: number; calls: AbortCall[] }[];
}

const abortCallArb: fc.Arbitrary<AbortCall> = fc.record({
  cost: costGenArb.map((c) => ({ ...c, over: false })),
  priority: fc.constantFrom(0, 0, 1, 2),
  key: fc.nat(3),
  maxQueueTimeMs: fc.oneof(
    { weight: 2, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.integer({ min: 0, max: 1500 }) },
  ),
  abort: fc.constantFrom('none', 'none', 'now', 'instant'),
});

export const abortWorkloadArb: fc.Arbitrary<AbortWorkload> = fc
  .record({
    startMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 1_000_000 })),
    mode: fc.constantFrom('single', 'many'),
    integral: fc.oneof(
      { weight: 3, arbitrary: fc.constant(true) },
      { weight: 1, arbitrary: fc.constant(false) },
    ),
    singleKey: fc.nat(3),
    global: fc.array(integralLimitArb, { minLength: 1, maxLength: 2 }),
    perKey: fc.array(integralLimitArb, { minLength: 0, maxLength: 1 }),
    keyOnly: fc.array(integralLimitArb, { minLength: 1, maxLength: 2 }),
    anyGlobal: fc.array(timedLimitArb, { minLength: 1, maxLength: 2 }),
    anyPerKey: fc.array(timedLimitArb, { minLength: 0, maxLength: 1 }),
    anyKeyOnly: fc.array(timedLimitArb, { minLength: 1, maxLength: 2 }),
    instants: fc.array(
      fc.record({
        gapMs: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 1000 })),
        calls: fc.array(abortCallArb, { minLength: 1, maxLength: 8, size: 'large' }),
      }),
      { minLength: 1, maxLength: 6, size: 'large' },
    ),
  })
  .map(({ startMs, mode, integral, singleKey, instants, ...limits }) => {
    const config: GateConfig = integral
      ? mode === 'single'
        ? { limits: limits.global, perKey: limits.perKey }
        : { limits: [], perKey: limits.keyOnly }
      : mode === 'single'
        ? { limits: limits.anyGlobal, perKey: limits.anyPerKey }
        : { limits: [], perKey: limits.anyKeyOnly };
    return { startMs, mode, integral, singleKey, config, instants };
  });

export type AbortOutcome =
  | { kind: 'started'; at: number; value: unknown }
  | { kind: 'refused'; code: string; predicted: boolean | undefined; predictedWaitMs: number | undefined };

export interface AbortRun {
  outcomes: Map<number, AbortOutcome>;
  /** Calls refused with ERR_ABORTED. */
  aborted: Set<number>;
  /** True when an immediately aborted call made the gate refuse another call while it was queued. */
  disturbed: boolean;
}

/**
 * Play an abort workload, leaving out the calls in `without` (their schedule and their abort).
 * Deadlines are dropped unless the limits are integral and no abort is deferred; priorities are
 * dropped when an abort is deferred (see below).
 */
export async function runAbortWorkload(w: AbortWorkload, without: ReadonlySet<number>): Promise<AbortRun> {
  const clock = new ManualClock(w.startMs);
  const gate = createGate({ clock, limits: w.config.limits, perKey: w.config.perKey });
  const refusals: unknown[] = [];
  gate.onRefused((event) => refusals.push(event.error));
  // A call aborted only at the end of its instant was queued meanwhile: later calls of the instant
  // queued behind it instead of starting at once, and a higher priority arriving then may overtake
  // them, or a deadline may refuse them. With no deadlines and one priority, aborting it before the
  // clock moves leaves them exactly where they would have been.
  const deferredAborts = w.instants.some((i) => i.calls.some((c) => c.abort === 'instant'));
  // Without whole-ms admissions a start at a fractional time fires at the next whole ms: window
  // limits then count it later than predicted, and predictions made before and after a re-plan
  // differ; deadlines would turn that into different refusals.
  const deadlines = w.integral && !deferredAborts;
  const outcomes = new Map<number, AbortOutcome>();
  const errors = new Map<number, unknown>();
  const windows: { id: number; refused: unknown[] }[] = [];
  let id = 0;
  for (const instant of w.instants) {
    clock.advance(instant.gapMs);
    const deferred: AbortController[] = [];
    for (const call of instant.calls) {
      const callId = id++;
      if (without.has(callId)) continue;
      const controller = call.abort === 'none' ? undefined : new AbortController();
      const key = KEYS[w.mode === 'single' ? w.singleKey : call.key];
      const opts: ScheduleOptions = { priority: deferredAborts ? 0 : call.priority };
      if (key !== undefined) opts.key = key;
      const cost = costFor(call.cost, w.config);
      if (cost !== undefined) opts.cost = cost;
      if (deadlines && call.maxQueueTimeMs !== undefined) opts.maxQueueTimeMs = call.maxQueueTimeMs;
      if (controller) opts.signal = controller.signal;
      const before = refusals.length;
      gate
        .schedule(() => {
          outcomes.set(callId, { kind: 'started', at: clock.now(), value: callId });
          return callId;
        }, opts)
        .then(undefined, (error: unknown) => {
          errors.set(callId, error);
          const e = error as Partial<QueueTimeoutError> & { code?: string };
          outcomes.set(callId, {
            kind: 'refused',
            code: String(e.code),
            predicted: e.predicted,
            predictedWaitMs: e.predictedWaitMs,
          });
        });
      if (call.abort === 'now') {
        controller!.abort(new Error('aborted at once'));
        windows.push({ id: callId, refused: refusals.slice(before) });
      } else if (controller) {
        deferred.push(controller);
      }
    }
    for (const controller of deferred) controller.abort(new Error('aborted at the end of the instant'));
  }
  clock.runAll();
  await flush();
  const aborted = new Set<number>();
  for (const [callId, outcome] of outcomes) {
    if (outcome.kind === 'refused' && outcome.code === 'ERR_ABORTED') aborted.add(callId);
  }
  // Refusals emitted while an immediately aborted call was queued must all be that call's own.
  const disturbed = windows.some((win) => win.refused.some((error) => error !== errors.get(win.id)));
  return { outcomes, aborted, disturbed };
}
