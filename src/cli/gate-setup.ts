/**
 * The gate a run uses, built from the parsed flags through the public API only: limits, budgets
 * (with their ledger), header adaptation, deadlines. The shared (Redis) gate is looked up at run
 * time, so this build works, and says so clearly, without it.
 */
import {
  type BudgetGuard,
  type BudgetSpec,
  type BudgetSpend,
  createBudgetGuard,
  createGate,
  defaultLedgerPath,
  type Gate,
  type GateOptions,
  isTollgateError,
  type LimitSpec,
} from '../index.js';
import { CliError } from './cli-error.js';
import { redact, redacted, safeUrlText } from './redact.js';
import { formatMs } from './summary.js';

export interface GateConfig {
  readonly limits: readonly LimitSpec[];
  /** Apply `limits` to each origin (partition key) instead of to the whole run. */
  readonly perHost: boolean;
  readonly budgets: readonly BudgetSpec[];
  /** Ledger file for the budgets, `memory` (not persisted), or `redis` (the Redis of `redis`). */
  readonly ledger: string | undefined;
  readonly headerAdapt: boolean;
  /** Extra adaptation options (config file only), e.g. `{ pacing: 'spread', maxRetries: 5 }`. */
  readonly adapt: GateOptions['adapt'] | undefined;
  readonly maxQueueTimeMs: number;
  /** Calls waiting in one partition's queue (the producer's window keeps it below this). */
  readonly maxQueue: number;
  readonly redis: string | undefined;
  /** Prefix of the shared gate's Redis keys: jobs with the same prefix share one quota. */
  readonly redisPrefix: string | undefined;
}

/** What a run uses of a gate: the in-memory `Gate` and the shared (Redis) gate both have it. */
export interface RunnableGate {
  schedule: Gate['schedule'];
  now(): number;
  onPause(
    listener: (event: { key: string | undefined; untilMs: number; reason: string }) => void,
  ): () => void;
  close(options?: { queued?: 'run' | 'reject' }): Promise<void>;
}

/** What the CLI reads of the shared gate besides `RunnableGate` (checked at run time: another build may lack it). */
interface SharedGateExtras {
  onStoreDown(listener: (event: { error: unknown; policy: string }) => void): () => void;
  onStoreUp(listener: (event: { downForMs: number }) => void): () => void;
  stats(): { storeUp: boolean; fallbackCalls: number };
  readonly store?: { readonly client?: { on?(event: string, listener: (error?: unknown) => void): unknown } };
}

/** The shared (Redis) gate's state at the end of a run. */
export interface SharedStoreReport {
  /** Calls sent through the local fallback (this process's share of each limit) while Redis was down. */
  readonly fallbackCalls: number;
  /** Redis was still not answering at the end of the run. */
  readonly down: boolean;
}

/**
 * The share of each limit a run keeps while Redis is not answering (the shared gate's default,
 * passed explicitly so that the warning can say it): 4 processes falling back together stay under
 * the shared limit.
 */
const localShare = 0.25;

export interface RunGate {
  readonly gate: RunnableGate;
  /** The budgets' currency; undefined without budgets. */
  readonly currency: string | undefined;
  /** Where the budgets' spend is recorded: a path, `memory`, or `redis:<key prefix>`. */
  readonly ledgerLabel: string | undefined;
  /**
   * Spend per budget (empty without budgets): now, or, for the Redis ledger, as last read (every
   * half second, and by `readSpend`).
   */
  spend(): BudgetSpend[];
  /** Read the spend now (the Redis ledger: one round trip). */
  readSpend(): Promise<BudgetSpend[]>;
  /**
   * True for an error of the Redis ledger not answering a reservation (`--ledger redis`): the call
   * was not sent, and may be sent once the ledger answers again.
   */
  ledgerUnavailable(error: unknown): boolean;
  /** Redis mode only (undefined otherwise): what the shared gate did while Redis was down. */
  sharedStore(): SharedStoreReport | undefined;
  close(): Promise<void>;
}

export interface GateSetUpHooks {
  /** A line for the user (stderr, or above the progress bar): Redis stopped or started answering. */
  log?(line: string): void;
  /** Keep the spend read while the run goes (`RunGate.spend`; the Redis ledger is polled). @default true */
  watchSpend?: boolean;
}

