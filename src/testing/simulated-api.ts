/**
 * A simulated paid HTTP API on a real loopback socket: hidden rate limits (the pure
 * `SimulatedPolicy`), provider-style rate-limit headers, 429 + Retry-After, 5xx storms, hostile
 * responses, prices. It records what it accepted and when, so tests and benchmarks can check that a
 * client never exceeded the limit and how close it came to the fastest possible schedule.
 *
 * Request → response:
 * 1. The arrival time is read once, when the request's head has been parsed (`now()`, by default
 *    `performance.timeOrigin + performance.now()`). Every window is measured at arrival.
 * 2. Requests are decided one at a time in arrival order (a request waits for its own body, and for
 *    earlier requests' decisions), so admission times never go backwards.
 * 3. Tokens: the `x-sim-tokens` header (a non-negative integer), else the JSON body's `max_tokens`
 *    (`content-type: application/json`), else 0. Each request also costs 1 in `requests` rules.
 * 4. In order: an outage (storm) answers 5xx; a cost no rule could ever admit answers 400
 *    `request_too_large`; a refusal answers 429 (Retry-After unless disabled) and consumes nothing;
 *    otherwise the request is accepted, charged `price` and answered 200 `{ ok: true, id, usage? }`
 *    after `latencyMs`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { maxAcceptedInWindow, overLimitWindows, type WindowPeak } from './arrival-stats.js';
import { normalizePolicy, policyOf, type SimulatedPolicyOption, type SimulatedRule } from './policy-spec.js';
import { ceilSeconds, garbageRateLimitHeaders, rateLimitHeaders } from './rate-limit-headers.js';
import {
  type NormalizedSimulatedApiOptions,
  normalizeSimulatedApiOptions,
  type SimulatedApiOptions,
  type SimulatedRequest,
} from './simulated-api-options.js';
import { physicalMinimumMs, SimulatedPolicy, type SimulatedWorkload } from './simulated-policy.js';
import { StormSchedule } from './storm-schedule.js';

/** Request header carrying the request's token cost (a non-negative integer). */
export const simTokensHeader = 'x-sim-tokens';
/** Response header carrying the request's price in integer micro-dollars (0 unless accepted). */
export const simCostHeader = 'x-sim-cost-micros';

// Bodies are read whole (for `max_tokens`); cap them so a test cannot exhaust memory by mistake.
const maxBodyBytes = 1 << 20;
const dayInSeconds = 86_400;

/** A frozen snapshot of what the server saw since it started (or since `reset()`). */
export interface SimulatedApiStats {
  /** Epoch-scale ms of start or last reset. */
  readonly startedAt: number;
  /** Arrival of the first request since then (any outcome), if any. */
  readonly firstArrivalAt: number | undefined;
  /** Requests received (every outcome). */
  readonly received: number;
  /** Requests answered 200. */
  readonly accepted: number;
  /** Requests answered 429. */
  readonly rejected: number;
  /** Requests answered with a storm's 5xx. */
  readonly unavailable: number;
  /** Sum of the prices of accepted requests, integer micro-dollars. */
  readonly totalChargedMicros: number;
  /** Sum of the tokens of accepted requests. */
  readonly acceptedTokens: number;
  /** Responses per status code. */
  readonly byStatus: Readonly<Record<number, number>>;
  /** Arrival times of accepted requests (epoch-scale ms, non-decreasing), for charts. */
  readonly acceptedAt: readonly number[];
  /** Tokens of each accepted request, parallel to `acceptedAt`. */
  readonly acceptedTokensAt: readonly number[];
  /** The most accepted requests (and, separately, tokens) in any window of `windowMs`, sliding over arrivals. */
  maxAcceptedInWindow(windowMs: number): WindowPeak;
  /**
   * How often accepted traffic exceeded the hidden policy (or `policy`, e.g. the limit a client
   * promised to keep against a `none` server); see `overLimitWindows` in arrival-stats. 0: never.
   */
  overLimitWindows(policy?: SimulatedPolicyOption): number;
  /**
   * The least wall time (ms) between the first and last arrival of `workload` under the hidden
   * policy from a fresh state. `startAt` defaults to `firstArrivalAt` (then 0), which places
   * fixed windows as this run saw them.
   */
  physicalMinimumMs(workload: SimulatedWorkload): number;
}

