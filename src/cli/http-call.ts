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
import { parsePrice } from './parse-units.js';
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
        return parsePrice('price header', value).micros;
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
  const throttled = wrapFetch(options.gate, {
    // Each attempt: its own timeout, the "abort in flight" signal (not the queue's), and a record.
    fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
      const startedAt = now();
      let status: number | undefined;
      try {
        const signals = [options.kill];
        if (Number.isFinite(options.timeoutMs)) signals.push(AbortSignal.timeout(options.timeoutMs));
        const response = await fetch(input, { ...init, signal: AbortSignal.any(signals) });
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
          actualCost: async (response: Response) => {
            const usage = response.ok ? readUsage(await jsonOf(response)) : undefined;
            return usage === undefined
              ? undefined
              : { tokens: (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0) };
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
    redirect: 'follow',
    tollgate,
  };
  if (request.body !== undefined) init.body = request.body;

  // What fetch would refuse (a header value, a method) is refused here, before the gate: a call
  // that fails inside the gate is charged its estimate, as one that may have reached the provider.
  new Request(request.url, { method: request.method, headers });
  const response = await throttled(request.url, init);
  const bytes = new Uint8Array(await response.arrayBuffer());
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

/** The final answer's body as text. */
export function bodyText(fetched: Fetched): string {
  return decoder.decode(fetched.bytes);
}
