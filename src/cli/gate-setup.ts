/**
 * The gate a run uses, built from the parsed flags through the public API only: limits, budgets
 * (with their ledger), header adaptation, deadlines. The shared (Redis) gate is looked up at run
 * time, so this build works, and says so clearly, without it.
 */
import {
  type BudgetGuard,
  type BudgetSpec,
  createBudgetGuard,
  createGate,
  defaultLedgerPath,
  type Gate,
  type GateOptions,
  isTollgateError,
  type LimitSpec,
} from '../index.js';
import { CliError } from './cli-error.js';

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
}

export interface RunGate {
  readonly gate: Gate;
  readonly guard: BudgetGuard | undefined;
  /** Where the budgets' spend is recorded (a path, or `memory`). */
  readonly ledgerLabel: string | undefined;
  close(): Promise<void>;
}

// Where a shared gate would live. A variable, so that builds without it still compile and bundle.
const redisModule = '../redis/index.js';

async function sharedGateFactory(): Promise<
  ((options: GateOptions & { redis: string }) => Gate) | undefined
> {
  try {
    const mod = (await import(redisModule)) as Record<string, unknown>;
    const factory = mod['createSharedGate'] ?? mod['createRedisGate'];
    return typeof factory === 'function'
      ? (factory as (options: GateOptions & { redis: string }) => Gate)
      : undefined;
  } catch {
    return undefined;
  }
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
  const options: GateOptions = {
    limits: config.perHost ? [] : config.limits,
    perKey: config.perHost ? config.limits : [],
    maxQueueTimeMs: config.maxQueueTimeMs,
    maxQueue: config.maxQueue,
    adapt: config.headerAdapt ? (config.adapt ?? {}) : false,
  };
  if (guard !== undefined) options.budget = guard;
  let gate: Gate;
  try {
    if (config.redis !== undefined) {
      const factory = await sharedGateFactory();
      if (factory === undefined) {
        throw new CliError(
          'Redis mode is not available in this build: it has no shared gate to connect to ' +
            `${config.redis}. Run without --redis (limits then hold for this process only).`,
        );
      }
      gate = factory({ ...options, redis: config.redis });
    } else gate = createGate(options);
  } catch (error) {
    guard?.close();
    if (error instanceof CliError) throw error;
    rethrow(error, 'Invalid limits');
  }
  return {
    gate,
    guard,
    ledgerLabel,
    close: async () => {
      await gate.close({ queued: 'reject' });
      guard?.close();
    },
  };
}
