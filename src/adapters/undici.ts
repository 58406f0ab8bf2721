/**
 * `tollgate/undici`: an undici 7 interceptor, so everything built on a dispatcher is throttled —
 * Node's global `fetch` included:
 *
 * ```ts
 * import { Agent, setGlobalDispatcher } from 'undici';
 * setGlobalDispatcher(new Agent().compose(tollgateInterceptor(gate)));
 * ```
 *
 * Shape: `options => dispatch => (opts, handler) => boolean`, options checked when the factory is
 * called. Handler API: undici 7's controller API (`onRequestStart(controller, context)`,
 * `onResponseStart(controller, statusCode, headers, statusMessage)`, `onResponseData`,
 * `onResponseEnd`, `onResponseError`). `Dispatcher.compose` wraps every handler into that API
 * before an interceptor sees it (legacy `onConnect`/`onHeaders`/`onData`/`onComplete`/`onError`
 * handlers, such as the one Node 20's bundled fetch passes, arrive wrapped), and undici 7's
 * dispatchers accept it downstream, so this is the one API handled here.
 *
 * The way of one request:
 * 1. The caller's handler gets `onRequestStart` at once with a controller of ours, so an abort
 *    while the request waits in the gate's queue works (the gate rejects the call, nothing is sent,
 *    the handler gets `onResponseError` with the abort reason, as undici reports aborts).
 * 2. When the gate starts the call, the request is dispatched downstream with a handler of ours
 *    (an attempt). At the response head the attempt pauses the response and hands status and
 *    headers to the gate's `inspect`. Nothing reaches the caller's handler yet.
 * 3. If the gate retries (429, 503 + Retry-After), the attempt drains and drops that response
 *    (bounded; a longer body aborts its connection) and the gate dispatches again after the pause:
 *    the caller's handler never sees the throttled response. If the gate gives up, the handler gets
 *    `onResponseError(RateLimitedError)` (through fetch: `TypeError: fetch failed` with that cause).
 *    The error's `cause` is a `ResponseHead` (status, status text, response headers): the gate only
 *    ever holds heads, never the request's options, whose path and headers may carry credentials.
 * 4. Otherwise the head is delivered to the caller's handler and the body streams through, with
 *    the caller's pause/resume applied to the live connection.
 *
 * What is buffered: nothing of a successful response. Of an error response with a JSON content
 * type, at most `errorBody.maxBytes` (read for body-borne limits, then replayed to the caller).
 * Of a request body that is a stream or an iterable (Node's fetch sends every body as an async
 * iterable), at most `replayBodyMaxBytes`, so the gate can send it again after a 429; a longer body
 * is streamed on and marked not retryable. An abort while such a body is being read ends the call at
 * once (the body is destroyed, the handler gets the abort reason, the gate frees the call's slot):
 * an upload that never ends must not hold the gate.
 *
 * Upgrades (WebSocket, CONNECT) pass through untouched: they are not request/response calls.
 */
import type { Dispatcher } from 'undici';
import { isTollgateError } from '../errors.js';
import type { Inspection, ScheduleOptions } from '../gate/gate.js';
import { integer } from '../validate.js';
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
  scheduleOptionsOf,
  setActuals,
  type TollgateRequestOptions,
} from './request-options.js';
import { headOf, type ResponseHead, resultOf } from './response-head.js';

type DispatchOptions = Dispatcher.DispatchOptions;
type DispatchHandler = Dispatcher.DispatchHandler;
type DispatchController = Dispatcher.DispatchController;
type Dispatch = Dispatcher.Dispatch;
type IncomingHttpHeaders = Parameters<NonNullable<DispatchHandler['onResponseStart']>>[2];

/** A response head, as the `actualCost` and `price.actual` hooks see it. */
export interface UndiciResponseHead {
  readonly statusCode: number;
  readonly headers: IncomingHttpHeaders;
  /** The request's dispatch options. */
  readonly opts: DispatchOptions;
}

