/**
 * `tollgate run`: a JSONL file of HTTP requests through one gate, one JSONL result per request.
 *
 * The producer reads the input lazily and feeds a p-queue whose size bounds the requests held in
 * memory (`window`): it reads the next line only when fewer than `window` requests wait, so a file of
 * any size costs one read chunk plus the window. The gate does all the throttling (limits, provider
 * headers, budgets); p-queue only keeps the reader from running ahead.
 *
 * Results are appended and flushed as each request finishes. Requests that were not sent (Ctrl-C,
 * a budget stop) get no result, so a re-run with the same output skips what is done and sends the
 * rest.
 */
import { createHash } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import PQueue from 'p-queue';
import {
  AbortedError,
  BudgetExceededError,
  type BudgetSpend,
  formatMicros,
  isTollgateError,
  RateLimitedError,
} from '../index.js';
import { CliError } from './cli-error.js';
import { ExitCode, type ExitCodeValue } from './exit-codes.js';
import { type GateConfig, type SharedStoreReport, setUpGate } from './gate-setup.js';
import { type Attempt, bodyText, type Fetched, type Pricing, send } from './http-call.js';
import { IdealSchedule } from './ideal-schedule.js';
import { type Line, maxLineBytes, readFileLines, readLines } from './jsonl.js';
import { createProgress, type ProgressMode, type ProgressState } from './progress.js';
import { redact, urlSecrets } from './redact.js';
import { MalformedLineError, parseRequestLine, type RequestSpec } from './request-line.js';
import { type Completed, ResultWriter, readCompleted } from './results-file.js';

export interface RunConfig extends GateConfig {
  /** A JSONL file, or `-` for stdin. A pipe (`<(cmd)`, a FIFO) is read once like stdin: no total, no ETA. */
  readonly input: string;
  readonly out: string;
  /** A malformed line stops the run (before anything is sent, for a file) instead of being skipped. */
  readonly strict: boolean;
  /** On resume, send again the ids whose last result failed (a new line is appended; the last line wins). */
  readonly retryFailed: boolean;
  /** Per attempt. */
  readonly timeoutMs: number;
  /** Default money estimate per request (a line's `price` wins). */
  readonly priceMicros: number | undefined;
  /** The budgets' currency (lowercase ISO 4217), when there are budgets: a line's price must be in it. */
  readonly currency?: string | undefined;
  readonly pricing: Pricing;
  readonly baseUrl: URL | undefined;
  /** Added to every request (a line's own headers win). */
  readonly headers: Readonly<Record<string, string>>;
  /** Most requests read ahead of their results (the p-queue bound). */
  readonly window: number;
  readonly progress: ProgressMode;
  /** Where bodies too large or not text are written. */
  readonly bodiesDir: string;
  readonly maxInlineBodyBytes: number;
  /** Response headers kept in results besides the usual ones (lower case). */
  readonly keepHeaders: readonly string[];
}

/** One HTTP attempt, for charts. Times on the gate's clock (epoch-scale ms). */
export interface AttemptRecord {
  readonly id: string;
  readonly startedAt: number;
  readonly endedAt: number;
  /** Undefined when no response arrived (network error, timeout, abort). */
  readonly status: number | undefined;
}

export interface RunHooks {
  /** Label in front of the progress line. @default 'tollgate' */
  readonly label?: string;
  onAttempt?(attempt: AttemptRecord): void;
  onPause?(pause: { at: number; untilMs: number; key: string | undefined; reason: string }): void;
  onResult?(result: { id: string; at: number; ok: boolean; priceMicros: number | undefined }): void;
}

export interface RunSignals {
  /** Stop taking new requests; queued ones are dropped (no result), in-flight ones finish. */
  readonly stop?: AbortSignal;
  /** Abort in-flight requests too (no result for them). */
  readonly kill?: AbortSignal;
}

