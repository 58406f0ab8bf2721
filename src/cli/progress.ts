/**
 * Live progress: a bar (cli-progress) when stdout is a terminal, a plain status line every few
 * seconds otherwise (logs, CI), or nothing. Messages printed during a run (a malformed line, a
 * warning) go above the bar in bar mode and to stderr otherwise.
 */
import { MultiBar, type SingleBar } from 'cli-progress';

export type ProgressMode = 'auto' | 'bar' | 'plain' | 'none';

export interface ProgressState {
  /** Requests finished in this run (a result written). */
  readonly done: number;
  /** Requests this run expects to finish, when known. */
  readonly total: number | undefined;
  /** Requests per second over the run so far. */
  readonly ratePerSec: number;
  /** `$0.42` or `$0.42 / $5.00`; empty without prices. */
  readonly spend: string;
  readonly pauses: number;
  readonly throttled: number;
  readonly failed: number;
}

export interface ProgressView {
  update(state: ProgressState): void;
  /** A message line (no trailing newline needed). */
  log(message: string): void;
  stop(state: ProgressState): void;
}

function formatSeconds(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  if (seconds < 60) return `${Math.ceil(seconds)}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m${String(Math.ceil(seconds % 60)).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

function eta(state: ProgressState): number {
  if (state.total === undefined || state.ratePerSec <= 0) return Number.NaN;
  return Math.max(0, state.total - state.done) / state.ratePerSec;
}

/** One plain status line. */
export function statusLine(label: string, state: ProgressState): string {
  const total = state.total === undefined ? '' : `/${state.total}`;
  const pct =
    state.total === undefined || state.total === 0
      ? ''
      : ` (${Math.floor((100 * state.done) / state.total)}%)`;
  const parts = [
    `${label} ${state.done}${total}${pct}`,
    `${state.ratePerSec.toFixed(1)}/s`,
    `eta ${formatSeconds(eta(state))}`,
  ];
  if (state.spend !== '') parts.push(`spend ${state.spend}`);
  parts.push(`pauses ${state.pauses}`, `429s ${state.throttled}`);
  if (state.failed > 0) parts.push(`failed ${state.failed}`);
  return parts.join(' | ');
}

class BarView implements ProgressView {
  private readonly multi: MultiBar;
  private readonly bar: SingleBar;

  constructor(label: string, stream: NodeJS.WriteStream) {
    this.multi = new MultiBar({
      stream,
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      fps: 8,
      barsize: 24,
      format: (options, params, payload: { line: string }) => {
        const size = options.barsize ?? 24;
        const filled = Math.round(params.progress * size);
        const bar = '█'.repeat(Math.max(0, filled)) + '░'.repeat(Math.max(0, size - filled));
        return `${label} ${bar} ${payload.line}`;
      },
    });
    this.bar = this.multi.create(1, 0, { line: '' });
  }

  update(state: ProgressState): void {
    const total = state.total ?? Math.max(state.done, 1);
    this.bar.setTotal(Math.max(total, 1));
    this.bar.update(state.done, { line: statusLine('', state).trimStart() });
  }

  log(message: string): void {
    this.multi.log(`${message}\n`);
  }

  stop(state: ProgressState): void {
    this.update(state);
    this.multi.stop();
  }
}

class PlainView implements ProgressView {
  private last: ProgressState | undefined;
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(
    private readonly label: string,
    private readonly out: NodeJS.WritableStream,
    intervalMs: number,
  ) {
    this.timer = setInterval(() => {
      if (this.last !== undefined) this.out.write(`${statusLine(this.label, this.last)}\n`);
    }, intervalMs);
    this.timer.unref();
  }

  update(state: ProgressState): void {
    this.last = state;
  }

  log(message: string): void {
    process.stderr.write(`${message}\n`);
  }

  stop(state: ProgressState): void {
    clearInterval(this.timer);
    this.out.write(`${statusLine(this.label, state)}\n`);
  }
}

class NoView implements ProgressView {
  update(): void {}
  log(message: string): void {
    process.stderr.write(`${message}\n`);
  }
  stop(): void {}
}

/** The view for `mode`: `auto` is a bar on a terminal and plain lines otherwise. */
export function createProgress(mode: ProgressMode, label: string, plainIntervalMs = 2_000): ProgressView {
  const stdout = process.stdout;
  const resolved = mode === 'auto' ? (stdout.isTTY ? 'bar' : 'plain') : mode;
  if (resolved === 'bar') return new BarView(label, stdout);
  if (resolved === 'plain') return new PlainView(label, stdout, plainIntervalMs);
  return new NoView();
}
