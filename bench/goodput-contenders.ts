// The goodput contenders, each configured for a scenario the way its README suggests, each sending
// real HTTP requests. Every contender records when it dispatched a request and what came back, so
// the bench can check that Retry-After was honoured and count refusals per reset window.
import type { AxiosError, AxiosInstance, AxiosResponse, InternalAxiosRequestConfig } from 'axios';
import axios from 'axios';
import Bottleneck from 'bottleneck';
import PQueue from 'p-queue';
import pThrottle from 'p-throttle';
import { createGate, type GateOptions } from '../src/index.js';
import { simTokensHeader } from '../src/testing/index.js';
import { type ContenderName, type KnownLimit, type Scenario, withoutMargin } from './goodput-scenarios.js';

/** What one contender did on the wire, on the child's monotonic clock (ms). */
export interface WireLog {
  /** Dispatch time of every HTTP request (retries included). */
  readonly dispatches: number[];
  readonly responses: ResponseRecord[];
  /**
   * Epoch-scale ms (performance.timeOrigin + now, as the simulated API reads its clock) at which each
   * request id was dispatched; the parent matches them with the server's arrival times.
   */
  readonly sentAt: Record<string, number>;
}

export interface ResponseRecord {
  /** When the response head arrived. */
  readonly at: number;
  readonly status: number;
  /** Retry-After in ms (delay-seconds only: the simulated API sends no dates), if present. */
  readonly retryAfterMs: number | undefined;
  /** X-RateLimit-Reset as sent: it names the server's window, to count refusals per window. */
  readonly reset: string | undefined;
}

/** One call of the batch: resolves when the API accepted it, rejects otherwise. */
export type Send = (index: number) => Promise<void>;

/** A non-2xx answer that reached the caller (after the contender's own retries, if any). */
export class HttpStatusError extends Error {
  constructor(
    readonly status: number,
    readonly retryAfterMs: number | undefined,
  ) {
    super(`HTTP ${status}`);
  }
}

// Retries after the first attempt, for every peer's retry plugin (axios-retry's default is 3).
const maxRetries = 3;

function retryAfterOf(value: string | null | undefined): number | undefined {
  // Delay-seconds, as the simulated API sends it: whole seconds to ms.
  return value != null && /^\d+$/.test(value.trim()) ? Number(value.trim()) * 1000 : undefined;
}

function record(log: WireLog, status: number, header: (name: string) => string | null | undefined): void {
  log.responses.push({
    at: performance.now(),
    status,
    retryAfterMs: retryAfterOf(header('retry-after')),
    reset: header('x-ratelimit-reset') ?? undefined,
  });
}

/** Node's fetch, recording dispatches and responses. */
function tracedFetch(log: WireLog): (url: string, init: RequestInit) => Promise<Response> {
  let sent = 0;
  return async (url, init) => {
    // A unique id per dispatch (retries included); the simulated API reports it with the arrival.
    const id = `r${++sent}`;
    const headers = { ...(init.headers as Record<string, string> | undefined), 'x-request-id': id };
    const at = performance.now();
    log.dispatches.push(at);
    log.sentAt[id] = performance.timeOrigin + at;
    const res = await fetch(url, { ...init, headers });
    record(log, res.status, (name) => res.headers.get(name));
    return res;
  };
}

/** axios' own http adapter, recording dispatches and responses (axios rejects non-2xx inside it). */
function tracedAxiosAdapter(log: WireLog): (config: InternalAxiosRequestConfig) => Promise<AxiosResponse> {
  const http = axios.getAdapter('http');
  const headerOf = (response: AxiosResponse) => (name: string) => {
    const value = response.headers[name] as unknown;
    return typeof value === 'string' ? value : undefined;
  };
  return async (config) => {
    log.dispatches.push(performance.now());
    try {
      const response = await http(config);
      record(log, response.status, headerOf(response));
      return response;
    } catch (error) {
      const response = (error as AxiosError).response;
      if (response !== undefined) record(log, response.status, headerOf(response));
      throw error;
    }
  };
}

/** Exponential backoff as axios-retry's `exponentialDelay` computes it: 2^n · 100 ms plus 0-20%. */
function backoffMs(retry: number): number {
  const delayMs = 2 ** retry * 100;
  return delayMs + delayMs * 0.2 * Math.random();
}

