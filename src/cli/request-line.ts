/**
 * One line of the input JSONL: an HTTP request to send.
 *
 *   {"id": "a1", "method": "POST", "url": "https://api.example.com/v1/things",
 *    "headers": {"content-type": "application/json"}, "body": {"name": "x"},
 *    "cost": {"tokens": 1200}, "price": "$0.002", "priority": 1, "key": "tenant-a"}
 *
 * - `id` (string or integer, required): ids are compared as strings; the first occurrence wins.
 * - `url` (required): absolute http(s), or relative to `--base-url`.
 * - `method` (default GET), `headers` (string values), `body` (a string is sent as is; any other
 *   JSON value is sent as JSON with `content-type: application/json` unless one is set).
 * - `cost`: units for the limits (a number of requests, or `{ "tokens": 1200 }`; requests default to 1).
 * - `price`: the money estimate reserved on the budgets (default `--price`).
 * - `priority` (integer, higher first), `key` (partition; default the URL's origin).
 * Other fields are ignored (keep your own metadata there).
 *
 * Messages never show a header's value, a URL's userinfo or its query values (API keys travel
 * there), nor the text around a JSON syntax error.
 */
import { headerNameProblem, headerValueProblem } from './header-value.js';
import { jsonErrorPosition } from './json-error-position.js';
import { parsePrice, priceCurrencyProblem } from './parse-units.js';
import { safeUrlText } from './redact.js';

export interface RequestSpec {
  /** The id as written (a string or an integer), echoed in the result. */
  readonly id: string | number;
  /** `String(id)`: what resume and duplicate checks compare. */
  readonly idKey: string;
  readonly line: number;
  readonly method: string;
  readonly url: URL;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | undefined;
  readonly cost: number | Readonly<Record<string, number>> | undefined;
  readonly priceMicros: number | undefined;
  readonly priority: number | undefined;
  readonly key: string | undefined;
}

/** A line that is not a valid request: the message names the line and the field. */
export class MalformedLineError extends Error {
  readonly line: number;
  constructor(line: number, message: string) {
    super(`line ${line}: ${message}`);
    this.name = 'MalformedLineError';
    this.line = line;
  }
}

const methodShape = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// fetch refuses these methods (after the gate would have reserved, and charged, the request).
const forbiddenMethods = new Set(['CONNECT', 'TRACE', 'TRACK']);

