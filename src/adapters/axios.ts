/**
 * `tollgate/axios`: `throttleAxios(instance, gate)` sends every request of an axios instance through
 * the gate. axios stays an optional peer: this module imports its types only and takes what it
 * needs at run time from the instance (or the `axios` option).
 *
 * ## Design: an adapter wrapper, installed by one request interceptor
 *
 * A request interceptor replaces `config.adapter` (whatever it resolved to: the instance default, a
 * per-request adapter, a mock adapter) with a wrapper that calls the real adapter inside
 * `gate.schedule`. Why not an interceptor pair (wait in a request interceptor, observe in a
 * response interceptor):
 * - **Retries.** The gate retries a throttled call by calling `fn` again. Inside the adapter, `fn`
 *   is "send this exact, already-transformed config once more": no interceptor runs twice (no
 *   second auth refresh, no double logging), `transformRequest` is not re-applied, the gate's
 *   partition accounting sees one call. An interceptor pair would have to re-enter
 *   `instance.request()` and every interceptor with it.
 * - **Only sent requests are counted.** The wait happens after every request interceptor (which may
 *   still fail or rewrite the URL, the headers, the adapter) and just before the socket.
 * - **Errors stay axios' errors.** The real adapter builds the response or the `AxiosError`
 *   (applying the caller's `validateStatus`) as without tollgate; `dispatchRequest` then runs
 *   `transformResponse` on exactly the response that is returned or attached to the error.
 *   The gate sees throttled responses either way: a non-2xx that `validateStatus` rejects arrives
 *   as an `AxiosError` carrying `response`, which the wrapper hands to the gate's `inspect` as a
 *   value (no `validateStatus` rewriting needed, and a custom `validateStatus` keeps working).
 *
 * ## Semantics
 * - **Cancellation while queued** (`signal` or `CancelToken`) rejects with axios' own
 *   `CanceledError` (`axios.isCancel(error)` is true, `code` `ERR_CANCELED`): the gate rejects the
 *   queued call with `AbortedError`, and axios' `dispatchRequest`, seeing the request cancelled,
 *   replaces any adapter rejection with its `CanceledError` (for a CancelToken: the token's reason).
 *   Nothing is sent. Existing cancellation handling keeps working unchanged. Cancellation in flight
 *   is the adapter's own, as without tollgate.
 * - **A 429 the gate gives up on** (attempts exhausted, a Retry-After beyond `maxRetryAfterMs`, a
 *   retry that cannot restart before `maxQueueTimeMs`) rejects with the **`AxiosError` of the last
 *   attempt, `response` attached** (status 429, headers, transformed data), exactly as axios would
 *   have rejected it, with the gate's `RateLimitedError` (`retryAt`, `attempts`) as its `cause`.
 *   Code that inspects `error.response.status` keeps working; code that wants the retry time reads
 *   `error.cause`. (If the caller's `validateStatus` accepts 429, the 429 response resolves, as in axios.)
 * - **Other statuses and network errors** are returned or rejected unchanged. Refusals before
 *   sending (`QueueTimeoutError`, `QueueFullError`, `BudgetExceededError`, `GateClosedError`,
 *   `InvalidOptionError` for a bad `config.tollgate`) reject with tollgate's typed errors.
 * - **Config is preserved**: the wrapper passes the config it receives to the real adapter
 *   (baseURL, params, headers, auth, timeouts, proxies, `responseType`, `env`), with one change:
 *   where `adapter` names adapters, `env.fetch` becomes a wrapper of the fetch it had (or of the
 *   global one) that notes whether fetch followed a redirect, which axios's fetch adapter does not
 *   say (see `inspectOutcome`'s `processed`).
 * - **Non-replayable bodies** (a stream as `data`) are marked not retryable: a 429 on one rejects
 *   as above instead of re-sending an empty stream.
 */
import type {
  AxiosAdapter,
  AxiosInstance,
  AxiosResponse,
  AxiosStatic,
  CancelToken,
  InternalAxiosRequestConfig,
} from 'axios';
import { isIdempotent } from '../core/adaptation.js';
import { isTollgateError } from '../errors.js';
import type { Inspection, ScheduleOptions } from '../gate/gate.js';
import type { HeadersLike } from '../headers/headers-like.js';
import { invalid } from '../validate.js';
import {
  type ActualCost,
  checkGate,
  checkOptions,
  checkSharedOptions,
  type ErrorBodyOptions,
  type GateLike,
  isJsonContentType,
  type MutableInspection,
  type NormalizedErrorBody,
  parseJson,
  type RequestHooks,
  safely,
  scheduleOptionsOf,
  setActuals,
  type TollgateRequestOptions,
} from './request-options.js';
import { headOf, type ResponseHead, resultOf } from './response-head.js';

