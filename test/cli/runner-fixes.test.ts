/**
 * `tollgate run` input handling: a pipe as input, the counts after a stop, a stop during the first
 * pass, a byte order mark, and the progress total. In process where the runner can be reached,
 * as a child process where the behaviour is the command's.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readLines } from '../../src/cli/jsonl.js';
import { parseRunOptions } from '../../src/cli/run-options.js';
import { runBatch } from '../../src/cli/runner.js';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';
import { readResults, runCli, spawnCli, writeJsonl } from './cli-helpers.js';

let api: SimulatedApi;
let dir: string;
let n = 0;
let input: string;
let out: string;

beforeAll(async () => {
  api = await startSimulatedApi({ policy: { kind: 'none' }, latencyMs: 20 });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-runner-fixes-'));
});

afterAll(async () => {
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  n++;
  input = join(dir, `requests-${n}.jsonl`);
  out = join(dir, `results-${n}.jsonl`);
  api.reset();
});

const request = (id: string | number) => ({ id, url: `${api.url}/v1/things/${id}` });
const requests = (count: number) => Array.from({ length: count }, (_, i) => request(`r${i + 1}`));

describe('input from a pipe', () => {
  it('sends every request of a FIFO (read once, no first pass)', async () => {
    const source = join(dir, `source-${n}.jsonl`);
    writeJsonl(source, requests(5));
    const fifo = join(dir, `fifo-${n}`);
    execFileSync('mkfifo', [fifo]);
    // The writer blocks until the command opens the FIFO, and ends once it has written it all.
    const writer = spawn('sh', ['-c', 'cat "$0" > "$1"', source, fifo], { stdio: 'ignore' });
    const cli = spawnCli(['run', fifo, '--out', out, '--progress', 'none']);
    // Reading a FIFO twice waits forever for a second writer: fail with a message, not a timeout.
    const timer = setTimeout(() => cli.child.kill('SIGKILL'), 8_000);
    try {
      const result = await cli.done;
      expect(result.code, result.stdout + result.stderr).toBe(0);
      expect(result.stdout).toContain('5 sent · 5 ok · 0 failed');
      expect(readResults(out).map((r) => r['id'])).toEqual(expect.arrayContaining(['r1', 'r3', 'r5']));
      expect(readResults(out)).toHaveLength(5);
      expect(api.stats().received).toBe(5);
    } finally {
      clearTimeout(timer);
      writer.kill();
    }
  }, 15_000);
});

describe('a stop', () => {
  it('counts every request of the input without a result as not sent', async () => {
    writeJsonl(input, requests(30));
    const { config } = parseRunOptions([input, '--out', out, '--window', '4', '--progress', 'none']);
    const stop = new AbortController();
    let results = 0;
    const report = await runBatch(
      config,
      { stop: stop.signal },
      {
        onResult: () => {
          if (++results === 2) stop.abort();
        },
      },
    );
    expect(report.exitCode).toBe(130);
    expect(report.toDo).toBe(30);
    expect(report.finished).toBeLessThan(30);
    expect(report.notSent).toBe(30 - report.finished);
  });

  it('ends the first pass over a large file at once', async () => {
    // ~20 MB; with --strict, a pass read to the end would refuse the file for its last line.
    const lines = Array.from({ length: 300_000 }, (_, i) => JSON.stringify(request(`r${i + 1}`)));
    writeFileSync(input, `${lines.join('\n')}\nnot json\n`);
    const { config } = parseRunOptions([input, '--out', out, '--strict', '--progress', 'none']);
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 20);
    const report = await runBatch(config, { stop: stop.signal });
    expect(report.exitCode).toBe(130);
    expect(report.sent).toBe(0);
    expect(api.stats().received).toBe(0);
  }, 10_000);

  it('ends the read of a large results file at once', async () => {
    // ~30 MB of earlier results (read whole: about 3 s here) and one request left.
    const results = Array.from({ length: 600_000 }, (_, i) =>
      JSON.stringify({ id: `r${i + 1}`, ok: true, status: 200 }),
    );
    writeFileSync(out, `${results.join('\n')}\n`);
    writeFileSync(input, `${JSON.stringify(request('left'))}\n`);
    const { config } = parseRunOptions([input, '--out', out, '--progress', 'none']);
    const stop = new AbortController();
    const began = performance.now();
    setTimeout(() => stop.abort(), 20);
    const report = await runBatch(config, { stop: stop.signal });
    expect(report.exitCode).toBe(130);
    expect(report.sent).toBe(0);
    expect(api.stats().received).toBe(0);
    // A stop ends the read within a few lines; reading it whole took 3 s.
    expect(performance.now() - began).toBeLessThan(1500);
  }, 10_000);
});

describe('input lines', () => {
  it('ignores a byte order mark at the start of the file only', async () => {
    const text = '\uFEFF{"id":1}\n\uFEFF{"id":2}\n';
    // One byte per chunk: the mark's three bytes arrive apart.
    const oneByteChunks = Readable.from([...Buffer.from(text)].map((byte) => Buffer.from([byte])));
    for (const source of [Readable.from([Buffer.from(text)]), oneByteChunks]) {
      const lines: (string | undefined)[] = [];
      for await (const line of readLines(source)) lines.push(line.text);
      expect(lines).toEqual(['{"id":1}', '\uFEFF{"id":2}']);
    }
  });

  it('sends line 1 of a file that starts with a byte order mark', async () => {
    writeFileSync(input, `\uFEFF${JSON.stringify(request('first'))}\n${JSON.stringify(request('second'))}\n`);
    const result = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(result.code, result.stderr).toBe(0);
    expect(readResults(out).map((r) => r['id'])).toEqual(expect.arrayContaining(['first', 'second']));
  });

  it('counts only the requests to do in the progress total (not malformed or duplicate lines)', async () => {
    writeJsonl(input, [
      request('a'),
      'not json',
      request('a'),
      { id: 'bad', url: 'not a url' },
      { url: `${api.url}/no-id` },
      request('b'),
    ]);
    const result = await runCli(['run', input, '--out', out, '--progress', 'plain']);
    expect(result.code).toBe(4);
    expect(result.stdout).toContain('tollgate 2/2 (100%)');
  });
});
