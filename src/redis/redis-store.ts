import { createLimit } from '../core/create-limit.js';
import { emissionIntervalMs } from '../core/gcra.js';
import type { LimitSpec } from '../core/limit.js';
import { countsWindow } from '../core/recount.js';
import { StoreUnavailableError } from '../errors.js';
import { ownUnits } from '../gate/schedule-options.js';
import { integer, invalid, nonEmptyString, onlyKnownKeys, plainObject } from '../validate.js';
import {
  adjustment,
  algorithmCodes,
  claimAdjust,
  claimRecount,
  claimRefund,
  coreOf,
  learnedId,
  learnedSpecText,
  levelCapacity,
  levelName,
  releasePermitsClaim,
} from './memory-store.js';
import { CommandRunner, connectRedis, loadedScript, type RedisClient } from './redis-client.js';
import { DigestCache, digest, partitionTag, pauseChannel, scopePart } from './redis-keys.js';
import {
  ADJUST_LUA,
  CLAIM_PROBE_LUA,
  LEARN_LUA,
  PAUSE_LUA,
  READ_PAUSE_LUA,
  RECOUNT_LUA,
  REFUND_LUA,
  RELEASE_PROBE_LUA,
  RESERVE_BUCKET_LUA,
  RESERVE_BUCKETS_LUA,
  RESERVE_LUA,
  TIME_LUA,
  WRITABLE_LUA,
} from './redis-scripts.js';
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

export interface RedisStoreOptions {
  /** An `ioredis` client (`Redis` or `Cluster`), or a URL such as `redis://127.0.0.1:6379`. */
  redis: RedisClient | string;
  /**
   * First part of every key's hash tag and of the pause channel: `{<keyPrefix>:<hash>}:...`.
   * Gates sharing a quota must share it. Letters, digits and `-_.:` only.
   * @default 'tollgate'
   */
  keyPrefix?: string;
  /**
   * A command not answered within this many ms fails with `StoreUnavailableError` (what a shared
   * gate's failure policy acts on). Integer >= 1.
   * @default 250
   */
  commandTimeoutMs?: number;
  /**
   * A concurrency permit held longer than this is given back (its process probably died). Longer
   * than the slowest call. Integer >= 1.
   * @default 300_000
   */
  concurrencyLeaseMs?: number;
  /**
   * A learned limit not learned again for this long is forgotten. Integer >= 1.
   * @default 600_000
   */
  learnedTtlMs?: number;
  /**
   * Keys live at least this long (ms) even when idle sooner. For tests that drive the store with an
   * explicit `now` (`reserveAt`) far from real time. Integer >= 1.
   * @default 1
   */
  minTtlMs?: number;
  /**
   * Send the decisions issued in the same tick (before Node runs I/O again) as one `EVALSHA` of a
   * script that decides them in order, each atomically and all or nothing, and splits the reply back:
   * fewer round trips and far less Redis time per decision under concurrency. Applies to calls
   * whose levels are all token or leaky buckets; on a Redis Cluster client only calls of the same
   * partition (one hash slot) share a batch. `false`: one `EVALSHA` per decision.
   * @default true
   */
  batch?: boolean;
}

/** At most this many decisions per batch: bounds the time one script holds Redis (a few µs each). */
const MAX_BATCH = 128;

const scripts = {
  reserve: loadedScript('reserve', RESERVE_LUA),
  reserveBuckets: loadedScript('reserve (buckets)', RESERVE_BUCKETS_LUA),
  reserveBucket: loadedScript('reserve (one bucket call)', RESERVE_BUCKET_LUA),
  refund: loadedScript('refund', REFUND_LUA),
  recount: loadedScript('recount', RECOUNT_LUA),
  adjust: loadedScript('adjust', ADJUST_LUA),
  pause: loadedScript('pause', PAUSE_LUA),
  readPause: loadedScript('readPause', READ_PAUSE_LUA),
  learn: loadedScript('learn', LEARN_LUA),
  claimProbe: loadedScript('claimProbe', CLAIM_PROBE_LUA),
  releaseProbe: loadedScript('releaseProbe', RELEASE_PROBE_LUA),
  time: loadedScript('time', TIME_LUA),
  writable: loadedScript('writable', WRITABLE_LUA),
};

/** A level's key suffix and its static script arguments, computed once per level object. */
interface LevelInfo {
  readonly suffix: string;
  readonly args: readonly string[];
  /** The largest cost the level admits (`levelCapacity`). */
  readonly capacity: number;
  /**
   * core/token-bucket.ts `fullMs` = (capacity - burst) × T: a full bucket's TAT lies that long
   * before now (0 but for a token bucket whose capacity exceeds its burst); and as text.
   */
  readonly fullMs: number;
  readonly fullArg: string;
  /** The bucket script's arguments for the last cost seen (costs repeat): slackMs, stepMs (then fullArg). */
  cost: number;
  slackArg: string;
  stepArg: string;
  /** The same two as numbers (NaN where the argument is '' or 'x'). */
  slackMs: number;
  stepMs: number;
}
const levelInfo = new WeakMap<StoreLevel, LevelInfo>();
function infoOf(level: StoreLevel): LevelInfo {
  let info = levelInfo.get(level);
  if (info === undefined) {
    const { algorithm, limit, intervalMs, burst } = level.spec;
    const capacity = levelCapacity(level);
    // The burst argument: 'burst', or 'burst:capacity' for a token bucket whose capacity exceeds
    // its burst (the scripts' level(); the layout stays five values per level).
    const wider = algorithm === 'token-bucket' && capacity !== burst;
    // The core's expression: (capacity - burst) (units) × T (ms/unit).
    const fullMs = wider ? (capacity - burst) * emissionIntervalMs(limit, intervalMs) : 0;
    info = {
      suffix: digest(levelName(level)),
      args: [
        algorithmCodes[algorithm],
        String(limit),
        String(intervalMs),
        wider ? `${burst}:${capacity}` : String(burst),
      ],
      capacity,
      fullMs,
      fullArg: String(fullMs),
      cost: 0,
      slackArg: '',
      stepArg: '',
      slackMs: Number.NaN,
      stepMs: Number.NaN,
    };
    levelInfo.set(level, info);
  }
  return info;
}

