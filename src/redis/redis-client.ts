/**
 * Talking to Redis: the optional `ioredis` dependency loaded on demand, scripts run by SHA with a
 * reload on NOSCRIPT, and a command timeout watched by a single timer.
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { InvalidOptionError, StoreUnavailableError } from '../errors.js';
import { requireOptional } from '../optional-dependency.js';

/** What tollgate needs of a client: `ioredis`'s `Redis` or `Cluster`. */
export type RedisClient = Redis | Cluster;

type RedisConstructor = new (url: string, options?: RedisOptions) => Redis;

// ioredis is optional: load it only when a store is created from a URL.
function loadIoredis(): RedisConstructor {
  try {
    const mod = requireOptional('ioredis') as { Redis?: RedisConstructor; default?: RedisConstructor };
    return (mod.Redis ?? mod.default ?? mod) as RedisConstructor;
  } catch (error) {
    throw new InvalidOptionError(
      'redis',
      'The Redis store needs the optional dependency `ioredis` (npm install ioredis), which could not be ' +
        `loaded (${(error as Error).message}). Install it, or pass an ioredis client as \`redis\`.`,
    );
  }
}

/**
 * A client for `url` with tollgate's defaults: no auto-pipelining (the store batches concurrent
 * decisions itself, one EVALSHA per tick; ioredis's auto-pipelining on top measured slower, with a
 * longer tail, in bench/redis.ts), an offline queue so calls made while connecting wait for the
 * connection, and quick reconnects (50 ms, growing to 1 s) so an outage ends as soon as Redis
 * answers again.
 */
export function connectRedis(url: string): Redis {
  // ioredis reads any scheme as redis:// (http://host:6379 connected); only its own are meant.
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url.trim())?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== 'redis' && scheme !== 'rediss')
    throw new InvalidOptionError(
      'redis',
      `Expected \`redis\` to be a redis:// or rediss:// URL, got a ${scheme}:// URL (not shown: it may hold a password).`,
    );
  const Ctor = loadIoredis();
  try {
    return new Ctor(url, {
      enableAutoPipelining: false,
      maxRetriesPerRequest: 1,
      retryStrategy: (times: number) => Math.min(times * 50, 1000),
      // The store's own command timeout decides when Redis is "down"; keep ioredis from logging.
      showFriendlyErrorStack: false,
    });
  } catch (error) {
    // Neither the URL (it may hold a password) nor the parser's error (which quotes it) is shown.
    throw new InvalidOptionError(
      'redis',
      `Expected \`redis\` to be a redis:// URL that can be parsed (${(error as { code?: string })?.code ?? 'invalid URL'}); the URL is not shown, it may hold a password.`,
    );
  }
}

/** A Lua script with its SHA-1, run with EVALSHA and loaded on NOSCRIPT. */
export interface LoadedScript {
  readonly name: string;
  readonly source: string;
  readonly sha: string;
}

export function loadedScript(name: string, source: string): LoadedScript {
  return { name, source, sha: createHash('sha1').update(source).digest('hex') };
}

/** One command's deadline; `settled` once it answered, failed or timed out (whichever came first). */
interface Watch {
  readonly deadline: number;
  readonly reject: (error: StoreUnavailableError) => void;
  settled: boolean;
}

/** An EVALSHA: its script, arguments and callbacks, its place in send order and its deadline. */
interface Command {
  readonly script: LoadedScript;
  readonly args: (string | number)[];
  readonly onReply: (reply: unknown) => void;
  /** The reply of a command its caller gave up on (timed out): what it did must be undone. */
  readonly onLate: ((reply: unknown) => void) | undefined;
  readonly watch: Watch;
  /** Order in which it was asked for (a command held and sent again keeps its place). */
  readonly seq: number;
  /** It met NOSCRIPT once already: a second one fails it (a server flushed again meanwhile). */
  reloaded: boolean;
}

/** A connection SCRIPT LOAD can be sent on: a server, or one node of a Cluster. */
type ScriptLoader = Pick<Redis, 'call'>;

