import { invalid, onlyKnownKeys, plainObject } from '../validate.js';
import {
  type BodyReader,
  type BodyReaderContext,
  type BodyReading,
  defaultBodyReaders,
} from './body-readers.js';
import { compoundParsers } from './compound-values.js';
import { type HeadersLike, normalizeHeaders } from './headers-like.js';
import { parseHttpDate } from './http-date.js';
import { readStructuredFamily } from './ietf-structured.js';
import { parseDelayDuration, parseDelayMs, parseDelaySeconds, parseRetryAfter } from './parse-retry-after.js';
import {
  compoundRules,
  type ResetFormat,
  type RetryFormat,
  retryDirectives,
  sourceMarkers,
  structuredFamilies,
  throttleHeaders,
  throttleStatuses,
  type WindowRule,
  windowRules,
} from './profiles.js';
import { assembleWindows, bindsBefore, type RawWindow, type TimeReference } from './quota-window.js';
import type { RateLimitObservation, RateLimitPolicy, RateLimitSummary } from './rate-limit-observation.js';

export interface ParseRateLimitOptions {
  /** Receive time of the response, ms on the Unix-epoch scale. Finite. */
  readonly now: number;
  /** The response body, already parsed (JSON) or undefined, for body-borne signals. */
  readonly body?: unknown;
  /** Extra body readers, run after `defaultBodyReaders`. */
  readonly bodyReaders?: readonly BodyReader[];
  /**
   * How to read a reset header whose provider documents other semantics than the default, by
   * lower-case header name. Example (Prisjakt sends delta ms): `{ 'x-rate-limit-reset': 'delta-ms' }`.
   */
  readonly resetFormats?: Readonly<Record<string, ResetFormat>>;
  /**
   * Measure absolute times from `now` rather than the `Date` header when `now` falls within the
   * Date's own second (the two clocks agree to the Date's 1 s resolution, and `now` is finer).
   * The rule P2 (Date first) is for clocks that may disagree; a client whose clock agrees gains up
   * to a second per reset. @default false
   */
  readonly preferReceiveTime?: boolean;
}

const parseOptionNames = ['now', 'body', 'bodyReaders', 'resetFormats', 'preferReceiveTime'];
const resetFormatNames: readonly ResetFormat[] = [
  'auto',
  'delta-seconds',
  'delta-ms',
  'epoch-seconds',
  'epoch-ms',
  'duration',
  'date',
];

/**
 * One normalized observation from a response's status, headers and (optionally) parsed body.
 * Pure: all times are measured from `options.now` or the response `Date` header; nothing reads the
 * clock. Never throws on response data: garbage is dropped by the rules commented where they apply.
 * Throws `InvalidOptionError` only for misused options (an unknown one, a non-finite `now`, a
 * malformed `bodyReaders` or `resetFormats`).
 */
export function parseRateLimitHeaders(
  status: number,
  headers: HeadersLike,
  options: ParseRateLimitOptions,
): RateLimitObservation {
  onlyKnownKeys('options', plainObject('options', options), parseOptionNames);
  const now = options.now;
  if (typeof now !== 'number' || !Number.isFinite(now)) throw invalid('now', 'a finite number', now);
  if (options.preferReceiveTime !== undefined && typeof options.preferReceiveTime !== 'boolean')
    throw invalid('preferReceiveTime', 'a boolean', options.preferReceiveTime);
  const formats = options.resetFormats;
  if (formats !== undefined) {
    for (const [name, format] of Object.entries(plainObject('resetFormats', formats))) {
      if (!resetFormatNames.includes(format as ResetFormat))
        throw invalid(`resetFormats.${name}`, `one of ${resetFormatNames.join(', ')}`, format);
    }
  }
  const extraReaders = options.bodyReaders ?? [];
  if (!Array.isArray(extraReaders) || extraReaders.some((reader) => typeof reader !== 'function')) {
    throw invalid('bodyReaders', 'an array of functions', extraReaders);
  }

  const fields = normalizeHeaders(headers);
  // P2: absolute times are measured against the server's clock when it sent a valid `Date`.
  const dateText = fields.get('date');
  const dateMs = dateText === undefined ? undefined : parseHttpDate(dateText, now);
  // Date has whole-second resolution: a clock inside that second agrees with it and is finer.
  const agrees =
    options.preferReceiveTime === true && dateMs !== undefined && now >= dateMs && now < dateMs + 1000;
  const referenceMs = agrees ? now : (dateMs ?? now);
  const time: TimeReference = { now, referenceMs };

  // Explicit directives: every one is read and the maximum wins (P5), never retry before any of them.
  let retryAfterMs: number | undefined;
  const addWait = (ms: unknown) => {
    const wait = sanitizeDuration(ms);
    if (wait !== undefined && (retryAfterMs === undefined || wait > retryAfterMs)) retryAfterMs = wait;
  };
  for (const directive of retryDirectives) {
    const value = fields.get(directive.header);
    if (value !== undefined) addWait(readDirective(directive.format, value, now, dateText));
  }

  const policies: RateLimitPolicy[] = [];
  const addPolicy = (policy: unknown) => {
    const clean = sanitizePolicy(policy);
    if (clean !== undefined) policies.push(clean);
  };
  for (const family of structuredFamilies) {
    for (const raw of readStructuredFamily(family, fields)) assembleWindows(raw, time).forEach(addPolicy);
  }
  for (const raw of rawWindowsFromNames(fields, options.resetFormats))
    assembleWindows(raw, time).forEach(addPolicy);

  let throttled =
    throttleStatuses.has(status) ||
    throttleHeaders.some(({ header, value }) => {
      const text = fields.get(header);
      return text !== undefined && value.test(text.trim());
    });

  if (options.body !== undefined) {
    const context: BodyReaderContext = {
      status,
      now,
      referenceMs,
      header: (name) => fields.get(name.toLowerCase()),
    };
    for (const reader of [...defaultBodyReaders, ...extraReaders]) {
      let reading: BodyReading | undefined;
      try {
        reading = reader(options.body, context);
      } catch {
        // Rule: a reader that throws (a user's reader meeting an unexpected body) contributes nothing.
        continue;
      }
      if (typeof reading !== 'object' || reading === null) continue;
      addWait(reading.retryAfterMs);
      if (Array.isArray(reading.policies)) reading.policies.slice(0, maxBodyPolicies).forEach(addPolicy);
      if (reading.throttled === true) throttled = true;
    }
  }

  return {
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    policies,
    ...(throttled ? { throttled: true } : {}),
  };
}