export interface RunReport {
  readonly input: string;
  readonly out: string;
  /** Requests to do in this run, from the first pass (undefined for stdin, a pipe, or a stop during the pass). */
  readonly toDo: number | undefined;
  /** Valid request lines read in this run (including those already done). */
  readonly read: number;
  /** Already in the output: not sent again. */
  readonly skipped: number;
  /** Of `skipped`, ids whose last result is a failure (without --retry-failed): they still fail. */
  readonly earlierFailures: number;
  readonly malformed: number;
  /** The first malformed lines' messages. */
  readonly malformedMessages: readonly string[];
  /** Requests whose first attempt started. */
  readonly sent: number;
  /** Results written in this run. */
  readonly finished: number;
  readonly ok: number;
  readonly failed: number;
  /** Requests that needed more than one attempt. */
  readonly retried: number;
  readonly attempts: number;
  readonly throttled: number;
  readonly serverErrors: number;
  readonly pauses: number;
  /** Time during which some partition was paused (ms, overlapping pauses counted once). */
  readonly pausedMs: number;
  /**
   * Requests to do that were never sent (stopped by Ctrl-C, a budget, or --strict). Without a total
   * (stdin, a pipe), only those read count: the rest is unknown.
   */
  readonly notSent: number;
  /** Requests sent whose attempt a second Ctrl-C cut off: no result, so a re-run sends them again. */
  readonly aborted: number;
  readonly budgetStop: BudgetExceededError | undefined;
  readonly interrupted: boolean;
  readonly killed: boolean;
  /** --strict stopped at this malformed line (stdin or a pipe only; files are checked before sending). */
  readonly strictStop: string | undefined;
  readonly spend: readonly BudgetSpend[];
  readonly ledger: string | undefined;
  /** --redis only: requests sent through the local fallback while Redis was not answering. */
  readonly sharedStore: SharedStoreReport | undefined;
  readonly wallMs: number;
  /** From the first request's start to the last result (ms); 0 without a result. */
  readonly activeMs: number;
  /** Least first-to-last-start span the configured limits allow for the requests sent; undefined without a rate limit. */
  readonly minimumMs: number | undefined;
  readonly exitCode: ExitCodeValue;
}

const usualHeaders =
  /^(content-type|date|etag|last-modified|location|retry-after|retry-after-ms|x-request-id|request-id)$/;
const limitHeaders = /ratelimit|rate-limit|quota|cost|call-limit|throttl/;
const textType = /json|text\/|xml|javascript|x-www-form-urlencoded|csv|yaml/i;
const maxMalformedMessages = 20;

function keptHeaders(headers: Headers, extra: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    if (usualHeaders.test(name) || limitHeaders.test(name) || extra.includes(name)) out[name] = value;
  });
  return out;
}

/** A file name for an id: readable when short and plain, hashed otherwise (ids are unique, so are names). */
function fileNameFor(idKey: string): string {
  if (/^[\w.-]{1,100}$/.test(idKey) && !idKey.startsWith('.')) return idKey;
  return `id-${createHash('sha256').update(idKey).digest('hex').slice(0, 32)}`;
}

function errorCode(error: unknown): string {
  if (isTollgateError(error)) return error.code;
  if (error instanceof Error) {
    const own = (error as { code?: unknown }).code;
    if (typeof own === 'string') return own; // a system error (EISDIR, ENOSPC)
    if (error.name === 'TimeoutError') return 'ETIMEDOUT';
    const cause = (error as { cause?: { code?: unknown } }).cause;
    if (cause !== undefined && typeof cause.code === 'string') return cause.code;
    if (error.name === 'TypeError') return 'ERR_NETWORK';
  }
  return 'ERR_UNKNOWN';
}

/** A line over the cap, as a malformed line (its text was never held). */
function overlongLine(line: Line & { text: undefined }): MalformedLineError {
  return new MalformedLineError(
    line.number,
    `longer than ${maxLineBytes / (1024 * 1024)} MiB (${line.bytes} bytes); skipped to its end`,
  );
}

function errorMessage(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  // A cause whose words the message already holds is not said twice.
  return cause instanceof Error && !error.message.includes(cause.message)
    ? `${error.message}: ${cause.message}`
    : error.message;
}

/**
 * The first pass over a file: the requests to do, judged as the second pass will judge them (valid,
 * first of their id, no result yet) so the total is what the run can finish; with --strict, every
 * malformed line. The total is undefined when a stop came first.
 */
