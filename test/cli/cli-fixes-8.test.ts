/**
 * CLI findings: a Redis that does not answer was silent (limits quietly held for this process only),
 * "got a undefined" in a malformed line's message, a --keep-header that can never match, a
 * negative --rate reported as an "ambiguous" argument, and results appended to a file that holds
 * something else.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseRequestLine } from '../../src/cli/request-line.js';
import { parseRunOptions } from '../../src/cli/run-options.js';
import {
  cliErrorMessage,
  closedPort,
  type OkServer,
  okServer,
  readResults,
  runCli,
  writeJsonl,
} from './cli-helpers.js';

let dir: string;
let api: OkServer;
let n = 0;
let input: string;
let out: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-fixes-8-'));
  api = await okServer();
});

afterAll(async () => {
  await api.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  n++;
  input = join(dir, `requests-${n}.jsonl`);
  out = join(dir, `results-${n}.jsonl`);
  api.received = 0;
});

function requests(count: number): object[] {
  return Array.from({ length: count }, (_, i) => ({ id: i + 1, url: `${api.url}/v1/${i + 1}` }));
}

describe('--redis that does not answer', () => {
  it('says once on stderr that limits hold for this process only, and counts those requests in the summary', async () => {
    const port = await closedPort();
    writeJsonl(input, requests(5));
    const result = await runCli([
      'run',
      input,
      '--out',
      out,
      '--redis',
      `redis://tollgate:RPASSWORD-8x@127.0.0.1:${port}/0`,
      '--rate',
      '100/s',
      '-H',
      'Authorization: Bearer sk-AUTH-SECRET-8',
      '--progress',
      'none',
    ]);
    expect(result.code, result.stderr).toBe(0);
    // Every request still went out and has its result.
    expect(api.received).toBe(5);
    expect(readResults(out).map((r) => r['ok'])).toEqual([true, true, true, true, true]);

    const warnings = result.stderr.split('\n').filter((line) => line.includes('is not answering'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(
      new RegExp(
        `^tollgate: Redis at redis://\\[redacted\\]@127\\.0\\.0\\.1:${port}/0 is not answering \\(.+\\); ` +
          'limits now hold for this process only \\(25% of each limit\\) until it answers again$',
      ),
    );
    expect(result.stdout).toMatch(
      /^ {2}redis {6}5 requests went through the local fallback while Redis was not answering \(limits held for this process only, not shared\); Redis was still not answering at the end$/m,
    );
    // Those requests ran at the fallback's share: the full limits' pace is no yardstick for them.
    expect(result.stdout).toMatch(
      /your limits allow no less than .* \(pace not judged: some requests ran on the local fallback\)/,
    );
    expect(result.stdout).not.toContain('of the ideal pace');
    const printed = `${result.stdout}\n${result.stderr}`;
    expect(printed).not.toContain('RPASSWORD-8x');
    expect(printed).not.toContain('sk-AUTH-SECRET-8');
  }, 60_000);

  it('hides a short password where it stands alone, not inside the address it also spells', async () => {
    const port = await closedPort();
    writeJsonl(input, requests(2));
    const result = await runCli([
      'run',
      input,
      '--out',
      out,
      '--redis',
      `redis://:1@127.0.0.1:${port}/0`,
      '--progress',
      'none',
    ]);
    expect(result.code, result.stderr).toBe(0);
    const warning = result.stderr.split('\n').find((line) => line.includes('is not answering'));
    expect(warning).toBeDefined();
    // The reason names the address as it is (the password `1` is in it anyway).
    expect(warning).toContain(`127.0.0.1:${port}`);
    expect(warning).not.toMatch(/\[redacted\]\d|\d\[redacted\]/);
  }, 60_000);
});

describe('messages', () => {
  it('names the kind of a wrong value in a request line in plain words, for every type', () => {
    const urlMessage = (url: unknown) => {
      try {
        parseRequestLine(JSON.stringify({ id: 1, url }), 3, undefined);
      } catch (error) {
        return (error as Error).message;
      }
      throw new Error('expected a MalformedLineError');
    };
    expect(urlMessage(undefined)).toBe(
      'line 3: expected `url` to be a string, got nothing (the field is missing)',
    );
    expect(urlMessage(null)).toBe('line 3: expected `url` to be a string, got null');
    expect(urlMessage(['http://x/'])).toBe('line 3: expected `url` to be a string, got an array');
    expect(urlMessage({ href: 'http://x/' })).toBe('line 3: expected `url` to be a string, got an object');
    expect(urlMessage(42)).toBe('line 3: expected `url` to be a string, got a number');
    expect(urlMessage(true)).toBe('line 3: expected `url` to be a string, got a boolean');
    expect(urlMessage('')).toBe('line 3: expected `url` to be a string, got ""');
    expect(() => parseRequestLine('"text"', 1, undefined)).toThrow(
      'line 1: expected a JSON object, got a string',
    );
  });

  it('refuses a --keep-header that is not a header name, naming the option and the value', () => {
    writeJsonl(input, requests(1));
    expect(cliErrorMessage(() => parseRunOptions([input, '--keep-header', 'bad name']))).toBe(
      "Expected --keep-header to be a header name like x-request-id (letters, digits and !#$%&'*+-.^_`|~; no spaces or colons): " +
        'header name "bad…" has a character not allowed in a name at position 4',
    );
    expect(cliErrorMessage(() => parseRunOptions([input, '--keep-header', 'x-cost: 5']))).toMatch(
      /^Expected --keep-header to be a header name .*: header name "x-cost…" has a character not allowed in a name at position 7$/,
    );
    // What follows the first bad character may be a pasted credential: never shown.
    const pasted = cliErrorMessage(() =>
      parseRunOptions([input, '--keep-header', 'Authorization: Bearer sk-live-0123456789abcdef']),
    );
    expect(pasted).toContain('header name "Authorization…"');
    expect(pasted).not.toContain('sk-live');
    expect(pasted).not.toContain('Bearer');
    const config = join(dir, `config-${n}.json`);
    writeFileSync(config, JSON.stringify({ keepHeaders: ['x-ok', 'x bad'] }));
    expect(cliErrorMessage(() => parseRunOptions([input, '--config', config]))).toMatch(
      /^Expected `keepHeaders` in .*config-\d+\.json to be a header name .*: header name "x…" has a character not allowed in a name at position 2$/,
    );
    expect(parseRunOptions([input, '--keep-header', 'X-Request-Cost']).config.keepHeaders).toEqual([
      'x-request-cost',
    ]);
  });

  it('says a rate must be positive for --rate -5/s, --rate=-5/s and --rate 0/s', async () => {
    writeJsonl(input, requests(1));
    const cli = await runCli(['run', input, '--out', out, '--rate', '-5/s']);
    expect(cli.code).toBe(2);
    expect(cli.stderr).toContain(
      'tollgate: Expected --rate to be a positive rate like 50/s or 3000/min, got `-5/s`: a rate must be a positive number',
    );
    expect(cli.stderr).not.toContain('ambiguous');
    for (const args of [['--rate=-5/s'], ['--rate', '0/s'], ['--rate', '-5/s']]) {
      expect(cliErrorMessage(() => parseRunOptions([input, ...args]))).toMatch(
        /^Expected --rate to be a positive rate like 50\/s or 3000\/min, got `(-5|0)\/s`: a rate must be a positive number/,
      );
    }
    expect(cliErrorMessage(() => parseRunOptions([input, '--limit', '-3/min']))).toMatch(
      /^Expected --limit to be a positive rate like 500\/min.*, got `-3\/min`: a rate must be a positive number/,
    );
    expect(api.received).toBe(0);
  });

  it('does not show the dash value of an option that is not a number (a header may be a key)', () => {
    writeJsonl(input, requests(1));
    for (const args of [
      ['-H', '-7f3c9a2b1e8d4f60'],
      ['--header', '-7f3c9a2b1e8d4f60'],
      ['-o', '-5.jsonl'],
      ['--redis', '-1secret'],
    ]) {
      const text = cliErrorMessage(() => parseRunOptions([input, ...args]));
      expect(text).toMatch(/needs a value, and the argument after it starts with a dash \(not shown\)/);
      expect(text).not.toContain(args[1]!.slice(1));
    }
    // A number option's negative value is shown: there is no secret in it.
    expect(cliErrorMessage(() => parseRunOptions([input, '--concurrency', '-5']))).toBe(
      'Expected --concurrency not to be negative, got `-5`. See `tollgate run --help`.',
    );
  });

  it('says a missing id is missing (not "got undefined")', () => {
    expect(() => parseRequestLine(JSON.stringify({ url: 'http://x/' }), 3, undefined)).toThrow(
      'line 3: expected `id` to be a non-empty string or an integer, got nothing (the field is missing)',
    );
  });
});

describe('--out that holds something else', () => {
  it('refuses to append results to a file that is not a results file, and still takes an empty file or earlier results', async () => {
    writeJsonl(input, requests(2));
    const notes = join(dir, `notes-${n}.txt`);
    writeFileSync(notes, 'call the vendor on monday\nkey rotation: done\n');
    const result = await runCli(['run', input, '--out', notes, '--progress', 'none']);
    expect(result.code).toBe(2);
    expect(result.stderr.trim()).toBe(
      `tollgate: --out ${notes} exists and does not hold tollgate results (line 1 is not a result line); ` +
        'nothing was sent. Pick another --out, or move that file away (an empty file, or the results of an earlier run, is fine).',
    );
    expect(readFileSync(notes, 'utf8')).toBe('call the vendor on monday\nkey rotation: done\n');
    // A requests file is not a results file either (its ids would be taken as done).
    const other = join(dir, `other-requests-${n}.jsonl`);
    writeJsonl(other, requests(2));
    const requestsAsOut = await runCli(['run', input, '--out', other, '--progress', 'none']);
    expect(requestsAsOut.code).toBe(2);
    expect(requestsAsOut.stderr).toContain(`--out ${other} exists and does not hold tollgate results`);
    expect(api.received).toBe(0);

    // An empty file is written into; an earlier run's results are resumed.
    writeFileSync(out, '');
    const first = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(first.code, first.stderr).toBe(0);
    expect(readResults(out)).toHaveLength(2);
    writeJsonl(input, requests(3));
    const again = await runCli(['run', input, '--out', out, '--progress', 'none']);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('2 already done (skipped)');
    expect(readResults(out).map((r) => r['id'])).toEqual([1, 2, 3]);
    expect(api.received).toBe(3);
  }, 60_000);
});