export interface TollgateInterceptorOptions {
  /**
   * Partition key of a request. Return undefined for the gate's default partition. Hash anything
   * secret with `hashKey`.
   * @default the request's origin (scheme, host, port)
   */
  key?: (opts: DispatchOptions) => string | undefined;
  /**
   * Per-request defaults (cost, key, priority, ...). A request's own `opts.tollgate` (e.g.
   * `undici.request(url, { tollgate: { cost: 3 } })`) overrides them field by field.
   */
  requestOptions?: (opts: DispatchOptions) => TollgateRequestOptions | undefined;
  /** Units the response says were used (from its headers), settling the reservation. A hook that throws counts as no answer. */
  actualCost?: (response: UndiciResponseHead) => ActualCost | undefined;
  price?: {
    /** Estimated price in integer micro-units, reserved on the gate's budgets before queueing. */
    estimate?: (opts: DispatchOptions) => number | undefined;
    /** Actual price in integer micro-units from the response head (e.g. a price header). */
    actual?: (response: UndiciResponseHead) => number | undefined;
  };
  /**
   * Error responses (status >= 400) with a JSON content type: how much of the body to read for
   * body-borne limits before the gate decides (it is then replayed to the caller). `false` disables it.
   * @default { maxBytes: 65_536, timeoutMs: 2_000 }
   */
  errorBody?: false | ErrorBodyOptions;
  /**
   * Request bodies that can be read only once (streams, iterables; Node's fetch sends every body
   * as one) are buffered up to this many bytes so a throttled request can be sent again. A longer
   * body streams on and is not retried; 0 buffers nothing. Integer >= 0.
   * @default 1_048_576
   */
  replayBodyMaxBytes?: number;
}

interface Settings {
  readonly gate: GateLike;
  /** `key`, `requestOptions` and `price.estimate`. */
  readonly requestHooks: RequestHooks<DispatchOptions>;
  readonly actualCost: ((response: UndiciResponseHead) => ActualCost | undefined) | undefined;
  readonly actualPrice: ((response: UndiciResponseHead) => number | undefined) | undefined;
  readonly errorBody: NormalizedErrorBody | undefined;
  readonly replayBodyMaxBytes: number;
}

const knownOptions = [
  'key',
  'requestOptions',
  'actualCost',
  'price',
  'errorBody',
  'replayBodyMaxBytes',
] as const;
// A dropped (retried) response's body is drained so its connection can be reused, up to this many
// bytes; a longer one aborts the connection instead of reading it.
const discardMaxBytes = 65_536;

/**
 * An undici 7 interceptor sending every request through `gate`. Options are validated here
 * (`InvalidOptionError` naming the option).
 *
 * A dispatcher sees each request a client sends, and redirects are new requests: fetch follows a
 * 3xx above the dispatcher, so each hop goes through the gate as a call of its own, counted by the
 * limits and priced by `price.estimate` (a redirect the provider bills nothing for can be priced 0
 * there: the hook receives the hop's dispatch options). `wrapFetch`, around fetch, sees one call.
 *
 * @example
 * const agent = new Agent().compose(tollgateInterceptor(gate));
 * setGlobalDispatcher(agent); // global fetch, undici.request, and libraries built on them
 */
export function tollgateInterceptor(
  gate: GateLike,
  options?: TollgateInterceptorOptions,
): Dispatcher.DispatcherComposeInterceptor {
  const g = checkGate(gate);
  const o = checkOptions(options, knownOptions);
  const shared = checkSharedOptions<TollgateInterceptorOptions>(o);
  const settings: Settings = Object.freeze({
    gate: g,
    requestHooks: Object.freeze({
      key: shared.key ?? ((opts: DispatchOptions) => originOf(opts.origin)),
      requestOptions: shared.requestOptions,
      estimate: shared.estimate,
    }),
    actualCost: shared.actualCost,
    actualPrice: shared.actualPrice,
    errorBody: shared.errorBody,
    replayBodyMaxBytes:
      o['replayBodyMaxBytes'] === undefined
        ? 1_048_576
        : integer('replayBodyMaxBytes', o['replayBodyMaxBytes'], 0),
  });
  return (dispatch: Dispatch): Dispatch =>
    function tollgateDispatch(opts: DispatchOptions, handler: DispatchHandler): boolean {
      if (opts.upgrade || opts.method === 'CONNECT') return dispatch(opts, handler);
      new ThrottledRequest(dispatch, opts, handler, settings).start();
      // Accepted: the gate queues it; a dispatcher's "busy" answer means nothing for a queued call.
      return true;
    };
}