async function prepass(
  config: RunConfig,
  completed: ReadonlySet<string>,
  signals: RunSignals,
): Promise<{ total: number | undefined; problems: string[]; problemCount: number }> {
  let total = 0;
  const problems: string[] = [];
  let problemCount = 0;
  const seen = new Map<string, number>();
  for await (const line of readFileLines(config.input)) {
    // Checked per line: this pass over a large file takes seconds, and Ctrl-C must not wait for it.
    if (signals.stop?.aborted || signals.kill?.aborted)
      return { total: undefined, problems: [], problemCount: 0 };
    try {
      if (line.text === undefined) throw overlongLine(line);
      const request = parseRequestLine(line.text, line.number, config.baseUrl, config.currency);
      const first = seen.get(request.idKey);
      if (first !== undefined) {
        throw new MalformedLineError(
          line.number,
          `duplicate id ${JSON.stringify(request.idKey)} (first at line ${first})`,
        );
      }
      seen.set(request.idKey, line.number);
      if (!completed.has(request.idKey)) total++;
    } catch (error) {
      if (!(error instanceof MalformedLineError)) throw error;
      if (!config.strict) continue;
      problemCount++;
      if (problems.length < maxMalformedMessages) problems.push(error.message);
    }
  }
  return { total, problems, problemCount };
}

