/**
 * `wrapFetch(gate)`: a drop-in `fetch` whose every call goes through the gate.
 *
 * Translation only (the gate decides):
 * - request → `gate.schedule(send, { key: origin, cost, priority, signal, maxQueueTimeMs, priceMicros, inspect })`;
 * - response → an `Inspection` (status, headers, method, whether the request can be sent again, how to
 *   release the body), from which the gate pauses, paces, learns, retries and settles costs.
 *
 * Semantics a caller can rely on:
 * - Same signature and result as `fetch`: the `Response` of the last attempt, untouched and unread
 *   (error bodies and hook bodies are read on clones).
 * - Per-request options ride on `init.tollgate` (or `withTollgate(init, options)`), removed before the
 *   real fetch sees `init`; `options.requestOptions(request, init)` supplies defaults.
 * - `init.signal` (or the input Request's signal) aborts the call while it waits in the queue
 *   (rejecting with `AbortedError`, the signal's reason as `cause`, fetch never called) and, once
 *   sent, aborts the fetch itself (rejecting as fetch does).
 * - A throttled response (429, or 503 + Retry-After for idempotent methods) is never returned while
 *   the gate retries it: its body is cancelled and the request sent again after the pause. When
 *   the gate gives up, the call rejects with `RateLimitedError` (`retryAt`, `status`, `attempts`)
 *   whose `cause` is a `ResponseHead` of the last response: its status and headers, not the
 *   `Response` (whose `url` would print the request's query, an `?api_key=` included, in logs).
 * - Hooks (`actualCost`, `price.actual`) get a clone; a clone's body the hook did not read is
 *   cancelled when the hook is done, so a hook reading a header holds no connection or buffer.
 * - A request whose body is a stream (ReadableStream, async iterable) cannot be sent twice: it is
 *   marked not retryable, so a 429 on it rejects with `RateLimitedError` instead of a broken retry.
 *   A `Request` input with a body is cloned for each attempt, so it can.
 * - A request that is not idempotent (POST, PATCH) and was redirected is never sent again: a 429
 *   or 503 then comes from the redirect's target, after the server acted on it (a 303 after a
 *   POST). That response is returned, its pause still holds the next calls (`processed`).
 */
import { isIdempotent } from '../core/adaptation.js';
import type { Inspection, ScheduleOptions } from '../gate/gate.js';
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
  optionalFn,
  parseJson,
  type RequestHooks,
  safely,
  scheduleOptionsOf,
  setActuals,
  type TollgateRequestOptions,
} from './request-options.js';
import { headOf, type ResponseHead, resultOf } from './response-head.js';

declare global {
  interface RequestInit {
    /**
     * tollgate's per-request options (cost, key, priority, maxQueueTimeMs, priceMicros), read by a
     * fetch from `wrapFetch` and removed before the underlying fetch sees `init`.
     */
    tollgate?: TollgateRequestOptions;
  }
}

/**
 * A fetch implementation: the global one, undici's, a test double. Its parameters are typed `never`
 * so that implementations with their own Request/Response types (undici's) are accepted as they
 * are; it is called with the caller's `input` and `init`.
 */
export type FetchLike = (input: never, init?: never) => Promise<unknown>;

type CallableFetch = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