interface PreparedBody {
  readonly opts: DispatchOptions;
  readonly retryable: boolean;
}

/**
 * One request of the caller: the controller its handler sees, stable across attempts. It forwards
 * pause/resume/abort to the attempt being delivered, and delivers exactly one terminal callback.
 */
class ThrottledRequest implements DispatchController {
  readonly dispatch: Dispatch;
  readonly opts: DispatchOptions;
  readonly settings: Settings;
  private readonly handler: DispatchHandler;
  private readonly abortController = new AbortController();
  private isAborted = false;
  private isPaused = false;
  private abortReason: Error | null = null;
  private scheduled = false;
  private settled = false;
  /** The attempt dispatched last (in flight, held for the gate's decision, or being delivered). */
  private current: Attempt | undefined = undefined;
  private delivering: Attempt | undefined = undefined;
  private prepared: PreparedBody | Promise<PreparedBody> | undefined = undefined;

  constructor(dispatch: Dispatch, opts: DispatchOptions, handler: DispatchHandler, settings: Settings) {
    this.dispatch = dispatch;
    this.opts = opts;
    this.handler = handler;
    this.settings = settings;
  }

  // --- the caller's controller ---------------------------------------------------------------

  get aborted(): boolean {
    return this.isAborted;
  }

  get paused(): boolean {
    return this.isPaused;
  }

  get reason(): Error | null {
    return this.abortReason;
  }

  get rawHeaders(): NonNullable<DispatchController['rawHeaders']> | null {
    return this.delivering?.controller?.rawHeaders ?? null;
  }

  get rawTrailers(): NonNullable<DispatchController['rawTrailers']> | null {
    return this.delivering?.controller?.rawTrailers ?? null;
  }

  abort(reason: Error): void {
    if (this.isAborted || this.settled) return;
    this.isAborted = true;
    this.abortReason =
      reason instanceof Error ? reason : new DOMException('This operation was aborted', 'AbortError');
    // Queued (or about to be re-queued for a retry): the gate rejects the call with AbortedError.
    // Started and still reading the request body (before dispatch): the read stops and the gate's
    // `fn` rejects with the reason, so the call settles and its slot is freed.
    this.abortController.abort(this.abortReason);
    if (!this.scheduled) {
      this.fail(this.abortReason);
      return;
    }
    // In flight: the attempt reports the abort through its onResponseError.
    this.current?.controller?.abort(this.abortReason);
  }

  pause(): void {
    this.isPaused = true;
    this.delivering?.controller?.pause();
  }

  resume(): void {
    if (!this.isPaused) return;
    this.isPaused = false;
    if (this.delivering !== undefined) this.flush(this.delivering);
  }

  // --- the way of the request ------------------------------------------------------------------

  start(): void {
    try {
      this.handler.onRequestStart?.(this, undefined);
    } catch (error) {
      this.fail(toError(error));
      return;
    }
    // Aborted from within onRequestStart (an already-aborted signal): reported, nothing to send.
    if (this.isAborted || this.settled) return;
    let scheduleOptions: ScheduleOptions;
    try {
      scheduleOptions = this.scheduleOptions();
    } catch (error) {
      this.fail(toError(error));
      return;
    }
    this.scheduled = true;
    this.settings.gate
      .schedule(() => this.attempt(), scheduleOptions)
      .then(
        (head) => this.deliver(resultOf<Attempt>(head)!),
        (error: unknown) =>
          // Aborted while queued: report the caller's own reason, as undici does for its aborts.
          this.fail(
            this.isAborted && isTollgateError(error) && error.code === 'ERR_ABORTED'
              ? this.abortReason!
              : toError(error),
          ),
      );
  }

