// The public API of `tollgate/redis`: one quota shared by many processes through Redis. Everything
// exported here is supported; the rest of src/redis is internal. Importing this entry needs nothing
// beyond tollgate itself until a Redis store is built from a URL, which loads the optional `ioredis`.

export type { AsyncBudgetGuardOptions } from './async-budget-guard.js';
export { AsyncBudgetGuard, createAsyncBudgetGuard } from './async-budget-guard.js';
export type { AsyncLedger } from './async-ledger.js';
export { asyncLedger } from './async-ledger.js';
export type { MemoryStoreOptions } from './memory-store.js';
export { MemoryStore } from './memory-store.js';
export type { RedisClient } from './redis-client.js';
export type { RedisLedgerOptions } from './redis-ledger.js';
export { RedisLedger } from './redis-ledger.js';
export type { RedisStoreOptions } from './redis-store.js';
export { RedisStore } from './redis-store.js';
export type {
  SharedGateStats,
  SharedPauseEvent,
  StoreDownEvent,
  StoreUpEvent,
} from './shared-gate.js';
export { createSharedGate, SharedGate } from './shared-gate.js';
export type { FailurePolicy, SharedBudget, SharedGateOptions } from './shared-gate-options.js';
export type {
  LearnOptions,
  MaybePromise,
  ReserveOptions,
  Store,
  StoreDecision,
  StoreLevel,
  StorePause,
  StorePauseEvent,
  StoreRefusal,
  StoreReservation,
} from './store.js';
// Deliberately internal: the Lua scripts and key layout (redis-scripts.ts, redis-ledger-scripts.ts,
// redis-keys.ts: their shapes change with the storage format), the command runner (redis-client.ts),
// the timer heap and the per-level helpers of memory-store.ts (coreOf, levelName, claimRefund...).
