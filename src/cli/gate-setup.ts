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
import { safeUrlText } from './redact.js';

export interface GateConfig {
  readonly limits: readonly LimitSpec[];
  /** Apply `limits` to each origin (partition key) instead of to the whole run. */
  readonly perHost: boolean;
  readonly budgets: readonly BudgetSpec[];
  /** Ledger file for the budgets, or `memory` (not persisted). */
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

export interface RunGate {
  readonly gate: RunnableGate;
  readonly guard: BudgetGuard | undefined;
  /** Where the budgets' spend is recorded (a path, or `memory`). */
  readonly ledgerLabel: string | undefined;
  /** Spend per budget now (empty without budgets). */
  spend(): BudgetSpend[];
  close(): Promise<void>;
}

// The shared gate, loaded only for --redis, from wherever this build has it: a `redis` entry next to
// the bundled CLI (dist/redis.js), or the sources (src/redis/) when run with tsx. Variable
// specifiers, so that a build without it still compiles and bundles, and says so at run time.
const sharedGateModules = ['./redis.js', '../redis/index.js', '../redis/shared-gate.js'];

type SharedGateFactory = (
  options: Omit<GateOptions, 'budget'> & { redis: string; keyPrefix?: string; budget?: BudgetGuard },
) => RunnableGate;

async function sharedGateFactory(): Promise<SharedGateFactory | undefined> {
  for (const specifier of sharedGateModules) {
    try {
      const mod = (await import(specifier)) as Record<string, unknown>;
      if (typeof mod['createSharedGate'] === 'function') return mod['createSharedGate'] as SharedGateFactory;
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

export async function setUpGate(config: GateConfig): Promise<RunGate> {
  let guard: BudgetGuard | undefined;
  let ledgerLabel: string | undefined;
  if (config.budgets.length > 0) {
    const ledger = config.ledger ?? defaultLedgerPath();
    ledgerLabel = ledger;
    try {
      guard = createBudgetGuard({
        budgets: [...config.budgets],
        ledger: ledger === 'memory' ? 'memory' : { path: ledger },
      });
    } catch (error) {
      rethrow(error, 'Invalid --budget or --ledger');
    }
  }
  const options: Omit<GateOptions, 'budget'> = {
    limits: config.perHost ? [] : config.limits,
    perKey: config.perHost ? config.limits : [],
    maxQueueTimeMs: config.maxQueueTimeMs,
    maxQueue: config.maxQueue,
    adapt: config.headerAdapt ? (config.adapt ?? {}) : false,
  };
  let gate: RunnableGate;
  try {
    if (config.redis !== undefined) {
      const factory = await sharedGateFactory();
      if (factory === undefined) {
        throw new CliError(
          'Redis mode is not available in this build: it has no shared gate to connect to ' +
            `${safeUrlText(config.redis)}. Run without --redis (limits then hold for this process only).`,
        );
      }
      gate = factory({
        ...options,
        redis: config.redis,
        ...(config.redisPrefix === undefined ? {} : { keyPrefix: config.redisPrefix }),
        ...(guard === undefined ? {} : { budget: guard }),
      });
    } else {
      gate = createGate(guard === undefined ? options : { ...options, budget: guard });
    }
  } catch (error) {
    guard?.close();
    if (error instanceof CliError) throw error;
    rethrow(error, config.redis === undefined ? 'Invalid limits' : 'Cannot start the shared gate');
  }
  return {
    gate,
    guard,
    ledgerLabel,
    spend: () => guard?.spend() ?? [],
    close: async () => {
      await gate.close({ queued: 'reject' });
      guard?.close();
    },
  };
}