// A body reader returning more windows than this is broken; the rest are ignored.
const maxBodyPolicies = 64;

function readDirective(format: RetryFormat, value: string, now: number, dateText: string | undefined) {
  switch (format) {
    case 'retry-after':
      return parseRetryAfter(value, now, dateText);
    case 'delay-seconds':
      return parseDelaySeconds(value);
    case 'milliseconds':
      return parseDelayMs(value);
    case 'duration':
      return parseDelayDuration(value);
  }
}

/** Windows from families whose header names carry the window and field (`windowRules`, `compoundRules`). */
function rawWindowsFromNames(
  fields: ReadonlyMap<string, string>,
  resetFormats: Readonly<Record<string, ResetFormat>> | undefined,
): RawWindow[] {
  const windows = new Map<string, RawWindow>();
  const compound: RawWindow[] = [];
  for (const [name, value] of fields) {
    const named = matchWindowRule(name);
    if (named !== undefined) {
      addField(windows, named.rule, named.groups, name, value, resetFormats);
      continue;
    }
    for (const compoundRule of compoundRules) {
      const match = compoundRule.name.exec(name);
      if (match === null) continue;
      const { key } = match.groups ?? {};
      for (const parsed of compoundParsers[compoundRule.format](value)) {
        const raw: RawWindow = { source: compoundRule.source, key: key ?? name, unit: compoundRule.unit };
        const windowName = parsed.name ?? key;
        if (windowName !== undefined) raw.name = windowName;
        if (parsed.limit !== undefined) raw.limit = parsed.limit;
        if (parsed.remaining !== undefined) raw.remaining = parsed.remaining;
        if (parsed.used !== undefined) raw.used = parsed.used;
        if (parsed.resetAfter !== undefined) raw.resetAfter = parsed.resetAfter;
        compound.push(raw);
      }
      break;
    }
  }
  for (const marker of sourceMarkers) {
    for (const raw of windows.values()) {
      if (raw.key === marker.key && fields.has(marker.header)) raw.source = marker.source;
    }
  }
  return [...windows.values(), ...compound];
}

/** The first window rule owning a header name, with its named groups. */
function matchWindowRule(name: string): { rule: WindowRule; groups: Record<string, string> } | undefined {
  for (const rule of windowRules) {
    const match = rule.name.exec(name);
    if (match !== null) return { rule, groups: match.groups ?? {} };
  }
  return undefined;
}