export interface SimulatedApi {
  /** Base URL, e.g. `http://127.0.0.1:53123`. Any path and method is served. */
  readonly url: string;
  readonly port: number;
  /** The hidden rules, normalized. */
  readonly rules: readonly SimulatedRule[];
  stats(): SimulatedApiStats;
  /** Fresh limits, counters and storm schedule, as at start. Call it while no request is in flight. */
  reset(): void;
  /** Stop listening and drop open connections. Idempotent. */
  close(): Promise<void>;
}

interface Plan {
  status: number;
  headers: Record<string, string>;
  body: unknown;
  delayMs: number;
}

type BodyResult = { ok: true; bytes: Buffer } | { ok: false; reason: 'too-large' | 'aborted' };

function readBody(req: IncomingMessage): Promise<BodyResult> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      // Past the cap, keep draining (so the response can be written) but store nothing.
      if (size <= maxBodyBytes) chunks.push(chunk);
    });
    req.on('end', () =>
      resolve(
        size > maxBodyBytes ? { ok: false, reason: 'too-large' } : { ok: true, bytes: Buffer.concat(chunks) },
      ),
    );
    req.on('error', () => resolve({ ok: false, reason: 'aborted' }));
    req.on('close', () => resolve({ ok: false, reason: 'aborted' }));
  });
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

class SimulatedApiServer {
  private readonly policy: SimulatedPolicy;
  private readonly storms: StormSchedule | undefined;
  private readonly timers = new Set<ReturnType<typeof setTimeout>>();
  // Decisions run one after another, in arrival order.
  private chain: Promise<void> = Promise.resolve();
  private closed: Promise<void> | undefined;

  private startedAt: number;
  private firstArrivalAt: number | undefined;
  private arrivals = 0;
  private responses = 0;
  private accepted = 0;
  private rejected = 0;
  private unavailable = 0;
  private totalChargedMicros = 0;
  private acceptedTokens = 0;
  private byStatus = new Map<number, number>();
  private acceptedAt: number[] = [];
  private acceptedTokensAt: number[] = [];

  constructor(
    private readonly options: NormalizedSimulatedApiOptions,
    readonly server: Server,
  ) {
    this.policy = new SimulatedPolicy(policyOf(options.rules));
    this.startedAt = options.now();
    this.storms =
      options.storms === undefined ? undefined : new StormSchedule(options.storms, this.startedAt);
    server.on('request', (req, res) => this.onRequest(req, res));
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const arrivedAt = this.options.now();
    const seq = ++this.arrivals;
    this.firstArrivalAt ??= arrivedAt;
    const body = readBody(req);
    this.chain = this.chain
      .then(() => body)
      .then((result) => {
        // A client gone before its body arrived gets no decision: nothing is counted but `received`.
        if (!result.ok && result.reason === 'aborted') return;
        let plan: Plan;
        try {
          plan = this.decide(req, arrivedAt, seq, result);
        } catch (error) {
          plan = this.finish(
            500,
            {},
            { ok: false, error: { type: 'server_error', message: String(error) } },
            arrivedAt,
          );
        }
        this.respond(res, plan);
      })
      // Never let one broken response stall the decisions queued behind it.
      .catch((error: unknown) => {
        res.destroy(error instanceof Error ? error : new Error(String(error)));
      });
  }