  private scheduleOptions(): ScheduleOptions {
    const { settings, opts } = this;
    const scheduleOptions = scheduleOptionsOf(
      settings.requestHooks,
      opts,
      (opts as { tollgate?: TollgateRequestOptions }).tollgate,
      'opts.tollgate',
    );
    scheduleOptions.signal = this.abortController.signal;
    scheduleOptions.inspect = ((head: ResponseHead<IncomingHttpHeaders>) =>
      resultOf<Attempt>(head)?.inspect()) as (
      result: never,
    ) => Inspection | undefined | Promise<Inspection | undefined>;
    return scheduleOptions;
  }

  /** The gate's `fn`: dispatch once more; resolves at the response head. */
  private attempt(): Promise<ResponseHead<IncomingHttpHeaders>> {
    const attempt = new Attempt(this);
    this.current = attempt;
    const prepared = this.preparedBody();
    return prepared instanceof Promise ? prepared.then((body) => attempt.send(body)) : attempt.send(prepared);
  }

  private preparedBody(): PreparedBody | Promise<PreparedBody> {
    if (this.prepared !== undefined) return this.prepared;
    const { opts } = this;
    const body: unknown = opts.body;
    const max = this.settings.replayBodyMaxBytes;
    let prepared: PreparedBody | Promise<PreparedBody>;
    if (isReplayable(body)) prepared = { opts, retryable: true };
    else if (max === 0) prepared = { opts, retryable: false };
    else {
      prepared = bufferBody(
        body as Iterable<unknown> | AsyncIterable<unknown>,
        max,
        this.abortController.signal,
      ).then((buffered): PreparedBody => {
        const next: PreparedBody =
          'bytes' in buffered
            ? { opts: { ...opts, body: buffered.bytes }, retryable: true }
            : {
                // undici sends any async iterable; its type lists Node's Readable for that.
                opts: { ...opts, body: buffered.rest as unknown as NonNullable<DispatchOptions['body']> },
                retryable: false,
              };
        this.prepared = next;
        return next;
      });
    }
    this.prepared = prepared;
    return prepared;
  }

  /** The gate kept this attempt's response: hand the head to the caller, then the buffered body. */
  private deliver(attempt: Attempt): void {
    if (this.settled || this.isAborted) {
      attempt.discard();
      this.fail(this.abortReason ?? new Error('Request already settled'));
      return;
    }
    this.delivering = attempt;
    attempt.state = 'delivering';
    try {
      this.handler.onResponseStart?.(this, attempt.statusCode, attempt.headers, attempt.statusMessage);
    } catch (error) {
      this.handlerThrew(attempt, error);
      return;
    }
    this.flush(attempt);
  }

  /** Replay what the attempt buffered while the caller is not paused; then let the connection flow. */
  flush(attempt: Attempt): void {
    const { chunks } = attempt;
    while (!this.isPaused && !this.settled && attempt.next < chunks.length) {
      const chunk = chunks[attempt.next]!;
      // Drop each chunk as it is delivered: the buffer never outlives the replay.
      chunks[attempt.next++] = EMPTY;
      try {
        this.handler.onResponseData?.(this, chunk);
      } catch (error) {
        this.handlerThrew(attempt, error);
        return;
      }
    }
    if (this.isPaused || this.settled) return;
    attempt.chunks = [];
    attempt.next = 0;
    if (attempt.error !== undefined) this.fail(attempt.error);
    else if (attempt.ended) this.end(attempt.trailers);
    else attempt.controller?.resume();
  }

