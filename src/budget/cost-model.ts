/**
 * Cost models: what a call costs before it is sent (the estimate, reserved on the budgets) and after
 * (the actual cost, which settles the difference). Users give amounts, price tables, or functions;
 * this module turns them into exact micros and turns every bad result into `InvalidCostError`, so a
 * call with a broken price is never sent.
 */

import { InvalidCostError } from '../errors.js';
import { invalid, onlyKnownKeys, plainObject } from '../validate.js';
import { costToMicros, type MoneyInput, normalizeCurrency, parseMoney, unitsToScaled } from './money.js';

/** What a call consumed, as providers report it. All counts are integers >= 0. */
export interface Usage {
  /** @default 1 */
  readonly requests?: number;
  readonly inputTokens?: number;
  readonly outputTokens?: number;
}

/**
 * Prices in major units of the currency (dollars): numbers or strings such as `'$0.0025'`, with up to
 * 9 decimals (a price per 1k tokens can be finer than a micro). Give per-1k or per-1M token prices,
 * not both for one direction.
 */
export interface PriceTable {
  /** Price of each request. */
  readonly perRequest?: number | string;
  readonly per1kInputTokens?: number | string;
  readonly per1kOutputTokens?: number | string;
  readonly per1mInputTokens?: number | string;
  readonly per1mOutputTokens?: number | string;
}

/** A price table compiled to exact integer rates. `price(usage)` is the cost in micros, rounded up. */
export interface CompiledPrice {
  (usage?: Usage): { micros: number };
  readonly table: Readonly<PriceTable>;
}

// Rates are kept in femto-units (1e-15 of the currency) so every table price, per request or per
// token, is an exact integer: a per-1M-token price with 9 decimals is nanos per 1M tokens, which is
// femto-units per token (1e-9 / 1e6 = 1e-15).
const FEMTO_PER_MICRO = 1_000_000_000n; // 1e-6 / 1e-15

/**
 * Compile a price table. Throws `InvalidOptionError` naming the bad price (`priceTable.perRequest`).
 *
 *   const price = priceTable({ per1mInputTokens: 3, per1mOutputTokens: 15 });
 *   price({ inputTokens: 1200, outputTokens: 300 }) // { micros: 8100 } = $0.0081
 */
export function priceTable(table: PriceTable, option = 'priceTable'): CompiledPrice {
  plainObject(option, table);
  const known = [
    'perRequest',
    'per1kInputTokens',
    'per1kOutputTokens',
    'per1mInputTokens',
    'per1mOutputTokens',
  ];
  for (const key of Object.keys(table)) {
    if (!known.includes(key))
      throw invalid(
        `${option}.${key}`,
        `not set (known: ${known.join(', ')})`,
        (table as Record<string, unknown>)[key],
      );
  }
  // Each price -> femto-units per request or per token. A per-1k price in nanos (9 decimals) is
  // nanos per 1k tokens = 1e-9 / 1e3 per token = 1e3 femto per token per nano: scale by 1000.
  const rate = (name: keyof PriceTable, femtoPerNano: bigint): bigint => {
    const value = table[name];
    if (value === undefined) return 0n;
    const nanos =
      typeof value === 'number' || typeof value === 'string' ? unitsToScaled(value, 9) : undefined;
    if (nanos === undefined)
      throw invalid(`${option}.${name}`, 'a finite price >= 0 with at most 9 decimals', value);
    return nanos * femtoPerNano;
  };
  const both = (a: keyof PriceTable, b: keyof PriceTable) => {
    if (table[a] !== undefined && table[b] !== undefined)
      throw invalid(`${option}.${b}`, `unset when \`${a}\` is set`, table[b]);
  };
  both('per1kInputTokens', 'per1mInputTokens');
  both('per1kOutputTokens', 'per1mOutputTokens');
  const perRequest = rate('perRequest', 1_000_000n); // nanos per request -> femto: x1e6
  const perInput = rate('per1kInputTokens', 1000n) + rate('per1mInputTokens', 1n);
  const perOutput = rate('per1kOutputTokens', 1000n) + rate('per1mOutputTokens', 1n);
  const frozen = Object.freeze({ ...table });

  const price = (usage: Usage = {}): { micros: number } => {
    const count = (name: keyof Usage, fallback: number): bigint => {
      const n = usage[name] ?? fallback;
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
        throw new InvalidCostError(`usage.${name} must be an integer >= 0, got ${String(n)}`, name);
      }
      return BigInt(n);
    };
    const femto =
      count('requests', 1) * perRequest +
      count('inputTokens', 0) * perInput +
      count('outputTokens', 0) * perOutput;
    // Round up to whole micros: never under-count a cost.
    const micros = (femto + FEMTO_PER_MICRO - 1n) / FEMTO_PER_MICRO;
    if (micros > BigInt(Number.MAX_SAFE_INTEGER))
      throw new InvalidCostError('cost overflows the exact range', 'micros');
    return { micros: Number(micros) };
  };
  return Object.assign(price, { table: frozen });
}