// The shared gate, loaded only for --redis, from wherever this build has it: a `redis` entry next to
// the bundled CLI (dist/redis.js), or the sources (src/redis/) when run with tsx. Variable
// specifiers, so that a build without it still compiles and bundles, and says so at run time.
const sharedGateModules = ['./redis.js', '../redis/index.js', '../redis/shared-gate.js'];

/** What `--ledger redis` uses of the budget guard on the Redis ledger (`AsyncBudgetGuard`). */
interface SharedBudgetGuard {
  readonly currency: string;
  tryReserve(estimateMicros: number, key?: string, now?: number): Promise<unknown>;
  settle(reservation: never, actualMicros: number, now?: number): Promise<boolean>;
  release(reservation: never, now?: number): Promise<boolean>;
  spend(): Promise<BudgetSpend[]>;
}

type SharedGateFactory = (
  options: Omit<GateOptions, 'budget'> & {
    redis: string;
    keyPrefix?: string;
    budget?: BudgetGuard | SharedBudgetGuard;
    failure: 'local';
    localShare: number;
  },
) => RunnableGate & Partial<SharedGateExtras>;

/** The Redis ledger and its guard, from the same module as the shared gate (see `sharedGateModules`). */
interface RedisBudgetModule {
  RedisLedger: new (options: { redis: string; keyPrefix?: string }) => { close(): Promise<void> };
  createAsyncBudgetGuard: (options: { budgets: BudgetSpec[]; ledger: unknown }) => SharedBudgetGuard;
}

async function redisModule(): Promise<Record<string, unknown> | undefined> {
  for (const specifier of sharedGateModules) {
    try {
      const mod = (await import(specifier)) as Record<string, unknown>;
      if (typeof mod['createSharedGate'] === 'function') return mod;
    } catch {
      // Not in this build: try the next place.
    }
  }
  return undefined;
}

function rethrow(error: unknown, what: string): never {
  if (isTollgateError(error)) throw new CliError(`${what}: ${error.message}`);
  throw error;
}

/** At most this many characters of an error's message in a one-line warning. */
const maxReasonChars = 120;

/**
 * Why Redis is not answering, in a few words and without secrets: the connection's own error
 * (`connect ECONNREFUSED 127.0.0.1:6390`) when the client reported one, else the failed command's.
 */
function shortReason(
  error: unknown,
  connectionError: unknown,
  secrets: { all: readonly string[]; password: readonly string[] },
): string {
  const firstLine = (e: unknown) => (e instanceof Error ? e.message : String(e)).split('\n')[0]!.trim();
  let text: string;
  if (connectionError !== undefined) text = firstLine(connectionError);
  else {
    text = firstLine(error);
    const timeout = /did not answer within commandTimeoutMs (\d+)/.exec(text);
    if (timeout !== null) text = `no answer within ${timeout[1]} ms`;
    // `Redis reserve (…) failed: <cause>`: the cause is the reason.
    else text = text.replace(/^Redis .*? failed: /, '');
  }
  let out = redact(text, secrets.all);
  // The password whatever its length (redact leaves out short values, which may be ordinary words),
  // where it stands alone: a password `1` must not turn `127.0.0.1` into `[redacted]27.0.0.[redacted]`.
  for (const secret of secrets.password) {
    const alone = new RegExp(
      `(?<![A-Za-z0-9])${secret.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![A-Za-z0-9])`,
      'g',
    );
    out = out.replace(alone, redacted);
  }
  return out.length > maxReasonChars ? `${out.slice(0, maxReasonChars - 1)}…` : out || 'no reason given';
}

/**
 * The userinfo of a Redis URL: values no line may print (`password`: whatever its length), unless
 * the host or port holds them too: those are printed anyway, and hiding them would garble the line.
 */
function redisSecrets(url: string): { all: string[]; password: string[] } {
  const decoded = (text: string) => {
    try {
      return decodeURIComponent(text);
    } catch {
      return text; // not percent-encoded text: the raw form is the one to hide
    }
  };
  try {
    const parsed = new URL(url);
    const address = `${parsed.hostname}:${parsed.port}`;
    const hidden = (values: string[]) => values.filter((s) => s !== '' && !address.includes(s));
    const password = hidden([parsed.password, decoded(parsed.password)]);
    return { all: [...hidden([parsed.username, decoded(parsed.username)]), ...password], password };
  } catch {
    // safeUrlText still hides it in the URL; an unparsable URL fails before any command is sent.
    return { all: [], password: [] };
  }
}

