// The public API of tollgate. Everything exported here is supported; anything not listed is internal.

export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
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
export type { CloseOptions, GateStats, LimitStats, PartitionStats, ScheduleOptions } from './gate/gate.js';
export { createGate, Gate } from './gate/gate.js';
export type { GateOptions } from './gate/options.js';
export * from './headers/index.js';