/** A refusal worth retrying (429, or a 5xx such as a storm's 503): its delay, else undefined. */
function retryDelayMs(error: unknown, retry: number): number | undefined {
  if (!(error instanceof HttpStatusError) || retry > maxRetries) return undefined;
  if (error.status !== 429 && error.status < 500) return undefined;
  // Honour the server's Retry-After when it gives one, as a careful user writes it.
  return error.retryAfterMs ?? backoffMs(retry);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** For peers without a retry plugin (p-queue, p-throttle): the p-retry loop, resubmitting through the limiter. */
async function withRetry(attempt: () => Promise<void>): Promise<void> {
  for (let retry = 1; ; retry++) {
    try {
      await attempt();
      return;
    } catch (error) {
      const delayMs = retryDelayMs(error, retry);
      if (delayMs === undefined) throw error;
      await sleep(delayMs);
    }
  }
}

function requestInit(scenario: Scenario): RequestInit {
  return scenario.tokensPerRequest > 0
    ? { headers: { [simTokensHeader]: String(scenario.tokensPerRequest) } }
    : {};
}

/** One request; a non-2xx answer becomes an HttpStatusError (its body released). */
function plainSender(url: string, scenario: Scenario, log: WireLog): (index: number) => Promise<void> {
  const send = tracedFetch(log);
  const init = requestInit(scenario);
  return async (index) => {
    const res = await send(`${url}/v1/work?i=${index}`, init);
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new HttpStatusError(res.status, retryAfterOf(res.headers.get('retry-after')));
    }
    await res.arrayBuffer();
  };
}

function tollgate(url: string, scenario: Scenario, log: WireLog, options: GateOptions): Send {
  const gate = createGate(options);
  const send = tracedFetch(log);
  const init = requestInit(scenario);
  const origin = new URL(url).origin;
  // Exactly what the fetch adapter does: the origin is the key, the gate reads every response.
  const inspect = (res: Response) => ({
    status: res.status,
    headers: res.headers,
    method: 'GET',
    discard: () => {
      res.body?.cancel().catch(() => {});
    },
  });
  return async (index) => {
    const res = await gate.schedule(() => send(`${url}/v1/work?i=${index}`, init), {
      key: origin,
      inspect,
      ...(scenario.cost === undefined ? {} : { cost: scenario.cost }),
    });
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new HttpStatusError(res.status, retryAfterOf(res.headers.get('retry-after')));
    }
    await res.arrayBuffer();
  };
}

/** Bottleneck options for what the user knows. */
function bottleneckOptions(
  known: Exclude<KnownLimit, { kind: 'requests-tokens' }>,
): Bottleneck.ConstructorOptions {
  switch (known.kind) {
    // README: "minTime and maxConcurrent are enough for the majority of use cases"; its reservoir
    // intervals (multiples of 250 ms) cannot express a burst of 10 at 50/s.
    case 'bucket':
    case 'guess':
      return { minTime: known.intervalMs / known.limit };
    // README, Reservoir Intervals: "100 per 60 s" is a reservoir refreshed every interval.
    case 'window':
      return {
        reservoir: known.limit,
        reservoirRefreshAmount: known.limit,
        reservoirRefreshInterval: known.intervalMs,
      };
  }
}

function bottleneck(url: string, scenario: Scenario, log: WireLog): Send {
  const send = plainSender(url, scenario, log);
  // README, Retries: the 'failed' listener returns the ms to wait before the job runs again.
  const retry = (error: unknown, jobInfo: Bottleneck.EventInfoRetryable) =>
    retryDelayMs(error, jobInfo.retryCount + 1);
  const known = scenario.known;
  if (known.kind === 'requests-tokens') {
    // Two token buckets as reservoir increase intervals (README: refill every 250 ms up to a maximum),
    // tokens as the job's weight; a job passes the requests limiter, then the tokens limiter.
    const bucket = (perMinute: number) =>
      new Bottleneck({
        reservoir: perMinute,
        reservoirIncreaseAmount: perMinute / 240, // 240 intervals of 250 ms per minute
        reservoirIncreaseInterval: 250,
        reservoirIncreaseMaximum: perMinute,
      });
    const requests = bucket(known.requestsPerMinute);
    const tokens = bucket(known.tokensPerMinute);
    tokens.on('failed', retry);
    return (index) =>
      requests.schedule(() => tokens.schedule({ weight: known.tokensPerRequest }, () => send(index)));
  }
  const limiter = new Bottleneck(bottleneckOptions(known));
  limiter.on('failed', retry);
  return (index) => limiter.schedule(() => send(index));
}

function pQueue(url: string, scenario: Scenario, log: WireLog): Send {
  const send = plainSender(url, scenario, log);
  const known = scenario.known;
  let queue: PQueue;
  switch (known.kind) {
    // "burst per burst-length": 10 per 200 ms is 50/s with bursts of 10.
    case 'bucket':
      queue = new PQueue({
        intervalCap: known.burst,
        interval: (known.burst * known.intervalMs) / known.limit,
      });
      break;
    case 'guess':
      queue = new PQueue({ intervalCap: known.limit, interval: known.intervalMs });
      break;
    // README, strict: "use it when interacting with APIs that enforce strict rate limits".
    case 'window':
      queue = new PQueue({ intervalCap: known.limit, interval: known.intervalMs, strict: true });
      break;
    // No weights: the token limit becomes a number of calls per minute.
    case 'requests-tokens':
      queue = new PQueue({
        intervalCap: Math.min(
          known.requestsPerMinute,
          Math.floor(known.tokensPerMinute / known.tokensPerRequest),
        ),
        interval: 60_000,
      });
      break;
  }
  return (index) => withRetry(() => queue.add(() => send(index)));
}