  private respond(res: ServerResponse, plan: Plan): void {
    const write = () => {
      if (res.destroyed || res.writableEnded) return;
      res.writeHead(plan.status, { ...plan.headers, 'content-type': 'application/json' });
      res.end(JSON.stringify(plan.body));
    };
    if (plan.delayMs <= 0) {
      write();
      return;
    }
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      write();
    }, plan.delayMs);
    this.timers.add(timer);
  }

  /** Parse the request's tokens and body; `error` is the type of a 400 answer. */
  private parse(
    req: IncomingMessage,
    result: BodyResult,
  ): { tokens: number; body: unknown } | { error: string; message: string } {
    if (!result.ok) return { error: 'request_too_large', message: `Body larger than ${maxBodyBytes} bytes` };
    let body: unknown;
    const type = headerValue(req, 'content-type') ?? '';
    if (result.bytes.length > 0 && /\bjson\b/i.test(type)) {
      try {
        body = JSON.parse(result.bytes.toString('utf8'));
      } catch {
        return { error: 'invalid_json', message: 'Body is not valid JSON' };
      }
    }
    const header = headerValue(req, simTokensHeader);
    if (header !== undefined) {
      const tokens = /^\d+$/.test(header.trim()) ? Number(header.trim()) : Number.NaN;
      if (!Number.isSafeInteger(tokens)) {
        return { error: 'invalid_tokens', message: `${simTokensHeader} must be a non-negative integer` };
      }
      return { tokens, body };
    }
    const maxTokens =
      typeof body === 'object' && body !== null ? (body as Record<string, unknown>)['max_tokens'] : undefined;
    if (maxTokens !== undefined) {
      if (typeof maxTokens !== 'number' || !Number.isSafeInteger(maxTokens) || maxTokens < 0) {
        return { error: 'invalid_tokens', message: 'max_tokens must be a non-negative integer' };
      }
      return { tokens: maxTokens, body };
    }
    return { tokens: 0, body };
  }

  private decide(req: IncomingMessage, arrivedAt: number, seq: number, result: BodyResult): Plan {
    const requestId = headerValue(req, 'x-request-id');
    const id = requestId ?? `sim-${seq}`;
    const idHeader: Record<string, string> = requestId === undefined ? {} : { 'x-request-id': requestId };

    const outage = this.storms?.arriveAt(arrivedAt);
    if (outage !== undefined) {
      this.unavailable++;
      const headers = { ...idHeader };
      if (outage.retryAfterSec !== undefined) headers['retry-after'] = String(outage.retryAfterSec);
      return this.finish(outage.status, headers, { ok: false, error: { type: 'unavailable' } }, arrivedAt);
    }

    const parsed = this.parse(req, result);
    if ('error' in parsed) {
      return this.finish(
        400,
        idHeader,
        { ok: false, error: { type: parsed.error, message: parsed.message } },
        arrivedAt,
      );
    }
    const request: SimulatedRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      tokens: parsed.tokens,
      body: parsed.body,
      arrivedAt,
      id,
    };
    const cost = { requests: 1, tokens: request.tokens };
    const tooLarge = this.policy.tooLargeFor(cost);
    if (tooLarge !== undefined) {
      const message = `Request costs more than rule \`${tooLarge}\` can ever admit`;
      return this.finish(
        400,
        idHeader,
        { ok: false, error: { type: 'request_too_large', message } },
        arrivedAt,
      );
    }
    // Price and usage are computed before admission so that a faulty callback never leaves a
    // request admitted but unanswered.
    const priceMicros = this.options.price(request);
    if (!Number.isSafeInteger(priceMicros) || priceMicros < 0) {
      throw new TypeError(`price returned ${String(priceMicros)}, expected an integer >= 0 (micro-dollars)`);
    }
    const usedTokens = this.options.usage?.(request);
    if (usedTokens !== undefined && !(Number.isFinite(usedTokens) && usedTokens >= 0)) {
      throw new TypeError(`usage returned ${String(usedTokens)}, expected a number >= 0`);
    }

    const admission = this.policy.admitAt(cost, arrivedAt);
    if (!admission.ok) {
      this.rejected++;
      const headers = { ...idHeader };
      if (this.options.retryAfter) {
        // Whole seconds, rounded up: a client that waits this long from arrival finds room.
        headers['retry-after'] = String(Math.max(1, ceilSeconds(admission.retryAfterMs)));
        // OpenAI also sends the exact wait in ms (its SDK reads it first).
        if (this.options.headers === 'openai')
          headers['retry-after-ms'] = String(Math.ceil(admission.retryAfterMs));
      }
      const error = {
        type: 'rate_limit_exceeded',
        rule: admission.rule,
        retryAfterMs: admission.retryAfterMs,
      };
      return this.finish(429, headers, { ok: false, error }, arrivedAt);
    }

    this.accepted++;
    this.totalChargedMicros += priceMicros;
    this.acceptedTokens += request.tokens;
    this.acceptedAt.push(arrivedAt);
    this.acceptedTokensAt.push(request.tokens);
    const body: Record<string, unknown> = { ok: true, id };
    if (usedTokens !== undefined) body['usage'] = { total_tokens: usedTokens };
    const { min, max } = this.options.latencyMs;
    const plan = this.finish(200, { ...idHeader, [simCostHeader]: String(priceMicros) }, body, arrivedAt);
    plan.delayMs = min + (max - min) * this.options.random();
    return plan;
  }

  /** Add the headers every response carries (rate limits, hostility, price, Date) and count the status. */
  private finish(status: number, headers: Record<string, string>, body: unknown, arrivedAt: number): Plan {
    const n = ++this.responses;
    const { headers: style, garbageEvery, retryAfterDayEvery } = this.options;
    const snapshots = this.policy.snapshotAt(arrivedAt);
    const limits =
      garbageEvery !== undefined && n % garbageEvery === 0
        ? garbageRateLimitHeaders(style, snapshots, arrivedAt, n)
        : rateLimitHeaders(style, snapshots, arrivedAt);
    const out: Record<string, string> = { ...limits, ...headers };
    out[simCostHeader] ??= '0';
    if (retryAfterDayEvery !== undefined && n % retryAfterDayEvery === 0)
      out['retry-after'] = String(dayInSeconds);
    // The Date header comes from the same clock as the windows, so absolute resets stay consistent with it.
    out['date'] = new Date(arrivedAt).toUTCString();
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
    return { status, headers: out, body, delayMs: 0 };
  }

  stats(): SimulatedApiStats {
    const at = Object.freeze(this.acceptedAt.slice());
    const tokens = Object.freeze(this.acceptedTokensAt.slice());
    const rules = this.options.rules;
    const firstArrivalAt = this.firstArrivalAt;
    return Object.freeze({
      startedAt: this.startedAt,
      firstArrivalAt,
      received: this.arrivals,
      accepted: this.accepted,
      rejected: this.rejected,
      unavailable: this.unavailable,
      totalChargedMicros: this.totalChargedMicros,
      acceptedTokens: this.acceptedTokens,
      byStatus: Object.freeze(Object.fromEntries(this.byStatus)),
      acceptedAt: at,
      acceptedTokensAt: tokens,
      maxAcceptedInWindow: (windowMs: number) => maxAcceptedInWindow(at, tokens, windowMs),
      overLimitWindows: (policy?: SimulatedPolicyOption) =>
        overLimitWindows(policy === undefined ? rules : normalizePolicy(policy), at, tokens),
      physicalMinimumMs: (workload: SimulatedWorkload) =>
        physicalMinimumMs(policyOf(rules), { ...workload, startAt: workload.startAt ?? firstArrivalAt ?? 0 }),
    });
  }

  reset(): void {
    this.policy.reset();
    this.startedAt = this.options.now();
    this.storms?.reset(this.startedAt);
    this.firstArrivalAt = undefined;
    this.arrivals = 0;
    this.responses = 0;
    this.accepted = 0;
    this.rejected = 0;
    this.unavailable = 0;
    this.totalChargedMicros = 0;
    this.acceptedTokens = 0;
    this.byStatus = new Map();
    this.acceptedAt = [];
    this.acceptedTokensAt = [];
  }

  close(): Promise<void> {
    this.closed ??= new Promise<void>((resolve) => {
      for (const t of this.timers) clearTimeout(t);
      this.timers.clear();
      this.server.close(() => resolve());
      // Keep-alive sockets (fetch pools them) would hold close() open until they time out.
      this.server.closeAllConnections();
    });
    return this.closed;
  }
}

/**
 * Start a simulated paid API on a loopback address (127.0.0.1 by default, or ::1; never anything
 * else). Options are validated first: a bad one throws `InvalidOptionError` naming it.
 *
 * @example
 * const api = await startSimulatedApi({ policy: { kind: 'token-bucket', limit: 5, intervalMs: 1000 }, headers: 'ietf-structured' });
 * const res = await fetch(`${api.url}/v1/things`);
 * api.stats().accepted; // 1
 * await api.close();
 */
export async function startSimulatedApi(options: SimulatedApiOptions): Promise<SimulatedApi> {
  const normalized = normalizeSimulatedApiOptions(options);
  const server = createServer();
  const sim = new SimulatedApiServer(normalized, server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: normalized.host, port: normalized.port, exclusive: true }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const url = normalized.host === '::1' ? `http://[::1]:${port}` : `http://127.0.0.1:${port}`;
  return Object.freeze({
    url,
    port,
    rules: normalized.rules,
    stats: () => sim.stats(),
    reset: () => sim.reset(),
    close: () => sim.close(),
  });
}
