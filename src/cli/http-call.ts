/**
 * One request of the input, sent through the gate with the library's fetch adapter (`wrapFetch`),
 * which turns each response into what the gate reads (status, headers, error bodies, retries). This
 * module adds only what a batch needs around it: a timeline of attempts, separate signals for "stop
 * waiting" (Ctrl-C once) and "abort in flight" (twice), actual prices and units read from
 * responses, and the final body read whole for the results file.
 */
import {
  costFromUsage,
  type GateLike,
  priceFromHeader,
  type priceTable,
  readUsage,
  type TollgateRequestOptions,
  wrapFetch,
} from '../index.js';
import { parsePrice, priceCurrencyProblem } from './parse-units.js';
import type { RequestSpec } from './request-line.js';

export interface Fetched {
  readonly status: number;
  readonly headers: Headers;
  readonly bytes: Uint8Array;
  /** The body as JSON, when it is JSON (parsed once, on demand). */
  json(): unknown;
}

/** How a run reads actual costs from responses. */
export interface Pricing {
  /** A header carrying the price in major units (`x-request-cost: 0.0042`). */
  readonly priceHeader: string | undefined;
  /** Prices for usage reported in the body (OpenAI, Anthropic, Gemini shapes). */
  readonly price: ReturnType<typeof priceTable> | undefined;
  /** Reconcile `tokens` from the body's usage (when a limit counts tokens). */
  readonly reconcileTokens: boolean;
  /** The budgets' currency: a price header naming another one is no answer. */
  readonly currency?: string | undefined;
}

export interface Attempt {
  readonly startedAt: number;
  readonly endedAt: number;
  /** Undefined when no response arrived (network error, timeout, abort). */
  readonly status: number | undefined;
}

export interface SendOptions {
  readonly gate: GateLike;
  readonly pricing: Pricing;
  readonly baseHeaders: Headers;
  /** Aborts the request while it waits in the gate (it is then not sent). */
  readonly stop: AbortSignal;
  /** Aborts the request in flight. */
  readonly kill: AbortSignal;
  /** Per attempt; Infinity for none. */
  readonly timeoutMs: number;
  readonly now: () => number;
  /** Called as each attempt ends. */
  readonly onAttempt: (attempt: Attempt) => void;
}

export interface Sent {
  readonly fetched: Fetched;
  /** The actual price the last response reported (micros), if it reported one. */
  readonly actualPriceMicros: number | undefined;
}

// fetch's own `redirect: 'follow'` drops only Authorization on a hop to another origin: an
// x-api-key from -H or a line would reach whatever origin a Location names. Hops are followed here.
const maxRedirects = 5;
const redirectStatuses = new Set([301, 302, 303, 307, 308]);
// Headers that describe a body: dropped with it when a redirect turns the request into a GET.
const bodyHeaders = ['content-encoding', 'content-language', 'content-location', 'content-type'];

/**
 * `fetch` following up to `maxRedirects` redirects itself, with fetch's method rules (303 → GET,
 * 301/302 POST → GET, 307/308 keep method and body). Every header of `init` is the user's (-H and
 * the line's): they go to the same origin only; after a hop to another origin, none of them is
 * sent again, except the body's content-type while the body is.
 */
async function fetchFollowingRedirects(url: URL, init: RequestInit): Promise<Response> {
  let current = url;
  let method = init.method ?? 'GET';
  let body = init.body ?? null;
  let headers = new Headers(init.headers);
  for (let hops = 0; ; hops++) {
    const response = await fetch(current, { ...init, method, headers, body, redirect: 'manual' });
    const location = response.headers.get('location');
    if (!redirectStatuses.has(response.status) || location === null) {
      // Said as fetch's own `redirect: 'follow'` says it: wrapFetch then never sends a redirected
      // POST again when the page it led to answers 429 (the POST was acted on).
      if (hops > 0) Object.defineProperty(response, 'redirected', { value: true });
      return response;
    }
    await response.body?.cancel();
    // As fetch fails them: a TypeError whose cause says why (the URL is not shown, it may hold a key).
    if (hops === maxRedirects) {
      throw new TypeError('fetch failed', { cause: new Error(`more than ${maxRedirects} redirects`) });
    }
    let next: URL;
    try {
      next = new URL(location, current);
    } catch {
      throw new TypeError('fetch failed', { cause: new Error('a redirect to an invalid URL') });
    }
    if (next.protocol !== 'http:' && next.protocol !== 'https:') {
      throw new TypeError('fetch failed', { cause: new Error('a redirect to a URL that is not http(s)') });
    }
    const status = response.status;
    if (
      (status === 303 && method !== 'GET' && method !== 'HEAD') ||
      ((status === 301 || status === 302) && method === 'POST')
    ) {
      method = 'GET';
      body = null;
      for (const name of bodyHeaders) headers.delete(name);
    }
    if (next.origin !== current.origin) {
      const contentType = headers.get('content-type');
      headers = new Headers();
      if (body !== null && contentType !== null) headers.set('content-type', contentType);
    }
    current = next;
  }
}

const jsonType = /\bjson\b/i;
// Bodies larger than this are not parsed.
const maxParsedBytes = 4 * 1024 * 1024;
const decoder = new TextDecoder();

/** The JSON body of a response clone the adapter hands a hook; undefined when it is not JSON. */
async function jsonOf(response: Response): Promise<unknown> {
  if (!jsonType.test(response.headers.get('content-type') ?? '')) return undefined;
  try {
    return await response.json();
  } catch {
    return undefined;
  }
}

