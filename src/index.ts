// The public API of tollgate. Everything exported here is supported; anything not listed is internal.

// Internal, deliberately not exported: the per-algorithm factories (createLimit is the one entry),
// the server-quota core and the ledger's accounting helpers (their shapes may change).
// HTTP: fetch needs no optional dependency; axios and undici have their own entry points
// (`tollgate/axios`, `tollgate/undici`) so that importing `tollgate` never needs them.
export * from './adapters/index.js';
export type { BudgetSpec } from './budget/budget.js';
// Budgets: exact money in integer micro-units, persistent ledgers.
export type {
  BudgetDecision,
  BudgetGuardOptions,
  BudgetReservation,
  BudgetSpend,
  ThresholdEvent,
} from './budget/budget-guard.js';
export { BudgetGuard, createBudgetGuard } from './budget/budget-guard.js';
export type { CostModel, CostModelOptions, PriceTable, Usage } from './budget/cost-model.js';
export {
  costFromUsage,
  createCostModel,
  priceFromHeader,
  priceTable,
  readUsage,
} from './budget/cost-model.js';
export type { BudgetRefusal } from './budget/errors.js';
export { BudgetExceededError, LedgerCorruptError } from './budget/errors.js';
export type { FileLedgerOptions } from './budget/file-ledger.js';
export { defaultLedgerPath, FileLedger } from './budget/file-ledger.js';
export type { Ledger } from './budget/ledger.js';
export { MemoryLedger } from './budget/memory-ledger.js';
export { formatMicros, parseMoney } from './budget/money.js';
export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export type { AdaptOptions, AimdOptions } from './core/adaptation.js';
export { createLimit } from './core/create-limit.js';
export type { Algorithm, Decision, LimitCore, LimitSpec } from './core/limit.js';
export { reserveAt, tryAcquireAt } from './core/limit.js';
export type { WindowSafeOptions } from './core/window-safe.js';
export { windowSafe } from './core/window-safe.js';
export type { TollgateErrorCode } from './errors.js';
export {
  AbortedError,
  GateClosedError,
  InvalidCostError,
  InvalidOptionError,
  isTollgateError,
  QueueFullError,
  QueueTimeoutError,
  RateLimitedError,
  StoreUnavailableError,
  TollgateError,
} from './errors.js';
export type {
  Dispose,
  LimitsChangedEvent,
  Listener,
  PauseEvent,
  QueuedEvent,
  RefusedEvent,
  ResumeEvent,
  StartEvent,
} from './gate/events.js';
export type {
  CloseOptions,
  GateStats,
  Inspection,
  LimitStats,
  PartitionStats,
  ScheduleOptions,
} from './gate/gate.js';
export { createGate, Gate } from './gate/gate.js';
export type { AdaptOptionsInput, GateOptions } from './gate/options.js';
export * from './headers/index.js';
