/**
 * Budgets through the CLI: `tollgate run --budget` stops cleanly at the cap (exit 3, nothing
 * over-spent, a re-run resumes), and `tollgate budget show|reset` reads and resets the ledger file.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';
import { readResults, runCli, writeJsonl } from './cli-helpers.js';

let api: SimulatedApi;
let dir: string;

beforeAll(async () => {
  api = await startSimulatedApi({ policy: { kind: 'none' }, price: 4_000 });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-budget-'));
});

afterAll(async () => {
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});

function nextUtcMidnight(): string {
  const d = new Date();
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1)).toISOString();
}

describe('tollgate budget', () => {
  it('run stops at the cap; show, reset (only with --yes) and resume', async () => {
    const ledger = join(dir, 'ledger.sqlite');
    const input = join(dir, 'requests.jsonl');
    const out = join(dir, 'results.jsonl');
    writeJsonl(
      input,
      Array.from({ length: 5 }, (_, i) => ({ id: i + 1, url: `${api.url}/v1/paid/${i + 1}` })),
    );
    const run = [
      'run',
      input,
      '--out',
      out,
      '--budget',
      '0.01usd/day',
      '--price',
      '0.004usd',
      '--ledger',
      ledger,
    ];

    const empty = await runCli(['budget', 'show', '--ledger', ledger]);
    expect(empty.code).toBe(0);
    expect(empty.stdout).toContain('No ledger at');

    const first = await runCli([...run, '--progress', 'none']);
    expect(first.code, first.stderr).toBe(3);
    expect(first.stdout).toMatch(/stopped by budget `day` \(\$0\.008 of \$0\.01\)/);
    expect(first.stdout).toContain('$0.008 of $0.01 (budget `day`, day;');
    expect(readResults(out)).toHaveLength(2);
    expect(api.stats().accepted).toBe(2);

    const shown = await runCli(['budget', 'show', '--ledger', ledger]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/budget\s+spent\s+reserved\s+limit\s+remaining\s+resets at/);
    expect(shown.stdout).toMatch(/day\s+\$0\.008\s+\$0\.00\s+\$0\.01\s+\$0\.002/);
    expect(shown.stdout).toContain(nextUtcMidnight());
    const json = JSON.parse((await runCli(['budget', '--json', '--ledger', ledger])).stdout) as unknown[];
    expect(json).toEqual([
      expect.objectContaining({
        budget: 'day',
        spentMicros: 8_000,
        limitMicros: 10_000,
        resetsAt: nextUtcMidnight(),
      }),
    ]);

    const again = await runCli([...run, '--progress', 'none']);
    expect(again.code).toBe(3);
    expect(again.stdout).toContain('2 already done (skipped)');
    expect(api.stats().accepted).toBe(2);

    const unconfirmed = await runCli(['budget', 'reset', '--ledger', ledger]);
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stderr).toContain('Add --yes to do it');
    expect((await runCli(['budget', 'show', '--ledger', ledger])).stdout).toContain('$0.008');

    const reset = await runCli(['budget', 'reset', '--budget', 'day', '--yes', '--ledger', ledger]);
    expect(reset.code).toBe(0);
    expect(reset.stdout).toContain('Reset budget `day`');
    expect((await runCli(['budget', 'show', '--ledger', ledger])).stdout).toContain('no budget has spend');

    const resumed = await runCli([...run, '--progress', 'none']);
    expect(resumed.code).toBe(3);
    expect(readResults(out)).toHaveLength(4);
    expect(api.stats().accepted).toBe(4);
    expect(new Set(readResults(out).map((r) => r['id'])).size).toBe(4);
  }, 40_000);

  it('refuses a bad subcommand', async () => {
    const bad = await runCli(['budget', 'drop']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('Expected `tollgate budget show` or `tollgate budget reset`');
  });

  it('refuses --key-prefix without --redis, and a Redis nobody answers at without showing its password', async () => {
    const prefixAlone = await runCli(['budget', '--key-prefix', 'x']);
    expect(prefixAlone.code).toBe(2);
    expect(prefixAlone.stderr).toContain('--key-prefix goes with --redis');
    // Port 1: nothing listens there.
    const down = await runCli(['budget', '--redis', 'redis://:S3CRET@127.0.0.1:1']);
    expect(down.code).toBe(2);
    expect(down.stderr).toContain('127.0.0.1:1');
    expect(`${down.stdout}${down.stderr}`).not.toContain('S3CRET');
    // Not a URL at all: a usage error, not a crash.
    const garbage = await runCli(['budget', '--redis', 'not a url']);
    expect(garbage.code).toBe(2);
    expect(garbage.stderr).not.toMatch(/at .*\.ts:\d+/);
  }, 30_000);
});

/** A server on 127.0.0.1 answering 200 after 10 ms, with the actual price in `x-request-cost`. */
async function pricedServer(price: string) {
  let received = 0;
  const server = createServer((_req, res) => {
    received++;
    setTimeout(
      () => res.writeHead(200, { 'x-request-cost': price, 'content-type': 'application/json' }).end('{}'),
      10,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    received: () => received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('tollgate run --budget with actual prices below the estimate', () => {
  const runPriced = async (server: { url: string }, name: string, count: number) => {
    const input = join(dir, `${name}.jsonl`);
    const out = join(dir, `${name}.out.jsonl`);
    writeJsonl(
      input,
      Array.from({ length: count }, (_, i) => ({ id: i + 1, url: `${server.url}/v1/${i + 1}` })),
    );
    const args = ['run', input, '--out', out, '--budget', '0.1usd/day', '--price', '0.01usd'];
    args.push(
      '--price-header',
      'x-request-cost',
      '--concurrency',
      '2',
      '--ledger',
      'memory',
      '--progress',
      'none',
    );
    return { result: await runCli(args), results: readResults(out) };
  };

  it("runs on while the run's own reservations, not the spend, fill the budget", async () => {
    // Reserved at 0.01 each, settled at 0.001: 50 requests spend 0.05 of 0.10.
    const server = await pricedServer('0.001');
    try {
      const { result, results } = await runPriced(server, 'cheap', 50);
      expect(result.code, result.stdout + result.stderr).toBe(0);
      expect(results).toHaveLength(50);
      expect(server.received()).toBe(50);
      expect(result.stdout).toContain('$0.05 of $0.10');
    } finally {
      await server.close();
    }
  });

  it("a price header in another currency than the budget's is no answer: the estimate stands", async () => {
    // 0.001 EUR is not 0.001 USD: counted 1:1, 10 requests would have spent $0.01, not $0.10.
    const server = await pricedServer('0.001 EUR');
    try {
      const { result, results } = await runPriced(server, 'euros', 10);
      expect(result.code, result.stdout + result.stderr).toBe(0);
      expect(results).toHaveLength(10);
      expect(result.stdout).toContain('$0.10 of $0.10');
    } finally {
      await server.close();
    }
  });

  it('stops where the spend leaves no room for one more estimate, never over the cap', async () => {
    // Settled at 0.009: after 11 (0.099), one more estimate (0.01) would not fit.
    const server = await pricedServer('0.009');
    try {
      const { result, results } = await runPriced(server, 'dear', 30);
      expect(result.code, result.stdout + result.stderr).toBe(3);
      expect(results).toHaveLength(11);
      expect(server.received()).toBe(11);
      expect(result.stdout).toContain('$0.099 of $0.10');
    } finally {
      await server.close();
    }
  });
});

describe('tollgate run --budget, two processes on one ledger', () => {
  it('each waits for the reservations of the other, stops when the spend fills the budget, and says so (exit 3)', async () => {
    // 40 + 40 requests at $0.01 against $0.50: 50 are sent between them, 30 are not.
    const server = await pricedServer('0.01');
    try {
      const ledger = join(dir, 'shared-ledger.sqlite');
      const runOne = (name: string) => {
        const input = join(dir, `${name}.jsonl`);
        writeJsonl(
          input,
          Array.from({ length: 40 }, (_, i) => ({
            id: `${name}-${i}`,
            url: `${server.url}/v1/${name}/${i}`,
          })),
        );
        const out = join(dir, `${name}.out.jsonl`);
        const args = [
          'run',
          input,
          '--out',
          out,
          '--budget',
          '0.5usd/day',
          '--price',
          '0.01usd',
          '--concurrency',
          '4',
        ];
        args.push('--ledger', ledger, '--progress', 'none');
        return { out, done: runCli(args) };
      };
      const a = runOne('a');
      const b = runOne('b');
      const [ra, rb] = await Promise.all([a.done, b.done]);
      const results = readResults(a.out).length + readResults(b.out).length;
      expect(results).toBe(50);
      expect(server.received()).toBe(50);
      for (const r of [ra, rb]) {
        // Every process ends with its summary; one with requests left unsent exits 3.
        expect(r.stdout, r.stderr).toContain('Summary:');
        expect([0, 3]).toContain(r.code);
      }
      expect([ra.code, rb.code]).toContain(3);
      const shown = await runCli(['budget', 'show', '--ledger', ledger]);
      expect(shown.stdout).toMatch(/\$0\.50\s+\$0\.00\s+\$0\.50/);
    } finally {
      await server.close();
    }
  }, 60_000);
});

describe('tollgate budget --redis', async () => {
  const { REDIS_URL, hasRedisServer, redisSkipReason } = await import('../helpers/redis-server.js');
  const skip = await redisSkipReason();
  if (skip) console.log(`[cli budget --redis] skipped (${skip})`);
  it.skipIf(skip !== false)(
    'shows and resets the budgets shared gates keep in Redis',
    async () => {
      const { RedisLedger } = await import('../../src/redis/redis-ledger.js');
      const { createAsyncBudgetGuard } = await import('../../src/redis/async-budget-guard.js');
      const keyPrefix = `cli-budget-${process.pid}-${Date.now()}`;
      const ledger = new RedisLedger({ redis: REDIS_URL, keyPrefix });
      const guard = createAsyncBudgetGuard({ budgets: { name: 'day', limit: '$1', period: 'day' }, ledger });
      const reservation = await guard.reserve(250_000);
      await guard.settle(reservation, 200_000);
      await ledger.close();
      const args = ['budget', '--redis', REDIS_URL, '--key-prefix', keyPrefix];
      const shown = await runCli(args);
      expect(shown.code).toBe(0);
      expect(shown.stdout).toContain(`key prefix ${keyPrefix}`);
      expect(shown.stdout).toMatch(/day\s+\$0\.20\s+\$0\.00\s+\$1\.00\s+\$0\.80/);
      const json = JSON.parse((await runCli([...args, '--json'])).stdout) as { spentMicros: number }[];
      expect(json.map((r) => r.spentMicros)).toEqual([200_000]);
      expect((await runCli(['budget', 'reset', ...args.slice(1)])).code).not.toBe(0);
      expect((await runCli(['budget', 'reset', '--yes', ...args.slice(1)])).code).toBe(0);
      expect((await runCli([...args, '--json'])).stdout.trim()).toBe('[]');
      // Both ledgers at once is a usage error.
      const both = await runCli([...args, '--ledger', 'x.sqlite']);
      expect(both.code).not.toBe(0);
      expect(both.stderr).toContain('--ledger or --redis');
    },
    60_000,
  );

  // Found by review (session 16): a password holding an unencoded '@' (ioredis splits the URL at
  // the last one) was printed in part: "Ledger redis://ss@127.0.0.1:...".
  it.skipIf(skip !== false || !hasRedisServer())(
    'never prints the password of the URL',
    async () => {
      const { DedicatedRedis, freePort } = await import('../helpers/redis-server.js');
      const { Redis } = await import('ioredis');
      const server = new DedicatedRedis(await freePort());
      await server.start();
      try {
        const admin = new Redis(server.url);
        await admin.call('ACL', 'SETUSER', 'bob', 'on', '>p@ss', '~*', '&*', '+@all');
        admin.disconnect();
        const url = `redis://bob:p@ss@127.0.0.1:${server.port}`;
        const shown = await runCli(['budget', '--redis', url]);
        expect(shown.code).toBe(0);
        expect(shown.stdout).toContain(`redis://127.0.0.1:${server.port}`);
        expect(`${shown.stdout}${shown.stderr}`).not.toMatch(/p@ss|ss@|bob/);
      } finally {
        await server.stop();
      }
    },
    60_000,
  );
});