/**
 * Say on stderr when the shared gate loses Redis (once per outage) and when Redis answers again:
 * while it is down, limits hold for this process only, which the user must know.
 */
function watchStore(gate: Partial<SharedGateExtras>, url: string, log: (line: string) => void): () => void {
  if (typeof gate.onStoreDown !== 'function' || typeof gate.onStoreUp !== 'function') return () => {};
  const where = `Redis at ${safeUrlText(url)}`;
  const secrets = redisSecrets(url);
  let connectionError: unknown;
  // The store keeps ioredis's connection errors to itself; their text says why better than a
  // command's ("max retries per request").
  const client = gate.store?.client;
  if (typeof client?.on === 'function') {
    client.on('error', (error) => {
      connectionError = error;
    });
    // Connected: an old connection error must not explain a later slow command.
    client.on('ready', () => {
      connectionError = undefined;
    });
  }
  const offDown = gate.onStoreDown(({ error, policy }) => {
    const reason = shortReason(error, connectionError, secrets);
    const then =
      policy === 'fail-open'
        ? 'requests now go out unthrottled'
        : policy === 'fail-closed'
          ? 'requests are now refused'
          : `limits now hold for this process only (${Math.round(localShare * 100)}% of each limit)`;
    log(`tollgate: ${where} is not answering (${reason}); ${then} until it answers again`);
  });
  const offUp = gate.onStoreUp(({ downForMs }) => {
    connectionError = undefined;
    log(`tollgate: ${where} answers again after ${formatMs(downForMs)}; limits are shared again`);
  });
  return () => {
    offDown();
    offUp();
  };
}

/** The budgets of a run and where they are recorded (see `setUpGate`). */
interface RunBudget {
  readonly guard: BudgetGuard | SharedBudgetGuard;
  readonly label: string;
  spend(): BudgetSpend[];
  readSpend(): Promise<BudgetSpend[]>;
  unavailable(error: unknown): boolean;
  close(): Promise<void>;
}

/** Spend is read again this often while a run records it in Redis (for the progress line). */
const redisSpendEveryMs = 500;

function fileBudget(config: GateConfig): RunBudget {
  const ledger = config.ledger ?? defaultLedgerPath();
  let guard: BudgetGuard;
  try {
    guard = createBudgetGuard({
      budgets: [...config.budgets],
      ledger: ledger === 'memory' ? 'memory' : { path: ledger },
    });
  } catch (error) {
    rethrow(error, 'Invalid --budget or --ledger');
  }
  return {
    guard,
    label: ledger,
    spend: () => guard.spend(),
    readSpend: async () => guard.spend(),
    unavailable: () => false,
    close: async () => guard.close(),
  };
}

/**
 * `--ledger redis`: the budgets in the Redis ledger of `--redis` (key prefix `--redis-prefix`), shared
 * by every process using it, as `tollgate budget show --redis` reads them. Fail-closed: while Redis
 * does not answer, a call that would reserve money is not sent (StoreUnavailableError).
 */