  /** Data of the attempt being delivered; in order behind anything still buffered. */
  data(attempt: Attempt, chunk: Buffer): void {
    if (attempt.next < attempt.chunks.length || this.isPaused) {
      attempt.chunks.push(chunk);
      return;
    }
    try {
      this.handler.onResponseData?.(this, chunk);
    } catch (error) {
      this.handlerThrew(attempt, error);
    }
  }

  end(trailers: IncomingHttpHeaders): void {
    if (this.settled) return;
    this.settled = true;
    try {
      this.handler.onResponseEnd?.(this, trailers);
    } catch {
      // Nothing is left to report a failure of the caller's last callback to.
    }
  }

  fail(error: Error): void {
    if (this.settled) return;
    this.settled = true;
    try {
      this.handler.onResponseError?.(this, error);
    } catch {
      // A handler without an error callback (undici throws for those): nothing else to tell it.
    }
  }

  /** The caller's handler threw: abort the response, as undici does, and report the error. */
  private handlerThrew(attempt: Attempt, error: unknown): void {
    const reason = toError(error);
    attempt.state = 'discarding';
    attempt.chunks = [];
    attempt.controller?.abort(reason);
    this.fail(reason);
  }
}

const EMPTY = Buffer.alloc(0);

/**
 * One dispatch of the request downstream: our handler for undici. Holds the response at its head
 * until the gate has decided, then either delivers it through the request or drops it.
 */
class Attempt implements DispatchHandler {
  controller: DispatchController | undefined = undefined;
  state: 'head' | 'held' | 'delivering' | 'discarding' = 'head';
  statusCode = 0;
  headers: IncomingHttpHeaders = {};
  statusMessage: string | undefined = undefined;
  /** Body chunks received while held (and not yet replayed). */
  chunks: Buffer[] = [];
  next = 0;
  size = 0;
  ended = false;
  trailers: IncomingHttpHeaders = {};
  error: Error | undefined = undefined;
  retryable = true;
  private readonly request: ThrottledRequest;
  private resolveHead: ((head: ResponseHead<IncomingHttpHeaders>) => void) | undefined = undefined;
  private rejectHead: ((error: unknown) => void) | undefined = undefined;
  private collecting = false;
  private wake: (() => void) | undefined = undefined;
  private dropped = 0;

  constructor(request: ThrottledRequest) {
    this.request = request;
  }

  /** Dispatch; resolves with a head of this attempt (all the gate holds of it) at the response head. */
  send(prepared: PreparedBody): Promise<ResponseHead<IncomingHttpHeaders>> {
    const { request } = this;
    if (request.aborted) return Promise.reject(request.reason);
    this.retryable = prepared.retryable;
    return new Promise<ResponseHead<IncomingHttpHeaders>>((resolve, reject) => {
      this.resolveHead = resolve;
      this.rejectHead = reject;
      try {
        request.dispatch(prepared.opts, this);
      } catch (error) {
        reject(error);
      }
    });
  }

  // --- undici's calls --------------------------------------------------------------------------

  onRequestStart(controller: DispatchController, _context: unknown): void {
    this.controller = controller;
    // Aborted between the gate's start and the socket: stop here.
    if (this.request.aborted) controller.abort(this.request.reason!);
  }

  onResponseStart(
    controller: DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
    statusMessage?: string,
  ): void {
    this.controller = controller;
    // Informational (103 Early Hints): the final response follows.
    if (statusCode < 200 || this.state !== 'head') return;
    this.statusCode = statusCode;
    this.headers = headers;
    this.statusMessage = statusMessage;
    this.state = 'held';
    // Hold the body at the socket until the gate has decided (no buffering of a body we may drop).
    controller.pause();
    this.resolveHead?.(headOf(this, statusCode, statusMessage ?? '', headers));
  }

