/**
 * Defects a review of the CLI reproduced: secrets echoed or forwarded (an unquoted -H, a redirect to
 * another origin, a URL fragment, a Redis password), a misspelt limit unit that limited nothing, and
 * budget commands that reset more, or less, than they said.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { setUpGate } from '../../src/cli/gate-setup.js';
import { parseLimit, parseRate } from '../../src/cli/parse-units.js';
import { redact, safeUrlText, urlSecrets } from '../../src/cli/redact.js';
import { parseRunOptions } from '../../src/cli/run-options.js';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';
import { cliErrorMessage, readResults, runCli, writeJsonl } from './cli-helpers.js';

// This build has the shared gate; without these modules it has none, which is the path under test.
vi.mock('../../src/redis/index.js', () => ({}));
vi.mock('../../src/redis/shared-gate.js', () => ({}));

let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-review-'));
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('run arguments', () => {
  it('says how many arguments an unquoted -H left, never their text', () => {
    const input = join(dir, 'r.jsonl');
    writeJsonl(input, [{ id: 1, url: 'http://127.0.0.1:1/' }]);
    const text = cliErrorMessage(() =>
      parseRunOptions([input, '-H', 'Authorization:', 'Bearer', 'sk-live-SECRETVALUE123']),
    );
    expect(text).not.toContain('SECRETVALUE123');
    expect(text).not.toContain('sk-live');
    expect(text).toContain('got 3 arguments');
    expect(text).toContain(input);
    expect(text).toMatch(/quote values with spaces/);
  });
});

describe('limit units', () => {
  it('refuses a misspelt unit and an exponent, naming the flag and the value', () => {
    expect(cliErrorMessage(() => parseLimit('2tokns/s'))).toBe(
      "Expected --limit's unit to be requests or tokens (did you mean tokens?), got `tokns` in `2tokns/s`",
    );
    expect(cliErrorMessage(() => parseLimit('1e3/s'))).toBe(
      'Expected --limit like 500/min, 90000tokens/min or sliding-log:20/min, got `1e3/s`',
    );
    expect(cliErrorMessage(() => parseLimit('5reqests/min', '`limits[0]` in job.json'))).toMatch(
      /^Expected `limits\[0\]` in job.json's unit .*did you mean requests\?.*`5reqests\/min`/,
    );
    expect(cliErrorMessage(() => parseRate('50reqests/s', undefined))).toMatch(/^Expected --rate's unit/);
  });

  it('keeps every documented form, and units of your own', () => {
    for (const [text, unit] of [
      ['500/min', 'requests'],
      ['500 requests/minute', 'requests'],
      ['1 request/s', 'requests'],
      ['5reqs/s', 'requests'],
      ['90000tokens/min', 'tokens'],
      ['1token/s', 'tokens'],
      ['90,000 tok/min', 'tokens'],
      ['sliding-log:20/min', 'requests'],
      ['40points/s', 'points'],
    ] as const) {
      expect(parseLimit(text), text).toMatchObject({ unit });
    }
    expect(parseRate('1000 requests / hour', undefined)).toMatchObject({ limit: 1_000 });
  });
});

describe('redaction', () => {
  it('replaces the values of a URL fragment as those of a query', () => {
    const text = safeUrlText('http://exa mple.com/#access_token=QSECRET0008&state=x');
    expect(text).toBe('http://exa mple.com/#access_token=[redacted]&state=[redacted]');
    const url = new URL('http://127.0.0.1:1/?k=QSECRET0011#frag=QSECRET0011f');
    expect(redact(`failed at ${url.href} (QSECRET0011f)`, urlSecrets(url))).not.toContain('QSECRET');
  });

  it('never prints the password of a --redis URL the build cannot use', async () => {
    const setUp = setUpGate({
      limits: [],
      perHost: false,
      budgets: [],
      ledger: undefined,
      headerAdapt: true,
      adapt: undefined,
      maxQueueTimeMs: Number.POSITIVE_INFINITY,
      maxQueue: 10_000,
      redis: 'redis://user:RSECRETPASS99@127.0.0.1:6379/0',
      redisPrefix: undefined,
    });
    await expect(setUp).rejects.toThrow(/Redis mode is not available in this build.*127\.0\.0\.1:6379/);
    await expect(setUp).rejects.not.toThrow(/RSECRETPASS99/);
  });
});

interface Seen {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A server that redirects `/r?status=S&to=URL` and records every other request. */
async function startServer(): Promise<{ server: Server; url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    let body = '';
    req.setEncoding('utf8').on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      if (u.pathname === '/r') {
        res.writeHead(Number(u.searchParams.get('status')), { location: u.searchParams.get('to')! });
        res.end();
        return;
      }
      if (u.pathname === '/loop') {
        seen.push({ method: req.method!, path: u.pathname, headers: req.headers, body });
        res.writeHead(302, { location: '/loop' });
        res.end();
        return;
      }
      seen.push({ method: req.method!, path: u.pathname + u.search, headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

describe('redirects', () => {
  it("send -H and line headers to the request's origin only; method and body as fetch treats them", async () => {
    const a = await startServer();
    const b = await startServer();
    try {
      const to = (server: string, path: string, status: number) =>
        `${a.url}/r?status=${status}&to=${encodeURIComponent(`${server}${path}`)}`;
      const input = join(dir, 'redirects.jsonl');
      const out = join(dir, 'redirects.results.jsonl');
      const headers = { 'x-line-key': 'LSECRET0001' };
      writeJsonl(input, [
        { id: 'cross', url: to(b.url, '/cross', 302), headers },
        { id: 'same', url: to(a.url, '/same', 302), headers },
        { id: 'see-other', method: 'POST', url: to(b.url, '/see-other', 303), body: { n: 1 } },
        { id: 'found-post', method: 'POST', url: to(a.url, '/found-post', 302), body: { n: 2 } },
        { id: 'temporary', method: 'PUT', url: to(b.url, '/temporary', 307), body: { n: 3 }, headers },
        { id: 'permanent', method: 'POST', url: to(a.url, '/permanent', 308), body: { n: 4 } },
        { id: 'loop', url: `${a.url}/loop` },
        // Garbage a server may send: a target that is not http(s), one no URL parser reads, none.
        {
          id: 'not-http',
          url: `${a.url}/r?status=302&to=${encodeURIComponent('file:///etc/passwd')}`,
          headers,
        },
        { id: 'unparsable', url: `${a.url}/r?status=301&to=${encodeURIComponent('http://[::1')}`, headers },
        { id: 'no-location', url: `${a.url}/r?status=307&to=` },
      ]);
      const run = await runCli([
        'run',
        input,
        '--out',
        out,
        '--progress',
        'none',
        '-H',
        'x-api-key: HSECRET0001',
      ]);
      expect(run.code, run.stderr).toBe(4);

      const at = (server: { seen: Seen[] }, path: string) => server.seen.find((s) => s.path === path)!;
      // Another origin: none of the user's headers, whatever the status.
      for (const path of ['/cross', '/see-other', '/temporary']) {
        expect(at(b, path).headers['x-api-key'], path).toBeUndefined();
        expect(at(b, path).headers['x-line-key'], path).toBeUndefined();
      }
      // The same origin: all of them.
      expect(at(a, '/same').headers).toMatchObject({
        'x-api-key': 'HSECRET0001',
        'x-line-key': 'LSECRET0001',
      });
      expect(at(a, '/permanent').headers['x-api-key']).toBe('HSECRET0001');
      // 303 and 302 after a POST: a GET without a body; 307 and 308: method and body kept.
      expect(at(b, '/see-other')).toMatchObject({ method: 'GET', body: '' });
      expect(at(b, '/see-other').headers['content-type']).toBeUndefined();
      expect(at(a, '/found-post')).toMatchObject({ method: 'GET', body: '' });
      expect(at(b, '/temporary')).toMatchObject({ method: 'PUT', body: '{"n":3}' });
      expect(at(b, '/temporary').headers['content-type']).toBe('application/json');
      expect(at(a, '/permanent')).toMatchObject({ method: 'POST', body: '{"n":4}' });
      // At most 5 redirects: the first request and 5 hops, then a failure.
      expect(a.seen.filter((s) => s.path === '/loop')).toHaveLength(6);
      const results = Object.fromEntries(readResults(out).map((r) => [r['id'], r]));
      expect(results['loop']).toMatchObject({ ok: false, error: { code: 'ERR_NETWORK' } });
      expect(results['cross']).toMatchObject({ ok: true, status: 200 });
      expect(results['not-http']).toMatchObject({ ok: false, error: { code: 'ERR_NETWORK' } });
      expect(results['unparsable']).toMatchObject({ ok: false, error: { code: 'ERR_NETWORK' } });
      // An empty Location resolves to the URL itself: followed until the bound, then a failure.
      expect(results['no-location']).toMatchObject({ ok: false, error: { code: 'ERR_NETWORK' } });
      expect(JSON.stringify(results) + run.stderr).not.toMatch(/LSECRET|HSECRET/);
    } finally {
      a.server.close();
      b.server.close();
    }
  }, 30_000);

  it('a POST redirected (303) to a page that answers 429 is not sent again: the 429 is its result', async () => {
    const methods: string[] = [];
    let gets = 0;
    const server = createServer((req, res) => {
      req.resume().on('end', () => {
        methods.push(req.method!);
        if (req.method === 'POST') {
          res.writeHead(303, { location: '/orders/1' }).end();
          return;
        }
        gets++;
        res.writeHead(gets === 1 ? 429 : 200, { 'retry-after': '1' }).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const input = join(dir, 'prg.jsonl');
      const out = join(dir, 'prg.results.jsonl');
      writeJsonl(input, [{ id: 'order', method: 'POST', url: `${url}/orders`, body: { item: 1 } }]);
      const run = await runCli(['run', input, '--out', out, '--progress', 'none']);
      expect(run.code, run.stderr).toBe(4);
      expect(methods).toEqual(['POST', 'GET']);
      expect(readResults(out)).toMatchObject([{ id: 'order', status: 429, ok: false, attempts: 1 }]);
    } finally {
      server.close();
    }
  }, 30_000);
});

describe('budget hints and resets', () => {
  let api: SimulatedApi;

  beforeAll(async () => {
    api = await startSimulatedApi({ policy: { kind: 'none' } });
  });

  afterAll(async () => {
    await api?.close();
  });

  it('a budget stop suggests resetting that budget in that ledger, and the command does only that', async () => {
    const ledger = join(dir, 'hint-ledger.sqlite');
    const input = join(dir, 'hint.jsonl');
    writeJsonl(
      input,
      Array.from({ length: 4 }, (_, i) => ({ id: i, url: `${api.url}/v1/paid/${i}` })),
    );
    const args = ['run', input, '--progress', 'none', '--price', '0.004usd', '--ledger', ledger];
    const stopped = await runCli([...args, '--budget', 'daily=0.01usd/day', '--budget', 'weekly=1usd/week']);
    expect(stopped.code, stopped.stderr).toBe(3);
    const hint = /\(or `tollgate (budget reset [^`]*)`\)/.exec(stopped.stdout)?.[1];
    expect(hint).toBe(`budget reset --ledger ${ledger} --budget daily --yes`);

    const reset = await runCli(hint!.split(' '));
    expect(reset.code, reset.stderr).toBe(0);
    const left = JSON.parse((await runCli(['budget', '--json', '--ledger', ledger])).stdout) as {
      budget: string;
      spentMicros: number;
    }[];
    expect(left).toEqual([expect.objectContaining({ budget: 'weekly', spentMicros: 8_000 })]);
  }, 30_000);

  it('refuses to reset a budget the ledger does not know, listing those it does (exit 2)', async () => {
    const ledger = join(dir, 'known-ledger.sqlite');
    const input = join(dir, 'known.jsonl');
    writeJsonl(input, [{ id: 1, url: `${api.url}/v1/paid/1` }]);
    const run = await runCli([
      ...['run', input, '--progress', 'none', '--price', '0.004usd', '--ledger', ledger],
      ...['--budget', 'daily=1usd/day', '--budget', 'weekly=5usd/week'],
    ]);
    expect(run.code, run.stderr).toBe(0);

    const reset = await runCli(['budget', 'reset', '--budget', 'nosuch', '--yes', '--ledger', ledger]);
    expect(reset.code).toBe(2);
    expect(reset.stderr).toContain('No budget `nosuch`');
    expect(reset.stderr).toContain('known budgets: daily, weekly');
    expect(reset.stdout).not.toContain('Reset');
  }, 30_000);
});
