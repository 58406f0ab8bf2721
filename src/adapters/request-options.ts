/**
 * What every HTTP adapter shares: the per-request options it hands the gate, the little the
 * adapters need of a gate, and the checks of the options they all accept. No algorithm lives here:
 * adapters translate, the gate decides.
 */
import { InvalidOptionError } from '../errors.js';
import type { Gate, Inspection, ScheduleOptions } from '../gate/gate.js';
import { fn, integer, invalid, plainObject } from '../validate.js';

/**
 * Per-request options, as a request carries them (`init.tollgate` for fetch, `config.tollgate` for
 * axios, `opts.tollgate` for undici) or as an adapter's `requestOptions` function returns them.
 * A request's own values win over the function's.
 */
export interface TollgateRequestOptions {
  /**
   * What the request consumes: a number of requests, or a record of units.
   * @default 1
   * @example { requests: 1, tokens: 1200 }
   */
  cost?: ScheduleOptions['cost'];
  /** Partition key; overrides the adapter's `key` (by default the request's origin). Never put a secret here: see `hashKey`. */
  key?: string;
  /** Higher starts first; FIFO among equals. Integer. @default 0 */
  priority?: number;
  /** Deadline to start, in ms (retries included); overrides the gate's `maxQueueTimeMs`. */
  maxQueueTimeMs?: number;
  /** Estimated price in integer micro-units, reserved on the gate's budgets before the request is queued. */
  priceMicros?: number;
}

/** Units a response says were actually used, e.g. `{ tokens: 812 }` from a body's `usage`. */
export type ActualCost = Readonly<Record<string, number>>;

/** What the adapters use of a gate: `schedule`. Any object with a compatible `schedule` works (a wrapper, a test double). */
export type GateLike = Pick<Gate, 'schedule'>;

/** How much of an error response's body an adapter reads for body-borne limits (Google RetryInfo, Discord, ...). */
export interface ErrorBodyOptions {
  /**
   * Largest body read, in bytes; a longer (or longer-announced) body is not read. Integer >= 0.
   * @default 65_536
   */
  maxBytes?: number;
  /**
   * Longest wait for the body, in ms: a server that trickles its error body cannot hold the
   * call (or its retry) longer than this. Integer >= 0.
   * @default 2_000
   */
  timeoutMs?: number;
}

export interface NormalizedErrorBody {
  readonly maxBytes: number;
  readonly timeoutMs: number;
}

const requestOptionKeys = new Set(['cost', 'key', 'priority', 'maxQueueTimeMs', 'priceMicros']);
const errorBodyDefaults: NormalizedErrorBody = Object.freeze({ maxBytes: 65_536, timeoutMs: 2_000 });

/** The gate an adapter is created with: anything with a `schedule` function. */
export function checkGate(gate: unknown): GateLike {
  if (
    typeof gate !== 'object' ||
    gate === null ||
    typeof (gate as { schedule?: unknown }).schedule !== 'function'
  ) {
    throw invalid('gate', 'a gate (from createGate)', gate);
  }
  return gate as GateLike;
}

/** Options object of an adapter: a plain object whose keys are all known. */
export function checkOptions(value: unknown, known: readonly string[]): Record<string, unknown> {
  if (value === undefined) return {};
  const o = plainObject('options', value);
  for (const key of Object.keys(o)) {
    if (!known.includes(key)) throw invalid(key, `a known option (${known.join(', ')})`, o[key]);
  }
  return o;
}

/** An optional function option. */
export function optionalFn<F>(name: string, value: unknown): F | undefined {
  return value === undefined ? undefined : (fn(name, value) as F);
}

/** The options every adapter accepts, each hook typed as the adapter's options type declares it. */
interface SharedOptionsShape {
  key?: unknown;
  requestOptions?: unknown;
  actualCost?: unknown;
  price?: { estimate?: unknown; actual?: unknown };
  errorBody?: false | ErrorBodyOptions;
}

/** The shared options of an adapter, checked; `price` is flattened into `estimate` and `actualPrice`. */
export interface SharedOptions<O extends SharedOptionsShape> {
  readonly key: O['key'] | undefined;
  readonly requestOptions: O['requestOptions'] | undefined;
  readonly actualCost: O['actualCost'] | undefined;
  readonly estimate: NonNullable<O['price']>['estimate'] | undefined;
  readonly actualPrice: NonNullable<O['price']>['actual'] | undefined;
  /** undefined: read no error body. */
  readonly errorBody: NormalizedErrorBody | undefined;
}