declare module 'axios' {
  interface AxiosRequestConfig {
    /** tollgate's per-request options (cost, key, priority, maxQueueTimeMs, priceMicros), read by `throttleAxios`. */
    tollgate?: TollgateRequestOptions;
  }
}

type AdapterSetting = InternalAxiosRequestConfig['adapter'];

export interface ThrottleAxiosOptions {
  /**
   * The axios default export, whose `getAdapter` resolves adapter *names* (`'http'`, `'fetch'`,
   * axios' default `['xhr', 'http', 'fetch']`). Not needed when `instance` is the default export
   * itself, or when every request's adapter is a function.
   * @example throttleAxios(axios.create({ baseURL }), gate, { axios })
   */
  axios?: Pick<AxiosStatic, 'getAdapter'>;
  /**
   * Partition key of a request. Return undefined for the gate's default partition. Hash anything
   * secret with `hashKey`.
   * @default the origin (scheme, host, port) of the request's full URL (`baseURL` + `url`)
   */
  key?: (config: InternalAxiosRequestConfig) => string | undefined;
  /** Per-request defaults (cost, key, priority, ...); `config.tollgate` overrides them field by field. */
  requestOptions?: (config: InternalAxiosRequestConfig) => TollgateRequestOptions | undefined;
  /**
   * Units the response says were used (e.g. `{ tokens: response.data.usage.total_tokens }`), to
   * settle the reservation. Called for every attempt's response (429s included) before
   * `transformResponse` runs: `data` is given JSON-parsed when the response is JSON text.
   * A hook that throws counts as no answer.
   */
  actualCost?: (response: AxiosResponse) => ActualCost | undefined | Promise<ActualCost | undefined>;
  price?: {
    /** Estimated price in integer micro-units, reserved on the gate's budgets before queueing. */
    estimate?: (config: InternalAxiosRequestConfig) => number | undefined;
    /** Actual price in integer micro-units (e.g. from a price header), settling the budget. */
    actual?: (response: AxiosResponse) => number | undefined | Promise<number | undefined>;
  };
  /**
   * Error responses (status >= 400) with JSON bodies up to `maxBytes` are handed to the gate for
   * body-borne limits. axios has already read the body, so `timeoutMs` does not apply. `false`
   * disables it.
   * @default { maxBytes: 65_536 }
   */
  errorBody?: false | ErrorBodyOptions;
}

const knownOptions = ['axios', 'key', 'requestOptions', 'actualCost', 'price', 'errorBody'] as const;
// axios' own default when neither the request nor the instance names an adapter.
const axiosDefaultAdapters = ['xhr', 'http', 'fetch'];
// Marks the adapters a registration installed, so a config sent again (axios-retry re-sends the
// same config) is not wrapped, and counted, twice.
const installedBy = Symbol('tollgate.axios.registration');

type ResponseHook<T> = (response: AxiosResponse) => T | Promise<T>;

/** One attempt's answer: the response, and the AxiosError axios rejected it with (non-2xx by `validateStatus`). */
interface Outcome {
  readonly response: AxiosResponse;
  readonly error?: unknown;
}

/**
 * Throttle every request of `instance` through `gate`. Returns a dispose function that removes the
 * throttling (requests already queued still complete). Options are validated here
 * (`InvalidOptionError` naming the option).
 *
 * @example
 * const dispose = throttleAxios(axios, createGate({ limits: [windowSafe(100, 60_000)] }));
 * await axios.get('https://api.example.com/v1/things', { tollgate: { priority: 1 } });
 */
