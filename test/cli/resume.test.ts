/**
 * Must show: `tollgate run` over 1,000 requests against the simulated API loses no result across a
 * SIGKILL and a SIGINT mid-run followed by a resume (every id exactly once in the output), and the
 * server never sees an over-limit window.
 *
 * The server enforces 100 requests/s (sliding window) and sends IETF RateLimit headers; the client
 * is told `--limit 90/s` (a 10% margin for network jitter, see docs/algorithms.md "A margin at the
 * provider"). Limit state lives in the process (no --redis), so a resumed run cannot know what the
 * killed one sent in its last second: the test waits one window before each resume, as a user
 * restarting a crashed job would see happen naturally.
 */
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';
import {
  closedPort,
  lineCount,
  readResults,
  runCli,
  sleep,
  spawnCli,
  waitFor,
  writeJsonl,
} from './cli-helpers.js';

const total = 1_000;
let api: SimulatedApi;
let dir: string;

beforeAll(async () => {
  api = await startSimulatedApi({
    policy: { kind: 'sliding-window', limit: 100, intervalMs: 1_000 },
    headers: 'ietf-structured',
    latencyMs: { min: 5, max: 25 },
  });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-resume-'));
});

afterAll(async () => {
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('tollgate run: kill, interrupt, resume', () => {
  it('writes every id exactly once across a SIGKILL and a SIGINT, and never exceeds the server limit', async () => {
    const input = join(dir, 'requests.jsonl');
    const out = join(dir, 'results.jsonl');
    writeJsonl(
      input,
      Array.from({ length: total }, (_, i) => ({
        id: `req-${i + 1}`,
        method: i % 4 === 0 ? 'POST' : 'GET',
        url: `${api.url}/v1/items/${i + 1}`,
        ...(i % 4 === 0 ? { body: { n: i + 1 } } : {}),
      })),
    );
    const args = [
      'run',
      input,
      '--out',
      out,
      '--limit',
      '90/s',
      '--concurrency',
      '16',
      '--progress',
      'plain',
    ];

    // 1. Killed without warning mid-run.
    const first = spawnCli(args);
    await waitFor(() => lineCount(out) >= 250, 20_000, '250 results before the SIGKILL');
    first.child.kill('SIGKILL');
    const killed = await first.done;
    expect(killed.signal).toBe('SIGKILL');
    const afterKill = lineCount(out);
    expect(afterKill).toBeGreaterThanOrEqual(250);
    expect(afterKill).toBeLessThan(total);
    await sleep(1_000);

    // 2. Resumed, then interrupted with Ctrl-C: in-flight requests finish and are written.
    const second = spawnCli(args);
    await waitFor(() => lineCount(out) >= afterKill + 250, 20_000, '250 more results before the SIGINT');
    second.child.kill('SIGINT');
    const interrupted = await second.done;
    expect(interrupted.code, interrupted.stderr).toBe(130);
    expect(interrupted.stdout).toMatch(/already done \(skipped\)/);
    expect(interrupted.stdout).toMatch(
      /interrupted: \d+ results? written; run the same command again to resume/,
    );
    const afterInterrupt = lineCount(out);
    expect(afterInterrupt).toBeLessThan(total);
    await sleep(1_000);

    // 3. Resumed to the end.
    const third = await spawnCli(args).done;
    expect(third.code, third.stdout + third.stderr).toBe(0);
    expect(third.stdout).toContain(`${afterInterrupt} already done (skipped)`);

    const results = readResults(out);
    const ids = results.map((r) => r['id']);
    expect(ids).toHaveLength(total);
    expect(new Set(ids).size).toBe(total);
    for (let i = 1; i <= total; i++) expect(ids).toContain(`req-${i}`);
    expect(results.every((r) => r['ok'] === true && r['status'] === 200)).toBe(true);

    const stats = api.stats();
    console.log(
      `resume: ${afterKill} results at the SIGKILL, ${afterInterrupt} after the SIGINT, ${results.length} at the end; ` +
        `server accepted ${stats.accepted} (${stats.accepted - total} sent twice), ${stats.rejected} × 429, ` +
        `busiest second ${stats.maxAcceptedInWindow(1_000).requests}, over-limit windows ${stats.overLimitWindows()}`,
    );
    expect(stats.overLimitWindows()).toBe(0);
    expect(stats.rejected).toBe(0);
    // Only requests in flight at the SIGKILL can have been sent twice (their results were lost).
    expect(stats.accepted).toBeGreaterThanOrEqual(total);
    expect(stats.accepted - total).toBeLessThanOrEqual(16);
  }, 60_000);
});

describe('tollgate run: resume with failures in the results', () => {
  it('exits 4 while failures of this input remain, and says how many and how to retry them', async () => {
    const input = join(dir, 'failing.jsonl');
    const out = join(dir, 'failing.results.jsonl');
    const down = { id: 'down', url: `http://127.0.0.1:${await closedPort()}/unreachable` };
    writeJsonl(input, [{ id: 'up', url: `${api.url}/v1/up` }, down]);
    const args = ['run', input, '--out', out, '--progress', 'none'];
    const first = await runCli(args);
    expect(first.code).toBe(4);

    // Nothing to send: the earlier failure still stands.
    const again = await runCli(args);
    expect(again.code, again.stdout).toBe(4);
    expect(again.stdout).toContain('2 already done (skipped; 1 of them failed earlier)');
    expect(again.stdout).toContain(
      'partial failure: 1 earlier failure still in the results (not sent again in this run); re-run with --retry-failed to send them again',
    );
    expect(again.stdout).not.toContain('nothing to do');

    // New requests all succeed: still a partial failure.
    appendFileSync(input, `${JSON.stringify({ id: 'new', url: `${api.url}/v1/new` })}\n`);
    const more = await runCli(args);
    expect(more.code, more.stdout).toBe(4);
    expect(more.stdout).toContain('1 sent · 1 ok · 0 failed');
    expect(readResults(out)).toHaveLength(3);

    // Once the failure is gone from this input, the run is a success.
    writeJsonl(input, [
      { id: 'up', url: `${api.url}/v1/up` },
      { id: 'new', url: `${api.url}/v1/new` },
    ]);
    const clean = await runCli(args);
    expect(clean.code, clean.stdout).toBe(0);
    expect(clean.stdout).toContain('nothing to do');
  });
});