/**
 * The bucket script's two arguments for `cost` on a token or leaky bucket level, computed with the
 * TypeScript core's own expressions (core/token-bucket.ts, leaky-bucket.ts, gcra.ts) so the script
 * decides on the very doubles the core would: `String` prints the shortest decimal that reads back
 * as the same double, and Lua's `tonumber` reads it back exactly.
 */
function setBucketArgs(info: LevelInfo, spec: StoreLevel['spec'], cost: number): void {
  info.cost = cost;
  info.slackMs = Number.NaN;
  info.stepMs = Number.NaN;
  if (cost === 0) {
    // Not consulted.
    info.slackArg = '';
    info.stepArg = '';
    return;
  }
  const tokenBucket = spec.algorithm === 'token-bucket';
  if (cost > info.capacity) {
    // Never conforms: refused as capacity.
    info.slackArg = 'x';
    info.stepArg = '';
    return;
  }
  const emissionMs = emissionIntervalMs(spec.limit, spec.intervalMs);
  // τ (ms): burst × T for the token bucket (a full bucket), cost × T for the leaky bucket.
  const toleranceMs = tokenBucket ? spec.burst * emissionMs : cost * emissionMs;
  // stepMs = cost (units) × T (ms/unit): how far a take moves the TAT; slackMs = τ - cost·T,
  // negative for a cost above the burst of a token bucket with a larger capacity (it starts after
  // the bucket is full).
  const stepMs = cost * emissionMs;
  info.slackMs = toleranceMs - stepMs;
  info.stepMs = stepMs;
  info.slackArg = String(info.slackMs);
  info.stepArg = String(stepMs);
}

/** Script arguments of one kind of call, with blanks for the per-call values (starting at `at`). */
interface CallShape {
  readonly levels: readonly StoreLevel[];
  readonly template: (string | number)[];
  readonly at: number;
  /** Only token/leaky buckets and no learned limits seen: the lean script serves it. */
  buckets: boolean;
  /** A concurrency level: the reservation id names its lease. */
  readonly leased: boolean;
  /** The call's keys (levels' states, then meta hashes), its level and meta key counts as text. */
  readonly keys: readonly string[];
  readonly nArg: string;
  readonly mArg: string;
  /** The partition's hash tag: a Cluster batch holds calls of one tag only. */
  readonly tag: string;
}

/** A bucket decision waiting for its batch (or sent alone). */
interface Queued {
  readonly shape: CallShape;
  readonly nowArg: string;
  /** `nowArg` as a number; NaN for Redis time. */
  readonly nowMs: number;
  readonly maxWaitMs: number;
  readonly maxWaitArg: string;
  readonly partition: string;
  readonly costs: readonly number[];
  readonly options: ReserveOptions | undefined;
  readonly resolve: (decision: StoreDecision | Promise<StoreDecision>) => void;
  readonly reject: (error: unknown) => void;
  /** Refused by a bucket script with `ownFrom`: the general script decides it (see reserveWith). */
  general: boolean;
}

const NO_LEARNED: StoreReservation['learned'] = Object.freeze([]);

/** '0', '1', ... (class numbers, sent with every call of a batch). */
const classNumbers: readonly string[] = Array.from({ length: MAX_BATCH + 1 }, (_, i) => String(i));