/** Headers as fetch (`Headers`), undici, axios or node:http give them. */
export type HeadersLike =
  | { get(name: string): string | null | undefined }
  | Readonly<Record<string, string | readonly string[] | number | undefined>>;

function headerValue(headers: HeadersLike, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') {
    return (headers as { get(name: string): string | null | undefined }).get(name) ?? undefined;
  }
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(headers as Record<string, unknown>)) {
    if (k.toLowerCase() !== lower || v === undefined) continue;
    return Array.isArray(v) ? String(v[0]) : String(v);
  }
  return undefined;
}

/**
 * The actual cost from a response header that carries a price in major units (e.g.
 * `x-request-cost: 0.0042`, or `$0.0042`). No header, or one that does not read as an amount
 * (`0,0042`, `n/a`): undefined, so the estimate stands. The response is already paid for: an
 * unreadable header must not fail the call, and must never be guessed at.
 */
export function priceFromHeader(
  name: string,
): (response: { readonly headers: HeadersLike }) => MoneyInput | undefined {
  if (typeof name !== 'string' || name.length === 0)
    throw invalid('priceFromHeader(name)', 'a header name', name);
  return (response) => {
    const value = headerValue(response.headers, name);
    if (value === undefined || value.trim() === '') return undefined;
    const text = value.trim();
    try {
      parseMoney(name, text, 'up');
    } catch {
      return undefined;
    }
    return text;
  };
}

/**
 * Token usage from a JSON response body, in the shapes providers use: OpenAI chat
 * (`usage.prompt_tokens`/`completion_tokens`), OpenAI responses and Anthropic
 * (`usage.input_tokens`/`output_tokens`), Gemini (`usageMetadata.promptTokenCount` plus
 * `toolUsePromptTokenCount` / `candidatesTokenCount` plus `thoughtsTokenCount`). Undefined when the
 * body has none of them.
 */
export function readUsage(body: unknown): Usage | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as { usage?: unknown; usageMetadata?: unknown };
  const pick = (o: unknown, ...names: string[]): number | undefined => {
    if (typeof o !== 'object' || o === null) return undefined;
    for (const n of names) {
      const v = (o as Record<string, unknown>)[n];
      if (typeof v === 'number') return v;
    }
    return undefined;
  };
  const usage = b.usage;
  let input = pick(usage, 'input_tokens', 'prompt_tokens');
  let output = pick(usage, 'output_tokens', 'completion_tokens');
  if (input === undefined && output === undefined) {
    // Gemini bills a thinking model's thoughts as output, and tool-use prompts as input, but counts
    // neither in promptTokenCount / candidatesTokenCount.
    const m = b.usageMetadata;
    input = sum(pick(m, 'promptTokenCount'), pick(m, 'toolUsePromptTokenCount'));
    output = sum(pick(m, 'candidatesTokenCount'), pick(m, 'thoughtsTokenCount'));
  }
  if (input === undefined && output === undefined) return undefined;
  return { inputTokens: input ?? 0, outputTokens: output ?? 0 };
}