  onResponseData(controller: DispatchController, chunk: Buffer): void {
    switch (this.state) {
      case 'delivering':
        this.request.data(this, chunk);
        return;
      case 'held':
        this.chunks.push(chunk);
        this.size += chunk.length;
        if (this.collecting && this.size > this.request.settings.errorBody!.maxBytes) {
          controller.pause();
          this.stopCollecting();
        }
        return;
      case 'discarding':
        this.dropped += chunk.length;
        if (this.dropped > discardMaxBytes)
          controller.abort(new Error('tollgate: dropped response body too long'));
        return;
      default:
        return;
    }
  }

  onResponseEnd(_controller: DispatchController, trailers: IncomingHttpHeaders): void {
    if (this.state === 'delivering' && this.next >= this.chunks.length && !this.request.paused) {
      this.request.end(trailers);
      return;
    }
    this.ended = true;
    this.trailers = trailers;
    if (this.state === 'held') this.stopCollecting();
  }

  onResponseError(_controller: DispatchController, error: Error): void {
    switch (this.state) {
      case 'head':
        this.state = 'discarding';
        this.rejectHead?.(error);
        return;
      case 'held':
        this.error = error;
        this.stopCollecting();
        return;
      case 'delivering':
        // An error waits behind the chunks the caller has not taken yet (it paused); an abort does
        // not: a caller that gave up never resumes, and its handler must still hear the end.
        if (!this.request.aborted && (this.next < this.chunks.length || this.request.paused))
          this.error = error;
        else this.request.fail(error);
        return;
      default:
        return;
    }
  }

  // --- the gate's view ---------------------------------------------------------------------------

  inspect(): Inspection | Promise<Inspection> {
    const { settings, opts } = this.request;
    const inspection: MutableInspection = {
      status: this.statusCode,
      headers: this.headers,
      method: opts.method,
      retryable: this.retryable,
      discard: () => this.discard(),
    };
    if (settings.actualCost !== undefined || settings.actualPrice !== undefined) {
      const head: UndiciResponseHead = { statusCode: this.statusCode, headers: this.headers, opts };
      setActuals(
        inspection,
        hook(() => settings.actualCost?.(head)),
        hook(() => settings.actualPrice?.(head)),
      );
    }
    const limits = settings.errorBody;
    if (
      limits === undefined ||
      this.statusCode < 400 ||
      opts.method === 'HEAD' ||
      !isJsonContentType(headerValue(this.headers['content-type']))
    ) {
      return inspection;
    }
    return this.collect(limits).then((text) => {
      if (text !== undefined) inspection.body = parseJson(text);
      return inspection;
    });
  }

  /** Let an error body in (bounded in size and time) while held; its chunks stay buffered for the caller. */
  private collect(limits: NormalizedErrorBody): Promise<string | undefined> {
    const declared = Number(headerValue(this.headers['content-length']) ?? Number.NaN);
    if (declared > limits.maxBytes) return Promise.resolve(undefined);
    return new Promise<string | undefined>((resolve) => {
      const timer = setTimeout(() => {
        this.controller?.pause();
        this.stopCollecting();
      }, limits.timeoutMs);
      timer.unref?.();
      this.wake = () => {
        clearTimeout(timer);
        resolve(
          this.ended && this.error === undefined && this.size <= limits.maxBytes
            ? Buffer.concat(this.chunks).toString('utf8')
            : undefined,
        );
      };
      if (this.ended || this.error !== undefined) {
        this.stopCollecting();
        return;
      }
      this.collecting = true;
      this.controller?.resume();
    });
  }