/**
 * Check the options every adapter accepts (`key`, `requestOptions`, `actualCost`, `price`,
 * `errorBody`), in that order, from the adapter's options object (already through `checkOptions`).
 */
export function checkSharedOptions<O extends SharedOptionsShape>(
  o: Record<string, unknown>,
): SharedOptions<O> {
  const key = optionalFn<O['key']>('key', o['key']);
  const requestOptions = optionalFn<O['requestOptions']>('requestOptions', o['requestOptions']);
  const actualCost = optionalFn<O['actualCost']>('actualCost', o['actualCost']);
  const price = checkPrice<NonNullable<O['price']>['estimate'], NonNullable<O['price']>['actual']>(
    o['price'],
  );
  return {
    key,
    requestOptions,
    actualCost,
    estimate: price.estimate,
    actualPrice: price.actual,
    errorBody: checkErrorBody(o['errorBody']),
  };
}

/** `price: { estimate?, actual? }`. */
function checkPrice<E, A>(value: unknown): { estimate: E | undefined; actual: A | undefined } {
  if (value === undefined) return { estimate: undefined, actual: undefined };
  const o = plainObject('price', value);
  for (const key of Object.keys(o)) {
    if (key !== 'estimate' && key !== 'actual') throw invalid(`price.${key}`, 'estimate or actual', o[key]);
  }
  return {
    estimate: optionalFn<E>('price.estimate', o['estimate']),
    actual: optionalFn<A>('price.actual', o['actual']),
  };
}

/** `errorBody: false | { maxBytes?, timeoutMs? }`; `false` (or `maxBytes: 0`) reads no error body. */
function checkErrorBody(value: unknown): NormalizedErrorBody | undefined {
  if (value === false) return undefined;
  if (value === undefined) return errorBodyDefaults;
  const o = plainObject('errorBody', value);
  for (const key of Object.keys(o)) {
    if (key !== 'maxBytes' && key !== 'timeoutMs')
      throw invalid(`errorBody.${key}`, 'maxBytes or timeoutMs', o[key]);
  }
  const maxBytes =
    o['maxBytes'] === undefined
      ? errorBodyDefaults.maxBytes
      : integer('errorBody.maxBytes', o['maxBytes'], 0);
  const timeoutMs =
    o['timeoutMs'] === undefined
      ? errorBodyDefaults.timeoutMs
      : integer('errorBody.timeoutMs', o['timeoutMs'], 0);
  // A Node timer keeps at most 2^31 - 1 ms; a longer one fires at once, and the body goes unread.
  if (timeoutMs > 2 ** 31 - 1)
    throw invalid(
      'errorBody.timeoutMs',
      'an integer of ms from 0 to 2147483647 (about 24.8 days)',
      timeoutMs,
    );
  return maxBytes === 0 ? undefined : Object.freeze({ maxBytes, timeoutMs });
}

/**
 * The adapter's hooks that shape a request's schedule options, each called with the client's own
 * view of the request (a fetch call, an axios config, undici's dispatch options).
 */
export interface RequestHooks<R> {
  /** The adapter's `key` option, or (without one) the request's origin. Not called when the request's options name a key. */
  readonly key: (request: R) => string | undefined;
  /** The adapter's `requestOptions` option. */
  readonly requestOptions: ((request: R) => TollgateRequestOptions | undefined) | undefined;
  /** The adapter's `price.estimate` option. Not called when the request's options give `priceMicros`. */
  readonly estimate: ((request: R) => number | undefined) | undefined;
}

/**
 * The gate's schedule options for one request, all but `signal` and `inspect` (which only the
 * client can supply). Precedence, highest first:
 * - the request's own options (`own`, e.g. `init.tollgate`), field by field;
 * - the `requestOptions` hook's answer;
 * - for `key`, the `key` hook (by default the origin); for `priceMicros`, the `estimate` hook.
 * Hooks run in that order, each at most once. Throws `InvalidOptionError` for unknown per-request
 * options (and whatever a hook throws): the adapter refuses the request, unsent.
 */