const isClusterClient = (client: RedisClient): client is Cluster =>
  (client as { isCluster?: boolean }).isCluster === true;

const isNoScript = (error: unknown): boolean => String((error as Error)?.message).startsWith('NOSCRIPT');

/**
 * Runs commands with a deadline. All commands share one timeout, so deadlines are ordered as the
 * commands were sent: the watches form a queue, and a single timer, armed for the oldest unsettled
 * one, watches them all. Settled watches leave the head of the queue at once, so on a healthy
 * connection (answers in order) it holds only the commands in flight, and no record of an answered
 * command outlives it (a long-lived record would be copied by every young-generation GC).
 *
 * Scripts run in the order they were asked for, as the callers rely on (a pause before the
 * reservations made after it, a learned limit before the decisions that follow). Redis runs a
 * connection's commands in order, but a script it does not hold (NOSCRIPT: a server restarted,
 * flushed, or never given it) fails and must be sent again, behind commands sent later. So the
 * runner loads every script of its owner before its first EVALSHA, and on a NOSCRIPT loads them all
 * again: meanwhile new commands wait, and once the loads answer (by then every command sent before
 * them has answered too) the failed ones are sent again in their order, then the waiting ones. A
 * runner given no scripts sends at once and loads a script when it meets NOSCRIPT. On a Cluster the
 * scripts load on every primary (each runs the scripts of its own slots), and a NOSCRIPT from any
 * of them (a restarted node, a replica promoted) loads them on every primary again.
 */