export interface WrapFetchOptions {
  /**
   * The fetch to throttle. When omitted, `globalThis.fetch` is read at each call, so interceptors
   * installed after wrapping (msw, undici's MockAgent) still apply.
   * @default globalThis.fetch
   */
  fetch?: FetchLike;
  /**
   * Partition key of a request: calls with the same key share a queue, pauses and learned limits.
   * Return undefined for the gate's default partition. Hash anything secret with `hashKey`.
   * `request` is a body-less view (URL, method, headers) built from `input` and `init`: reading it
   * can never consume the body that will be sent (that is `init.body`, as given).
   * @default the origin of the URL (scheme, host, port)
   * @example (request) => hashKey(request.headers.get('authorization') ?? '')
   */
  key?: (request: Request, init: RequestInit | undefined) => string | undefined;
  /** Per-request defaults (cost, key, priority, ...); a request's `init.tollgate` overrides them field by field. */
  requestOptions?: (request: Request, init: RequestInit | undefined) => TollgateRequestOptions | undefined;
  /**
   * Units the response says were used (e.g. `{ tokens: usage.total_tokens }`), to settle the
   * reservation. Receives a clone of each response (429s included), so reading its body leaves the
   * caller's response unread; the call resolves once the returned promise has. Read the clone's
   * body within the hook (before its promise settles): a body left unread then is cancelled, so that
   * it holds no connection. A hook that throws counts as no answer.
   */
  actualCost?: (response: Response) => ActualCost | undefined | Promise<ActualCost | undefined>;
  price?: {
    /** Estimated price in integer micro-units, reserved on the gate's budgets before queueing. */
    estimate?: (request: Request, init: RequestInit | undefined) => number | undefined;
    /** Actual price in integer micro-units (e.g. from a price header), settling the budget. Receives a clone, like `actualCost` (its unread body is cancelled when the hook is done). */
    actual?: (response: Response) => number | undefined | Promise<number | undefined>;
  };
  /**
   * Error responses (status >= 400) with a JSON content type have their body read from a clone,
   * bounded, for body-borne limits (Google RetryInfo, Discord `retry_after`, ...). `false` disables it.
   * @default { maxBytes: 65_536, timeoutMs: 2_000 }
   */
  errorBody?: false | ErrorBodyOptions;
}

const knownOptions = ['fetch', 'key', 'requestOptions', 'actualCost', 'price', 'errorBody'] as const;

/** One call, as the hooks see it: `view()` builds the body-less Request view once, and only if a hook asks. */
interface FetchCall {
  readonly input: RequestInfo | URL;
  /** `init` without `tollgate`. */
  readonly init: RequestInit | undefined;
  view(): Request;
}

/**
 * A `fetch` with the exact signature of `fetch` whose calls go through `gate`. Options are
 * validated here (`InvalidOptionError` naming the option).
 *
 * @example
 * const gate = createGate({ limits: [windowSafe(500, 60_000)] });
 * const fetch = wrapFetch(gate);
 * await fetch('https://api.example.com/v1/things', { tollgate: { cost: { requests: 1, tokens: 900 } } });
 */