export function throttleAxios(
  instance: AxiosInstance,
  gate: GateLike,
  options?: ThrottleAxiosOptions,
): () => void {
  const g = checkGate(gate);
  if (
    (typeof instance !== 'function' && typeof instance !== 'object') ||
    instance === null ||
    typeof instance.interceptors?.request?.use !== 'function'
  ) {
    throw invalid('instance', 'an axios instance', instance);
  }
  const o = checkOptions(options, knownOptions);
  let getAdapter: AxiosStatic['getAdapter'] | undefined;
  if (o['axios'] !== undefined) {
    const axios = o['axios'] as Partial<AxiosStatic> | null;
    if (typeof axios?.getAdapter !== 'function') throw invalid('axios', 'the axios default export', axios);
    getAdapter = axios.getAdapter.bind(axios);
  } else if (typeof (instance as Partial<AxiosStatic>).getAdapter === 'function') {
    getAdapter = (instance as AxiosStatic).getAdapter.bind(instance);
  }
  if (getAdapter === undefined && typeof instance.defaults?.adapter !== 'function') {
    throw invalid(
      'axios',
      'the axios default export (its getAdapter resolves adapter names such as the default ["xhr", "http", "fetch"])',
      undefined,
    );
  }
  const shared = checkSharedOptions<ThrottleAxiosOptions>(o);
  const hooks: RequestHooks<InternalAxiosRequestConfig> = {
    key: shared.key ?? originOfConfig,
    requestOptions: shared.requestOptions,
    estimate: shared.estimate,
  };
  const registration = {};

  const resolveAdapter = (setting: AdapterSetting, config: InternalAxiosRequestConfig): AxiosAdapter => {
    if (typeof setting === 'function') return setting;
    if (getAdapter === undefined) {
      throw invalid('axios', 'the axios default export, to resolve the adapter name', setting);
    }
    return getAdapter(setting ?? axiosDefaultAdapters, config);
  };

  const run = (config: InternalAxiosRequestConfig, setting: AdapterSetting): Promise<AxiosResponse> => {
    let inner: AxiosAdapter;
    let scheduleOptions: ScheduleOptions;
    try {
      if (typeof setting !== 'function') seeRedirectsOfFetch(config);
      inner = resolveAdapter(setting, config);
      scheduleOptions = scheduleOptionsOf(hooks, config, config.tollgate, 'config.tollgate');
    } catch (error) {
      return Promise.reject(error);
    }
    const method = (config.method ?? 'get').toUpperCase();
    const retryable = !isStreamData(config.data);
    const cancel = cancellationOf(config);
    if (cancel.signal !== undefined) scheduleOptions.signal = cancel.signal;
    scheduleOptions.inspect = ((head: ResponseHead<unknown>) =>
      inspectOutcome(
        resultOf<Outcome>(head),
        method,
        retryable,
        shared.errorBody,
        shared.actualCost,
        shared.actualPrice,
      )) as (result: never) => Inspection | undefined | Promise<Inspection | undefined>;

    let last: Outcome | undefined;
    // The gate gets a head of each answer (status and response headers), not the response: a
    // throttled call's RateLimitedError carries it as its cause, and an axios response holds the
    // request's config (its authorization and x-api-key headers). See response-head.ts.
    const headOfLast = (outcome: Outcome): ResponseHead<unknown> => {
      last = outcome;
      const { response } = outcome;
      return headOf(outcome, response.status, response.statusText, response.headers);
    };
    const attempt = (): Promise<ResponseHead<unknown>> =>
      inner(config).then(
        (response) => headOfLast({ response }),
        (error: unknown) => {
          const response = responseOf(error);
          // No response (network error, timeout, cancellation): the gate passes the error through.
          if (response === undefined) throw error;
          return headOfLast({ response, error });
        },
      );

    return g.schedule(attempt, scheduleOptions).then(
      (head) => {
        cancel.dispose();
        const outcome = resultOf<Outcome>(head)!;
        if (outcome.error !== undefined) throw outcome.error;
        return outcome.response;
      },
      (error: unknown) => {
        cancel.dispose();
        if (last !== undefined && isTollgateError(error) && error.code === 'ERR_RATE_LIMITED') {
          // The provider's answer, as axios would have given it, with tollgate's verdict as the cause.
          if (last.error === undefined) return last.response;
          attachCause(last.error, error);
          throw last.error;
        }
        throw error;
      },
    );
  };

  const install = (config: InternalAxiosRequestConfig): InternalAxiosRequestConfig => {
    const setting = config.adapter;
    if (
      typeof setting === 'function' &&
      (setting as { [installedBy]?: object })[installedBy] === registration
    ) {
      return config;
    }
    const throttled: AxiosAdapter & { [installedBy]?: object } = (adapterConfig) =>
      run(adapterConfig, setting);
    throttled[installedBy] = registration;
    config.adapter = throttled;
    return config;
  };

  // Synchronous: adds no tick to requests when the other interceptors are synchronous too.
  const id = instance.interceptors.request.use(install, undefined, { synchronous: true });
  let disposed = false;
  return () => {
    if (disposed) return;
    disposed = true;
    instance.interceptors.request.eject(id);
  };
}