function sameCosts(a: readonly number[], b: readonly number[]): boolean {
  if (a === b) return true;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const num = (value: unknown): number => (value === '-1' ? Infinity : Number(value));

/**
 * The server's clock (ms) from the bucket scripts' first answer, `TIME` in µs (0: every call had a
 * now override): s × 1000 + µs / 1000, the very operations the script does on the same integers.
 */
function timeOf(us: number): number {
  if (us === 0) return Number.NaN;
  const micros = us % 1_000_000;
  return ((us - micros) / 1_000_000) * 1000 + micros / 1000;
}

/** A level's bucket constants for `cost` (cached for the last cost seen). */
function bucketInfo(level: StoreLevel, cost: number): LevelInfo {
  const info = infoOf(level);
  if (info.cost !== cost) setBucketArgs(info, level.spec, cost);
  return info;
}

/** The TATs and steps of the call being answered (arrays reused: answers are computed one at a time). */
const scratch: number[] = [];
const scratchSteps: number[] = [];

let idCounter = 0;
const idPrefix = digest(`${process.pid}:${Math.random()}:${Date.now()}`).slice(0, 8);

/**
 * The Redis store: every decision runs in a Lua script that reads Redis server time, checks and
 * commits all levels atomically, and sets TTLs so idle state disappears (see `redis-scripts.ts` for
 * the scripts, `redis-keys.ts` for the key layout). One `EVALSHA` per decision, or one per batch of
 * the bucket decisions issued in the same tick (`batch`). Answers with promises; a failure or a
 * command slower than `commandTimeoutMs` rejects each decision it carried with
 * `StoreUnavailableError`.
 */
export class RedisStore implements Store {
  readonly keyPrefix: string;
  readonly commandTimeoutMs: number;
  readonly client: RedisClient;
  private readonly runner: CommandRunner;
  private readonly ownsClient: boolean;
  private readonly concurrencyLeaseMs: string;
  readonly learnedTtlMs: number;
  private readonly minTtlMs: string;
  private readonly digests = new DigestCache();
  private readonly listeners = new Set<(event: StorePauseEvent) => void>();
  /** Call shapes by partition (calls without a scope), and by partition and scope. */
  private readonly shapes = new Map<string, CallShape>();
  private readonly scopedShapes = new Map<string, CallShape>();
  /** Batch concurrent bucket decisions (see `RedisStoreOptions.batch`). */
  readonly batch: boolean;
  /** Bucket decisions of this tick, sent when it ends. */
  private queue: Queued[] = [];
  /** A Cluster runs one script on one hash slot only: its batches are split by partition. */
  private readonly cluster: boolean;
  private subscriber: RedisClient | undefined = undefined;
  private closed = false;
  private closing: Promise<void> | undefined = undefined;

  constructor(options: RedisStoreOptions) {
    const o = plainObject('options', options);
    const known = [
      'redis',
      'keyPrefix',
      'commandTimeoutMs',
      'concurrencyLeaseMs',
      'learnedTtlMs',
      'minTtlMs',
      'batch',
    ];
    onlyKnownKeys('options', o, known);
    const prefix = nonEmptyString('keyPrefix', o['keyPrefix'] ?? 'tollgate');
    if (!/^[\w\-.:]{1,100}$/.test(prefix) || prefix.includes('{') || prefix.includes('}')) {
      throw invalid('keyPrefix', 'letters, digits and `-_.:` (at most 100)', prefix);
    }
    this.keyPrefix = prefix;
    this.commandTimeoutMs = integer('commandTimeoutMs', o['commandTimeoutMs'] ?? 250, 1);
    this.concurrencyLeaseMs = String(integer('concurrencyLeaseMs', o['concurrencyLeaseMs'] ?? 300_000, 1));
    this.learnedTtlMs = integer('learnedTtlMs', o['learnedTtlMs'] ?? 600_000, 1);
    this.minTtlMs = String(integer('minTtlMs', o['minTtlMs'] ?? 1, 1));
    const batch = o['batch'] ?? true;
    if (typeof batch !== 'boolean') throw invalid('batch', 'a boolean', batch);
    this.batch = batch;
    const redis = o['redis'];
    if (typeof redis === 'string') {
      // ioredis reads '' as "localhost, default port": a missing setting must not connect there.
      if (redis.trim() === '') throw invalid('redis', 'an ioredis client or a redis:// URL', redis);
      this.client = connectRedis(redis);
      this.ownsClient = true;
    } else if (typeof (redis as RedisClient | null)?.call === 'function') {
      this.client = redis as RedisClient;
      this.ownsClient = false;
    } else {
      throw invalid('redis', 'an ioredis client or a redis:// URL', redis);
    }
    this.runner = new CommandRunner(this.client, this.commandTimeoutMs, Object.values(scripts));
    this.cluster = (this.client as { isCluster?: boolean }).isCluster === true;
    // A client we own reports errors through failed commands; without a listener ioredis logs them.
    if (this.ownsClient) this.client.on('error', () => {});
  }

  /** Commands sent so far (the bench divides it by decisions: round trips per decision). */
  get commandsSent(): number {
    return this.runner.commands;
  }

  reserve(
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    options?: ReserveOptions,
  ): Promise<StoreDecision> {
    return this.reserveWith('', partition, levels, costs, maxWaitMs, options);
  }

  reserveAt(
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    now: number,
    options?: ReserveOptions,
  ): Promise<StoreDecision> {
    return this.reserveWith(String(now), partition, levels, costs, maxWaitMs, options);
  }

  refund(reservation: StoreReservation, which: 'all' | 'untimed' = 'all'): Promise<void> {
    return this.refundWith('', reservation, which);
  }

  refundAt(reservation: StoreReservation, now: number, which: 'all' | 'untimed' = 'all'): Promise<void> {
    return this.refundWith(String(now), reservation, which);
  }

  recount(reservation: StoreReservation, marginMs: number, startedAt?: number): Promise<void> {
    return this.recountWith('', reservation, marginMs, startedAt);
  }

  recountAt(reservation: StoreReservation, marginMs: number, now: number, startedAt?: number): Promise<void> {
    return this.recountWith(String(now), reservation, marginMs, startedAt);
  }

  adjust(
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs?: number,
    startedAt?: number,
  ): Promise<void> {
    return this.adjustWith('', reservation, units, recountMarginMs, startedAt);
  }

  adjustAt(
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs: number | undefined,
    now: number,
    startedAt?: number,
  ): Promise<void> {
    return this.adjustWith(String(now), reservation, units, recountMarginMs, startedAt);
  }

  pause(partition: string, untilMs: number, scope = ''): Promise<StorePause> {
    return this.pauseWith('', 'until', partition, untilMs, scope);
  }

  pauseFor(partition: string, durationMs: number, scope = ''): Promise<StorePause> {
    return this.pauseWith('', 'for', partition, durationMs, scope);
  }

  /** `pause` at an explicit now (tests). */
  pauseAt(partition: string, untilMs: number, now: number, scope = ''): Promise<StorePause> {
    return this.pauseWith(String(now), 'until', partition, untilMs, scope);
  }

  async pausedUntil(partition: string, scope = ''): Promise<StorePause> {
    this.checkOpen();
    const reply = (await this.runner.evalsha(scripts.readPause, 1, [this.pauseId(partition, scope), ''])) as [
      string,
      string,
    ];
    return { untilMs: Number(reply[0]), serverNow: Number(reply[1]) };
  }

  pauseId(partition: string, scope = ''): string {
    return `${this.tagOf(partition)}:m:${this.scopeOf(scope)}`;
  }

  onPause(listener: (event: StorePauseEvent) => void): () => void {
    this.listeners.add(listener);
    this.subscribe();
    return () => {
      this.listeners.delete(listener);
    };
  }

  learn(partition: string, spec: LimitSpec, options?: LearnOptions): Promise<boolean> {
    return this.learnWith('', partition, spec, options);
  }

  /** `learn` at an explicit now (tests). */
  learnAt(partition: string, spec: LimitSpec, now: number, options?: LearnOptions): Promise<boolean> {
    return this.learnWith(String(now), partition, spec, options);
  }

  async writable(): Promise<void> {
    this.checkOpen();
    await this.runner.evalsha(scripts.writable, 1, [`{${this.keyPrefix}}:probe`]);
  }

  async time(): Promise<number> {
    this.checkOpen();
    return Number(await this.runner.evalsha(scripts.time, 0, []));
  }

  /**
   * Load every script now (the first command waits for that anyway: scripts run in the order they
   * were asked for, which a NOSCRIPT retry would break; see `CommandRunner`).
   */
  preload(): Promise<void> {
    return this.runner.load();
  }

  close(): Promise<void> {
    // A second close resolves with the first (which may wait for commands in flight).
    this.closing ??= this.closeNow();
    return this.closing;
  }

  private async closeNow(): Promise<void> {
    this.closed = true;
    this.listeners.clear();
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    subscriber?.disconnect();
    this.flush();
    // Recounts, refunds and adjustments in flight land first (each within the command timeout):
    // rejected here, they would still run in Redis, but as failures reported to their callers.
    await this.runner.settled();
    this.runner.abandon();
    if (this.ownsClient) await this.runner.quit();
  }

  // ---------------------------------------------------------------------------------------------

  private checkOpen(): void {
    if (this.closed) throw new StoreUnavailableError('Redis store is closed');
  }

  private tagOf(partition: string): string {
    return partitionTag(this.keyPrefix, this.digests.get(partition));
  }

  private scopeOf(scope: string): string {
    return scopePart(scope === '' ? undefined : this.digests.get(scope));
  }

  /** The cached script arguments of calls on `levels` in `partition` and `scope`. */
  private shapeOf(partition: string, scope: string, levels: readonly StoreLevel[]): CallShape {
    // Calls without a scope (most) are looked up by partition alone: no key to build per call.
    const shapes = scope === '' ? this.shapes : this.scopedShapes;
    const name = scope === '' ? partition : `${partition}\u0000${scope}`;
    const cached = shapes.get(name);
    if (cached !== undefined && cached.levels === levels) return cached;
    const tag = this.tagOf(partition);
    const scopeId = this.scopeOf(scope);
    const n = levels.length;
    const buckets = levels.every(
      (l) => l.spec.algorithm === 'token-bucket' || l.spec.algorithm === 'leaky-bucket',
    );
    const template: (string | number)[] = [scripts.reserve.sha, 0];
    for (let i = 0; i < n; i++) template.push(`${tag}:s:${infoOf(levels[i]!).suffix}`);
    if (scope !== '') template.push(`${tag}:m:-`);
    template.push(`${tag}:m:${scopeId}`);
    template[1] = template.length - 2;
    const at = template.length;
    // nowOverride, maxWaitMs, id and units are filled per call (see reserveWith).
    // ARGV 8 and 9 (ReserveOptions.ownFrom) are filled per call when given.
    template.push(
      '',
      '',
      String(n),
      scope === '' ? '1' : '2',
      '',
      this.concurrencyLeaseMs,
      this.minTtlMs,
      '',
      '',
      '',
    );
    for (let i = 0; i < n; i++) {
      const args = infoOf(levels[i]!).args;
      template.push(args[0]!, args[1]!, args[2]!, args[3]!, '');
    }
    const leased = levels.some((l) => l.spec.algorithm === 'concurrency');
    const keys = template.slice(2, at) as string[];
    const shape: CallShape = {
      levels,
      template,
      at,
      buckets,
      leased,
      keys,
      nArg: String(n),
      mArg: String(keys.length - n),
      tag,
    };
    // Bounded: a burst of new keys clears it (rebuilding a shape costs a few digests).
    if (shapes.size >= 10_000) shapes.clear();
    shapes.set(name, shape);
    return shape;
  }

  private reserveWith(
    nowArg: string,
    partition: string,
    levels: readonly StoreLevel[],
    costs: readonly number[],
    maxWaitMs: number,
    options: ReserveOptions | undefined,
  ): Promise<StoreDecision> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('Redis store is closed'));
    let own: number;
    let maxWait: number;
    try {
      own = ownWaitOf(options);
      maxWait = waitBoundOf(maxWaitMs);
    } catch (error) {
      return Promise.reject(error);
    }
    const shape = this.shapeOf(partition, options?.scope ?? '', levels);
    if (!shape.buckets) {
      // Bucket calls asked for earlier in this tick go first: one connection runs them in order.
      if (this.queue.length > 0) this.flush();
      return this.reserveGeneral(shape, nowArg, partition, costs, maxWaitMs, options);
    }
    // The bucket scripts have no shared/own split (ReserveOptions.ownFrom), but a call they can
    // start within ownWaitMs is decided the same either way: they decide that (batched, the common
    // case), and a call they would refuse goes to the general script, which says who held it.
    const bound = Math.min(maxWait, own);
    return new Promise<StoreDecision>((resolve, reject) => {
      const queued: Queued = {
        shape,
        nowArg,
        nowMs: nowArg === '' ? Number.NaN : Number(nowArg),
        maxWaitMs,
        // -1 means no bound; a deadline already past is a bound of 0.
        maxWaitArg: Number.isFinite(bound) ? String(bound) : '-1',
        partition,
        costs,
        options,
        resolve,
        reject,
        general: false,
      };
      if (!this.batch) {
        this.send([queued]);
        return;
      }
      // The first decision of the tick schedules the flush: after every microtask of this tick (so
      // the answers of one reply, each issuing its next decision, land in one batch).
      if (this.queue.length === 0) process.nextTick(this.flush);
      this.queue.push(queued);
    });
  }

  /** Send the queued decisions: one batch, or one per partition on a Cluster, at most MAX_BATCH each. */
  private readonly flush = (): void => {
    const queue = this.queue;
    if (queue.length === 0) return;
    this.queue = [];
    if (this.closed) {
      const error = new StoreUnavailableError('Redis store is closed');
      for (const q of queue) q.reject(error);
      return;
    }
    if (!this.cluster) {
      for (let i = 0; i < queue.length; i += MAX_BATCH) this.send(queue.slice(i, i + MAX_BATCH));
      return;
    }
    const byTag = new Map<string, Queued[]>();
    for (const q of queue) {
      const group = byTag.get(q.shape.tag);
      if (group === undefined) byTag.set(q.shape.tag, [q]);
      else group.push(q);
    }
    for (const group of byTag.values()) {
      for (let i = 0; i < group.length; i += MAX_BATCH) this.send(group.slice(i, i + MAX_BATCH));
    }
  };

  /** One EVALSHA of a bucket script for `batch`; its reply is split back into the decisions. */
  private send(batch: readonly Queued[]): void {
    const one = batch.length === 1;
    this.runner.evalshaArgs(
      one ? scripts.reserveBucket : scripts.reserveBuckets,
      one ? this.argsOfOne(batch[0]!) : this.argsOfBatch(batch),
      (reply) => this.split(batch, reply as (string | number)[]),
      (error) => {
        // Rejecting a decision already answered does nothing: only the unanswered ones fail.
        for (const q of batch) q.reject(error);
      },
      (reply) => this.undoLate(batch, reply),
    );
  }

  /**
   * The reply of a batch its callers gave up on (the command timed out, and Redis ran it later):
   * nobody uses its reservations, so each is refunded. Exact for concurrency permits and windows;
   * a bucket gives back only its latest take (see `refund`), the rest is spent as if sent.
   */
  private undoLate(batch: readonly Queued[], reply: unknown): void {
    const granted: StoreReservation[] = [];
    const undo = (decision: StoreDecision | Promise<StoreDecision>): void => {
      if (!(decision instanceof Promise) && decision.ok) granted.push(decision);
    };
    const shadows = batch.map((q): Queued => ({ ...q, resolve: undo, reject: () => {}, general: false }));
    this.split(shadows, reply as (string | number)[], true);
    // Latest first: each is then its bucket's latest take, which a refund gives back.
    for (let i = granted.length - 1; i >= 0; i--) this.refund(granted[i]!).catch(() => {});
  }

  /** The one-call bucket script's arguments. */
  private argsOfOne(q: Queued): (string | number)[] {
    const { shape, costs } = q;
    const keys = shape.keys;
    const args: (string | number)[] = [scripts.reserveBucket.sha, keys.length, ...keys];
    args.push(this.minTtlMs, q.nowArg, q.maxWaitArg);
    this.pushLevelArgs(args, shape.levels, costs);
    return args;
  }

  /** Each level's slackMs, stepMs and fullMs for `costs`. */
  private pushLevelArgs(
    args: (string | number)[],
    levels: readonly StoreLevel[],
    costs: readonly number[],
  ): void {
    for (let i = 0; i < levels.length; i++) {
      const info = bucketInfo(levels[i]!, costs[i]!);
      args.push(info.slackArg, info.stepArg, info.fullArg);
    }
  }

  /** The bucket script's arguments for a batch: calls of one shape and costs share a class. */
  private argsOfBatch(batch: readonly Queued[]): (string | number)[] {
    const args: (string | number)[] = [scripts.reserveBuckets.sha, 0];
    const classArgs: (string | number)[] = [this.minTtlMs, ''];
    const callArgs: string[] = [];
    // The class last opened for each shape (a call with other costs opens another).
    const lastClass = new Map<CallShape, number>();
    const classes: Queued[] = [];
    for (const q of batch) {
      const { shape, costs } = q;
      let c = lastClass.get(shape);
      if (c === undefined || !sameCosts(classes[c]!.costs, costs)) {
        c = classes.length;
        lastClass.set(shape, c);
        classes.push(q);
        const keys = shape.keys;
        for (let i = 0; i < keys.length; i++) args.push(keys[i]!);
        classArgs.push(shape.nArg, shape.mArg);
        this.pushLevelArgs(classArgs, shape.levels, costs);
      }
      callArgs.push(classNumbers[c + 1] ?? String(c + 1), q.nowArg, q.maxWaitArg);
    }
    args[1] = args.length - 2;
    classArgs[1] = classNumbers[classes.length] ?? String(classes.length);
    for (let i = 0; i < classArgs.length; i++) args.push(classArgs[i]!);
    for (let i = 0; i < callArgs.length; i++) args.push(callArgs[i]!);
    return args;
  }

  /**
   * Answer each decision of `batch` from its part of the bucket script's reply. `late`: the batch
   * was given up on; the calls it left undecided are not run again.
   */
  private split(batch: readonly Queued[], reply: readonly (string | number)[], late = false): void {
    const serverNow = timeOf(reply[0] as number);
    let r = 1;
    let undecided: Queued[] | undefined;
    let learnedSeen = false;
    // Each level's mark after the latest take of this batch (a later call answers '=' for it).
    const taken = batch.length > 1 ? new Map<string, number>() : undefined;
    for (const q of batch) {
      const now = q.nowArg === '' ? serverNow : q.nowMs;
      const kind = reply[r];
      if (kind === 1 || kind === 3) {
        const { levels, keys } = q.shape;
        const n = levels.length;
        const costs = q.costs;
        // The script's arithmetic, on what it read (see RESERVE_BUCKETS_LUA): 3 starts after the
        // pause whose text follows.
        const from = kind === 1 ? now : Number(reply[r + 1]);
        if (kind === 3) r++;
        let startAt = from;
        const tats = scratch;
        const steps = scratchSteps;
        for (let i = 0; i < n; i++) {
          if (costs[i] === 0) continue;
          const state = reply[r + 1 + i] as string;
          const info = bucketInfo(levels[i]!, costs[i]!);
          // No state (or an unreadable one) is a TAT of now - fullMs (a full bucket).
          const read = state === '=' ? taken!.get(keys[i]!)! : state === '' ? Number.NaN : Number(state);
          const tat = Number.isNaN(read) ? now - info.fullMs : read;
          tats[i] = tat;
          steps[i] = info.stepMs;
          // core/gcra.ts gcraEarliestAt: max(TAT - slack, from); a bucket full for fullMs starts
          // any cost at once (core/token-bucket.ts).
          let atMs = tat - info.slackMs;
          if (atMs < from || tat <= from - info.fullMs) atMs = from;
          if (atMs > startAt) startAt = atMs;
        }
        // Marks stay numbers: printing a double costs more than the rest of this answer, and only
        // a refund (rare) needs the text (ioredis prints it, shortest round trip, for the script).
        const marks: (string | number)[] = new Array(n);
        for (let i = 0; i < n; i++) {
          if (costs[i] === 0) {
            marks[i] = '';
            continue;
          }
          // core/gcra.ts gcraTake: max(TAT, startAt) + cost·T
          const mark = Math.max(tats[i]!, startAt) + steps[i]!;
          marks[i] = mark;
          taken?.set(keys[i]!, mark);
        }
        r += 1 + n;
        q.resolve({
          ok: true,
          startAt,
          serverNow: now,
          id: `${idPrefix}.${++idCounter}`,
          partition: q.partition,
          scope: q.options?.scope ?? '',
          levels,
          costs: q.costs,
          marks,
          learned: NO_LEARNED,
        });
      } else if (kind === 0 && q.options?.ownFrom !== undefined && reply[r + 2] === 'wait') {
        // Past ownWaitMs or maxWaitMs: the general script decides whether to reserve it ahead (the
        // gate-wide levels hold it) or refuse it (its own do), in this call's order.
        q.general = true;
        undecided ??= [];
        undecided.push(q);
        r += 3;
      } else if (kind === 0) {
        q.resolve({
          ok: false,
          retryAfterMs: num(reply[r + 1]),
          reason: reply[r + 2] as 'wait' | 'capacity',
          serverNow: now,
        });
        r += 3;
      } else if (kind === 2) {
        if (!learnedSeen) {
          // The first call answered 2: its scope has learned limits, the general script serves
          // its shape from now on.
          learnedSeen = true;
          q.shape.buckets = false;
        }
        undecided ??= [];
        undecided.push(q);
        r += 1;
      } else {
        throw new Error(`unexpected reply from the bucket script at ${r}: ${String(kind)}`);
      }
    }
    if (undecided !== undefined && !late) this.again(undecided);
  }

  /**
   * Run undecided calls again, in their order (one connection answers in order): runs of bucket
   * calls as batches, the others through the general script.
   */
  private again(calls: readonly Queued[]): void {
    if (this.closed) {
      const error = new StoreUnavailableError('Redis store is closed');
      for (const q of calls) q.reject(error);
      return;
    }
    let run: Queued[] = [];
    for (const q of calls) {
      if (q.shape.buckets && !q.general) {
        run.push(q);
        continue;
      }
      if (run.length > 0) this.send(run);
      run = [];
      q.resolve(this.reserveGeneral(q.shape, q.nowArg, q.partition, q.costs, q.maxWaitMs, q.options));
    }
    if (run.length > 0) this.send(run);
  }

  /** One EVALSHA of the general script (any algorithm, learned limits). */
  private reserveGeneral(
    shape: CallShape,
    nowArg: string,
    partition: string,
    costs: readonly number[],
    maxWaitMs: number,
    options: ReserveOptions | undefined,
  ): Promise<StoreDecision> {
    const levels = shape.levels;
    const scope = options?.scope ?? '';
    const args = shape.template.slice();
    const at = shape.at;
    const id = `${idPrefix}.${++idCounter}`;
    args[at] = nowArg;
    // -1 means no bound; a deadline already past is a bound of 0.
    const maxWait = waitBoundOf(maxWaitMs);
    args[at + 1] = maxWait === Infinity ? '-1' : String(maxWait);
    if (shape.leased) args[at + 4] = id;
    if (options?.ownFrom !== undefined) {
      args[at + 7] = String(options.ownFrom);
      args[at + 8] = String(options.ownWaitMs ?? 0);
    }
    const units = options?.units;
    if (units !== undefined) {
      let text = '';
      for (const unit of Object.keys(units)) text += `${encodeURIComponent(unit)} ${units[unit]} `;
      args[at + 9] = text;
    }
    const n = levels.length;
    for (let i = 0; i < n; i++) args[at + 14 + i * 5] = String(costs[i]);
    const parse = (value: unknown): StoreDecision => {
      const reply = value as (string | number)[];
      if (reply[0] !== 1) {
        const refusal = {
          ok: false,
          retryAfterMs: num(reply[1]),
          reason: reply[2] as 'wait' | 'concurrency' | 'capacity',
          serverNow: Number(reply[3]),
        } as const;
        return options?.ownFrom === undefined || refusal.reason !== 'wait'
          ? refusal
          : { ...refusal, shared: reply[4] === 1 };
      }
      const marks = reply.slice(3, 3 + n) as string[];
      const learnedCount = Number(reply[3 + n]);
      const learned: { id: string; cost: number; mark: string }[] = [];
      for (let j = 0, k = 4 + n; j < learnedCount; j++, k += 3) {
        learned.push({ id: String(reply[k]), cost: Number(reply[k + 1]), mark: String(reply[k + 2]) });
      }
      return {
        ok: true,
        startAt: Number(reply[1]),
        serverNow: Number(reply[2]),
        id,
        partition,
        scope,
        levels,
        costs,
        marks,
        learned,
      };
    };
    return new Promise((resolve, reject) => {
      this.runner.evalshaArgs(
        scripts.reserve,
        args,
        (reply) => resolve(parse(reply)),
        reject,
        // Given up on and run later: nobody uses the reservation (concurrency permits would stay
        // leased until their lease expires, for every process).
        (reply) => {
          const decision = parse(reply);
          if (decision.ok) this.refund(decision).catch(() => {});
        },
      );
    });
  }

  private refundWith(nowArg: string, reservation: StoreReservation, which: 'all' | 'untimed'): Promise<void> {
    const part = claimRefund(reservation, which);
    if (part === undefined) return Promise.resolve();
    if (this.closed) {
      releasePermitsClaim(reservation, part);
      return Promise.reject(new StoreUnavailableError('Redis store is closed'));
    }
    const { levels, costs, marks } = reservation;
    const tag = this.tagOf(reservation.partition);
    const scopeId = this.scopeOf(reservation.scope);
    const n = levels.length;
    const keys: (string | number)[] = [];
    for (let i = 0; i < n; i++) keys.push(`${tag}:s:${infoOf(levels[i]!).suffix}`);
    keys.push(`${tag}:m:${scopeId}`);
    const learned = part === 'untimed' ? [] : reservation.learned.filter((entry) => entry.cost !== 0);
    keys.push(
      nowArg,
      String(n),
      reservation.id,
      this.minTtlMs,
      '',
      '',
      String(reservation.startAt),
      String(learned.length),
    );
    for (let i = 0; i < n; i++) {
      const level = levels[i]!;
      const args = infoOf(level).args;
      const untimed = level.spec.algorithm === 'concurrency';
      // Only the part being refunded is charged back: the rest is sent with cost 0 (skipped).
      const give = part === 'all' || (part === 'untimed') === untimed;
      keys.push(args[0]!, args[1]!, args[2]!, args[3]!, give ? String(costs[i]) : '0', marks[i] ?? '');
    }
    for (const entry of learned) keys.push(entry.id, String(entry.cost), entry.mark);
    return this.runner.evalsha(scripts.refund, n + 1, keys).then(
      () => undefined,
      (error: unknown) => {
        // Its permits may be given back again when Redis answers (the shared gate keeps it).
        releasePermitsClaim(reservation, part);
        throw error;
      },
    );
  }

  private recountWith(
    nowArg: string,
    reservation: StoreReservation,
    marginMs: number,
    startedAt: number | undefined,
  ): Promise<void> {
    if (typeof marginMs !== 'number' || !(marginMs >= 0))
      return Promise.reject(invalid('marginMs', 'a number >= 0', marginMs));
    let from: number;
    try {
      from = startedAtOf(reservation, startedAt);
    } catch (error) {
      return Promise.reject(error);
    }
    if (!claimRecount(reservation)) return Promise.resolve();
    const { levels, costs } = reservation;
    // Only the window levels the call was charged on; nothing to send for the others.
    const keys: string[] = [];
    const args: string[] = [
      nowArg,
      this.minTtlMs,
      String(marginMs),
      String(reservation.startAt),
      '',
      String(from),
    ];
    const tag = this.tagOf(reservation.partition);
    for (let i = 0; i < levels.length; i++) {
      const level = levels[i]!;
      if (costs[i] === 0 || !countsWindow(level.spec.algorithm)) continue;
      const info = infoOf(level);
      keys.push(`${tag}:s:${info.suffix}`);
      args.push(info.args[0]!, info.args[1]!, info.args[2]!, info.args[3]!, String(costs[i]));
    }
    args[4] = String(keys.length);
    // Learned limits are sliding logs: the script reads each one's spec from the scope's meta hash.
    const learned = reservation.learned.filter((entry) => entry.cost !== 0);
    if (learned.length > 0) {
      keys.push(`${tag}:m:${this.scopeOf(reservation.scope)}`);
      for (const entry of learned) args.push(entry.id, String(entry.cost));
    }
    if (keys.length === 0) return Promise.resolve();
    if (this.closed) return Promise.reject(new StoreUnavailableError('Redis store is closed'));
    return this.runner.evalsha(scripts.recount, keys.length, [...keys, ...args]).then(() => undefined);
  }

  private adjustWith(
    nowArg: string,
    reservation: StoreReservation,
    units: Readonly<Record<string, number>>,
    recountMarginMs: number | undefined,
    startedAt: number | undefined,
  ): Promise<void> {
    let from: number;
    try {
      from = startedAtOf(reservation, startedAt);
      if (!claimAdjust(reservation, units, recountMarginMs)) return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
    const { levels, costs, marks } = reservation;
    const tag = this.tagOf(reservation.partition);
    // Only the levels with something to settle; the learned ones are settled by the script (their
    // units are in the scope's meta hash).
    const keys: string[] = [];
    const args: string[] = [
      nowArg,
      String(this.minTtlMs),
      String(reservation.startAt),
      recountMarginMs === undefined ? '' : String(recountMarginMs),
      '',
      '',
      String(from),
    ];
    for (let i = 0; i < levels.length; i++) {
      const level = levels[i]!;
      const spec = level.spec;
      if (spec.algorithm === 'concurrency') continue;
      const recounted = recountMarginMs !== undefined && countsWindow(spec.algorithm);
      const delta = adjustment(ownUnits(units, spec.unit), costs[i]!, coreOf(level).capacity, recounted);
      if (delta === 0) continue;
      const info = infoOf(level);
      keys.push(`${tag}:s:${info.suffix}`);
      args.push(...info.args, String(delta), String(marks[i] ?? ''), recounted ? '1' : '');
    }
    args[4] = String(keys.length);
    let used = '';
    for (const unit of Object.keys(units)) {
      const count = units[unit];
      if (typeof count === 'number' && Number.isFinite(count) && count >= 0)
        used += `${encodeURIComponent(unit)} ${count} `;
    }
    args[5] = used;
    if (reservation.learned.length > 0 && used !== '') {
      keys.push(`${tag}:m:${this.scopeOf(reservation.scope)}`);
      for (const entry of reservation.learned) args.push(entry.id, String(entry.cost), entry.mark);
    }
    // Recounted first (unless it was): what it used beyond the estimate goes where the estimate
    // goes (sent before the adjustment, on the same connection: run in that order).
    const recount =
      recountMarginMs === undefined
        ? Promise.resolve()
        : this.recountWith(nowArg, reservation, recountMarginMs, from);
    if (keys.length === 0) return recount;
    if (this.closed) return Promise.reject(new StoreUnavailableError('Redis store is closed'));
    const adjusted = this.runner.evalsha(scripts.adjust, keys.length, [...keys, ...args]);
    return Promise.all([recount, adjusted]).then(() => undefined);
  }

  private async pauseWith(
    nowArg: string,
    mode: 'until' | 'for',
    partition: string,
    ms: number,
    scope: string,
  ): Promise<StorePause> {
    this.checkOpen();
    if (typeof ms !== 'number' || Number.isNaN(ms))
      throw invalid(mode === 'for' ? 'durationMs' : 'untilMs', 'a number', ms);
    const reply = (await this.runner.evalsha(scripts.pause, 1, [
      this.pauseId(partition, scope),
      nowArg,
      mode,
      // Lua reads 'Infinity' as nothing: 'forever' goes as a huge number (the script caps it).
      Number.isFinite(ms) ? String(ms) : ms > 0 ? '1e300' : '-1e300',
      pauseChannel(this.keyPrefix),
    ])) as [string, string];
    return { untilMs: Number(reply[0]), serverNow: Number(reply[1]) };
  }

  async claimProbe(partition: string, holder: string, ttlMs: number, scope = ''): Promise<boolean> {
    this.checkOpen();
    if (typeof ttlMs !== 'number' || !(ttlMs >= 1) || !Number.isFinite(ttlMs))
      throw invalid('ttlMs', 'a finite number of ms >= 1', ttlMs);
    const key = `${this.tagOf(partition)}:q:${this.scopeOf(scope)}`;
    return (await this.runner.evalsha(scripts.claimProbe, 1, [key, holder, String(Math.ceil(ttlMs))])) === 1;
  }

  async releaseProbe(partition: string, holder: string, scope = ''): Promise<void> {
    this.checkOpen();
    const key = `${this.tagOf(partition)}:q:${this.scopeOf(scope)}`;
    await this.runner.evalsha(scripts.releaseProbe, 1, [key, holder]);
  }

  private async learnWith(
    nowArg: string,
    partition: string,
    spec: LimitSpec,
    options: LearnOptions | undefined,
  ): Promise<boolean> {
    this.checkOpen();
    const core = createLimit(spec, 'spec');
    if (!core.timed) throw invalid('spec.algorithm', 'a timed algorithm (not concurrency)', spec.algorithm);
    const tag = this.tagOf(partition);
    const scopeId = this.scopeOf(options?.scope ?? '');
    const id = digest(learnedId(core.spec));
    const reply = (await this.runner.evalsha(scripts.learn, 2, [
      `${tag}:m:${scopeId}`,
      `${tag}:L:${scopeId}:${id}`,
      nowArg,
      id,
      learnedSpecText(core.spec),
      String(this.learnedTtlMs),
      String(options?.seedUnits ?? 0),
      this.minTtlMs,
      String(seedAge(options)),
    ])) as [number, string];
    return reply[0] === 1;
  }

  private subscribe(): void {
    if (this.subscriber !== undefined || this.closed) return;
    const subscriber = this.client.duplicate();
    this.subscriber = subscriber;
    subscriber.on('error', () => {});
    const channel = pauseChannel(this.keyPrefix);
    subscriber.on('message', (from: string, message: string) => {
      if (from !== channel) return;
      const [pauseId, untilMs, serverNow] = message.split(' ');
      if (pauseId === undefined) return;
      const event = { partition: undefined, pauseId, untilMs: Number(untilMs), serverNow: Number(serverNow) };
      for (const listener of this.listeners) {
        try {
          listener(event);
        } catch (error) {
          queueMicrotask(() => {
            throw error;
          });
        }
      }
    });
    subscriber.subscribe(channel).catch(() => {
      // Reconnects resubscribe by themselves; a failure here shows up as a missed pause only.
    });
  }
}
