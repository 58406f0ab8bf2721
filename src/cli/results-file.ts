/**
 * The output JSONL: one result per request, appended as each completes, so a crash or Ctrl-C loses
 * nothing that completed; and the set of ids already completed, so a re-run resumes.
 */
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { dirname } from 'node:path';
import { readFileLines } from './jsonl.js';

export interface Completed {
  /** Ids (as strings) with a result line. */
  readonly ids: Set<string>;
  /** Ids whose last result line is a success (`ok` true, or a status below 400). */
  readonly succeeded: Set<string>;
  /** Result lines read. */
  readonly results: number;
  /** Lines that were not a JSON object with an id (a write torn by a crash, or someone's edit). */
  readonly unreadable: number;
  /** Lines this tool writes: a JSON object with an `id` and a boolean `ok`. */
  readonly resultLines: number;
  /**
   * The first line that neither this tool wrote nor a crash tore from one (free text, a requests
   * file's line): with no result line at all, the file is someone else's.
   */
  readonly firstForeignLine: number | undefined;
}

// A line torn by a crash is the start of a result line (every one starts `{"id":`), cut short
// anywhere, even within those first bytes.
const resultStart = '{"id":';
const tornResult = (text: string) => text.startsWith(resultStart) || resultStart.startsWith(text);

/** Ids already in the output (streaming; a missing file has none). */
export async function readCompleted(path: string, stopped: () => boolean = () => false): Promise<Completed> {
  const ids = new Set<string>();
  const succeeded = new Set<string>();
  let results = 0;
  let unreadable = 0;
  let resultLines = 0;
  let firstForeignLine: number | undefined;
  const foreign = (line: number) => {
    firstForeignLine ??= line;
  };
  // Only a regular file holds earlier results: reading a pipe or a device (--out /dev/stdout, a FIFO,
  // /dev/full) waited forever for a writer or read without end, and nothing was sent.
  if (!existsSync(path) || !statSync(path).isFile())
    return { ids, succeeded, results, unreadable, resultLines, firstForeignLine };
  for await (const line of readFileLines(path)) {
    // A large results file takes seconds to read: Ctrl-C ends the read (nothing is sent after it).
    if (stopped()) break;
    if (line.text === undefined) {
      // Longer than any line this tool writes (--max-inline-body is capped below it).
      unreadable++;
      foreign(line.number);
      continue;
    }
    let value: unknown;
    try {
      value = JSON.parse(line.text);
    } catch {
      unreadable++;
      if (!tornResult(line.text)) foreign(line.number);
      continue;
    }
    const result = (typeof value === 'object' && value !== null ? value : {}) as {
      id?: unknown;
      ok?: unknown;
      status?: unknown;
    };
    const id = result.id;
    if ((typeof id === 'string' || typeof id === 'number') && typeof result.ok === 'boolean') resultLines++;
    else foreign(line.number);
    if (typeof id === 'string' || typeof id === 'number') {
      const key = String(id);
      ids.add(key);
      results++;
      // The last line for an id wins (a --retry-failed run appends a new one).
      const success =
        typeof result.ok === 'boolean' ? result.ok : typeof result.status === 'number' && result.status < 400;
      if (success) succeeded.add(key);
      else succeeded.delete(key);
    } else unreadable++;
  }
  return { ids, succeeded, results, unreadable, resultLines, firstForeignLine };
}

/**
 * Appends one JSON line per result with a synchronous write: when `write` returns, the line is in
 * the operating system's hands and survives the process being killed (not a power loss).
 */
export class ResultWriter {
  private fd: number | undefined;

  constructor(readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    this.fd = openSync(path, 'a+');
    // A line torn by a crash must not swallow the next result: start on a fresh line.
    const size = fstatSync(this.fd).size;
    if (size > 0) {
      const last = Buffer.alloc(1);
      readSync(this.fd, last, 0, 1, size - 1);
      if (last[0] !== 0x0a) writeSync(this.fd, '\n');
    }
  }

  write(result: object): void {
    if (this.fd === undefined) throw new Error(`results file ${this.path} is closed`);
    const bytes = Buffer.from(`${JSON.stringify(result)}\n`, 'utf8');
    // writeSync may write less than asked (a signal, a pipe, a nearly full disk): the rest follows
    // at once, so the line is never torn by the next one.
    for (let written = 0; written < bytes.length; ) {
      written += writeSync(this.fd, bytes, written, bytes.length - written);
    }
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