function inspectOutcome(
  outcome: Outcome | undefined,
  method: string,
  retryable: boolean,
  errorBody: NormalizedErrorBody | undefined,
  actualCostHook: ResponseHook<ActualCost | undefined> | undefined,
  actualPriceHook: ResponseHook<number | undefined> | undefined,
): Inspection | undefined | Promise<Inspection | undefined> {
  const response = outcome?.response;
  if (typeof response !== 'object' || response === null || typeof response.status !== 'number')
    return undefined;
  const inspection: MutableInspection = {
    status: response.status,
    headers: (response.headers ?? {}) as unknown as HeadersLike,
    method,
    retryable,
    // Followed redirects (follow-redirects counts them on the last request): a POST answered by a
    // 303 was acted on; its target's 429 is no reason to send the POST again.
    processed: redirectsOf(response) > 0 && !isIdempotent(method),
    discard: () => releaseData(response.data),
  };
  if (errorBody !== undefined && response.status >= 400) {
    const body = jsonData(response, errorBody.maxBytes);
    if (body !== undefined) inspection.body = body;
  }
  if (actualCostHook === undefined && actualPriceHook === undefined) return inspection;
  // Hooks see data as the caller will (parsed JSON), though transformResponse has not run yet.
  const parsed = jsonData(response, Infinity);
  const view: AxiosResponse = parsed === undefined ? response : { ...response, data: parsed };
  return Promise.all([
    actualCostHook === undefined ? undefined : safely(() => actualCostHook(view)),
    actualPriceHook === undefined ? undefined : safely(() => actualPriceHook(view)),
  ]).then(([cost, priceMicros]) => {
    setActuals(inspection, cost, priceMicros);
    return inspection;
  });
}

/** The response's JSON body, parsed, if it is JSON text (or an already-parsed object) of at most `maxBytes`. */
function jsonData(response: AxiosResponse, maxBytes: number): unknown {
  const data: unknown = response.data;
  if (data === null || data === undefined) return undefined;
  if (typeof data === 'string' || data instanceof Uint8Array || data instanceof ArrayBuffer) {
    if (!isJsonContentType(headerOf(response.headers, 'content-type'))) return undefined;
    const bytes = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
    if (bytes > maxBytes) return undefined;
    const text =
      typeof data === 'string'
        ? data
        : Buffer.from(data instanceof ArrayBuffer ? new Uint8Array(data) : data).toString('utf8');
    return parseJson(text);
  }
  // An adapter (or a mock) that already parsed it; never a stream.
  if (typeof data === 'object' && !isStreamData(data)) return data;
  return undefined;
}

function headerOf(headers: unknown, name: string): string | undefined {
  if (typeof headers !== 'object' || headers === null) return undefined;
  const get = (headers as { get?: unknown }).get;
  const value =
    typeof get === 'function'
      ? (get as (name: string) => unknown).call(headers, name)
      : (headers as Record<string, unknown>)[name];
  return typeof value === 'string' ? value : undefined;
}

function responseOf(error: unknown): AxiosResponse | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const response = (error as { response?: unknown }).response;
  return typeof response === 'object' &&
    response !== null &&
    typeof (response as AxiosResponse).status === 'number'
    ? (response as AxiosResponse)
    : undefined;
}

function attachCause(error: unknown, cause: unknown): void {
  if (typeof error !== 'object' || error === null) return;
  try {
    Object.defineProperty(error, 'cause', {
      value: cause,
      writable: true,
      configurable: true,
      enumerable: false,
    });
  } catch {
    // A frozen error keeps its own shape; the response it carries is what matters most.
  }
}

/**
 * Requests that axios's fetch adapter sent and fetch followed a redirect for. That adapter hands
 * back the `Request` it built as `response.request`, and nothing of fetch's `Response` (whose
 * `redirected` says it): `seeRedirectsOfFetch` gives it a fetch that notes them here.
 */
const redirectedRequests = new WeakSet<object>();
/** One noting fetch per fetch it calls (axios caches an adapter per `env.fetch` function). */
const notingFetches = new WeakMap<typeof fetch, typeof fetch>();
const noting = new WeakSet<typeof fetch>();
/** The noting fetch of "the global fetch at the time of the call" (msw and tests replace it). */
let notingGlobal: typeof fetch | undefined;

function notingFetch(base: typeof fetch | undefined): typeof fetch {
  let wrapper = base === undefined ? notingGlobal : notingFetches.get(base);
  if (wrapper !== undefined) return wrapper;
  wrapper = async (input, init) => {
    const response = await (base ?? globalThis.fetch)(input, init);
    if (response.redirected && typeof input === 'object' && input !== null) redirectedRequests.add(input);
    return response;
  };
  noting.add(wrapper);
  if (base === undefined) notingGlobal = wrapper;
  else notingFetches.set(base, wrapper);
  return wrapper;
}

/**
 * Give the request's `env.fetch` (axios's fetch adapter uses it, the others ignore it) a wrapper of
 * the fetch it had, or of the global one, that notes a redirected response in `redirectedRequests`.
 * Only where `config.adapter` names adapters: an adapter function is built already.
 */