function pThrottled(url: string, scenario: Scenario, log: WireLog): Send {
  const send = plainSender(url, scenario, log);
  const known = scenario.known;
  let throttled: (index: number) => Promise<void>;
  switch (known.kind) {
    case 'bucket':
      throttled = pThrottle({
        limit: known.burst,
        interval: (known.burst * known.intervalMs) / known.limit,
        strict: true,
      })(send);
      break;
    case 'guess':
    case 'window':
      throttled = pThrottle({ limit: known.limit, interval: known.intervalMs, strict: true })(send);
      break;
    case 'requests-tokens': {
      // README, weight: cost-based limits; the requests limit wraps the tokens limit.
      const tokens = pThrottle({
        limit: known.tokensPerMinute,
        interval: 60_000,
        strict: true,
        weight: () => known.tokensPerRequest,
      })(send);
      throttled = pThrottle({ limit: known.requestsPerMinute, interval: 60_000, strict: true })(tokens);
      break;
    }
  }
  return (index) => withRetry(() => throttled(index));
}

// axios-rate-limit and axios-retry are loaded at run time: the bench runs without them (their row
// says so) and the type check does not need them.
interface RateLimitOptions {
  limits?: { maxRequests: number; duration: number | string }[];
  maxRPS?: number;
}
type RetryCondition = (error: AxiosError) => boolean;
interface AxiosRetry {
  (instance: AxiosInstance, options: Record<string, unknown>): unknown;
  exponentialDelay: (retryCount: number, error: AxiosError) => number;
  isNetworkOrIdempotentRequestError: RetryCondition;
}

async function loadDefault<T>(name: string): Promise<T | undefined> {
  try {
    const module = (await import(name)) as { default?: T };
    return module.default;
  } catch {
    return undefined;
  }
}

function rateLimitOptions(known: KnownLimit): RateLimitOptions {
  switch (known.kind) {
    case 'bucket':
      return {
        limits: [{ maxRequests: known.burst, duration: (known.burst * known.intervalMs) / known.limit }],
      };
    case 'guess':
      return { maxRPS: (known.limit * 1000) / known.intervalMs };
    case 'window':
      return { limits: [{ maxRequests: known.limit, duration: known.intervalMs }] };
    case 'requests-tokens':
      return {
        limits: [
          {
            maxRequests: Math.min(
              known.requestsPerMinute,
              Math.floor(known.tokensPerMinute / known.tokensPerRequest),
            ),
            duration: '1m',
          },
        ],
      };
  }
}

async function axiosRateLimit(url: string, scenario: Scenario, log: WireLog): Promise<Send | string> {
  const rateLimit =
    await loadDefault<(instance: AxiosInstance, options: RateLimitOptions) => AxiosInstance>(
      'axios-rate-limit',
    );
  const axiosRetry = await loadDefault<AxiosRetry>('axios-retry');
  if (rateLimit === undefined || axiosRetry === undefined) {
    return 'not installed (npm i -D axios-rate-limit axios-retry)';
  }
  const http = rateLimit(
    axios.create({ adapter: tracedAxiosAdapter(log) }),
    rateLimitOptions(scenario.known),
  );
  // axios-rate-limit's "retrying failed requests" use case: axios-retry on the same instance, so
  // retries pass the limiter again; exponentialDelay waits at least the server's Retry-After.
  axiosRetry(http, {
    retries: maxRetries,
    retryDelay: axiosRetry.exponentialDelay,
    retryCondition: (error: AxiosError) =>
      axiosRetry.isNetworkOrIdempotentRequestError(error) || error.response?.status === 429,
  });
  const headers =
    scenario.tokensPerRequest > 0 ? { [simTokensHeader]: String(scenario.tokensPerRequest) } : {};
  return async (index) => {
    try {
      await http.get(`${url}/v1/work?i=${index}`, { headers });
    } catch (error) {
      const response = (error as AxiosError).response;
      if (response === undefined) throw error;
      const retryAfter = response.headers['retry-after'] as unknown;
      throw new HttpStatusError(
        response.status,
        retryAfterOf(typeof retryAfter === 'string' ? retryAfter : undefined),
      );
    }
  };
}

/** The contender's `send`, or why it cannot run. */
export async function makeContender(
  name: ContenderName,
  scenario: Scenario,
  url: string,
  log: WireLog,
): Promise<Send | string> {
  switch (name) {
    case 'tollgate':
      return tollgate(url, scenario, log, scenario.gate);
    case 'tollgate (no margin)':
      return tollgate(url, scenario, log, withoutMargin(scenario.gate));
    case 'bottleneck':
      return bottleneck(url, scenario, log);
    case 'p-queue':
      return pQueue(url, scenario, log);
    case 'p-throttle':
      return pThrottled(url, scenario, log);
    case 'axios-rate-limit':
      return axiosRateLimit(url, scenario, log);
  }
}