export function scheduleOptionsOf<R>(
  hooks: RequestHooks<R>,
  request: R,
  own: TollgateRequestOptions | undefined,
  where: string,
): ScheduleOptions {
  const scheduleOptions: ScheduleOptions = {};
  applyRequestOptions(scheduleOptions, mergeRequestOptions(hooks.requestOptions?.(request), own, where));
  if (scheduleOptions.key === undefined) {
    const key = hooks.key(request);
    if (key !== undefined) scheduleOptions.key = key;
  }
  if (scheduleOptions.priceMicros === undefined && hooks.estimate !== undefined) {
    const estimate = hooks.estimate(request);
    if (estimate !== undefined) scheduleOptions.priceMicros = estimate;
  }
  return scheduleOptions;
}

/**
 * The schedule options of one request: the adapter-level function's answer, overridden field by
 * field by the request's own options. Unknown fields are a mistake worth reporting (a misspelled
 * `prority` would silently do nothing): the request is refused with `InvalidOptionError`, never sent.
 * Values themselves are checked by `gate.schedule`.
 */
function mergeRequestOptions(
  fromFunction: TollgateRequestOptions | undefined,
  fromRequest: TollgateRequestOptions | undefined,
  where: string,
): TollgateRequestOptions | undefined {
  if (fromFunction !== undefined) checkRequestOptions(fromFunction, 'requestOptions()');
  if (fromRequest !== undefined) checkRequestOptions(fromRequest, where);
  if (fromFunction === undefined) return fromRequest;
  if (fromRequest === undefined) return fromFunction;
  return { ...fromFunction, ...fromRequest };
}

function checkRequestOptions(value: unknown, where: string): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalid(where, 'an object of per-request options', value);
  }
  for (const key of Object.keys(value)) {
    if (!requestOptionKeys.has(key)) {
      throw new InvalidOptionError(
        `${where}.${key}`,
        `Unknown per-request option \`${where}.${key}\` (known: ${[...requestOptionKeys].join(', ')})`,
      );
    }
  }
}

/** Copy the per-request options that are set into `target` (exactOptionalPropertyTypes: no `undefined` values). */
function applyRequestOptions(target: ScheduleOptions, options: TollgateRequestOptions | undefined): void {
  if (options === undefined) return;
  if (options.cost !== undefined) target.cost = options.cost;
  if (options.key !== undefined) target.key = options.key;
  if (options.priority !== undefined) target.priority = options.priority;
  if (options.maxQueueTimeMs !== undefined) target.maxQueueTimeMs = options.maxQueueTimeMs;
  if (options.priceMicros !== undefined) target.priceMicros = options.priceMicros;
}

/** `application/json`, `application/problem+json`, `application/vnd.api+json; charset=utf-8`, ... */
export function isJsonContentType(value: string | null | undefined): boolean {
  if (typeof value !== 'string') return false;
  const type = value.split(';', 1)[0]!.trim().toLowerCase();
  return type === 'application/json' || type.endsWith('+json');
}

/** JSON text to a value, or undefined when it is not JSON (an error page in HTML, a truncated body). */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Call a user's hook on the response; a hook that throws or rejects is treated as having said
 * nothing (the estimate stands): a paid response already received must not be lost to it.
 */
export function safely<T>(hook: () => T | Promise<T>): T | undefined | Promise<T | undefined> {
  try {
    const value = hook();
    return value instanceof Promise ? value.catch(() => undefined) : value;
  } catch {
    return undefined;
  }
}

/** An inspection an adapter is still filling in. */
export type MutableInspection = { -readonly [K in keyof Inspection]: Inspection[K] };

/**
 * Put what the `actualCost` and `price.actual` hooks answered on `inspection`, each only if usable
 * (a record of units; integer micros >= 0): an unusable answer counts as none, the estimate stands.
 */
export function setActuals(inspection: MutableInspection, cost: unknown, priceMicros: unknown): void {
  const actualCost = costOrUndefined(cost);
  if (actualCost !== undefined) inspection.actualCost = actualCost;
  const actualPriceMicros = priceOrUndefined(priceMicros);
  if (actualPriceMicros !== undefined) inspection.actualPriceMicros = actualPriceMicros;
}

/** A number a price hook returned, if usable as integer micros. */
function priceOrUndefined(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/** A record of units a cost hook returned, if it is one. */
function costOrUndefined(value: unknown): ActualCost | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as ActualCost)
    : undefined;
}
