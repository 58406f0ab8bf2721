/**
 * Secrets stay out of what `tollgate run` prints and writes: header values, a URL's userinfo and
 * query values, config text around a JSON error. Child processes against a local server, and the
 * runner in process with a fetch that fails quoting what it was given.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseRunOptions } from '../../src/cli/run-options.js';
import { runBatch } from '../../src/cli/runner.js';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';
import { readResults, runCli, writeJsonl } from './cli-helpers.js';

let api: SimulatedApi;
let dir: string;
let n = 0;
let input: string;
let out: string;

beforeAll(async () => {
  api = await startSimulatedApi({ policy: { kind: 'none' } });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-secrets-'));
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

afterEach(() => {
  vi.unstubAllGlobals();
});

/** Everything the run printed or wrote. */
function everything(result: { stdout: string; stderr: string }): string {
  let results = '';
  try {
    results = readFileSync(out, 'utf8');
  } catch {
    // No results file.
  }
  return `${result.stdout}\n${result.stderr}\n${results}`;
}

describe('request lines', () => {
  it('refuses a header value with a line break or NUL as a malformed line, naming the header only', async () => {
    writeJsonl(input, [
      { id: 'crlf', url: `${api.url}/v1/a`, headers: { authorization: 'Bearer sk-LEAK-1\nX-Evil: 1' } },
      { id: 'nul', url: `${api.url}/v1/b`, headers: { 'x-api-key': 'sk-LEAK-2\u0000' } },
      { id: 'array', url: `${api.url}/v1/c`, headers: { authorization: ['Bearer sk-LEAK-3'] } },
      { id: 'name', url: `${api.url}/v1/d`, headers: { 'Authorization: Bearer sk-LEAK-4': 'x' } },
      { id: 'fine', url: `${api.url}/v1/e` },
    ]);
    const result = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(result.code).toBe(4);
    expect(result.stderr).toContain(
      'line 1: `headers.authorization` contains a line break (CR or LF) or NUL',
    );
    expect(result.stderr).toContain('line 2: `headers.x-api-key` contains a line break (CR or LF) or NUL');
    expect(result.stderr).toContain('line 3: expected `headers.authorization` to be a string, got an array');
    expect(result.stderr).toContain('line 4: in `headers`, header name "Authorization…"');
    expect(everything(result)).not.toMatch(/sk-LEAK/);
    expect(readResults(out).map((r) => r['id'])).toEqual(['fine']);
    expect(api.stats().received).toBe(1);
  });

  it('refuses a URL with credentials, and never shows userinfo or query values', async () => {
    const { host } = new URL(api.url);
    writeJsonl(input, [
      { id: 'creds', url: `http://user:sk-PASS-1@${host}/v1/a?api_key=sk-QUERY-1` },
      { id: 'scheme', url: `ftp://user:sk-PASS-2@${host}/v1/b?api_key=sk-QUERY-2` },
      { id: 'broken', url: `http://user:sk-PASS-3@[${host}/v1/c?api_key=sk-QUERY-3&x` },
    ]);
    const result = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(result.code).toBe(4);
    expect(result.stderr).toContain(
      `line 1: expected \`url\` without credentials (user:password@), got "http://[redacted]@${host}/v1/a?api_key=[redacted]"`,
    );
    expect(result.stderr).toContain(`line 2: expected \`url\` to use http or https, got "ftp://[redacted]@`);
    expect(result.stderr).toContain('line 3: expected `url` to be an absolute http(s) URL');
    expect(everything(result)).not.toMatch(/sk-PASS|sk-QUERY/);
    expect(api.stats().received).toBe(0);
  });

  it('says where a line stops being JSON without quoting the text around it', async () => {
    writeJsonl(input, [`{"id": 1, "headers": {"authorization": Bearer sk-LEAK-5}}`]);
    const result = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(result.code).toBe(4);
    expect(result.stderr).toContain('line 1: not valid JSON (at column 40)');
    expect(everything(result)).not.toMatch(/sk-LEAK/);
  });
});

