/**
 * Talking to Redis: the optional `ioredis` dependency loaded on demand, scripts run by SHA with a
 * reload on NOSCRIPT, and a command timeout watched by a single timer.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { InvalidOptionError, StoreUnavailableError } from '../errors.js';

/** What tollgate needs of a client: `ioredis`'s `Redis` or `Cluster`. */
export type RedisClient = Redis | Cluster;

type RedisConstructor = new (url: string, options?: RedisOptions) => Redis;

// ioredis is optional: load it only when a store is created from a URL. `require` exists in the
// CommonJS build; the ESM build makes one.
function loadIoredis(): RedisConstructor {
  try {
    const req = typeof require === 'function' ? require : createRequire(import.meta.url);
    const mod = req('ioredis') as { Redis?: RedisConstructor; default?: RedisConstructor };
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

/**
 * Runs commands with a deadline. All commands share one timeout, so deadlines are ordered as the
 * commands were sent: the watches form a queue, and a single timer, armed for the oldest unsettled
 * one, watches them all. Settled watches leave the head of the queue at once, so on a healthy
 * connection (answers in order) it holds only the commands in flight, and no record of an answered
 * command outlives it (a long-lived record would be copied by every young-generation GC).
 */
export class CommandRunner {
  private watches: Watch[] = [];
  private head = 0;
  private timer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** Commands sent (EVALSHA, SCRIPT LOAD, EVAL...): the bench reads it for round trips. */
  commands = 0;

  constructor(
    readonly client: RedisClient,
    private readonly timeoutMs: number,
  ) {}

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
   * hot path: no promise of ours on top of ioredis's, the reply handed to `onReply` and any failure
   * (an error reply, a lost connection, no answer within the timeout, or `onReply` throwing) to
   * `onError` as a `StoreUnavailableError`. Exactly one of them is called, once. NOSCRIPT loads the
   * script and sends the same arguments again.
   */
  evalshaArgs(
    script: LoadedScript,
    args: (string | number)[],
    onReply: (reply: unknown) => void,
    onError: (error: StoreUnavailableError) => void,
  ): void {
    this.commands++;
    const watch = this.track(onError);
    // Two closures per command, no more: this runs for every decision.
    (this.client.call('EVALSHA', args) as Promise<unknown>).then(
      (reply) => this.answered(watch, script, reply, onReply),
      (error: unknown) => {
        if (!String((error as Error)?.message).startsWith('NOSCRIPT'))
          return this.failed(watch, script, error);
        // Its caller was told of a timeout already: send nothing it no longer waits for (a
        // decision made now would hold a slot, or money, that nobody settles).
        if (watch.settled) return;
        this.commands++;
        (this.client.call('SCRIPT', ['LOAD', script.source]) as Promise<unknown>).then(
          () => {
            if (watch.settled) return;
            this.commands++;
            (this.client.call('EVALSHA', args) as Promise<unknown>).then(
              (reply) => this.answered(watch, script, reply, onReply),
              (error: unknown) => this.failed(watch, script, error),
            );
          },
          (error: unknown) => this.failed(watch, script, error),
        );
      },
    );
  }

  /** A script's reply: to `onReply`, unless its watch timed out; `onReply` throwing is a failure. */
  private answered(
    watch: Watch,
    script: LoadedScript,
    reply: unknown,
    onReply: (reply: unknown) => void,
  ): void {
    if (!this.settle(watch)) return;
    try {
      onReply(reply);
    } catch (error) {
      watch.reject(unavailable(error, script.name));
    }
  }

  private failed(watch: Watch, script: LoadedScript, error: unknown): void {
    if (this.settle(watch)) watch.reject(unavailable(error, script.name));
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
  }

  private watch(promise: Promise<unknown>, what: string): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const watch = this.track(reject);
      promise.then(
        (value) => {
          if (this.settle(watch)) resolve(value);
        },
        (error: unknown) => {
          if (this.settle(watch)) reject(unavailable(error, what));
        },
      );
    });
  }

  /** Watch a command's deadline; the caller settles the returned watch when the command answers. */
  private track(reject: (error: StoreUnavailableError) => void): Watch {
    const watch: Watch = { deadline: performance.now() + this.timeoutMs, reject, settled: false };
    this.watches.push(watch);
    if (this.timer === undefined) this.arm();
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
    const watches = this.watches;
    for (let i = this.head; i < watches.length; i++) {
      const w = watches[i]!;
      if (w.settled) continue;
      if (w.deadline > now) break;
      w.settled = true;
      w.reject(new StoreUnavailableError(`Redis did not answer within commandTimeoutMs ${this.timeoutMs}`));
    }
    this.trim();
    this.arm();
  }
}

function unavailable(error: unknown, what: string): StoreUnavailableError {
  if (error instanceof StoreUnavailableError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`Redis ${what} failed: ${message}`, { cause: error });
}