  private stopCollecting(): void {
    this.collecting = false;
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  /** The gate drops this response (it retries, or gives up): drain a short body, abort a long one. */
  discard(): void {
    if (this.state === 'discarding') return;
    this.state = 'discarding';
    this.chunks = [];
    this.stopCollecting();
    if (this.ended || this.error !== undefined) return;
    const declared = Number(headerValue(this.headers['content-length']) ?? Number.NaN);
    if (declared > discardMaxBytes) this.controller?.abort(new Error('tollgate: dropped response'));
    else this.controller?.resume();
  }
}

function hook<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch {
    return undefined;
  }
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** Bodies undici can send any number of times. */
function isReplayable(body: unknown): boolean {
  if (body === null || body === undefined || typeof body === 'string') return true;
  if (typeof body !== 'object') return true;
  if (ArrayBuffer.isView(body) || body instanceof ArrayBuffer || Array.isArray(body)) return true;
  const b = body as Record<string, unknown>;
  // Blob-like (re-readable through stream()) and FormData-like (re-serialized per send).
  if (typeof b['stream'] === 'function' && typeof b['arrayBuffer'] === 'function') return true;
  if (typeof b['getAll'] === 'function' && typeof b['append'] === 'function') return true;
  return !(Symbol.asyncIterator in b) && !(Symbol.iterator in b);
}

type Buffered = { readonly bytes: Buffer } | { readonly rest: AsyncIterable<Buffer> };

/**
 * Read a once-only body up to `maxBytes`: all of it, or what was read followed by the rest, streamed.
 * An abort of `signal` rejects at once with its reason, without waiting for the next chunk (an
 * upload that never ends would otherwise hold the call), and stops the body.
 */
async function bufferBody(
  body: Iterable<unknown> | AsyncIterable<unknown>,
  maxBytes: number,
  signal: AbortSignal,
): Promise<Buffered> {
  const iterator: Iterator<unknown> | AsyncIterator<unknown> =
    Symbol.asyncIterator in body
      ? (body as AsyncIterable<unknown>)[Symbol.asyncIterator]()
      : (body as Iterable<unknown>)[Symbol.iterator]();
  const chunks: Buffer[] = [];
  let size = 0;
  for (;;) {
    let next: IteratorResult<unknown>;
    try {
      next = await untilAborted(iterator.next(), signal);
    } catch (error) {
      if (signal.aborted) stopBody(body, iterator);
      throw error;
    }
    if (next.done) return { bytes: Buffer.concat(chunks) };
    const chunk = toBuffer(next.value);
    chunks.push(chunk);
    size += chunk.length;
    if (size > maxBytes) {
      const rest = async function* (): AsyncGenerator<Buffer> {
        yield* chunks;
        for (;;) {
          const more = await iterator.next();
          if (more.done) return;
          yield toBuffer(more.value);
        }
      };
      return { rest: rest() };
    }
  }
}

/** `step`, or a rejection with the signal's reason as soon as it aborts (a late outcome of `step` is dropped). */
function untilAborted<T>(step: T | Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    Promise.resolve(step).then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * Stop an aborted body, as undici does when a request is aborted: a Node stream is destroyed (its
 * pending read settles, the producer learns nobody reads); any iterator is asked to finish (an
 * async generator does so after the step it is in).
 */
function stopBody(body: unknown, iterator: Iterator<unknown> | AsyncIterator<unknown>): void {
  try {
    const destroy = (body as { destroy?: unknown }).destroy;
    // No error passed: an 'error' event on a stream nobody listens to any more would throw.
    if (typeof destroy === 'function') destroy.call(body);
    Promise.resolve(iterator.return?.()).catch(() => {});
  } catch {
    // A body that fails to stop: the call settles all the same, and nothing reads it again.
  }
}

function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (typeof chunk === 'string') return Buffer.from(chunk);
  if (ArrayBuffer.isView(chunk)) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (chunk instanceof ArrayBuffer) return Buffer.from(chunk);
  return Buffer.from(String(chunk));
}

let lastOrigin: string | URL | undefined;
let lastKey: string | undefined;

/** Scheme + host + port of a dispatch origin (a string or URL); the last one is remembered, as requests come in runs. */
function originOf(origin: string | URL | undefined): string | undefined {
  if (origin === undefined || origin === null) return undefined;
  if (origin === lastOrigin) return lastKey;
  let key: string | undefined;
  try {
    key = (typeof origin === 'string' ? new URL(origin) : origin).origin;
    if (key === 'null') key = undefined;
  } catch {
    key = undefined;
  }
  lastOrigin = origin;
  lastKey = key;
  return key;
}