function sum(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined && b === undefined ? undefined : (a ?? 0) + (b ?? 0);
}

/** The actual cost from usage in a JSON body priced by `price`; undefined when the body reports none. */
export function costFromUsage(price: CompiledPrice): (body: unknown) => { micros: number } | undefined {
  return (body) => {
    const usage = readUsage(body);
    return usage === undefined ? undefined : price(usage);
  };
}

export interface CostModelOptions<Req, Res> {
  /**
   * ISO 4217 currency of every amount (must match the budgets').
   * @default 'usd'
   */
  currency?: string;
  /**
   * The cost reserved before sending: an amount (`0.002`, `'$0.002'`, `{ micros: 2000 }`) or a
   * function of the request returning one (e.g. `(req) => price({ inputTokens: countTokens(req) })`).
   * Function results are rounded up to whole micros; a throw, NaN, a negative or infinite amount is
   * an `InvalidCostError`.
   */
  estimate: MoneyInput | ((request: Req) => MoneyInput);
  /**
   * The actual cost from the response (and request): an amount, or undefined to keep the estimate.
   * Without it, every call settles at its estimate.
   */
  actual?: (response: Res, request: Req) => MoneyInput | undefined;
}

export interface CostModel<Req, Res> {
  readonly currency: string;
  /** The estimate in micros. Throws `InvalidCostError` (do not send the call). */
  estimateMicros(request: Req): number;
  /**
   * The actual cost in micros (the estimate when the model has no `actual` or it returns undefined).
   * Throws `InvalidCostError` when the response's cost is unreadable; the call was sent, so settle
   * it at its estimate then, and report the error.
   */
  actualMicros(response: Res, request: Req, estimateMicros: number): number;
}

/** Build a cost model; options are checked now (a fixed estimate is parsed once). */
export function createCostModel<Req = unknown, Res = unknown>(
  options: CostModelOptions<Req, Res>,
): CostModel<Req, Res> {
  onlyKnownKeys('costModel', plainObject('costModel', options), ['currency', 'estimate', 'actual']);
  const currency = normalizeCurrency('costModel.currency', options.currency ?? 'usd');
  const { estimate, actual } = options;
  if (actual !== undefined && typeof actual !== 'function')
    throw invalid('costModel.actual', 'a function', actual);
  let fixed: number | undefined;
  if (typeof estimate !== 'function') {
    if (estimate === undefined)
      throw invalid('costModel.estimate', 'an amount or a function of the request', estimate);
    const parsed = parseMoney('costModel.estimate', estimate, 'exact');
    if (parsed.currency !== undefined && parsed.currency !== currency) {
      throw invalid('costModel.estimate', `an amount in ${currency.toUpperCase()}`, estimate);
    }
    fixed = parsed.micros;
  }
  const call = <A extends unknown[]>(what: string, f: (...args: A) => unknown, ...args: A): unknown => {
    try {
      return f(...args);
    } catch (error) {
      const e = new InvalidCostError(
        `${what} threw: ${error instanceof Error ? error.message : String(error)}`,
        currency,
      );
      e.cause = error;
      throw e;
    }
  };
  return Object.freeze({
    currency,
    estimateMicros(request: Req): number {
      if (fixed !== undefined) return fixed;
      const value = call('costModel.estimate', estimate as (request: Req) => MoneyInput, request);
      return costToMicros(value, 'costModel.estimate result', currency);
    },
    actualMicros(response: Res, request: Req, estimateMicros: number): number {
      if (actual === undefined) return estimateMicros;
      const value = call('costModel.actual', actual, response, request);
      if (value === undefined) return estimateMicros;
      return costToMicros(value, 'costModel.actual result', currency);
    },
  });
}
