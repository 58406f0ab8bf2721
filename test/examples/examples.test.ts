/**
 * Every example runs to completion (exit 0) and prints what it claims, so examples/ cannot rot.
 * Each is a child process, as a reader would run it: node --import tsx examples/<file>.
 */
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

function runExample(file: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', resolve(root, 'examples', file)], {
      cwd: root,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    child.on('close', (code) => done({ code, stdout, stderr }));
  });
}

const redisUrl = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const redisAnswers = await new Promise<boolean>((done) => {
  const { hostname, port } = new URL(redisUrl);
  const socket = connect({ host: hostname, port: Number(port || 6379) });
  const finish = (ok: boolean) => {
    socket.destroy();
    done(ok);
  };
  socket.setTimeout(1_000, () => finish(false));
  socket.once('connect', () => finish(true));
  socket.once('error', () => finish(false));
});

describe('examples', () => {
  it('01 wraps axios: every request 200 within the documented limit', async () => {
    const r = await runExample('01-axios-third-party.ts');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/60 requests in [\d.]+ s, all 200 OK/);
    expect(r.stdout).toMatch(/busiest second (1\d|20)\/20/);
  });

  it('02 fetch with requests + tokens: settles the budget at what the provider billed', async () => {
    const r = await runExample('02-fetch-llm-tokens.ts');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/server: 40 accepted/);
    const m = /settled (\$[\d.]+) \(the provider billed (\$[\d.]+)\)/.exec(r.stdout);
    expect(m?.[1]).toBe(m?.[2]);
  });

  it('03 daily budget: stops cleanly at the cap, and the second run starts from the spend', async () => {
    const r = await runExample('03-daily-budget.ts');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('first run: sent 12, then stopped: $0.048 spent of $0.05');
    expect(r.stdout).toContain('second run, same day: sent 0');
    expect(r.stdout).toContain('the provider billed $0.048 for 12 calls');
  });

  it('04 batch: urgent calls overtake, the cancelled rest is never sent', async () => {
    const r = await runExample('04-batch-priority-cancel.ts');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/background: \d+ done, \d+ cancelled before sending/);
    expect(r.stderr).not.toContain('MaxListenersExceededWarning');
  });

  // Outside CI without a Redis server this is skipped (and says so); .ci/run starts one.
  it.skipIf(!redisAnswers && process.env['CI'] !== 'true')(
    `05 Redis: three workers share one quota (needs Redis at ${redisUrl})`,
    async () => {
      const r = await runExample('05-redis-shared-quota.ts');
      expect(r.code, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toMatch(/3 workers, 90 calls in [\d.]+ s; busiest second (1\d|2\d|30)\/30/);
      expect(r.stdout).toContain('seconds over the quota: 0');
    },
  );
});
