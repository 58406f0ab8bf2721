/**
 * The hidden server-side limits of the simulated API: the option shapes and their validation into a
 * frozen list of rules. Deliberately independent of `src/core/`: the simulated server is the oracle
 * the client's algorithms are measured against, so it must not share their arithmetic.
 */
import { finiteNumber, integer, invalid, nonEmptyString, oneOf, plainObject } from '../validate.js';

/** What a rule counts. A request's `requests` cost is always 1; its `tokens` cost comes from the request. */
export type SimulatedUnit = 'requests' | 'tokens';

/** Rule kinds the server can enforce. */
export type SimulatedRuleKind = 'token-bucket' | 'fixed-window' | 'sliding-window';

interface RuleCommon {
  /**
   * Units admitted per `intervalMs`. Integer >= 1.
   */
  limit: number;
  /** Length of the interval in ms. Finite, > 0. */
  intervalMs: number;
  /**
   * What the rule counts.
   * @default 'requests'
   */
  unit?: SimulatedUnit;
  /**
   * Policy id used in `RateLimit-Policy` / `RateLimit` (ietf-structured) headers.
   * @default the unit, suffixed with `-2`, `-3`... when several rules share it
   */
  name?: string;
}

/** Continuous refill at `limit / intervalMs`, holding at most `burst`; starts full. */
export interface TokenBucketPolicy extends RuleCommon {
  kind: 'token-bucket';
  /**
   * Bucket size: the most units admitted at once after an idle period. Integer >= 1.
   * @default limit
   */
  burst?: number;
}

/** At most `limit` per window aligned to multiples of `intervalMs` on the Unix-epoch scale (calendar minute for 60 000). */
export interface FixedWindowPolicy extends RuleCommon {
  kind: 'fixed-window';
}

/** An exact sliding log: at most `limit` in every interval `(t - intervalMs, t]`. */
export interface SlidingWindowPolicy extends RuleCommon {
  kind: 'sliding-window';
}

/**
 * OpenAI-style pair of per-minute limits: requests per minute and tokens per minute (at least one).
 * Expands to one rule per unit with `intervalMs` 60 000.
 */
export interface RequestsTokensPolicy {
  kind: 'requests-tokens';
  /** Requests per minute. Integer >= 1. */
  requestsPerMinute?: number;
  /** Tokens per minute. Integer >= 1. */
  tokensPerMinute?: number;
  /**
   * How each per-minute limit is enforced (token buckets start full, burst = the per-minute limit).
   * @default 'token-bucket'
   */
  algorithm?: SimulatedRuleKind;
}

/** No limit at all: every request is accepted (storms and hostile responses still apply). */
export interface NoPolicy {
  kind: 'none';
}

export type SimulatedPolicySpec =
  | TokenBucketPolicy
  | FixedWindowPolicy
  | SlidingWindowPolicy
  | RequestsTokensPolicy
  | NoPolicy;

/** One policy, or several enforced together (a request must pass all of them). */
export type SimulatedPolicyOption = SimulatedPolicySpec | readonly SimulatedPolicySpec[];

/** A validated rule. `burst` is set for every kind (it equals `limit` except for token buckets). */
export interface SimulatedRule {
  readonly kind: SimulatedRuleKind;
  readonly unit: SimulatedUnit;
  readonly name: string;
  readonly limit: number;
  readonly intervalMs: number;
  /** The largest cost one request may have in this rule's unit: `burst` for token buckets, else `limit`. */
  readonly capacity: number;
  /** Token bucket only (else equals `limit`). */
  readonly burst: number;
}

const ruleKinds: readonly SimulatedRuleKind[] = ['token-bucket', 'fixed-window', 'sliding-window'];
const allKinds = [...ruleKinds, 'requests-tokens', 'none'] as const;
const units: readonly SimulatedUnit[] = ['requests', 'tokens'];
// Names go inside an sf-string; keep them printable ASCII without quote or backslash so no escaping is needed.
const namePattern = /^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/;

