/**
 * `tollgate run`, found by a user's-eye review (session 17): prices in another currency than the
 * budget's, a timeout that stopped covering the body, the body's download counted as waiting, a
 * tokens limit that refused a request above a tenth of it, --out on a pipe, a 429's status lost,
 * pauses counted past the run's end, and --redis / --price-header taken with nonsense values.
 * In process (parseRunOptions + runBatch) against a loopback server.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CliError } from '../../src/cli/cli-error.js';
import { parseRunOptions } from '../../src/cli/run-options.js';
import { runBatch } from '../../src/cli/runner.js';
import { readResults, repoRoot, writeJsonl } from './cli-helpers.js';

let server: Server;
let base: string;
let dir: string;
let n = 0;
let input: string;
let out: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/slow-body') {
      // Headers at once, the body 1.5 s later.
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('start ');
      const timer = setTimeout(() => res.end('end'), 1_500);
      res.on('close', () => clearTimeout(timer));
      return;
    }
    if (url.pathname === '/throttled') {
      res.writeHead(429, { 'retry-after': url.searchParams.get('ra') ?? '60' });
      res.end('slow down');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  dir = mkdtempSync(join(tmpdir(), 'tollgate-cli-17-'));
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  n++;
  input = join(dir, `requests-${n}.jsonl`);
  out = join(dir, `results-${n}.jsonl`);
});

const run = (args: readonly string[]) =>
  runBatch(parseRunOptions([input, '--out', out, '--progress', 'none', ...args]).config, {});

const cliError = (args: readonly string[]): string => {
  try {
    parseRunOptions([input, '--out', out, ...args]);
  } catch (error) {
    if (error instanceof CliError) return error.message;
    throw error;
  }
  throw new Error(`expected a CliError for ${args.join(' ')}`);
};

describe('prices and the budget currency', () => {
  it('--price in another currency than the budget is refused, naming both', () => {
    writeJsonl(input, [{ id: 1, url: `${base}/ok` }]);
    expect(cliError(['--budget', '0.01eur/day', '--price', '0.003usd'])).toBe(
      "Expected --price in EUR, the budget's currency, got `0.003usd` (USD)",
    );
    // The same currency, or none named, is the budget's.
    expect(() =>
      parseRunOptions([input, '--out', out, '--budget', '0.01eur/day', '--price', '0.003eur']),
    ).not.toThrow();
    expect(() =>
      parseRunOptions([input, '--out', out, '--budget', '0.01eur/day', '--price', '0.003']),
    ).not.toThrow();
  });

  it("a line's price in another currency is a malformed line: not sent, never charged", async () => {
    writeJsonl(input, [
      { id: 'eur', url: `${base}/ok`, price: '0.003eur' },
      { id: 'usd', url: `${base}/ok`, price: '0.003usd' },
    ]);
    const report = await run(['--budget', '0.01usd/day', '--ledger', 'memory']);
    expect(report.ok).toBe(1);
    expect(report.malformed).toBe(1);
    expect(readResults(out).map((r) => r['id'])).toEqual(['usd']);
  });
});

describe('--timeout and the response body', () => {
  it('covers the body however often the garbage collector runs', async () => {
    writeJsonl(input, [
      { id: 'slow', url: `${base}/slow-body` },
      ...Array.from({ length: 5 }, (_, i) => ({ id: `ok${i}`, url: `${base}/ok` })),
    ]);
    // AbortSignal.timeout held only by AbortSignal.any was collected before the body was read: with
    // a collection every 20 ms the old code returned the slow body ok after 1.5 s.
    const gcLoop = join(dir, 'gc-loop.mjs');
    writeFileSync(gcLoop, 'setInterval(() => globalThis.gc(), 20).unref();\n');
    const child = spawn(
      process.execPath,
      [
        '--expose-gc',
        '--import',
        pathToFileURL(gcLoop).href,
        '--import',
        'tsx',
        join(repoRoot, 'src/cli/main.ts'),
        'run',
        input,
        '--out',
        out,
        '--progress',
        'none',
        '--timeout',
        '500ms',
      ],
      { cwd: repoRoot, stdio: 'ignore' },
    );
    await new Promise((resolve) => child.on('close', resolve));
    const results = readResults(out);
    const slow = results.find((r) => r['id'] === 'slow')!;
    expect(slow['ok']).toBe(false);
    expect(slow['error']).toMatchObject({ code: 'ETIMEDOUT' });
    expect(results.filter((r) => r['ok'] === true)).toHaveLength(5);
  });

  it('a body read within the timeout is not waiting time (the download is not a wait)', async () => {
    writeJsonl(input, [
      { id: 'slow', url: `${base}/slow-body` },
      { id: 'ok', url: `${base}/ok` },
    ]);
    await run(['--timeout', '5s']);
    const slow = readResults(out).find((r) => r['id'] === 'slow')!;
    expect(slow['ok']).toBe(true);
    expect(slow['durationMs'] as number).toBeGreaterThanOrEqual(1_400);
    expect(slow['waitedMs'] as number).toBeLessThan(200);
  });
});

describe('the timeout timers', () => {
  it('are cleared once each body is read, not left for the whole timeout', async () => {
    // Timers of the timeout's length (61 s: nothing else uses it) not cleared by the end of the run.
    const pending = new Set<unknown>();
    const { setTimeout: realSet, clearTimeout: realClear } = globalThis;
    globalThis.setTimeout = ((fn: () => void, ms?: number) => {
      const timer = realSet(fn, ms);
      if (ms === 61_000) pending.add(timer);
      return timer;
    }) as typeof setTimeout;
    globalThis.clearTimeout = ((timer: Parameters<typeof clearTimeout>[0]) => {
      pending.delete(timer);
      realClear(timer);
    }) as typeof clearTimeout;
    try {
      writeJsonl(
        input,
        Array.from({ length: 20 }, (_, i) => ({ id: i, url: `${base}/ok` })),
      );
      const report = await run(['--timeout', '61s']);
      expect(report.ok).toBe(20);
    } finally {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
    }
    // All 20 stayed, each for 61 s, on the old code.
    expect(pending.size).toBe(0);
  });
});

describe('--limit in tokens', () => {
  it('admits one request of up to N tokens (half the window here)', async () => {
    writeJsonl(input, [{ id: 'big', url: `${base}/ok`, cost: { tokens: 500 } }]);
    const report = await run(['--limit', '1000tokens/min']);
    expect(report.ok).toBe(1);
    expect(readResults(out)[0]).toMatchObject({ id: 'big', ok: true });
  });
});

describe('--out that is not a regular file', () => {
  it('a FIFO is written to, not read for earlier results first (which waited forever)', async () => {
    writeJsonl(input, [
      { id: 1, url: `${base}/ok` },
      { id: 2, url: `${base}/ok` },
    ]);
    const fifo = join(dir, `out-fifo-${n}`);
    execFileSync('mkfifo', [fifo]);
    const copy = join(dir, `copy-${n}.jsonl`);
    const reader = spawn('sh', ['-c', 'cat "$0" > "$1"', fifo, copy], { stdio: 'ignore' });
    const readerDone = new Promise((resolve) => reader.on('close', resolve));
    const report = await Promise.race([
      runBatch(parseRunOptions([input, '--out', fifo, '--progress', 'none']).config, {}),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('the run hung on a FIFO')), 8_000)),
    ]).finally(() => reader.kill());
    await readerDone;
    expect(report.ok).toBe(2);
    expect(readFileSync(copy, 'utf8').trim().split('\n')).toHaveLength(2);
  }, 15_000);
});

describe('a 429 whose retry cannot start in time', () => {
  it('keeps its status, and the summary counts only the pause the run lived through', async () => {
    writeJsonl(input, [{ id: 'a', url: `${base}/throttled?ra=60` }]);
    const t0 = Date.now();
    const report = await run(['--max-queue-time', '2s']);
    const wallMs = Date.now() - t0;
    expect(readResults(out)[0]).toMatchObject({ id: 'a', ok: false, status: 429 });
    expect(report.pauses).toBe(1);
    // The pause announced 60 s; the run ended at once.
    expect(report.pausedMs).toBeLessThanOrEqual(wallMs + 50);
  });
});

describe('flags with nonsense values', () => {
  it.each([
    [
      ['--redis', 'notaurl'],
      'Expected --redis to be a URL like redis://127.0.0.1:6379 or rediss://host:6380 (or a socket path), got `notaurl`',
    ],
    [['--redis', 'http://:pw@127.0.0.1:6379'], /--redis .*another value \(not shown/],
    [['--redis', ':pw@127.0.0.1:6379'], /--redis .*another value \(not shown/],
    [['--price-header', ''], /Expected --price-header to be a header name like x-request-cost, got ``/],
    [['--price-header', 'x cost'], /Expected --price-header to be a header name/],
  ] as const)('%j is refused', (args, message) => {
    writeJsonl(input, [{ id: 1, url: `${base}/ok` }]);
    const text = cliError(args);
    if (typeof message === 'string') expect(text).toBe(message);
    else expect(text).toMatch(message);
    expect(text).not.toContain('pw@');
  });
});

describe('--redis as a socket path', () => {
  it('is taken (ioredis connects to a Unix socket)', () => {
    writeJsonl(input, [{ id: 1, url: `${base}/ok` }]);
    expect(parseRunOptions([input, '--out', out, '--redis', '/tmp/redis.sock']).config.redis).toBe(
      '/tmp/redis.sock',
    );
  });
});

describe('a value from the config file', () => {
  it('is named as the config key, not as the flag the user did not give', () => {
    writeJsonl(input, [{ id: 1, url: `${base}/ok` }]);
    const config = join(dir, `config-${n}.json`);
    writeFileSync(config, JSON.stringify({ timeout: 0 }));
    expect(cliError(['--config', config])).toBe(
      `Expected \`timeout\` in ${config} to be more than 0 (or \`inf\` for none)`,
    );
    expect(cliError(['--timeout', '0'])).toBe('Expected --timeout to be more than 0 (or `inf` for none)');
  });
});