export class CommandRunner {
  private watches: Watch[] = [];
  private head = 0;
  /** Callers of `settled()`, told when no command is pending. */
  private idleWaiters: (() => void)[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined = undefined;
  /**
   * When a deadline was found past (`expire`), while its check waits for the replies already
   * received: only deadlines up to then have had a poll phase since (see `expireOverdue`).
   */
  private expiringAt: number | undefined = undefined;
  /** Commands sent (EVALSHA, SCRIPT LOAD, EVAL...): the bench reads it for round trips. */
  commands = 0;
  /** While scripts load: the commands to send once they are loaded, in their order (`seq`). */
  private held: Command[] | undefined = undefined;
  /** Callers of `load()` waiting for the loads in progress. */
  private loadWaiters: { watch: Watch; resolve: () => void }[] = [];
  /** The scripts are loaded (as far as the runner knows): commands go out at once. */
  private loaded: boolean;
  /** The script loads sent and not answered yet, and the sources they load (`loadAlso` adds). */
  private loads: Promise<unknown> | undefined = undefined;
  private loading = new Set<string>();
  /** Counts reloads: the answer of one given up on (timed out) releases nothing. */
  private generation = 0;
  private seq = 0;
  /** Named in errors (see serverOf). */
  private readonly server: string;

  constructor(
    readonly client: RedisClient,
    private readonly timeoutMs: number,
    private readonly scripts: readonly LoadedScript[] = [],
  ) {
    this.loaded = scripts.length === 0;
    this.server = serverOf(client);
  }

  /**
   * EVALSHA `script` with `numKeys` keys first in `keysAndArgs`; on NOSCRIPT (a restarted or flushed
   * server) load it and run it again.
   */
  evalsha(
    script: LoadedScript,
    numKeys: number,
    keysAndArgs: readonly (string | number)[],
  ): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.evalshaArgs(script, [script.sha, numKeys, ...keysAndArgs], resolve, reject);
    });
  }

  /**
   * EVALSHA with the arguments ready (`args[0]` the script's SHA, `args[1]` the key count), for the
   * hot path: the reply handed to `onReply` and any failure (an error reply, a lost connection, no
   * answer within the timeout, or `onReply` throwing) to `onError` as a `StoreUnavailableError`.
   * Exactly one of them is called, once. NOSCRIPT loads the scripts and sends the same arguments
   * again, in order (see the class). A command that timed out may still run (it was sent; Redis
   * runs it when it can): its reply then goes to `onLate`, which undoes what it committed.
   */
  evalshaArgs(
    script: LoadedScript,
    args: (string | number)[],
    onReply: (reply: unknown) => void,
    onError: (error: StoreUnavailableError) => void,
    onLate?: (reply: unknown) => void,
  ): void {
    const watch = this.track(onError);
    const command: Command = { script, args, onReply, onLate, watch, seq: this.seq++, reloaded: false };
    if (this.loaded && this.held === undefined) this.send(command);
    else this.hold(command);
  }

  /** Load every script now, within the command timeout (commands asked for meanwhile wait for it). */
  load(): Promise<void> {
    return new Promise((resolve, reject) => {
      const watch = this.track(reject);
      if (this.held === undefined) this.reload(undefined);
      this.loadWaiters.push({ watch, resolve });
    });
  }

  private send(command: Command): void {
    this.commands++;
    (this.client.call('EVALSHA', command.args) as Promise<unknown>).then(
      (reply) => this.answered(command, reply),
      (error: unknown) => {
        if (!isNoScript(error) || command.reloaded) return this.failed(command.watch, command.script, error);
        // Its caller was told of a timeout already: send nothing it no longer waits for (a
        // decision made now would hold a slot, or money, that nobody settles).
        if (command.watch.settled) return;
        command.reloaded = true;
        if (this.held === undefined) this.reload(command.script);
        else this.loadAlso(command.script);
        this.hold(command);
      },
    );
  }

  /** Queue `command` at its place in order until the scripts are loaded. */
  private hold(command: Command): void {
    if (this.held === undefined) this.reload(undefined);
    const held = this.held!;
    let i = held.length;
    while (i > 0 && held[i - 1]!.seq > command.seq) i--;
    held.splice(i, 0, command);
  }

  /**
   * Load every script (and `also`, one not in the list). The commands held meanwhile go out once all
   * loads answered, in order; if a load fails or does not answer within the command timeout, they
   * fail (and the next command loads again).
   */
  private reload(also: LoadedScript | undefined): void {
    this.held = [];
    this.loaded = false;
    const generation = ++this.generation;
    // Loads still unanswered (given up on, a server away) are waited for again rather than sent
    // again: a client that queues commands while disconnected would pile up sources.
    let loads = this.loads;
    if (loads === undefined) {
      this.loading = new Set(this.scripts.map((s) => s.source));
      if (also !== undefined) this.loading.add(also.source);
      const sources = [...this.loading];
      const sent = this.onEveryPrimary((node) => sources.map((source) => this.scriptLoad(node, source)));
      loads = sent;
      this.loads = sent;
      const done = () => {
        if (this.loads === sent) this.loads = undefined;
      };
      sent.then(done, done);
    }
    if (also !== undefined) this.loadAlso(also);
    // After the poll phase that follows the timer (setImmediate): loads answered in time while this
    // process was busy past the timeout are read first (see `expire`).
    const timer = setTimeout(
      () =>
        setImmediate(() =>
          this.release(
            generation,
            new StoreUnavailableError(
              `Redis did not answer SCRIPT LOAD within commandTimeoutMs ${this.timeoutMs}`,
            ),
          ),
        ),
      this.timeoutMs,
    );
    timer.unref?.();
    loads.then(
      () => {
        clearTimeout(timer);
        this.release(generation, undefined);
      },
      (error: unknown) => {
        clearTimeout(timer);
        this.release(generation, error);
      },
    );
  }

  /**
   * Load `script` too, unless the loads in progress do (a runner given no scripts learns them from
   * NOSCRIPT). Not waited for: sent before the held commands go again, it runs before them.
   */
  private loadAlso(script: LoadedScript): void {
    if (this.loading.has(script.source)) return;
    this.loading.add(script.source);
    this.onEveryPrimary((node) => [this.scriptLoad(node, script.source)]).catch(() => {});
  }

  /**
   * Send `load`'s commands where scripts must be loaded: to the server, or on a Cluster to every
   * primary (SCRIPT LOAD sent through the Cluster client goes to one node, any node; each primary
   * runs the scripts of its own slots). Sent at once, in this call (so they go before anything sent
   * after it), except on a Cluster still connecting: its nodes are known once it is ready, which is
   * waited for within the load's timeout. Resolves when every command answered.
   */
  private onEveryPrimary(load: (node: ScriptLoader) => Promise<unknown>[]): Promise<unknown> {
    const client = this.client;
    if (!isClusterClient(client)) return Promise.all(load(client));
    if (client.status === 'ready') return Promise.all(client.nodes('master').flatMap(load));
    return new Promise((resolve, reject) => {
      const ready = () => {
        client.off('end', ended);
        resolve(Promise.all(client.nodes('master').flatMap(load)));
      };
      const ended = () => {
        client.off('ready', ready);
        reject(
          new StoreUnavailableError('Redis Cluster connection ended before it was ready: scripts not loaded'),
        );
      };
      client.once('ready', ready);
      client.once('end', ended);
    });
  }

  private scriptLoad(node: ScriptLoader, source: string): Promise<unknown> {
    this.commands++;
    return node.call('SCRIPT', ['LOAD', source]) as Promise<unknown>;
  }

  /** The loads answered (or failed: `error`): send the held commands in order, or fail them. */
  private release(generation: number, error: unknown): void {
    if (generation !== this.generation || this.held === undefined) return;
    const held = this.held;
    const waiters = this.loadWaiters;
    this.held = undefined;
    this.loadWaiters = [];
    // Without scripts of its own the runner stays optimistic; with them, after a failed load the
    // next command loads them again before it goes.
    this.loaded = this.scripts.length === 0 || error === undefined;
    for (const w of waiters) {
      if (!this.settle(w.watch)) continue;
      if (error === undefined) w.resolve();
      else w.watch.reject(unavailable(error, 'SCRIPT LOAD', this.server));
    }
    for (const command of held) {
      if (command.watch.settled) continue;
      if (error !== undefined) this.failed(command.watch, command.script, error);
      else this.send(command);
    }
  }

  /**
   * A script's reply: to `onReply`, unless its watch timed out (then to `onLate`); `onReply`
   * throwing is a failure.
   */
  private answered(command: Command, reply: unknown): void {
    const watch = command.watch;
    if (!this.settle(watch)) {
      try {
        command.onLate?.(reply);
      } catch {
        // Undoing is best effort: what it could not undo expires with its TTL.
      }
      return;
    }
    try {
      command.onReply(reply);
    } catch (error) {
      watch.reject(unavailable(error, command.script.name, this.server));
    }
  }

  private failed(watch: Watch, script: LoadedScript, error: unknown): void {
    if (this.settle(watch)) watch.reject(unavailable(error, script.name, this.server));
  }

  /** Any other command, with the same deadline. */
  call(command: string, ...args: (string | number)[]): Promise<unknown> {
    this.commands++;
    return this.watch(this.client.call(command, args) as Promise<unknown>, command);
  }

  /**
   * Close the connection: `QUIT`, or, when that does not answer within the command timeout (a
   * partition, a stalled server) or fails, drop the connection. Never hangs.
   */
  async quit(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), this.timeoutMs);
      timer.unref?.();
    });
    const quitting = this.client.quit().then(
      () => 'quit' as const,
      () => 'failed' as const,
    );
    const outcome = await Promise.race([quitting, timedOut]);
    clearTimeout(timer);
    if (outcome !== 'quit') this.client.disconnect();
  }

  /**
   * Resolves once every command asked for so far has answered, failed or timed out, and at the
   * latest after the command timeout: closing lets the bookkeeping in flight (recounts, refunds)
   * land first. Its timer keeps the process alive until then (the watches' timer does not).
   */
  settled(): Promise<void> {
    if (this.head === this.watches.length) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, this.timeoutMs);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.idleWaiters.push(done);
    });
  }

  /** Reject everything pending (closing). */
  abandon(): void {
    const watches = this.watches;
    const head = this.head;
    this.watches = [];
    this.head = 0;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    for (let i = head; i < watches.length; i++) {
      const w = watches[i]!;
      if (w.settled) continue;
      w.settled = true;
      w.reject(new StoreUnavailableError('Redis store closed with a command in flight'));
    }
    this.wakeIdle();
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters;
    if (waiters.length === 0) return;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private watch(promise: Promise<unknown>, what: string): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const watch = this.track(reject);
      promise.then(
        (value) => {
          if (this.settle(watch)) resolve(value);
        },
        (error: unknown) => {
          if (this.settle(watch)) reject(unavailable(error, what, this.server));
        },
      );
    });
  }

  /** Watch a command's deadline; the caller settles the returned watch when the command answers. */
  private track(reject: (error: StoreUnavailableError) => void): Watch {
    const watch: Watch = { deadline: performance.now() + this.timeoutMs, reject, settled: false };
    this.watches.push(watch);
    if (this.timer === undefined && this.expiringAt === undefined) this.arm();
    return watch;
  }

  /** Settle `watch`: true the first time (its caller answers), false if it was settled already. */
  private settle(watch: Watch): boolean {
    if (watch.settled) return false;
    watch.settled = true;
    this.trim();
    return true;
  }

  /** Drop settled watches from the head of the queue. */
  private trim(): void {
    const watches = this.watches;
    let head = this.head;
    while (head < watches.length && watches[head]!.settled) head++;
    if (head === watches.length) {
      watches.length = 0;
      head = 0;
      this.head = 0;
      this.wakeIdle();
      return;
    } else if (head >= 1024 && head * 2 >= watches.length) {
      // Answers out of order (a slow command at the head): compact now and then.
      watches.splice(0, head);
      head = 0;
    }
    this.head = head;
  }

  private arm(): void {
    const first = this.watches[this.head];
    if (first === undefined) return;
    const delayMs = Math.max(0, Math.ceil(first.deadline - performance.now()));
    this.timer = setTimeout(() => this.expire(), delayMs);
    // A pending command must not keep the process alive on its own.
    this.timer.unref?.();
  }

  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    const first = this.watches[this.head];
    if (first !== undefined && first.deadline <= now) {
      // A deadline passed, but the reply may be here already, unread: this process was busy (a long
      // task, a GC pause, a starved CPU) past the deadline while Redis answered in time. setImmediate
      // runs after this turn's poll phase, which reads the replies the socket holds and settles
      // their watches; only what is still unanswered then times out.
      this.expiringAt = now;
      setImmediate(() => this.expireOverdue());
      return;
    }
    this.arm();
  }

  /**
   * Time out the watches whose deadline had passed when `expire` ran, unanswered by the poll phase
   * since; one past its deadline only later (this process busy again meanwhile) gets a poll phase
   * of its own first: the timer again, at once.
   */
  private expireOverdue(): void {
    const checkedAt = this.expiringAt ?? -Infinity;
    this.expiringAt = undefined;
    const watches = this.watches;
    for (let i = this.head; i < watches.length; i++) {
      const w = watches[i]!;
      if (w.settled) continue;
      if (w.deadline > checkedAt) break;
      w.settled = true;
      w.reject(
        new StoreUnavailableError(`${this.server} did not answer within commandTimeoutMs ${this.timeoutMs}`),
      );
    }
    this.trim();
    if (this.timer === undefined) this.arm();
  }
}

function unavailable(error: unknown, what: string, server: string): StoreUnavailableError {
  if (error instanceof StoreUnavailableError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`${server} ${what} failed: ${message}`, { cause: error });
}

/**
 * Which server an error is about: `Redis at host:port` (or its socket path) for a client that
 * says, `Redis Cluster`, or `Redis`. Never the URL: it may hold a password.
 */
function serverOf(client: RedisClient): string {
  if ((client as { isCluster?: boolean }).isCluster === true) return 'Redis Cluster';
  const o = (client as { options?: { host?: unknown; port?: unknown; path?: unknown } }).options;
  if (typeof o?.path === 'string' && o.path !== '') return `Redis at ${o.path}`;
  if (typeof o?.host === 'string' && typeof o.port === 'number') return `Redis at ${o.host}:${o.port}`;
  return 'Redis';
}
