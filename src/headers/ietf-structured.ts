import {
  type BareItem,
  type Dictionary,
  type List,
  parseDictionary,
  parseList,
  Token,
} from 'structured-headers';
import type { StructuredFamily } from './profiles.js';
import type { RawWindow } from './quota-window.js';

/**
 * The IETF `RateLimit` field in its two structured generations, parsed with a Structured Fields
 * (RFC 8941/9651) parser:
 * - draft-07: a Dictionary `limit=100, remaining=50, reset=5` (+ `RateLimit-Policy: 100;w=10`);
 * - draft-08+: a List of named Items `"p";r=50;t=30` + `RateLimit-Policy: "p";q=100;w=60`.
 *
 * P11: any SF syntax error, or a known parameter of the wrong type or range, makes the WHOLE field
 * ignored ("Malformed RateLimit header fields MUST be ignored"). Tolerated, because the draft's own
 * examples do it: a missing `r`, Token ids instead of Strings. Unknown parameters are comments.
 * `limit` is the `q` of the policy with the SAME id; no match -> no limit (never "the only policy").
 *
 * Known leniency of the SF parser we use: it returns Decimals as JS numbers, so `t=2.0` cannot be
 * told from `t=2` and is read as 2; `t=2.5` is still refused.
 */

interface Policy {
  readonly quota?: number;
  readonly unit?: string;
  readonly windowMs?: number;
}

/** Raw windows for one structured family, or none when its `RateLimit` field is absent or malformed. */
export function readStructuredFamily(
  family: StructuredFamily,
  fields: ReadonlyMap<string, string>,
): RawWindow[] {
  const value = fields.get(family.field);
  if (value === undefined) return [];
  const list = tryParse(parseList, value);
  if (list === undefined) {
    const dictionary = tryParse(parseDictionary, value);
    return dictionary === undefined ? [] : draft07Window(family, dictionary, fields);
  }
  const items = rateLimitItems(list);
  if (items === undefined) return [];
  const policyText = fields.get(family.policyField);
  // A malformed policy field is ignored on its own; the RateLimit items still stand, without limits.
  const policies =
    policyText === undefined ? new Map<string, Policy>() : (namedPolicies(policyText) ?? new Map());
  const resetAtText = family.resetAtField === undefined ? undefined : fields.get(family.resetAtField);
  return items.map((item): RawWindow => {
    const policy = policies.get(item.id);
    const window: RawWindow = {
      source: family.source,
      key: item.id,
      unit: policy?.unit ?? 'requests',
      name: item.id,
    };
    if (policy?.quota !== undefined) window.limit = String(policy.quota);
    if (policy?.windowMs !== undefined) window.windowMs = policy.windowMs;
    if (item.remaining !== undefined) window.remaining = String(item.remaining);
    if (item.resetSeconds !== undefined) window.resetAfter = String(item.resetSeconds);
    // P8: the absolute reset header (Jira `X-Beta-RateLimit-Reset`) only fills a missing `t`.
    else if (resetAtText !== undefined) window.resetAt = { text: resetAtText, format: 'auto' };
    return window;
  });
}

interface RateLimitItem {
  readonly id: string;
  readonly remaining?: number;
  readonly resetSeconds?: number;
}

function rateLimitItems(list: List): RateLimitItem[] | undefined {
  const items: RateLimitItem[] = [];
  for (const member of list) {
    const [bare, parameters] = member;
    const id = itemId(bare);
    if (id === undefined) return undefined; // an Inner List or a non-name id: malformed
    const remaining = parameters.get('r');
    const resetSeconds = parameters.get('t');
    if (remaining !== undefined && !isNonNegativeInteger(remaining)) return undefined;
    if (resetSeconds !== undefined && !isNonNegativeInteger(resetSeconds)) return undefined;
    const pk = parameters.get('pk');
    if (pk !== undefined && !(pk instanceof ArrayBuffer)) return undefined;
    items.push({
      id,
      ...(remaining === undefined ? {} : { remaining: remaining as number }),
      ...(resetSeconds === undefined ? {} : { resetSeconds: resetSeconds as number }),
    });
  }
  return items;
}

/**
 * Draft-08+ policies by id. Integer-valued items are draft-04..07 policies (`100;w=10`) and are
 * skipped here (the window assembly reads them as window lengths); any other malformation -> undefined.
 */
function namedPolicies(value: string): Map<string, Policy> | undefined {
  const list = tryParse(parseList, value);
  if (list === undefined) return undefined;
  const policies = new Map<string, Policy>();
  for (const member of list) {
    const [bare, parameters] = member;
    if (typeof bare === 'number') continue; // a draft-04..07 policy, not a named one
    const id = itemId(bare);
    if (id === undefined) return undefined;
    const quota = parameters.get('q');
    const unit = parameters.get('qu');
    const windowSeconds = parameters.get('w');
    const pk = parameters.get('pk');
    if (quota !== undefined && !isNonNegativeInteger(quota)) return undefined;
    if (unit !== undefined && typeof unit !== 'string') return undefined;
    // draft-09: w must be non-zero.
    if (windowSeconds !== undefined && (!isNonNegativeInteger(windowSeconds) || windowSeconds === 0))
      return undefined;
    if (pk !== undefined && !(pk instanceof ArrayBuffer)) return undefined;
    // s -> ms; w has at most 15 digits, so the product can exceed 2^53 only for garbage.
    const windowMs = windowSeconds === undefined ? undefined : (windowSeconds as number) * 1000;
    if (policies.has(id)) continue; // the first policy of an id wins
    policies.set(id, {
      ...(quota === undefined ? {} : { quota: quota as number }),
      ...(unit === undefined || unit === '' ? {} : { unit }),
      ...(windowMs === undefined || !Number.isSafeInteger(windowMs) ? {} : { windowMs }),
    });
  }
  return policies;
}

/** Draft-07 `RateLimit: limit=100, remaining=50, reset=5`; `reset` is read by P6 like the older fields. */
function draft07Window(
  family: StructuredFamily,
  dictionary: Dictionary,
  fields: ReadonlyMap<string, string>,
): RawWindow[] {
  const values: Partial<Record<'limit' | 'remaining' | 'reset', number>> = {};
  for (const key of ['limit', 'remaining', 'reset'] as const) {
    const member = dictionary.get(key);
    if (member === undefined) continue;
    const [bare] = member;
    if (!isNonNegativeInteger(bare)) return []; // wrong type (or an Inner List): malformed
    values[key] = bare as number;
  }
  if (values.limit === undefined && values.remaining === undefined && values.reset === undefined) return [];
  const window: RawWindow = { source: 'ietf-dictionary', key: family.field, unit: 'requests' };
  if (values.limit !== undefined) window.limit = String(values.limit);
  if (values.remaining !== undefined) window.remaining = String(values.remaining);
  if (values.reset !== undefined) window.reset = { text: String(values.reset), format: 'auto' };
  // Draft-07 policies are integer items; the one whose quota equals the limit gives the window length.
  const policy = fields.get(family.policyField);
  if (policy !== undefined) window.policy = policy;
  return [window];
}

function itemId(bare: BareItem | readonly unknown[]): string | undefined {
  if (typeof bare === 'string') return bare;
  if (bare instanceof Token) return bare.toString();
  return undefined;
}

function isNonNegativeInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function tryParse<T>(parse: (input: string) => T, value: string): T | undefined {
  try {
    return parse(value);
  } catch {
    // P11: a syntax error makes the field malformed; malformed fields are ignored.
    return undefined;
  }
}
