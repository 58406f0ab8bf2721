/**
 * Options of `startSimulatedApi` and their validation, done once at start. Errors name the option
 * path and the value: Expected `storms.every` to be an integer >= 1, got `0` (number).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { finiteNumber, fn, integer, invalid, oneOf, plainObject } from '../validate.js';
import { normalizePolicy, type SimulatedPolicyOption, type SimulatedRule } from './policy-spec.js';
import { headerStyles, type SimulatedHeaderStyle } from './rate-limit-headers.js';
import { normalizeStorms, type SimulatedStorms, type StormConfig } from './storm-schedule.js';

/** What the server knows of a request when it prices it or reports its usage. */
export interface SimulatedRequest {
  readonly method: string;
  /** Path and query, as sent. */
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  /** Tokens the request costs: `x-sim-tokens` header, else the JSON body's `max_tokens`, else 0. */
  readonly tokens: number;
  /** The parsed JSON body, or undefined (no body, or not `application/json`). */
  readonly body: unknown;
  /** Arrival time on the server (epoch-scale ms). */
  readonly arrivedAt: number;
  /** The echoed `x-request-id`, or a generated `sim-<n>`. */
  readonly id: string;
}

/** Misbehaviour real APIs show now and then, for testing a client's defences. */
export interface SimulatedHostility {
  /** Every Nth response (any status) carries `Retry-After: 86400` (a day). Integer >= 1. */
  retryAfterDayEvery?: number;
  /**
   * Replace the rate-limit header values (not Retry-After) with garbage (`NaN`, `-1`, `1e999`, `6m0`,
   * malformed structured fields...): `true` on every response, a number N on every Nth.
   */
  garbageHeaders?: boolean | number;
}

export interface SimulatedApiOptions {
  /**
   * The hidden server-side limit(s). Windows are measured at request arrival on the server; a
   * refused request does not consume quota.
   * @example { kind: 'token-bucket', limit: 10, intervalMs: 1000, burst: 5 }
   * @example [{ kind: 'sliding-window', limit: 3, intervalMs: 1000 }, { kind: 'fixed-window', limit: 1000, intervalMs: 60_000, unit: 'tokens' }]
   */
  policy: SimulatedPolicyOption;
  /**
   * Rate-limit headers emitted on every response.
   * @default 'none'
   */
  headers?: SimulatedHeaderStyle;
  /**
   * Send `Retry-After` (whole seconds, rounded up to what the policy needs) on 429.
   * @default true
   */
  retryAfter?: boolean;
  /** Outages answered with 503 (or another 5xx) and Retry-After. */
  storms?: SimulatedStorms;
  /** Hostile responses: day-long Retry-After, garbage rate-limit headers. */
  hostile?: SimulatedHostility;
  /**
   * Price of an accepted request in integer micro-dollars, or a function of the request returning
   * one. Sent as `x-sim-cost-micros` on every response (0 when not accepted) and summed in
   * `stats().totalChargedMicros` for accepted requests only.
   * @default 0
   */
  price?: number | ((request: SimulatedRequest) => number);
  /**
   * Include `usage: { total_tokens }` in accepted bodies: `true` reports the request's tokens, a
   * function returns the tokens actually "used" (for reconciliation tests).
   * @default false
   */
  usage?: boolean | ((request: SimulatedRequest) => number);
  /**
   * Processing time of accepted requests before the response (admission happens at arrival):
   * fixed ms or uniform in `[min, max]`. Refusals answer at once.
   * @default 0
   */
  latencyMs?: number | { min: number; max: number };
  /**
   * Loopback address to listen on; nothing else is allowed.
   * @default '127.0.0.1'
   */
  host?: '127.0.0.1' | '::1';
  /**
   * Port; 0 picks a free one.
   * @default 0
   */
  port?: number;
  /**
   * The server's clock (epoch-scale ms), read once per request at arrival. Inject one to drive
   * windows deterministically in tests.
   * @default () => performance.timeOrigin + performance.now()
   */
  now?: () => number;
  /**
   * Random source in [0, 1) for latency.
   * @default Math.random
   */
  random?: () => number;
}