export function wrapFetch(gate: GateLike, options?: WrapFetchOptions): typeof fetch {
  const g = checkGate(gate);
  const o = checkOptions(options, knownOptions);
  const fetchOption = optionalFn<FetchLike>('fetch', o['fetch']);
  const {
    key: keyHook,
    requestOptions: requestOptionsHook,
    actualCost: actualCostHook,
    estimate: estimateHook,
    actualPrice: actualPriceHook,
    errorBody,
  } = checkSharedOptions<WrapFetchOptions>(o);
  const observesBody = actualCostHook !== undefined || actualPriceHook !== undefined;
  // The hooks take (request view, init); the default key needs neither the view nor init.
  const hooks: RequestHooks<FetchCall> = {
    key:
      keyHook === undefined
        ? (call) => originOf(urlOf(call.input))
        : (call) => keyHook(call.view(), call.init),
    requestOptions:
      requestOptionsHook === undefined ? undefined : (call) => requestOptionsHook(call.view(), call.init),
    estimate: estimateHook === undefined ? undefined : (call) => estimateHook(call.view(), call.init),
  };

  const throttledFetch = (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    let forwardInit = init;
    let own: TollgateRequestOptions | undefined;
    if (typeof init === 'object' && init !== null && 'tollgate' in init) {
      // The real fetch never sees our options (a strict implementation may reject unknown fields).
      const { tollgate, ...rest } = init;
      own = tollgate;
      forwardInit = rest;
    }
    const request = isRequestLike(input) ? input : undefined;
    const method = (forwardInit?.method ?? request?.method ?? 'GET').toUpperCase();
    const initBody = forwardInit?.body;
    // A Request's own body is used (and consumed) only when init does not replace it.
    const cloneEachAttempt = request !== undefined && initBody == null && request.body != null;
    // A stream can be read once: a second attempt would send nothing (or throw).
    const retryable = !isStreamBody(initBody);
    let scheduleOptions: ScheduleOptions;
    try {
      let view: Request | undefined;
      const call: FetchCall = {
        input,
        init: forwardInit,
        view: () => {
          view ??= new Request(urlOf(input), {
            method,
            headers: (forwardInit?.headers ?? request?.headers) as HeadersInit | undefined,
          } as RequestInit);
          return view;
        },
      };
      scheduleOptions = scheduleOptionsOf(hooks, call, own, 'init.tollgate');
    } catch (error) {
      return Promise.reject(error);
    }
    const signal =
      forwardInit !== undefined && 'signal' in forwardInit
        ? (forwardInit.signal ?? undefined)
        : request?.signal;
    if (signal !== undefined) scheduleOptions.signal = signal;
    scheduleOptions.inspect = ((head: ResponseHead) =>
      inspectResponse(
        resultOf<Response>(head),
        method,
        retryable,
        errorBody,
        observesBody,
        actualCostHook,
        actualPriceHook,
      )) as (result: never) => Inspection | undefined | Promise<Inspection | undefined>;

    const send = (): Promise<unknown> => {
      const impl = (fetchOption ?? globalThis.fetch) as CallableFetch;
      // Each attempt sends a fresh clone, keeping the caller's Request unread for the next one.
      return impl(cloneEachAttempt ? request.clone() : input, forwardInit).then(headOfResponse);
    };
    return g.schedule(send, scheduleOptions).then(unwrap);
  };
  return throttledFetch as typeof fetch;
}

/**
 * `init` with tollgate's per-request options attached, typed without relying on the global
 * `RequestInit` augmentation (for code that passes `init` through other libraries' types).
 *
 * @example fetch(url, withTollgate({ method: 'POST', body }, { cost: { tokens: 1200 } }))
 */
export function withTollgate<T extends RequestInit>(
  init: T | undefined,
  options: TollgateRequestOptions,
): T & { tollgate: TollgateRequestOptions } {
  return { ...(init as T), tollgate: options };
}

/**
 * The gate sees a head, never the `Response`: what it keeps of a throttled one becomes
 * `RateLimitedError.cause` (see response-head.ts). A result that is not a response (a test double's)
 * passes as it is.
 */
function headOfResponse(response: Response): unknown {
  if (typeof response !== 'object' || response === null || typeof response.status !== 'number')
    return response;
  return headOf(response, response.status, response.statusText, response.headers);
}

/** The caller's `Response` again, from the head the gate resolved with. */
function unwrap(outcome: unknown): Response {
  return resultOf<Response>(outcome) ?? (outcome as Response);
}

function inspectResponse(
  response: Response | undefined,
  method: string,
  retryable: boolean,
  errorBody: NormalizedErrorBody | undefined,
  observesBody: boolean,
  actualCostHook: WrapFetchOptions['actualCost'],
  actualPriceHook: ((response: Response) => number | undefined | Promise<number | undefined>) | undefined,
): Inspection | undefined | Promise<Inspection | undefined> {
  if (response === undefined) return undefined;
  const base: Inspection = {
    status: response.status,
    headers: response.headers,
    method,
    retryable,
    // Followed redirects: a POST answered by a 303 was acted on; its target's 429 is no reason to
    // send the POST again (fetch does not say which redirect it followed, so any counts).
    processed: response.redirected === true && !isIdempotent(method),
    discard: () => cancelBody(response),
  };
  const readErrorBody =
    errorBody !== undefined &&
    response.status >= 400 &&
    response.body != null &&
    isJsonContentType(response.headers.get('content-type'));
  if (!readErrorBody && !observesBody) return base;
  return Promise.all([
    readErrorBody ? readBoundedText(response, errorBody!) : undefined,
    actualCostHook === undefined ? undefined : onClone(response, actualCostHook),
    actualPriceHook === undefined ? undefined : onClone(response, actualPriceHook),
  ]).then(([text, cost, priceMicros]) => {
    const inspection: MutableInspection = { ...base };
    if (text !== undefined) inspection.body = parseJson(text);
    setActuals(inspection, cost, priceMicros);
    return inspection;
  });
}

