/**
 * Lazy line reading. The file is read one chunk at a time and only when the consumer asks for the
 * next line, so a slow consumer (the bounded producer waiting for room) holds back the reads:
 * memory stays at one chunk plus the lines in flight, whatever the file's size.
 *
 * Lines are split on bytes: a `\n` byte never occurs inside a multi-byte UTF-8 sequence, so each
 * line decodes alone exactly as the whole stream would. Each chunk is searched once (a long line
 * costs its length, not its length squared), and a line longer than `maxLineBytes` is not held:
 * its bytes are counted up to its end and it is returned as an overlong line, without its text.
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';

/** The longest line kept (bytes, without the `\n`): far below V8's string limit (~512 Mi chars). */
export const maxLineBytes = 64 * 1024 * 1024;

export type Line =
  | {
      /** 1-based. */
      readonly number: number;
      /** Without the line break (`\n` or `\r\n`). */
      readonly text: string;
    }
  | {
      readonly number: number;
      /** Longer than the cap: skipped to its end, never held in memory. */
      readonly text: undefined;
      /** Its length in bytes (without the `\n`). */
      readonly bytes: number;
    };

export interface ReadLinesOptions {
  /** @default maxLineBytes (64 MiB) */
  readonly maxLineBytes?: number;
}

const newline = 0x0a;
const carriageReturn = 0x0d;

/**
 * Lines of a stream, numbered from 1. Empty and whitespace-only lines are skipped but counted; a
 * line over the cap is yielded with `text: undefined` and its length.
 */
export async function* readLines(
  input: Readable | AsyncIterable<Buffer | string>,
  options: ReadLinesOptions = {},
): AsyncGenerator<Line> {
  const cap = options.maxLineBytes ?? maxLineBytes;
  // The current line's bytes before the chunk being split (none of them is a newline).
  let parts: Buffer[] = [];
  let partBytes = 0;
  // Past the cap: its bytes are only counted from here on.
  let overlong = false;
  let number = 0;

  const add = (piece: Buffer) => {
    if (piece.length === 0) return;
    partBytes += piece.length;
    if (overlong) return;
    if (partBytes > cap) {
      overlong = true;
      parts = [];
    } else parts.push(piece);
  };
  /** The line ending with `last` (the bytes before its `\n` in the current chunk). */
  const take = (last: Buffer): Line | undefined => {
    const bytes = partBytes + last.length;
    const wasOverlong = overlong || bytes > cap;
    const kept = parts;
    parts = [];
    partBytes = 0;
    overlong = false;
    if (wasOverlong) return { number, text: undefined, bytes };
    const whole = kept.length === 0 ? last : Buffer.concat([...kept, last], bytes);
    const end =
      whole.length > 0 && whole[whole.length - 1] === carriageReturn ? whole.length - 1 : whole.length;
    let text = whole.toString('utf8', 0, end);
    // Some editors start a UTF-8 file with a byte order mark; it belongs to no line's JSON.
    if (number === 1 && text.startsWith('\uFEFF')) text = text.slice(1);
    return text.trim() === '' ? undefined : { number, text };
  };

  for await (const chunk of input) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : (chunk as Buffer);
    let start = 0;
    // Only this chunk is searched: what came before it holds no newline.
    for (let nl = bytes.indexOf(newline, start); nl !== -1; nl = bytes.indexOf(newline, start)) {
      number++;
      const line = take(bytes.subarray(start, nl));
      start = nl + 1;
      if (line !== undefined) yield line;
    }
    add(bytes.subarray(start));
  }
  if (partBytes > 0) {
    number++;
    const line = take(Buffer.alloc(0));
    if (line !== undefined) yield line;
  }
}

/** Lines of a file (lazily). */
export function readFileLines(path: string, options: ReadLinesOptions = {}): AsyncGenerator<Line> {
  return readLines(createReadStream(path, { highWaterMark: 64 * 1024 }), options);
}

/** Number of non-empty lines of a file, streaming (for the progress bar's total and ETA). */
export async function countLines(path: string): Promise<number> {
  let n = 0;
  for await (const _ of readFileLines(path)) n++;
  return n;
}