export async function runBatch(
  config: RunConfig,
  signals: RunSignals = {},
  hooks: RunHooks = {},
): Promise<RunReport> {
  const began = performance.now();
  let previous: Completed;
  try {
    previous = await readCompleted(
      config.out,
      () => signals.stop?.aborted === true || signals.kill?.aborted === true,
    );
  } catch (error) {
    throw new CliError(`Cannot read --out ${config.out}: ${(error as Error).message}`);
  }
  // Results are appended: a file of something else (notes, a requests file) would get them mixed
  // in, and its ids taken as done. Its text is not quoted (it may hold secrets).
  if (previous.resultLines === 0 && previous.firstForeignLine !== undefined) {
    throw new CliError(
      `--out ${config.out} exists and does not hold tollgate results (line ${previous.firstForeignLine} is not a result line); ` +
        'nothing was sent. Pick another --out, or move that file away (an empty file, or the results of an earlier run, is fine).',
    );
  }
  const completed = config.retryFailed ? previous.succeeded : previous.ids;

  let total: number | undefined;
  // A pipe can be read only once (a second read finds it empty, or waits for a new writer).
  if (config.input !== '-' && statSync(config.input).isFile()) {
    const pass = await prepass(config, completed, signals);
    if (pass.problemCount > 0) {
      const more =
        pass.problemCount > pass.problems.length
          ? `\n  … and ${pass.problemCount - pass.problems.length} more`
          : '';
      throw new CliError(
        `--strict: ${pass.problemCount} malformed line(s) in ${config.input}; nothing was sent:\n  ${pass.problems.join('\n  ')}${more}`,
      );
    }
    total = pass.total;
  }

  // Redis warnings go above the progress bar once there is one (the gate is built before it).
  const toStderr = (line: string) => {
    process.stderr.write(`${line}\n`);
  };
  let log = toStderr;
  const run = await setUpGate(config, {
    log: (line) => log(redact(line, Object.values(config.headers))),
    watchSpend: config.progress !== 'none',
  });
  const { gate } = run;
  let writer: ResultWriter;
  try {
    writer = new ResultWriter(config.out);
  } catch (error) {
    await run.close();
    throw new CliError(`Cannot open --out ${config.out}: ${(error as Error).message}`);
  }
  const progress = createProgress(config.progress, hooks.label ?? 'tollgate');
  log = (line) => {
    progress.log(line);
  };
  const ideal = new IdealSchedule(config.limits, config.perHost);
  const baseHeaders = new Headers(config.headers);
  const queue = new PQueue({ concurrency: config.window });

  // Our own stop: Ctrl-C from the caller, a budget stop, or --strict on stdin.
  const halt = new AbortController();
  const kill = new AbortController();
  // Every queued call listens to `halt` and every attempt to `kill`: thousands of listeners is expected.
  setMaxListeners(0, halt.signal, kill.signal);
  const onStop = () => halt.abort(new Error('stopped'));
  const onKill = () => {
    halt.abort(new Error('stopped'));
    kill.abort(new Error('aborted'));
  };
  signals.stop?.addEventListener('abort', onStop, { once: true });
  signals.kill?.addEventListener('abort', onKill, { once: true });
  if (signals.stop?.aborted) onStop();
  if (signals.kill?.aborted) onKill();

  let read = 0;
  let skipped = 0;
  let earlierFailures = 0;
  let malformed = 0;
  const malformedMessages: string[] = [];
  let sent = 0;
  let finished = 0;
  let ok = 0;
  let failed = 0;
  let retried = 0;
  let attemptsTotal = 0;
  let throttled = 0;
  let serverErrors = 0;
  let pauses = 0;
  let pausedMs = 0;
  let pausedUntil = 0;
  let notSent = 0;
  let aborted = 0;
  let budgetStop: BudgetExceededError | undefined;
  let strictStop: string | undefined;
  let readerStopped = false;
  let fatal: unknown;
  // A body file that could not be written: the run stops (exit 1) once the requests in flight end.
  let diskFailure: { error: unknown; results: number } | undefined;
  let firstStart: number | undefined;
  let lastDone: number | undefined;

  const disposePause = gate.onPause((event) => {
    pauses++;
    const now = gate.now();
    // Overlapping pauses are counted once: only the part beyond what is already paused adds.
    pausedMs += Math.max(0, event.untilMs - Math.max(now, pausedUntil));
    pausedUntil = Math.max(pausedUntil, event.untilMs);
    hooks.onPause?.({ at: now, untilMs: event.untilMs, key: event.key, reason: event.reason });
  });

  const currency = run.currency ?? 'usd';
  let spentThisRun = 0;
  const state = (): ProgressState => {
    const elapsedSec = firstStart === undefined ? 0 : (gate.now() - firstStart) / 1000;
    let spend = '';
    if (run.currency !== undefined) {
      const first = run.spend()[0];
      if (first !== undefined) {
        const held =
          first.reservedMicros > 0 ? ` (+${formatMicros(first.reservedMicros, currency)} reserved)` : '';
        spend = `${formatMicros(first.spentMicros, currency)}${held} of ${formatMicros(first.limitMicros, currency)}`;
      }
    } else if (spentThisRun > 0) spend = formatMicros(spentThisRun, currency);
    return {
      done: finished,
      total,
      ratePerSec: elapsedSec > 0.5 ? finished / elapsedSec : 0,
      spend,
      pauses,
      throttled,
      failed,
    };
  };
  const refresh = () => progress.update(state());

  const noteMalformed = (message: string) => {
    malformed++;
    if (malformedMessages.length < maxMalformedMessages) malformedMessages.push(message);
    progress.log(`skipped ${message}`);
  };

  const bodyFields = (fetched: Fetched, request: RequestSpec): Record<string, unknown> => {
    if (fetched.bytes.length === 0) return {};
    const type = fetched.headers.get('content-type') ?? '';
    const textual = type === '' || textType.test(type);
    if (textual && fetched.bytes.length <= config.maxInlineBodyBytes) {
      const json = fetched.json();
      return { body: json !== undefined ? json : bodyText(fetched) };
    }
    mkdirSync(config.bodiesDir, { recursive: true });
    const path = join(config.bodiesDir, fileNameFor(request.idKey));
    writeFileSync(path, fetched.bytes);
    return { bodyFile: relative(dirname(config.out), path), bodyBytes: fetched.bytes.length };
  };

  /**
   * The body's fields of a result. Writing a body file can fail (a full disk, a file where the
   * directory should be): that is a local failure, not the request's. The provider answered (and
   * charged), so the result stays as it was, with a `bodyError` instead of the body, and a re-run
   * does not send it again, even with --retry-failed. No new request starts; the run exits 1.
   */
  const savedBody = (fetched: Fetched, request: RequestSpec): Record<string, unknown> => {
    try {
      return bodyFields(fetched, request);
    } catch (error) {
      if (diskFailure === undefined) {
        diskFailure = { error, results: 0 };
        readerStopped = true;
        halt.abort(error);
        progress.log(`cannot write a body file: ${errorMessage(error)}. No new requests are taken.`);
      }
      diskFailure.results++;
      return { bodyError: { code: errorCode(error), message: errorMessage(error) } };
    }
  };

  /** Values an error message may quote that must not reach the results file. */
  const secretsOf = (request: RequestSpec): string[] => [
    ...Object.values(request.headers),
    ...Object.values(config.headers),
    ...urlSecrets(request.url),
  ];

  // Requests of this run inside `send` (each holds its price reserved until it settles), and the
  // requests waiting for budget (see sendWithinBudget).
  let inSend = 0;
  let budgetWaiters: (() => void)[] = [];
  // The refusal the spend itself caused: final for every request, waiting ones included.
  let budgetSpent: BudgetExceededError | undefined;
  let toldOthersHold = false;
  // The Redis ledger (`--ledger redis`) not answering a reservation: the requests wait for it.
  let ledgerDown = false;
  const wakeBudgetWaiters = () => {
    const waiting = budgetWaiters;
    budgetWaiters = [];
    for (const wake of waiting) wake();
  };
  // A stop wakes them too: they are not sent.
  halt.signal.addEventListener('abort', wakeBudgetWaiters, { once: true });
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        halt.signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      halt.signal.addEventListener('abort', done, { once: true });
    });

  /**
   * `send`, except that a budget refusal caused by reservations, not by spend (spent + this price
   * fits the limit), waits and asks again: for one of this run's requests to end while some are
   * inside `send` (they settle, often below their estimates), else for a while (another process
   * holds the reservations: asked again after 250 ms, doubling to 4 s; they settle or expire). A
   * refusal the spend causes is final, for the waiting requests too.
   */
  const sendWithinBudget = async (...args: Parameters<typeof send>): ReturnType<typeof send> => {
    for (let pollMs = 250; ; ) {
      if (budgetSpent !== undefined) throw budgetSpent;
      inSend++;
      let refused: BudgetExceededError | undefined;
      let unanswered: unknown;
      try {
        const sent = await send(...args);
        if (ledgerDown) {
          ledgerDown = false;
          progress.log('the budget ledger in Redis answers again: requests go on.');
        }
        return sent;
      } catch (error) {
        if (run.ledgerUnavailable(error)) unanswered = error;
        else if (!(error instanceof BudgetExceededError)) throw error;
        else refused = error;
      } finally {
        inSend--;
        // Only a request that held a reservation frees some; waking the others on a refusal would
        // have refused requests wake each other forever.
        if (refused === undefined && unanswered === undefined) wakeBudgetWaiters();
      }
      if (unanswered !== undefined) {
        // Not sent (nothing goes out without its reservation): asked again after 250 ms, doubling to
        // 4 s, until the ledger answers or the run is stopped (then it has no result: a re-run sends it).
        if (!ledgerDown) {
          ledgerDown = true;
          progress.log(
            `the budget ledger in Redis is not answering (${errorMessage(unanswered)}): requests wait for it; nothing is sent without its reservation.`,
          );
        }
        await pause(pollMs);
        pollMs = Math.min(pollMs * 2, 4_000);
        if (halt.signal.aborted) throw new AbortedError(halt.signal.reason);
        continue;
      }
      // Here the request was refused by the budget (every other outcome returned or threw above).
      const refusal = refused!;
      if (halt.signal.aborted) throw refusal;
      if (refusal.spentMicros + refusal.estimateMicros > refusal.limitMicros) {
        budgetSpent = refusal;
        wakeBudgetWaiters();
        throw refusal;
      }
      if (inSend > 0) await new Promise<void>((resolve) => budgetWaiters.push(resolve));
      else {
        if (!toldOthersHold) {
          toldOthersHold = true;
          progress.log(
            `budget held by reservations of other processes: ${refusal.message}. Waiting for them to settle.`,
          );
        }
        await pause(pollMs);
        pollMs = Math.min(pollMs * 2, 4_000);
      }
      if (halt.signal.aborted) throw new AbortedError(halt.signal.reason);
    }
  };

  const processOne = async (request: RequestSpec): Promise<void> => {
    const key = request.key ?? request.url.origin;
    const estimate = request.priceMicros ?? config.priceMicros;
    const t0 = gate.now();
    let attempts = 0;
    let busyMs = 0;
    // When the last attempt's headers came: what follows is the body's download, not a wait.
    let lastEndedAt: number | undefined;
    let lastStatus: number | undefined;
    const onAttempt = (attempt: Attempt) => {
      attempts++;
      attemptsTotal++;
      if (attempts === 1) {
        sent++;
        firstStart ??= attempt.startedAt;
        ideal.add(request.cost, key);
      }
      busyMs += attempt.endedAt - attempt.startedAt;
      lastEndedAt = attempt.endedAt;
      lastStatus = attempt.status;
      if (attempt.status === 429) throttled++;
      else if (attempt.status !== undefined && attempt.status >= 500) serverErrors++;
      hooks.onAttempt?.({ id: request.idKey, ...attempt });
    };
    let result: Record<string, unknown>;
    let priceMicros: number | undefined;
    let success = false;
    let fetched: Fetched | undefined;
    try {
      const sent = await sendWithinBudget(request, estimate, {
        gate,
        pricing: config.pricing,
        baseHeaders,
        stop: halt.signal,
        kill: kill.signal,
        timeoutMs: config.timeoutMs,
        now: () => gate.now(),
        onAttempt,
      });
      fetched = sent.fetched;
      const at = gate.now();
      success = fetched.status < 400;
      priceMicros = sent.actualPriceMicros ?? estimate;
      result = {
        id: request.id,
        line: request.line,
        status: fetched.status,
        ok: success,
        attempts,
        waitedMs: Math.max(0, Math.round((lastEndedAt ?? at) - t0 - busyMs)),
        durationMs: Math.round(at - t0),
        headers: keptHeaders(fetched.headers, config.keepHeaders),
      };
    } catch (error) {
      if (error instanceof BudgetExceededError) {
        notSent++;
        if (budgetStop === undefined) {
          budgetStop = error;
          // Stop reading; calls already admitted hold their reservations and still run.
          readerStopped = true;
          progress.log(
            `budget reached: ${error.message}. Requests already admitted still run; no new ones are read.`,
          );
        }
        return;
      }
      if (error instanceof AbortedError || (kill.signal.aborted && errorCode(error) !== 'ETIMEDOUT')) {
        // Not sent, or cut off by a second Ctrl-C: no result, so a re-run sends it.
        if (attempts > 0) aborted++;
        else notSent++;
        return;
      }
      const at = gate.now();
      // A 429 whose retry could not be scheduled in time is refused with no status of its own.
      const status = (error instanceof RateLimitedError ? error.status : undefined) ?? lastStatus;
      result = {
        id: request.id,
        line: request.line,
        ...(status === undefined ? {} : { status }),
        ok: false,
        attempts,
        waitedMs: Math.max(0, Math.round((lastEndedAt ?? at) - t0 - busyMs)),
        durationMs: Math.round(at - t0),
        // Last line of defence: whatever fetch or the network quoted (a header value, a URL's
        // userinfo or query) is scrubbed before it is written.
        error: { code: errorCode(error), message: redact(errorMessage(error), secretsOf(request)) },
      };
      // A network error may have reached the provider: the gate charged the estimate.
      priceMicros = attempts > 0 ? estimate : undefined;
    }
    // Outside the request's try: a local write failure does not turn a response into a failure.
    if (fetched !== undefined) Object.assign(result, savedBody(fetched, request));
    if (attempts > 1) retried++;
    if (request.cost !== undefined || priceMicros !== undefined) {
      const cost: Record<string, unknown> = {};
      if (request.cost !== undefined) cost['units'] = request.cost;
      if (priceMicros !== undefined) {
        cost['priceMicros'] = priceMicros;
        cost['price'] = formatMicros(priceMicros, currency);
        spentThisRun += priceMicros;
      }
      result['cost'] = cost;
    }
    writer.write(result);
    finished++;
    if (success) ok++;
    else failed++;
    lastDone = gate.now();
    hooks.onResult?.({ id: request.idKey, at: lastDone, ok: success, priceMicros });
    refresh();
  };

  const seen = new Map<string, number>();
  let spend: readonly BudgetSpend[] = [];
  let sharedStore: SharedStoreReport | undefined;
  try {
    const source = config.input === '-' ? readLines(process.stdin) : readFileLines(config.input);
    for await (const line of source) {
      if (halt.signal.aborted || readerStopped) break;
      let request: RequestSpec;
      try {
        if (line.text === undefined) throw overlongLine(line);
        request = parseRequestLine(line.text, line.number, config.baseUrl, config.currency);
        const first = seen.get(request.idKey);
        if (first !== undefined) {
          throw new MalformedLineError(
            line.number,
            `duplicate id ${JSON.stringify(request.idKey)} (first at line ${first})`,
          );
        }
      } catch (error) {
        if (!(error instanceof MalformedLineError)) throw error;
        noteMalformed(error.message);
        if (config.strict) {
          strictStop = error.message;
          halt.abort(error);
          break;
        }
        continue;
      }
      seen.set(request.idKey, line.number);
      read++;
      if (completed.has(request.idKey)) {
        skipped++;
        // Not sent again, but still a failure in the results: the run is not a success.
        if (!previous.succeeded.has(request.idKey)) earlierFailures++;
        continue;
      }
      // The bound: read on only when every request read so far has a slot (at most `window` at once).
      await queue.onSizeLessThan(1);
      if (halt.signal.aborted || readerStopped) {
        notSent++;
        break;
      }
      queue
        .add(() => processOne(request))
        .catch((error: unknown) => {
          // Only writing the result can fail here (a full disk): stop everything, report it.
          fatal ??= error;
          halt.abort(error);
          kill.abort(error);
        });
    }
    await queue.onIdle();
  } finally {
    queue.clear();
    disposePause();
    signals.stop?.removeEventListener('abort', onStop);
    signals.kill?.removeEventListener('abort', onKill);
    progress.stop(state());
    log = toStderr;
    writer.close();
    // Read now: the Redis ledger's last reading may be half a second old (a failed read keeps it).
    spend = await run.readSpend().catch(() => run.spend());
    sharedStore = run.sharedStore();
    await run.close();
  }
  if (fatal !== undefined) throw fatal;
  if (diskFailure !== undefined) {
    throw new CliError(
      `Cannot write response bodies to --bodies-dir ${config.bodiesDir}: ${errorMessage(diskFailure.error)}. ` +
        `${diskFailure.results} result(s) were written without their body ("bodyError"; not sent again on a re-run), ` +
        'and the run stopped taking new requests. Fix the problem, then run the same command to resume the rest.',
      ExitCode.internal,
    );
  }

  const interrupted = (signals.stop?.aborted ?? false) || (signals.kill?.aborted ?? false);
  let exitCode: ExitCodeValue = ExitCode.ok;
  if (failed > 0 || malformed > 0 || earlierFailures > 0) exitCode = ExitCode.partial;
  if (strictStop !== undefined) exitCode = ExitCode.usage;
  if (budgetStop !== undefined) exitCode = ExitCode.budget;
  if (interrupted) exitCode = ExitCode.interrupted;
  return {
    input: config.input,
    out: config.out,
    toDo: total,
    read,
    skipped,
    earlierFailures,
    malformed,
    malformedMessages,
    sent,
    finished,
    ok,
    failed,
    retried,
    attempts: attemptsTotal,
    throttled,
    serverErrors,
    pauses,
    // Time paused while the run lasted: a pause announced past its end did not hold it.
    pausedMs: Math.max(0, pausedMs - Math.max(0, pausedUntil - gate.now())),
    // A count of what was dropped would miss the lines never read after a stop.
    notSent: total === undefined ? notSent : Math.max(0, total - finished - aborted),
    aborted,
    budgetStop,
    interrupted,
    killed: signals.kill?.aborted ?? false,
    strictStop,
    spend,
    ledger: run.ledgerLabel,
    sharedStore,
    wallMs: performance.now() - began,
    activeMs: firstStart === undefined || lastDone === undefined ? 0 : lastDone - firstStart,
    minimumMs: ideal.bounded ? ideal.minimumMs : undefined,
    exitCode,
  };
}