function seeRedirectsOfFetch(config: InternalAxiosRequestConfig): void {
  if (typeof globalThis.fetch !== 'function') return;
  const env = (config as { env?: { fetch?: unknown } }).env;
  // Not a function: axios says what it makes of it, as without tollgate.
  if (env?.fetch !== undefined && typeof env.fetch !== 'function') return;
  const own = env?.fetch as typeof fetch | undefined;
  if (own !== undefined && noting.has(own)) return;
  (config as { env?: object }).env = { ...env, fetch: notingFetch(own) };
}

/**
 * Redirects followed for `response`: axios's Node adapter counts them (follow-redirects), its fetch
 * adapter's are noted by `seeRedirectsOfFetch`; 0 when unknown.
 */
function redirectsOf(response: { request?: unknown }): number {
  const request = response.request;
  const count = (request as { _redirectable?: { _redirectCount?: unknown } } | undefined)?._redirectable
    ?._redirectCount;
  if (typeof count === 'number') return count;
  return typeof request === 'object' && request !== null && redirectedRequests.has(request) ? 1 : 0;
}

/** Release a response the gate drops (a retried 429): streams are destroyed, buffered bodies need nothing. */
function releaseData(data: unknown): void {
  if (typeof data !== 'object' || data === null) return;
  try {
    const destroy = (data as { destroy?: unknown }).destroy;
    if (typeof destroy === 'function') {
      (destroy as () => void).call(data);
      return;
    }
    const cancel = (data as { cancel?: unknown }).cancel;
    if (typeof cancel === 'function' && typeof (data as ReadableStream).getReader === 'function') {
      ((cancel as () => Promise<void>).call(data) as Promise<void>).catch(() => {});
    }
  } catch {
    // Releasing a dropped response must not fail the call.
  }
}

function isStreamData(data: unknown): boolean {
  if (typeof data !== 'object' || data === null) return false;
  return (
    typeof (data as { pipe?: unknown }).pipe === 'function' ||
    typeof (data as ReadableStream).getReader === 'function' ||
    typeof (data as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  );
}

const absoluteUrl = /^([a-z][a-z\d+\-.]*:)?\/\//i;

/** Origin of the URL axios will request (`buildFullPath`: an absolute `url` wins unless `allowAbsoluteUrls` is false). */
function originOfConfig(config: InternalAxiosRequestConfig): string | undefined {
  const url = config.url ?? '';
  const baseURL = config.baseURL;
  const allowAbsolute = (config as { allowAbsoluteUrls?: boolean }).allowAbsoluteUrls !== false;
  const full =
    baseURL && (!absoluteUrl.test(url) || !allowAbsolute)
      ? `${baseURL.replace(/\/?\/$/, '')}/${url.replace(/^\/+/, '')}`
      : url;
  try {
    const origin = new URL(full).origin;
    return origin === 'null' ? undefined : origin;
  } catch {
    return undefined;
  }
}

interface Cancellation {
  readonly signal: AbortSignal | undefined;
  dispose(): void;
}

const noCancellation: Cancellation = { signal: undefined, dispose: () => {} };

/**
 * One AbortSignal for the gate from axios' `signal` and/or `CancelToken`. A native signal alone is
 * passed as it is; otherwise a controller follows both, and forgets them once the call settles.
 */
function cancellationOf(config: InternalAxiosRequestConfig): Cancellation {
  const token = config.cancelToken as (CancelToken & Partial<CancelTokenListeners>) | undefined;
  const signal = config.signal as (Partial<AbortSignal> & { aborted?: boolean }) | undefined;
  if (token == null && signal == null) return noCancellation;
  if (token == null && signal instanceof AbortSignal) return { signal, dispose: () => {} };
  const controller = new AbortController();
  const onAbort = (): void => controller.abort((signal as AbortSignal | undefined)?.reason);
  const onCancel = (reason: unknown): void => controller.abort(reason);
  if (signal != null) {
    if (signal.aborted) onAbort();
    else signal.addEventListener?.('abort', onAbort);
  }
  if (token != null) {
    if (token.reason !== undefined) onCancel(token.reason);
    else token.subscribe?.(onCancel);
  }
  return {
    signal: controller.signal,
    dispose: () => {
      signal?.removeEventListener?.('abort', onAbort);
      token?.unsubscribe?.(onCancel);
    },
  };
}

interface CancelTokenListeners {
  subscribe(listener: (reason: unknown) => void): void;
  unsubscribe(listener: (reason: unknown) => void): void;
}
