/**
 * Lazy line reading. The file is read one chunk at a time and only when the consumer asks for the
 * next line, so a slow consumer (the bounded producer waiting for room) holds back the reads:
 * memory stays at one chunk plus the lines in flight, whatever the file's size.
 */
import { createReadStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

export interface Line {
  /** 1-based. */
  readonly number: number;
  /** Without the line break (`\n` or `\r\n`). */
  readonly text: string;
}

/** Lines of a stream, numbered from 1. Empty and whitespace-only lines are skipped but counted. */
export async function* readLines(input: Readable): AsyncGenerator<Line> {
  const decoder = new StringDecoder('utf8');
  let pending = '';
  let number = 0;
  for await (const chunk of input) {
    pending += typeof chunk === 'string' ? chunk : decoder.write(chunk as Buffer);
    let start = 0;
    for (let nl = pending.indexOf('\n'); nl !== -1; nl = pending.indexOf('\n', start)) {
      number++;
      const end = nl > start && pending.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
      const text = pending.slice(start, end);
      start = nl + 1;
      if (text.trim() !== '') yield { number, text };
    }
    pending = pending.slice(start);
  }
  pending += decoder.end();
  if (pending.trim() !== '') yield { number: number + 1, text: pending.replace(/\r$/, '') };
}

/** Lines of a file (lazily). */
export function readFileLines(path: string): AsyncGenerator<Line> {
  return readLines(createReadStream(path, { highWaterMark: 64 * 1024 }));
}

/** Number of non-empty lines of a file, streaming (for the progress bar's total and ETA). */
export async function countLines(path: string): Promise<number> {
  let n = 0;
  for await (const _ of readFileLines(path)) n++;
  return n;
}