function show(value: unknown): string {
  if (value === undefined) return kindOf(value);
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/**
 * What a value is, for messages about values that must not be shown: `an array`, `an object`,
 * `a number`, `null`; a field that is absent is `nothing` (not "a undefined").
 */
function kindOf(value: unknown): string {
  if (value === undefined) return 'nothing (the field is missing)';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** Parse and validate one line. Throws `MalformedLineError`. */
export function parseRequestLine(
  text: string,
  line: number,
  baseUrl: URL | undefined,
  currency?: string,
): RequestSpec {
  const bad = (message: string) => new MalformedLineError(line, message);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // V8's message quotes the text around the error: only the position is shown.
    const at = jsonErrorPosition(text);
    throw bad(`not valid JSON${at === undefined ? '' : ` (at column ${at.column})`}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw bad(`expected a JSON object, got ${kindOf(value)}`);
  }
  const o = value as Record<string, unknown>;

  const id = o['id'];
  if (!((typeof id === 'string' && id.length > 0) || (typeof id === 'number' && Number.isSafeInteger(id)))) {
    throw bad(`expected \`id\` to be a non-empty string or an integer, got ${show(id)}`);
  }

  const rawUrl = o['url'];
  if (typeof rawUrl !== 'string' || rawUrl.length === 0) {
    throw bad(`expected \`url\` to be a string, got ${typeof rawUrl === 'string' ? '""' : kindOf(rawUrl)}`);
  }
  const shownUrl = show(safeUrlText(rawUrl));
  let url: URL;
  try {
    url = new URL(rawUrl, baseUrl);
  } catch {
    throw bad(
      baseUrl === undefined
        ? `expected \`url\` to be an absolute http(s) URL (or pass --base-url), got ${shownUrl}`
        : `expected \`url\` to be a URL, got ${shownUrl}`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw bad(`expected \`url\` to use http or https, got ${shownUrl}`);
  }
  if (url.username !== '' || url.password !== '') {
    // fetch refuses them (quoting the URL); credentials belong in a header.
    throw bad(
      `expected \`url\` without credentials (user:password@), got ${shownUrl}; send them in a header`,
    );
  }

  const rawMethod = o['method'] ?? 'GET';
  if (typeof rawMethod !== 'string' || !methodShape.test(rawMethod)) {
    throw bad(`expected \`method\` to be an HTTP method such as GET or POST, got ${show(rawMethod)}`);
  }
  const method = rawMethod.toUpperCase();
  if (forbiddenMethods.has(method)) throw bad(`fetch cannot send a ${method} request`);

  const headers: Record<string, string> = {};
  const rawHeaders = o['headers'];
  if (rawHeaders !== undefined && rawHeaders !== null) {
    if (typeof rawHeaders !== 'object' || Array.isArray(rawHeaders)) {
      throw bad(`expected \`headers\` to be an object of strings, got ${kindOf(rawHeaders)}`);
    }
    for (const [name, v] of Object.entries(rawHeaders as Record<string, unknown>)) {
      const nameProblem = headerNameProblem(name);
      if (nameProblem !== undefined) throw bad(`in \`headers\`, ${nameProblem}`);
      if (typeof v !== 'string' && typeof v !== 'number') {
        throw bad(`expected \`headers.${name}\` to be a string, got ${kindOf(v)}`);
      }
      const value = String(v);
      const valueProblem = headerValueProblem(value);
      if (valueProblem !== undefined) throw bad(`\`headers.${name}\` ${valueProblem} (value not shown)`);
      headers[name.toLowerCase()] = value;
    }
  }

  let body: string | undefined;
  const rawBody = o['body'];
  if (rawBody !== undefined && rawBody !== null) {
    if (typeof rawBody === 'string') body = rawBody;
    else {
      body = JSON.stringify(rawBody);
      headers['content-type'] ??= 'application/json';
    }
    if (method === 'GET' || method === 'HEAD') {
      throw bad(`a ${method} request cannot have a \`body\``);
    }
  }

  let cost: RequestSpec['cost'];
  const rawCost = o['cost'];
  if (rawCost !== undefined && rawCost !== null) {
    if (typeof rawCost === 'number') {
      if (!Number.isFinite(rawCost) || rawCost < 0)
        throw bad(`expected \`cost\` to be a number >= 0, got ${show(rawCost)}`);
      cost = rawCost;
    } else if (typeof rawCost === 'object' && !Array.isArray(rawCost)) {
      const record: Record<string, number> = {};
      for (const [unit, v] of Object.entries(rawCost as Record<string, unknown>)) {
        if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
          throw bad(`expected \`cost.${unit}\` to be a number >= 0, got ${show(v)}`);
        }
        record[unit] = v;
      }
      cost = record;
    } else {
      throw bad(`expected \`cost\` to be a number or an object like {"tokens": 1200}, got ${show(rawCost)}`);
    }
  }

  let priceMicros: number | undefined;
  if (o['price'] !== undefined && o['price'] !== null) {
    let price: ReturnType<typeof parsePrice>;
    try {
      price = parsePrice('price', o['price']);
    } catch {
      throw bad(`expected \`price\` to be an amount like 0.002 or "$0.002", got ${show(o['price'])}`);
    }
    const problem = priceCurrencyProblem(price, currency);
    if (problem !== undefined) throw bad(`expected \`price\` ${problem}, got ${show(o['price'])}`);
    priceMicros = price.micros;
  }

  const priority = o['priority'];
  if (priority !== undefined && priority !== null && !Number.isSafeInteger(priority)) {
    throw bad(`expected \`priority\` to be an integer, got ${show(priority)}`);
  }
  const key = o['key'];
  if (key !== undefined && key !== null && (typeof key !== 'string' || key.length === 0)) {
    throw bad(`expected \`key\` to be a non-empty string, got ${show(key)}`);
  }

  return {
    id,
    idKey: String(id),
    line,
    method,
    url,
    headers,
    body,
    cost,
    priceMicros,
    priority: typeof priority === 'number' ? priority : undefined,
    key: typeof key === 'string' ? key : undefined,
  };
}