/** The validated, frozen options. */
export interface NormalizedSimulatedApiOptions {
  readonly rules: readonly SimulatedRule[];
  readonly headers: SimulatedHeaderStyle;
  readonly retryAfter: boolean;
  readonly storms: StormConfig | undefined;
  readonly retryAfterDayEvery: number | undefined;
  /** Every Nth response gets garbage headers (undefined: never). */
  readonly garbageEvery: number | undefined;
  readonly price: (request: SimulatedRequest) => number;
  readonly usage: ((request: SimulatedRequest) => number) | undefined;
  readonly latencyMs: { readonly min: number; readonly max: number };
  readonly host: '127.0.0.1' | '::1';
  readonly port: number;
  readonly now: () => number;
  readonly random: () => number;
}

const origin = performance.timeOrigin;
const realNow = () => origin + performance.now();

export function normalizeSimulatedApiOptions(options: unknown): NormalizedSimulatedApiOptions {
  const o = plainObject('options', options);
  const known = new Set([
    'policy',
    'headers',
    'retryAfter',
    'storms',
    'hostile',
    'price',
    'usage',
    'latencyMs',
    'host',
    'port',
    'now',
    'random',
  ]);
  for (const key of Object.keys(o)) {
    if (!known.has(key)) throw invalid(key, `a known option (${[...known].join(', ')})`, o[key]);
  }
  if (o['policy'] === undefined)
    throw invalid('policy', "a policy (use { kind: 'none' } for no limit)", undefined);
  const rules = normalizePolicy(o['policy']);
  const headers = o['headers'] === undefined ? 'none' : oneOf('headers', o['headers'], headerStyles);
  let retryAfter = true;
  if (o['retryAfter'] !== undefined) {
    if (typeof o['retryAfter'] !== 'boolean') throw invalid('retryAfter', 'a boolean', o['retryAfter']);
    retryAfter = o['retryAfter'];
  }
  const storms = o['storms'] === undefined ? undefined : normalizeStorms(o['storms']);

  let retryAfterDayEvery: number | undefined;
  let garbageEvery: number | undefined;
  if (o['hostile'] !== undefined) {
    const h = plainObject('hostile', o['hostile']);
    if (h['retryAfterDayEvery'] !== undefined) {
      retryAfterDayEvery = integer('hostile.retryAfterDayEvery', h['retryAfterDayEvery'], 1);
    }
    const g = h['garbageHeaders'];
    if (g === true) garbageEvery = 1;
    else if (typeof g === 'number') garbageEvery = integer('hostile.garbageHeaders', g, 1);
    else if (g !== undefined && g !== false)
      throw invalid('hostile.garbageHeaders', 'a boolean or an integer >= 1', g);
  }

  let price: (request: SimulatedRequest) => number = () => 0;
  if (typeof o['price'] === 'function') price = o['price'] as (request: SimulatedRequest) => number;
  else if (o['price'] !== undefined) {
    const micros = integer('price', o['price'], 0);
    price = () => micros;
  }

  let usage: ((request: SimulatedRequest) => number) | undefined;
  if (o['usage'] === true) usage = (request) => request.tokens;
  else if (typeof o['usage'] === 'function') usage = o['usage'] as (request: SimulatedRequest) => number;
  else if (o['usage'] !== undefined && o['usage'] !== false) {
    throw invalid('usage', 'a boolean or a function', o['usage']);
  }

  let latencyMs = { min: 0, max: 0 };
  if (typeof o['latencyMs'] === 'number' || o['latencyMs'] === null) {
    const ms = finiteNumber('latencyMs', o['latencyMs'], { min: 0 });
    latencyMs = { min: ms, max: ms };
  } else if (o['latencyMs'] !== undefined) {
    const l = plainObject('latencyMs', o['latencyMs']);
    const min = finiteNumber('latencyMs.min', l['min'], { min: 0 });
    const max = finiteNumber('latencyMs.max', l['max'], { min });
    latencyMs = { min, max };
  }

  const host =
    o['host'] === undefined ? '127.0.0.1' : oneOf('host', o['host'], ['127.0.0.1', '::1'] as const);
  const port = o['port'] === undefined ? 0 : integer('port', o['port'], 0);
  if (port > 65_535) throw invalid('port', 'an integer from 0 to 65535', port);
  const now = o['now'] === undefined ? realNow : (fn('now', o['now']) as () => number);
  const random = o['random'] === undefined ? Math.random : (fn('random', o['random']) as () => number);

  return Object.freeze({
    rules,
    headers,
    retryAfter,
    storms,
    retryAfterDayEvery,
    garbageEvery,
    price,
    usage,
    latencyMs: Object.freeze(latencyMs),
    host,
    port,
    now,
    random,
  });
}