/**
 * A response hook's answer, from a clone of `response`. Once the hook is done, the clone's body is
 * cancelled unless the hook read it (or still holds a reader): a clone shares its source with the
 * caller's body (a tee), which is released only when every branch is read or cancelled. Left
 * unread, the clone's branch would keep the connection busy after the gate dropped the response
 * (a retried 429) or the caller cancelled its body, and would buffer everything the caller reads.
 */
function onClone<T>(response: Response, hook: (clone: Response) => T | Promise<T>): Promise<T | undefined> {
  let clone: Response | undefined;
  return Promise.resolve(
    safely(() => {
      clone = response.clone();
      return hook(clone);
    }),
  ).finally(() => {
    if (clone !== undefined && !clone.bodyUsed) cancelBody(clone);
  });
}

/** Read a clone's body as text, or undefined when it is longer than `maxBytes` or slower than `timeoutMs`. */
async function readBoundedText(response: Response, limits: NormalizedErrorBody): Promise<string | undefined> {
  const declared = Number(response.headers.get('content-length') ?? Number.NaN);
  if (declared > limits.maxBytes) return undefined;
  let reader: ReadableStreamDefaultReader<Uint8Array>;
  try {
    const body = response.clone().body;
    if (body === null) return undefined;
    reader = body.getReader();
  } catch {
    // Already read or locked by someone else: nothing to learn from it.
    return undefined;
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), limits.timeoutMs);
    // A pending read must not keep the process alive.
    timer.unref?.();
  });
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const next = await Promise.race([reader.read(), timeout]);
      if (next === 'timeout') {
        reader.cancel().catch(() => {});
        return undefined;
      }
      if (next.done) break;
      size += next.value.byteLength;
      if (size > limits.maxBytes) {
        reader.cancel().catch(() => {});
        return undefined;
      }
      chunks.push(next.value);
    }
  } catch {
    return undefined;
  } finally {
    clearTimeout(timer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function cancelBody(response: Response): void {
  // Cancelling releases the connection; a locked or already-read body is left as it is.
  response.body?.cancel().catch(() => {});
}

interface RequestLike {
  readonly url: string;
  readonly method: string;
  readonly headers: Headers;
  readonly body: unknown;
  readonly signal: AbortSignal;
  clone(): RequestLike;
}

// Duck-typed: a Request of another fetch implementation (undici's) is not an instance of the global one.
function isRequestLike(input: unknown): input is Request & RequestLike {
  return (
    typeof input === 'object' &&
    input !== null &&
    !(input instanceof URL) &&
    typeof (input as RequestLike).url === 'string' &&
    typeof (input as RequestLike).clone === 'function'
  );
}

function urlOf(input: RequestInfo | URL): string {
  if (typeof input === 'string') return input;
  if (input instanceof URL) return input.href;
  if (isRequestLike(input)) return input.url;
  return String(input);
}

/** Scheme + host + port, or undefined for a URL fetch will reject anyway (or an opaque `null` origin). */
function originOf(url: string): string | undefined {
  try {
    const origin = new URL(url).origin;
    return origin === 'null' ? undefined : origin;
  } catch {
    return undefined;
  }
}

function isStreamBody(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  return (
    typeof (body as ReadableStream).getReader === 'function' ||
    typeof (body as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  );
}