function addField(
  windows: Map<string, RawWindow>,
  rule: WindowRule,
  groups: Readonly<Record<string, string>>,
  name: string,
  value: string,
  resetFormats: Readonly<Record<string, ResetFormat>> | undefined,
): void {
  const { field: fieldText = '', key: groupKey } = groups;
  const field = ownValue(rule.fields, fieldText);
  const key = groupKey ?? rule.key ?? name;
  if (field === undefined) return;
  const id = `${rule.source}\u0000${key}`;
  let raw = windows.get(id);
  if (raw === undefined) {
    const unit = rule.unit === 'from-key' ? (ownValue(rule.unitAliases, key) ?? key) : rule.unit;
    raw = { source: rule.source, key, unit };
    const windowMs = ownValue(rule.windowMsByKey, key);
    if (windowMs !== undefined) raw.windowMs = windowMs;
    if (rule.nameFromKey === true) raw.name = key;
    windows.set(id, raw);
  }
  // An override (provider documentation) beats the family's default reading of a reset.
  const format = ownValue(resetFormats, name) ?? rule.reset;
  switch (field) {
    case 'reset':
      raw.reset = { text: value, format };
      break;
    case 'resetAt':
      raw.resetAt = { text: value, format: ownValue(resetFormats, name) ?? 'auto' };
      break;
    case 'windowMs':
      raw.windowMsText = value;
      break;
    case 'name':
    case 'scope': {
      // Names are labels, not numbers: bounded, trimmed, and the first header to give one wins.
      const label = value.trim().slice(0, maxNameChars);
      if (raw[field] === undefined && label !== '') raw[field] = label;
      break;
    }
    default:
      raw[field] = value;
  }
}

const maxNameChars = 128;

/**
 * `record[key]` for an own key only. Keys here come from header names: `x-ratelimit-constructor-*`
 * must not reach `Object.prototype.constructor` through a plain-object table.
 */
function ownValue<T>(record: Readonly<Record<string, T>> | undefined, key: string): T | undefined {
  return record !== undefined && Object.hasOwn(record, key) ? record[key] : undefined;
}

/**
 * The last line of defence, also for windows from user body readers: every number is a
 * non-negative safe integer or absent, `remaining <= limit`, and a window with neither limit nor
 * remaining is dropped (P9).
 */
function sanitizePolicy(policy: unknown): RateLimitPolicy | undefined {
  if (typeof policy !== 'object' || policy === null) return undefined;
  const candidate = policy as { readonly [K in keyof RateLimitPolicy]?: unknown };
  const limit = sanitizeCount(candidate.limit);
  let remaining = sanitizeCount(candidate.remaining);
  if (limit === undefined && remaining === undefined) return undefined;
  if (limit !== undefined && remaining !== undefined && remaining > limit) remaining = limit;
  const resetMs = sanitizeDuration(candidate.resetMs);
  const windowMs = sanitizeDuration(candidate.windowMs);
  const { unit, source, name } = candidate;
  return {
    // A window without a unit counts requests, the default unit everywhere in tollgate.
    unit: typeof unit === 'string' && unit !== '' ? unit.slice(0, maxNameChars) : 'requests',
    ...(limit === undefined ? {} : { limit }),
    ...(remaining === undefined ? {} : { remaining }),
    ...(resetMs === undefined ? {} : { resetMs }),
    ...(windowMs === undefined || windowMs === 0 ? {} : { windowMs }),
    ...(typeof name === 'string' && name !== '' ? { name: name.slice(0, maxNameChars) } : {}),
    source: typeof source === 'string' && source !== '' ? source.slice(0, maxNameChars) : 'custom',
  };
}

/** A count (limit, remaining): a non-negative finite number floored like header counts (P12), if safe. */
function sanitizeCount(value: unknown): number | undefined {
  return wholeOrUndefined(value, Math.floor);
}

/** A duration in ms: a non-negative finite number rounded up (a wait is never shortened), if safe. */
function sanitizeDuration(value: unknown): number | undefined {
  return wholeOrUndefined(value, Math.ceil);
}

function wholeOrUndefined(value: unknown, round: (value: number) => number): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return undefined;
  const whole = round(value);
  return Number.isSafeInteger(whole) ? whole : undefined;
}

/**
 * The binding window (rule P9): among windows counted in `requests` (all windows if there are none),
 * the lowest `remaining`; ties go to the later known reset. Windows without a `remaining` are chosen
 * only when no window has one.
 */
export function bindingPolicy(observation: RateLimitObservation): RateLimitPolicy | undefined {
  const requestWindows = observation.policies.filter((policy) => policy.unit === 'requests');
  const candidates = requestWindows.length > 0 ? requestWindows : observation.policies;
  let binding: RateLimitPolicy | undefined;
  for (const candidate of candidates) {
    if (binding === undefined || bindsBefore(candidate, binding)) binding = candidate;
  }
  return binding;
}

/** The four numbers the header vectors check: the explicit wait and the binding window's numbers. */
export function summarize(observation: RateLimitObservation): RateLimitSummary {
  const binding = bindingPolicy(observation);
  return {
    retryAfterMs: observation.retryAfterMs ?? null,
    remaining: binding?.remaining ?? null,
    limit: binding?.limit ?? null,
    resetMs: binding?.resetMs ?? null,
  };
}