/** Validate `policy` into a frozen list of rules (empty for `none`). Throws InvalidOptionError naming the path. */
export function normalizePolicy(policy: unknown, option = 'policy'): readonly SimulatedRule[] {
  const specs = Array.isArray(policy) ? policy : [policy];
  if (Array.isArray(policy) && policy.length === 0)
    throw invalid(option, 'a non-empty array of policies', policy);
  const drafts: Array<Omit<SimulatedRule, 'name'> & { name: string | undefined }> = [];
  specs.forEach((spec: unknown, i) => {
    const path = Array.isArray(policy) ? `${option}[${i}]` : option;
    const o = plainObject(path, spec);
    const kind = oneOf(`${path}.kind`, o['kind'], allKinds);
    if (kind === 'none') return;
    if (kind === 'requests-tokens') {
      const algorithm =
        o['algorithm'] === undefined ? 'token-bucket' : oneOf(`${path}.algorithm`, o['algorithm'], ruleKinds);
      if (o['requestsPerMinute'] === undefined && o['tokensPerMinute'] === undefined) {
        throw invalid(`${path}.requestsPerMinute`, 'an integer >= 1 (or set tokensPerMinute)', undefined);
      }
      for (const [field, unit] of [
        ['requestsPerMinute', 'requests'],
        ['tokensPerMinute', 'tokens'],
      ] as const) {
        if (o[field] === undefined) continue;
        const limit = integer(`${path}.${field}`, o[field], 1);
        drafts.push({
          kind: algorithm,
          unit,
          name: undefined,
          limit,
          intervalMs: 60_000,
          capacity: limit,
          burst: limit,
        });
      }
      return;
    }
    const limit = integer(`${path}.limit`, o['limit'], 1);
    const intervalMs = finiteNumber(`${path}.intervalMs`, o['intervalMs'], { min: 0, minExclusive: true });
    const unit = o['unit'] === undefined ? 'requests' : oneOf(`${path}.unit`, o['unit'], units);
    let name: string | undefined;
    if (o['name'] !== undefined) {
      name = nonEmptyString(`${path}.name`, o['name']);
      if (!namePattern.test(name)) throw invalid(`${path}.name`, 'printable ASCII without `"` or `\\`', name);
    }
    let burst = limit;
    if (kind === 'token-bucket') {
      if (o['burst'] !== undefined) burst = integer(`${path}.burst`, o['burst'], 1);
    } else if (o['burst'] !== undefined) {
      throw invalid(
        `${path}.burst`,
        `undefined (burst applies to token-bucket only, kind is '${kind}')`,
        o['burst'],
      );
    }
    drafts.push({ kind, unit, name, limit, intervalMs, capacity: burst, burst });
  });
  // Default names: the unit, numbered when several rules share it ("requests", "requests-2").
  const seen = new Map<string, number>();
  const rules = drafts.map((d) => {
    let name = d.name;
    if (name === undefined) {
      const n = (seen.get(d.unit) ?? 0) + 1;
      seen.set(d.unit, n);
      name = n === 1 ? d.unit : `${d.unit}-${n}`;
    }
    return Object.freeze({ ...d, name });
  });
  const names = new Set<string>();
  for (const r of rules) {
    if (names.has(r.name))
      throw invalid(option, `policies with distinct names (\`${r.name}\` repeats)`, policy);
    names.add(r.name);
  }
  return Object.freeze(rules);
}

/** The policy option that `rules` were normalized from (a frozen copy; `none` for no rules). */
export function policyOf(rules: readonly SimulatedRule[]): SimulatedPolicyOption {
  if (rules.length === 0) return Object.freeze({ kind: 'none' });
  return Object.freeze(
    rules.map((r): SimulatedPolicySpec => {
      const { kind, limit, intervalMs, unit, name } = r;
      return Object.freeze(
        kind === 'token-bucket'
          ? { kind, limit, intervalMs, unit, name, burst: r.burst }
          : { kind, limit, intervalMs, unit, name },
      );
    }),
  );
}
