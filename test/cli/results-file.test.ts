/**
 * The results file and the line reader, in process: short writes, long lines, the line cap.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { readLines } from '../../src/cli/jsonl.js';
import { ResultWriter, readCompleted } from '../../src/cli/results-file.js';

// writeSync may write fewer bytes than asked: this one writes at most `shortWriteBytes` per call
// while `shortWrites` is on, as a pipe or a signal-interrupted write can.
let shortWrites = false;
const shortWriteBytes = 7;
vi.mock('node:fs', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs')>();
  const writeSync = (fd: number, data: string | NodeJS.ArrayBufferView, ...rest: unknown[]): number => {
    if (!shortWrites) return (real.writeSync as (...a: unknown[]) => number)(fd, data, ...rest);
    if (typeof data === 'string') return real.writeSync(fd, data.slice(0, shortWriteBytes));
    const offset = (rest[0] as number | undefined) ?? 0;
    const length = (rest[1] as number | undefined) ?? data.byteLength - offset;
    return real.writeSync(fd, data, offset, Math.min(length, shortWriteBytes));
  };
  return { ...real, default: { ...real, writeSync }, writeSync };
});

const dir = mkdtempSync(join(tmpdir(), 'tollgate-results-file-'));

afterEach(() => {
  shortWrites = false;
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A stream of `chunkBytes`-sized Buffers of `text`. */
function chunked(text: string | Buffer, chunkBytes: number): Readable {
  const bytes = typeof text === 'string' ? Buffer.from(text) : text;
  return Readable.from(
    (function* () {
      for (let i = 0; i < bytes.length; i += chunkBytes) yield bytes.subarray(i, i + chunkBytes);
    })(),
  );
}

async function collect(input: Readable, maxLineBytes?: number) {
  const lines = [];
  for await (const line of readLines(input, maxLineBytes === undefined ? {} : { maxLineBytes })) {
    lines.push(line);
  }
  return lines;
}

describe('ResultWriter', () => {
  it('writes a whole line even when writeSync writes only part of it', async () => {
    const path = join(dir, 'short-writes.jsonl');
    const writer = new ResultWriter(path);
    shortWrites = true;
    writer.write({ id: 'a', ok: true, body: 'x'.repeat(40) });
    writer.write({ id: 'b', ok: false });
    shortWrites = false;
    writer.close();
    expect(readFileSync(path, 'utf8')).toBe(
      `${JSON.stringify({ id: 'a', ok: true, body: 'x'.repeat(40) })}\n${JSON.stringify({ id: 'b', ok: false })}\n`,
    );
    const completed = await readCompleted(path);
    expect([...completed.ids]).toEqual(['a', 'b']);
    expect(completed.unreadable).toBe(0);
  });
});

describe('readCompleted: whose file is it', () => {
  it('takes a line torn anywhere in a result line, even within its first bytes, as a crash, not as foreign text', async () => {
    for (const torn of ['{', '{"i', '{"id":', '{"id":7,"o']) {
      const path = join(dir, `torn-${torn.length}.jsonl`);
      writeFileSync(path, torn);
      const completed = await readCompleted(path);
      expect(completed.resultLines, torn).toBe(0);
      expect(completed.firstForeignLine, torn).toBeUndefined();
    }
    const notes = join(dir, 'notes.txt');
    writeFileSync(notes, 'id: 7\n');
    expect((await readCompleted(notes)).firstForeignLine).toBe(1);
  });
});

describe('readLines', () => {
  it('splits lines across chunks, including multi-byte characters and CRLF', async () => {
    const text = '{"id":"é€😀"}\r\n\n  \n{"id":2}\nlast';
    for (const chunkBytes of [1, 2, 3, 5, 64]) {
      expect(await collect(chunked(text, chunkBytes))).toEqual([
        { number: 1, text: '{"id":"é€😀"}' },
        { number: 4, text: '{"id":2}' },
        { number: 5, text: 'last' },
      ]);
    }
  });

  it('skips a line over the cap to its end, giving its number and length, and reads on', async () => {
    const long = 'x'.repeat(1_000);
    const text = `{"id":1}\n${long}\r\n{"id":3}\n${long}`;
    for (const chunkBytes of [7, 64, 4_096]) {
      expect(await collect(chunked(text, chunkBytes), 100)).toEqual([
        { number: 1, text: '{"id":1}' },
        { number: 2, text: undefined, bytes: 1_001 },
        { number: 3, text: '{"id":3}' },
        { number: 4, text: undefined, bytes: 1_000 },
      ]);
    }
    // At the cap exactly, the line is kept.
    expect(await collect(chunked(`${'y'.repeat(100)}\n`, 7), 100)).toEqual([
      { number: 1, text: 'y'.repeat(100) },
    ]);
  });

  it('reads a 32 MB line in time linear in its length', async () => {
    const line = Buffer.alloc(32 * 1024 * 1024, 0x61);
    const started = performance.now();
    const lines = await collect(chunked(Buffer.concat([line, Buffer.from('\n{"id":2}\n')]), 64 * 1024));
    const elapsedMs = performance.now() - started;
    expect(lines.map((l) => l.number)).toEqual([1, 2]);
    expect(lines[0]!.text?.length).toBe(line.length);
    // Linear: tens of ms. Searching the whole pending text after each 64 KB chunk took ~5 s.
    expect(elapsedMs).toBeLessThan(1_500);
  });
});
