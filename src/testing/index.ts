// The public API of `tollgate/testing`: a simulated paid API for tests and benchmarks. Everything
// exported here is supported; the rest of src/testing is internal.

export type { WindowPeak } from './arrival-stats.js';
export { maxAcceptedInWindow, overLimitWindows } from './arrival-stats.js';
export type {
  FixedWindowPolicy,
  NoPolicy,
  RequestsTokensPolicy,
  SimulatedPolicyOption,
  SimulatedPolicySpec,
  SimulatedRule,
  SimulatedRuleKind,
  SimulatedUnit,
  SlidingWindowPolicy,
  TokenBucketPolicy,
} from './policy-spec.js';
export { normalizePolicy } from './policy-spec.js';
export type { SimulatedHeaderStyle } from './rate-limit-headers.js';
// Header formatting helpers are exported so tests can build expected values the same way.
export { formatGoDuration, formatRfc3339, rateLimitHeaders } from './rate-limit-headers.js';
export type { SimulatedApi, SimulatedApiStats } from './simulated-api.js';
export { simCostHeader, simTokensHeader, startSimulatedApi } from './simulated-api.js';
export type { SimulatedApiOptions, SimulatedHostility, SimulatedRequest } from './simulated-api-options.js';
export type {
  RuleSnapshot,
  SimulatedAdmission,
  SimulatedCost,
  SimulatedWorkload,
} from './simulated-policy.js';
export { physicalMinimumMs, SimulatedPolicy } from './simulated-policy.js';
export type { OutageResponse, SimulatedOutage, SimulatedStorms } from './storm-schedule.js';
export { StormSchedule } from './storm-schedule.js';
// Not exported: normalizeSimulatedApiOptions / normalizeStorms (startSimulatedApi validates), the
// garbage-header generator and bindingRule (details of the server's responses).
