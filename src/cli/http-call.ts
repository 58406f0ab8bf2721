/**
 * One HTTP attempt of a request, and what its response tells the gate (status, headers, actual
 * price and units). The response body is read whole: the CLI writes it to the results anyway.
 */
import { costFromUsage, type Inspection, priceFromHeader, type priceTable, readUsage } from '../index.js';
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

const jsonType = /\bjson\b/i;
// Bodies larger than this are not parsed for usage or throttling markers.
const maxParsedBytes = 4 * 1024 * 1024;
const decoder = new TextDecoder();

export async function send(
  request: RequestSpec,
  baseHeaders: Headers,
  signal: AbortSignal,
): Promise<Fetched> {
  const headers = new Headers(baseHeaders);
  for (const [name, value] of Object.entries(request.headers)) headers.set(name, value);
  const init: RequestInit = { method: request.method, headers, signal, redirect: 'follow' };
  if (request.body !== undefined) init.body = request.body;
  const response = await fetch(request.url, init);
  const bytes = new Uint8Array(await response.arrayBuffer());
  let parsed: { value: unknown } | undefined;
  return {
    status: response.status,
    headers: response.headers,
    bytes,
    json() {
      if (parsed === undefined) {
        parsed = { value: undefined };
        const type = response.headers.get('content-type') ?? '';
        if (jsonType.test(type) && bytes.length > 0 && bytes.length <= maxParsedBytes) {
          try {
            parsed.value = JSON.parse(decoder.decode(bytes));
          } catch {
            // Not JSON after all: nothing to read from it.
          }
        }
      }
      return parsed.value;
    },
  };
}

/** What the gate needs from an attempt's response. */
export function inspect(fetched: Fetched, method: string, pricing: Pricing): Inspection {
  const ok = fetched.status >= 200 && fetched.status < 300;
  const body = fetched.json();
  const inspection: { -readonly [K in keyof Inspection]: Inspection[K] } = {
    status: fetched.status,
    headers: fetched.headers,
    method,
  };
  // Error bodies can carry throttling details (Shopify, Discord, Google); successes carry usage.
  if (!ok && body !== undefined) inspection.body = body;
  if (ok) {
    const actual = actualPriceMicros(fetched, body, pricing);
    if (actual !== undefined) inspection.actualPriceMicros = actual;
    if (pricing.reconcileTokens) {
      const usage = readUsage(body);
      if (usage !== undefined) {
        inspection.actualCost = { tokens: (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0) };
      }
    }
  }
  return inspection;
}

function actualPriceMicros(fetched: Fetched, body: unknown, pricing: Pricing): number | undefined {
  if (pricing.priceHeader !== undefined) {
    const value = priceFromHeader(pricing.priceHeader)({ headers: fetched.headers });
    if (value !== undefined) {
      try {
        return parsePrice('price header', value).micros;
      } catch {
        // An unreadable price header: the estimate stands.
      }
    }
  }
  if (pricing.price !== undefined) return costFromUsage(pricing.price)(body)?.micros;
  return undefined;
}

/** The final answer's body as the results file stores it. */
export function bodyText(fetched: Fetched): string {
  return decoder.decode(fetched.bytes);
}