async function actualPrice(response: Response, pricing: Pricing): Promise<number | undefined> {
  if (pricing.priceHeader !== undefined) {
    const value = priceFromHeader(pricing.priceHeader)({ headers: response.headers });
    if (value !== undefined) {
      try {
        const parsed = parsePrice('price header', value);
        // A price in another currency is not counted 1:1 (no conversion): the estimate stands.
        if (priceCurrencyProblem(parsed, pricing.currency) === undefined) return parsed.micros;
      } catch {
        // An unreadable price header: the estimate stands.
      }
    }
  }
  if (pricing.price !== undefined && response.ok)
    return costFromUsage(pricing.price)(await jsonOf(response))?.micros;
  return undefined;
}

/** Send `request` through the gate; resolves with the last attempt's response, read whole. */
export async function send(
  request: RequestSpec,
  estimateMicros: number | undefined,
  options: SendOptions,
): Promise<Sent> {
  const { pricing, now } = options;
  let actualPriceMicros: number | undefined;
  // The last attempt's timeout, cleared once its body is read (a timer left for the whole timeout
  // held its controller and signals: tens of thousands at a few hundred requests a second).
  let clearTimeoutOfAttempt = () => {};
  const throttled = wrapFetch(options.gate, {
    // Each attempt: its own timeout, the "abort in flight" signal (not the queue's), and a record.
    fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
      const startedAt = now();
      let status: number | undefined;
      try {
        const signals = [options.kill];
        if (Number.isFinite(options.timeoutMs)) {
          // A timer of its own rather than AbortSignal.timeout: held only by AbortSignal.any, that
          // signal could be collected before the body was read, and the body then had no timeout
          // (found by a review: a body trickling for 3 s came back ok with --timeout 1s, in a file
          // of two lines). The timer holds the controller until it fires; unref'd, it keeps no run alive.
          const timeout = new AbortController();
          const timer = setTimeout(
            () => timeout.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
            options.timeoutMs,
          );
          timer.unref();
          // A new attempt: the one before it is over.
          clearTimeoutOfAttempt();
          clearTimeoutOfAttempt = () => clearTimeout(timer);
          signals.push(timeout.signal);
        }
        // `send` passes the URL (never a Request) and an init holding every header.
        const response = await fetchFollowingRedirects(new URL(String(input)), {
          ...init,
          signal: AbortSignal.any(signals),
        });
        status = response.status;
        return response;
      } finally {
        options.onAttempt({ startedAt, endedAt: now(), status });
      }
    },
    price: {
      actual: async (response) => {
        actualPriceMicros = await actualPrice(response, pricing);
        return actualPriceMicros;
      },
    },
    ...(pricing.reconcileTokens
      ? {
          // Usage in the body charges more than the line's tokens, never less: OpenAI counts the
          // prompt plus max_tokens at admission and gives nothing back, so settling down to the
          // usage sent more tokens a minute than the limit (116-122% of it, found by a review).
          actualCost: async (response: Response) => {
            const usage = response.ok ? readUsage(await jsonOf(response)) : undefined;
            if (usage === undefined) return undefined;
            const used = (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0);
            return { tokens: Math.max(used, tokensOf(request.cost)) };
          },
        }
      : {}),
  });

  const headers = new Headers(options.baseHeaders);
  for (const [name, value] of Object.entries(request.headers)) headers.set(name, value);
  const tollgate: TollgateRequestOptions = { key: request.key ?? request.url.origin };
  if (request.cost !== undefined) tollgate.cost = request.cost;
  if (request.priority !== undefined) tollgate.priority = request.priority;
  if (estimateMicros !== undefined) tollgate.priceMicros = estimateMicros;
  const init: RequestInit = {
    method: request.method,
    headers,
    signal: options.stop,
    tollgate,
  };
  if (request.body !== undefined) init.body = request.body;

  // What fetch would refuse (a header value, a method) is refused here, before the gate: a call
  // that fails inside the gate is charged its estimate, as one that may have reached the provider.
  new Request(request.url, { method: request.method, headers });
  let bytes: Uint8Array;
  let response: Response;
  try {
    response = await throttled(request.url, init);
    bytes = new Uint8Array(await response.arrayBuffer());
  } finally {
    clearTimeoutOfAttempt();
  }
  let parsed: { value: unknown } | undefined;
  const fetched: Fetched = {
    status: response.status,
    headers: response.headers,
    bytes,
    json() {
      if (parsed === undefined) {
        parsed = { value: undefined };
        if (
          jsonType.test(response.headers.get('content-type') ?? '') &&
          bytes.length > 0 &&
          bytes.length <= maxParsedBytes
        ) {
          try {
            parsed.value = JSON.parse(decoder.decode(bytes));
          } catch {
            // Not JSON after all: the text is kept instead.
          }
        }
      }
      return parsed.value;
    },
  };
  return { fetched, actualPriceMicros };
}

/** The tokens a line's cost names (0 for a plain number of requests, or none). */
function tokensOf(cost: RequestSpec['cost']): number {
  return typeof cost === 'object' ? (cost['tokens'] ?? 0) : 0;
}

/** The final answer's body as text. */
export function bodyText(fetched: Fetched): string {
  return decoder.decode(fetched.bytes);
}
