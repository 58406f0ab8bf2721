// The public API of tollgate. Everything exported here is supported; anything not listed is internal.

export type { Clock } from './clock.js';
export { systemClock } from './clock.js';
export type { Algorithm, Decision, LimitCore, LimitSpec } from './core/limit.js';
export { reserveAt, tryAcquireAt } from './core/limit.js';
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
