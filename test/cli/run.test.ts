/**
 * `tollgate run` end to end (a child process against the simulated API): flags and their errors,
 * malformed lines, --strict, results, body files, failures and --retry-failed, config files.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';
import { closedPort, lineCount, readResults, runCli, spawnCli, waitFor, writeJsonl } from './cli-helpers.js';

let api: SimulatedApi;
let dir: string;
let n = 0;
/** A fresh pair of paths per test. */
let input: string;
let out: string;

beforeAll(async () => {
  api = await startSimulatedApi({
    policy: { kind: 'token-bucket', limit: 200, intervalMs: 1_000, burst: 20 },
    headers: 'openai',
    price: 1_500,
  });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-run-'));
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

const request = (id: string | number, extra: object = {}) => ({
  id,
  url: `${api.url}/v1/things/${id}`,
  ...extra,
});

describe('flags', () => {
  it('names the flag and the value of a bad unit, exit 2, nothing sent', async () => {
    writeJsonl(input, [request(1)]);
    const result = await runCli(['run', input, '--rate', 'fast']);
    expect(result.code).toBe(2);
    expect(result.stderr.trim()).toBe('tollgate: Expected --rate like 50/s or 3000/min, got `fast`');
    expect(api.stats().received).toBe(0);
  });

  it('suggests the flag meant by a typo', async () => {
    writeJsonl(input, [request(1)]);
    const result = await runCli(['run', input, '--rat', '5/s']);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/Unknown option --rat .*did you mean --rate\?/);
  });

  it.each([
    [['--budget', 'lots'], 'Expected --budget like 5usd/day'],
    [['--limit', '5'], 'Expected --limit like 500/min'],
    [['--concurrency', '0'], 'Expected --concurrency to be an integer >= 1, got `0`'],
    [['--header-adapt', 'sometimes'], 'Expected --header-adapt to be on or off, got `sometimes`'],
    [['--max-queue-time', '10'], 'Expected --max-queue-time like 500ms, 30s or 2m'],
    [['--burst', '5'], '--burst needs a rate'],
    [['--progress', 'fancy'], 'Expected --progress to be auto, bar, plain or none'],
    [['--timeout', '25d'], 'Expected --timeout to be at most 24d (2147483647 ms), or `inf` for none'],
    [['--max-inline-body', '9mb'], 'Expected --max-inline-body to be at most 8mb'],
  ])('refuses %j', async (flags, text) => {
    writeJsonl(input, [request(1)]);
    const result = await runCli(['run', input, ...flags]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(text);
  });

  // Outside CI without REDIS_URL this is skipped (visible in the report); .ci/run provides Redis.
  it.skipIf(process.env['REDIS_URL'] === undefined)(
    'shares the quota through Redis with --redis',
    async () => {
      writeJsonl(input, [request(1), request(2), request(3)]);
      const result = await runCli([
        'run',
        input,
        '--out',
        out,
        '--redis',
        process.env['REDIS_URL']!,
        '--redis-prefix',
        `tollgate-cli-test-${process.pid}-${n}`,
        '--limit',
        '50/s',
        '--progress',
        'none',
      ]);
      expect(result.code, result.stderr).toBe(0);
      expect(readResults(out)).toHaveLength(3);
    },
  );

  it('names --out and the path when --out is a directory or under a file (exit 2, nothing sent)', async () => {
    writeJsonl(input, [request(1)]);
    const aFile = join(dir, `a-file-${n}`);
    writeFileSync(aFile, 'not a directory');
    const underFile = await runCli([
      'run',
      input,
      '--out',
      join(aFile, 'results.jsonl'),
      '--progress',
      'none',
    ]);
    expect(underFile.code).toBe(2);
    expect(underFile.stderr.trim()).toBe(
      `tollgate: Cannot create --out ${join(aFile, 'results.jsonl')}: ${aFile} is a file, not a directory`,
    );
    const isDirectory = await runCli(['run', input, '--out', dir, '--progress', 'none']);
    expect(isDirectory.code).toBe(2);
    expect(isDirectory.stderr.trim()).toBe(
      `tollgate: Expected --out to be a file, got ${dir}, which is a directory`,
    );
    const bodies = await runCli(['run', input, '--out', out, '--bodies-dir', aFile, '--progress', 'none']);
    expect(bodies.code).toBe(2);
    expect(bodies.stderr.trim()).toBe(
      `tollgate: Expected --bodies-dir to be a directory, got ${aFile}, which is a file`,
    );
    expect(api.stats().received).toBe(0);
  });

  it('takes a fractional --timeout as whole milliseconds (1.005s)', async () => {
    writeJsonl(input, [request(1)]);
    const result = await runCli(['run', input, '--out', out, '--timeout', '1.005s', '--progress', 'none']);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(readResults(out)).toMatchObject([{ id: 1, ok: true, status: 200 }]);
  });

  it('explains a missing file and an unknown command', async () => {
    const missing = await runCli(['run', join(dir, 'nope.jsonl')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('Requests file not found');
    const unknown = await runCli(['launch']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('Unknown command `launch`');
  });
});

describe('input lines', () => {
  const mixed = () => [
    request('a'),
    'this is not json',
    request('b', { method: 'POST', body: { x: 1 } }),
    { id: 'c', url: 'not a url' },
    request('a'),
    { url: `${api.url}/no-id` },
    request('d', { cost: 'lots' }),
    request('e', { method: 'GET', body: 'x' }),
    request('f'),
  ];

  it('reports malformed lines by number, skips them, sends the rest, exits 4', async () => {
    writeJsonl(input, mixed());
    const result = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(result.code).toBe(4);
    expect(result.stderr).toContain('line 2: not valid JSON');
    expect(result.stderr).toContain('line 4: expected `url` to be an absolute http(s) URL');
    expect(result.stderr).toContain('line 5: duplicate id "a" (first at line 1)');
    expect(result.stderr).toContain('line 6: expected `id` to be a non-empty string or an integer');
    expect(result.stderr).toContain('line 7: expected `cost` to be a number or an object');
    expect(result.stderr).toContain('line 8: a GET request cannot have a `body`');
    expect(result.stdout).toContain('6 malformed lines skipped');
    expect(readResults(out).map((r) => r['id'])).toEqual(expect.arrayContaining(['a', 'b', 'f']));
    expect(readResults(out)).toHaveLength(3);
  });

  it('skips a line over 64 MiB as malformed (number and length), and reads on after it', async () => {
    // A valid request line of 64 MiB + 1 KiB: held whole, it would be sent.
    const pad = 'x'.repeat(64 * 1024 * 1024 + 1024);
    const long = JSON.stringify(request('long', { pad }));
    writeFileSync(input, `${JSON.stringify(request('a'))}\n${long}\n${JSON.stringify(request('b'))}\n`);
    const result = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(result.code).toBe(4);
    expect(result.stderr).toContain(
      `line 2: longer than 64 MiB (${Buffer.byteLength(long)} bytes); skipped to its end`,
    );
    expect(readResults(out).map((r) => r['id'])).toEqual(expect.arrayContaining(['a', 'b']));
    expect(readResults(out)).toHaveLength(2);
    expect(api.stats().received).toBe(2);
  }, 60_000);

  it('never charges a budget for a request fetch refuses to send', async () => {
    writeJsonl(input, [request('traced', { method: 'TRACE' }), request('sent')]);
    const result = await runCli([
      'run',
      input,
      '--out',
      out,
      '--budget',
      '1usd/day',
      '--ledger',
      'memory',
      '--price',
      '0.1usd',
      '--progress',
      'none',
    ]);
    expect(result.code).toBe(4);
    expect(result.stderr).toContain('line 1: fetch cannot send a TRACE request');
    expect(result.stdout).toContain('spend      $0.10 of $1.00');
    expect(readResults(out).map((r) => r['id'])).toEqual(['sent']);
  });

  it('--strict refuses the file before sending anything', async () => {
    writeJsonl(input, mixed());
    const result = await runCli(['run', input, '--out', out, '--strict', '--progress', 'none']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('--strict: 6 malformed line(s)');
    expect(result.stderr).toContain('line 2: not valid JSON');
    expect(api.stats().received).toBe(0);
    expect(existsSync(out)).toBe(false);
  });
});

describe('results', () => {
  it('writes status, kept headers, body, attempts, waits and cost per request; a re-run has nothing to do', async () => {
    writeJsonl(input, [
      request(1, { price: '$0.002', cost: { requests: 1 } }),
      request('two', { method: 'POST', body: { hello: 'world' } }),
    ]);
    const first = await runCli(['run', input, '--out', out, '--price', '0.001usd', '--progress', 'none']);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain('done: every request has a successful result');
    const results = readResults(out);
    const one = results.find((r) => r['id'] === 1)!;
    expect(one).toMatchObject({ id: 1, line: 1, status: 200, ok: true, attempts: 1 });
    expect(one['body']).toMatchObject({ ok: true });
    expect(one['headers']).toMatchObject({
      // OpenAI-style headers report the bucket's size (burst 20) as the limit.
      'x-ratelimit-limit-requests': '20',
      'x-sim-cost-micros': '1500',
    });
    expect(one['cost']).toEqual({ units: { requests: 1 }, priceMicros: 2_000, price: '$0.002' });
    expect(typeof one['waitedMs']).toBe('number');
    expect(results.find((r) => r['id'] === 'two')!['cost']).toMatchObject({ priceMicros: 1_000 });

    const again = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('2 already done (skipped)');
    expect(again.stdout).toContain('nothing to do');
    expect(api.stats().received).toBe(2);
  });

  it('writes bodies over --max-inline-body to files next to the results', async () => {
    writeJsonl(input, [request('big/one')]);
    const result = await runCli(['run', input, '--out', out, '--max-inline-body', '8', '--progress', 'none']);
    expect(result.code, result.stderr).toBe(0);
    const [r] = readResults(out);
    expect(r!['body']).toBeUndefined();
    expect(typeof r!['bodyFile']).toBe('string');
    expect(JSON.parse(readFileSync(join(dir, r!['bodyFile'] as string), 'utf8'))).toMatchObject({ ok: true });
  });

  it('a body file that cannot be written stops the run (exit 1); the success is kept and not sent again', async () => {
    writeJsonl(input, [request('one')]);
    const bodies = join(dir, `bodies-${n}`);
    // A directory where the body file of `one` goes: writing it fails (EISDIR).
    mkdirSync(join(bodies, 'one'), { recursive: true });
    const args = ['run', input, '--out', out, '--bodies-dir', bodies, '--max-inline-body', '8'];
    const first = await runCli([...args, '--progress', 'none']);
    expect(first.code).toBe(1);
    expect(first.stderr).toContain(
      `tollgate: Cannot write response bodies to --bodies-dir ${bodies}: EISDIR`,
    );
    expect(first.stderr).not.toContain('internal error');
    const one = readResults(out).find((r) => r['id'] === 'one')!;
    expect(one).toMatchObject({ ok: true, status: 200, bodyError: { code: 'EISDIR' } });
    expect(one['body']).toBeUndefined();

    const retry = await runCli([...args, '--retry-failed', '--progress', 'none']);
    expect(retry.code).toBe(0);
    expect(retry.stdout).toContain('1 already done (skipped)');
    expect(readResults(out)).toHaveLength(1);
    expect(api.stats().received).toBe(1);
  });

  it('records a failure as a result (exit 4) and sends it again with --retry-failed', async () => {
    writeJsonl(input, [
      request('fine'),
      { id: 'down', url: `http://127.0.0.1:${await closedPort()}/unreachable` },
    ]);
    const first = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(first.code).toBe(4);
    expect(first.stdout).toContain('partial failure: 1 request failed');
    const down = readResults(out).find((r) => r['id'] === 'down')!;
    expect(down).toMatchObject({ ok: false, attempts: 1, error: { code: 'ECONNREFUSED' } });

    const plain = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(plain.code).toBe(4);
    expect(readResults(out)).toHaveLength(2);
    const retry = await runCli(['run', input, '--out', out, '--retry-failed', '--progress', 'none']);
    expect(retry.code).toBe(4);
    expect(retry.stdout).toContain('1 already done (skipped)');
    expect(readResults(out).filter((r) => r['id'] === 'down')).toHaveLength(2);
  });
});

describe('config file', () => {
  it('reads options from JSON, flags win, and names an unknown key', async () => {
    writeJsonl(input, [request(1), request(2)]);
    const config = join(dir, `config-${n}.json`);
    writeFileSync(
      config,
      JSON.stringify({ rate: '100/s', burst: 5, concurrency: 2, out: `results-${n}.jsonl` }),
    );
    const result = await runCli(['run', input, '--config', config, '--progress', 'none']);
    expect(result.code, result.stderr).toBe(0);
    expect(readResults(out)).toHaveLength(2);

    writeFileSync(config, JSON.stringify({ rate: '100/s', concurency: 2 }));
    const bad = await runCli(['run', input, '--config', config]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('Unknown key `concurency`');
    expect(bad.stderr).toContain('did you mean `concurrency`?');

    writeFileSync(config, JSON.stringify({ rate: 'quick' }));
    const badValue = await runCli(['run', input, '--config', config]);
    expect(badValue.code).toBe(2);
    expect(badValue.stderr).toContain('Expected `rate` in');
    expect(badValue.stderr).toContain('got `quick`');
  });
});

describe('Ctrl-C', () => {
  it('once lets requests in flight finish; twice aborts them, writing no result for them', async () => {
    const slow = await startSimulatedApi({ policy: { kind: 'none' }, latencyMs: 1_500 });
    try {
      writeJsonl(
        input,
        Array.from({ length: 9 }, (_, i) => ({ id: `slow-${i + 1}`, url: `${slow.url}/v1/slow/${i + 1}` })),
      );
      const args = ['run', input, '--out', out, '--concurrency', '3', '--progress', 'none'];

      // Once: the three in flight finish and are written; the rest is not sent.
      const once = spawnCli(args);
      await waitFor(() => slow.stats().received >= 3, 10_000, 'three requests in flight');
      once.child.kill('SIGINT');
      const first = await once.done;
      expect(first.code).toBe(130);
      expect(first.stderr).toContain('Stopping: no new requests');
      expect(lineCount(out)).toBe(3);
      expect(slow.stats().received).toBe(3);

      // Twice: the three in flight are aborted, nothing more is written, and it exits at once.
      const twice = spawnCli(args);
      await waitFor(() => slow.stats().received >= 6, 10_000, 'three more in flight');
      twice.child.kill('SIGINT');
      await new Promise((r) => setTimeout(r, 100));
      const killedAt = Date.now();
      twice.child.kill('SIGINT');
      const second = await twice.done;
      expect(Date.now() - killedAt).toBeLessThan(1_200);
      expect(second.code).toBe(130);
      expect(second.stderr).toContain('Aborting the requests in flight');
      expect(second.stdout).toContain('interrupted (requests in flight aborted)');
      // 6 to do: 3 sent and cut off, 3 never sent; no result, so no first-to-last span.
      expect(second.stdout).toContain(
        '3 sent · 0 ok · 0 failed · 3 aborted in flight (no result) · 3 not sent',
      );
      expect(second.stdout).not.toContain('first start to last result');
      expect(lineCount(out)).toBe(3);
    } finally {
      await slow.close();
    }
  });
});