describe('-H and config headers', () => {
  it('refuses a -H value with a line break up front (exit 2), naming the flag and header only', async () => {
    writeJsonl(input, [{ id: 1, url: `${api.url}/v1/a` }]);
    const result = await runCli([
      'run',
      input,
      '--out',
      out,
      '-H',
      'Authorization: Bearer sk-LEAK-6\nX-Evil: 1',
      '--progress',
      'none',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim()).toBe(
      'tollgate: Expected --header "Authorization" to have a valid value: it contains a line break (CR or LF) or NUL (value not shown)',
    );
    const noColon = await runCli(['run', input, '--out', out, '-H', 'Authorization Bearer sk-LEAK-7']);
    expect(noColon.code).toBe(2);
    expect(noColon.stderr).toContain('Expected --header like');
    expect(`${everything(result)}${noColon.stderr}`).not.toMatch(/sk-LEAK/);
    expect(api.stats().received).toBe(0);
  });

  it('refuses a config header with NUL up front (exit 2), naming the field only', async () => {
    writeJsonl(input, [{ id: 1, url: `${api.url}/v1/a` }]);
    const config = join(dir, `config-${n}.json`);
    writeFileSync(config, JSON.stringify({ headers: { 'x-api-key': 'sk-LEAK-8\u0000' } }));
    const result = await runCli(['run', input, '--out', out, '--config', config, '--progress', 'none']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('Expected `headers.x-api-key` in');
    expect(result.stderr).toContain('contains a line break (CR or LF) or NUL (value not shown)');
    expect(everything(result)).not.toMatch(/sk-LEAK|internal error/);
    expect(api.stats().received).toBe(0);
  });

  it('reports a config JSON error by file and position only', async () => {
    writeJsonl(input, [{ id: 1, url: `${api.url}/v1/a` }]);
    const config = join(dir, `config-${n}.json`);
    writeFileSync(config, '{\n  "headers": {"api-key": sk-CONFIG-LEAK}\n}\n');
    const result = await runCli(['run', input, '--out', out, '--config', config]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim()).toBe(
      `tollgate: --config ${config} is not valid JSON (at line 2, column 26)`,
    );
  });
});

describe('error messages in results', () => {
  it('replace header values, userinfo and query values with [redacted]', async () => {
    writeJsonl(input, [
      {
        id: 'quoted',
        url: `${api.url}/v1/a?api_key=sk-QUERY-SECRET-3&page=2`,
        headers: { authorization: 'Bearer sk-LINE-SECRET-1', 'x-short': 'tiny' },
      },
    ]);
    // A fetch that fails quoting what it was given, as fetch does for a value it refuses.
    vi.stubGlobal('fetch', async (url: URL, init: RequestInit) => {
      const headers = new Headers(init.headers);
      const withUser = new URL(url);
      withUser.username = 'bob';
      withUser.password = 'sk-PASS-SECRET-4';
      throw new TypeError(
        `refused "${headers.get('authorization')}" and "${headers.get('x-flag-key')}" and "${headers.get('x-short')}" for ${url} (${withUser.href})`,
      );
    });
    const parsed = parseRunOptions(
      [input, '--out', out, '-H', 'x-flag-key: sk-FLAG-SECRET-2', '--progress', 'none'],
      dir,
    );
    const report = await runBatch(parsed.config);
    expect(report.failed).toBe(1);
    const [result] = readResults(out);
    const message = (result!['error'] as { message: string }).message;
    expect(message).toBe(
      `refused "[redacted]" and "[redacted]" and "tiny" for ${api.url}/v1/a?api_key=[redacted]&page=[redacted] (http://[redacted]@${new URL(api.url).host}/v1/a?api_key=[redacted]&page=[redacted])`,
    );
  });
});