function redisBudget(config: GateConfig, mod: Record<string, unknown>, watchSpend: boolean): RunBudget {
  const { RedisLedger, createAsyncBudgetGuard } = mod as unknown as Partial<RedisBudgetModule>;
  if (typeof RedisLedger !== 'function' || typeof createAsyncBudgetGuard !== 'function')
    throw new CliError('--ledger redis is not available in this build: it has no Redis ledger.');
  let ledger: InstanceType<RedisBudgetModule['RedisLedger']>;
  try {
    ledger = new RedisLedger({
      redis: config.redis!,
      ...(config.redisPrefix === undefined ? {} : { keyPrefix: config.redisPrefix }),
    });
  } catch (error) {
    rethrow(error, 'Cannot open the budget ledger at --redis with --redis-prefix');
  }
  let inner: SharedBudgetGuard;
  try {
    inner = createAsyncBudgetGuard({ budgets: [...config.budgets], ledger });
  } catch (error) {
    void ledger.close();
    rethrow(error, 'Invalid --budget');
  }
  // The reservations Redis did not answer (the gate passes the error on as it is): told from the
  // limit store's failures, which the shared gate's fallback takes.
  const unanswered = new WeakSet<object>();
  const guard: SharedBudgetGuard = {
    currency: inner.currency,
    tryReserve: (estimateMicros, key, now) =>
      inner.tryReserve(estimateMicros, key, now).catch((error: unknown) => {
        if (isTollgateError(error) && error.code === 'ERR_STORE_UNAVAILABLE') unanswered.add(error);
        throw error;
      }),
    settle: (reservation, actualMicros, now) => inner.settle(reservation, actualMicros, now),
    release: (reservation, now) => inner.release(reservation, now),
    spend: () => inner.spend(),
  };
  // Readings may answer out of order (one waits on a slow Redis): the newest asked for wins.
  let last: BudgetSpend[] = [];
  let asked = 0;
  let shown = 0;
  const readSpend = async () => {
    const n = ++asked;
    const spend = await guard.spend();
    if (n > shown) {
      shown = n;
      last = spend;
    }
    return spend;
  };
  // The progress line reads spend synchronously: it shows the last reading (a failed one keeps it).
  const timer = watchSpend ? setInterval(() => readSpend().catch(() => {}), redisSpendEveryMs) : undefined;
  timer?.unref?.();
  if (watchSpend) void readSpend().catch(() => {});
  return {
    guard,
    label: `redis:${config.redisPrefix ?? 'tollgate'}`,
    spend: () => last,
    readSpend,
    unavailable: (error) => typeof error === 'object' && error !== null && unanswered.has(error),
    close: async () => {
      clearInterval(timer);
      await ledger.close();
    },
  };
}

export async function setUpGate(config: GateConfig, hooks: GateSetUpHooks = {}): Promise<RunGate> {
  const mod = config.redis === undefined ? undefined : await redisModule();
  if (config.redis !== undefined && mod === undefined) {
    throw new CliError(
      'Redis mode is not available in this build: it has no shared gate to connect to ' +
        `${safeUrlText(config.redis)}. Run without --redis (limits then hold for this process only).`,
    );
  }
  let budget: RunBudget | undefined;
  if (config.budgets.length > 0)
    budget =
      config.ledger === 'redis' ? redisBudget(config, mod!, hooks.watchSpend ?? true) : fileBudget(config);
  const options: Omit<GateOptions, 'budget'> = {
    limits: config.perHost ? [] : config.limits,
    perKey: config.perHost ? config.limits : [],
    maxQueueTimeMs: config.maxQueueTimeMs,
    maxQueue: config.maxQueue,
    adapt: config.headerAdapt ? (config.adapt ?? {}) : false,
  };
  let gate: RunnableGate;
  let shared: Partial<SharedGateExtras> | undefined;
  let unwatch = () => {};
  try {
    if (config.redis !== undefined) {
      const factory = mod!['createSharedGate'] as SharedGateFactory;
      shared = factory({
        ...options,
        redis: config.redis,
        ...(config.redisPrefix === undefined ? {} : { keyPrefix: config.redisPrefix }),
        ...(budget === undefined ? {} : { budget: budget.guard }),
        failure: 'local',
        localShare,
      }) as RunnableGate & Partial<SharedGateExtras>;
      gate = shared as RunnableGate;
      const log = hooks.log ?? ((line: string) => process.stderr.write(`${line}\n`));
      unwatch = watchStore(shared, config.redis, log);
    } else {
      const guard = budget?.guard as BudgetGuard | undefined;
      gate = createGate(guard === undefined ? options : { ...options, budget: guard });
    }
  } catch (error) {
    await budget?.close();
    if (error instanceof CliError) throw error;
    rethrow(error, config.redis === undefined ? 'Invalid limits' : 'Cannot start the shared gate');
  }
  return {
    gate,
    currency: budget?.guard.currency,
    ledgerLabel: budget?.label,
    spend: () => budget?.spend() ?? [],
    readSpend: async () => (await budget?.readSpend()) ?? [],
    ledgerUnavailable: (error) => budget?.unavailable(error) ?? false,
    sharedStore: () => {
      if (typeof shared?.stats !== 'function') return undefined;
      const stats = shared.stats();
      return { fallbackCalls: stats.fallbackCalls, down: !stats.storeUp };
    },
    close: async () => {
      unwatch();
      await gate.close({ queued: 'reject' });
      await budget?.close();
    },
  };
}
