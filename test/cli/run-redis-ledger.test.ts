/**
 * `tollgate run --redis URL --ledger redis`: budgets recorded in the Redis ledger, shared by every
 * process using it (without it, each machine's ledger file holds its own budget).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseRunOptions } from '../../src/cli/run-options.js';
import {
  DedicatedRedis,
  freePort,
  hasRedisServer,
  REDIS_URL,
  redisSkipReason,
} from '../helpers/redis-server.js';
import {
  cliErrorMessage,
  closedPort,
  type OkServer,
  okServer,
  readResults,
  runCli,
  sleep,
  spawnCli,
  waitFor,
  writeJsonl,
} from './cli-helpers.js';

const skip = await redisSkipReason();
if (skip) console.log(`[cli run --ledger redis] Redis suites skipped (${skip})`);

let dir: string;
let api: OkServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-ledger-'));
  api = await okServer();
});

afterAll(async () => {
  await api.close();
  rmSync(dir, { recursive: true, force: true });
});

function input(name: string, count: number): string {
  const path = join(dir, `${name}.jsonl`);
  writeJsonl(
    path,
    Array.from({ length: count }, (_, i) => ({ id: i + 1, url: `${api.url}/v1/${name}/${i + 1}` })),
  );
  return path;
}

/**
 * `tollgate run` of `count` requests named `name` (results in `<name>.results.jsonl`), budgets in the
 * Redis ledger at `redis`: `budget`, $0.001 a request unless `extra` says otherwise.
 */
function ledgerRun(
  name: string,
  count: number,
  redis: string,
  budget: string,
  extra: string[] = [],
): string[] {
  return [
    'run',
    input(name, count),
    '--out',
    join(dir, `${name}.results.jsonl`),
    '--redis',
    redis,
    '--ledger',
    'redis',
    '--budget',
    budget,
    '--price',
    '0.001usd',
    '--progress',
    'none',
    ...extra,
  ];
}

describe('--ledger redis, checked before anything runs', () => {
  it('needs --redis', () => {
    expect(
      cliErrorMessage(() =>
        parseRunOptions([input('alone', 1), '--ledger', 'redis', '--budget', '1usd/day']),
      ),
    ).toBe('--ledger redis records budgets in the Redis that --redis names: give --redis URL too');
  });

  it('--redis with a budget in the ledger file says the budget is not shared; --ledger redis or memory does not', () => {
    const file = input('warn', 1);
    const base = [file, '--redis', 'redis://127.0.0.1:6379', '--budget', '1usd/day', '--price', '0.01usd'];
    expect(parseRunOptions(base).warnings.join('\n')).toContain(
      "Budgets are recorded in this machine's ledger file, not shared through --redis",
    );
    for (const ledger of ['redis', 'memory']) {
      const { warnings, config } = parseRunOptions([...base, '--ledger', ledger]);
      expect(warnings.join('\n')).not.toContain('not shared through --redis');
      expect(config.ledger).toBe(ledger);
    }
    // A file of that name is ./redis.
    expect(parseRunOptions([...base, '--ledger', './redis'], dir).config.ledger).toBe(join(dir, 'redis'));
  });
});

describe('--ledger redis, garbage in', () => {
  it('a config file says it as "redis" (a word, as on the command line); anything but a string is refused, naming it', () => {
    const file = input('config', 1);
    const config = join(dir, 'ledger-config.json');
    writeFileSync(
      config,
      JSON.stringify({ redis: 'redis://127.0.0.1:6379', ledger: 'redis', budget: '1usd/day' }),
    );
    expect(parseRunOptions([file, '-c', config]).config.ledger).toBe('redis');
    for (const bad of [{ path: 'x' }, ['redis'], true, null]) {
      writeFileSync(config, JSON.stringify({ ledger: bad, budget: '1usd/day' }));
      expect(cliErrorMessage(() => parseRunOptions([file, '-c', config]))).toBe(
        `Expected \`ledger\` in ${config} to be a string, got \`${JSON.stringify(bad)}\``,
      );
    }
  });

  it('a key prefix Redis keys cannot take is refused before anything is sent, naming the flags', async () => {
    api.received = 0;
    const result = await runCli(
      ledgerRun('prefix', 2, 'redis://:PREFIX-PW@127.0.0.1:6379', '1usd/day', ['--redis-prefix', 'a b{x}']),
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      'Cannot open the budget ledger at --redis with --redis-prefix: Expected `ledger.keyPrefix`',
    );
    expect(result.stderr).not.toContain('PREFIX-PW');
    expect(api.received).toBe(0);
  });
});

describe.skipIf(skip !== false)('--ledger redis against a real Redis', () => {
  it('two runs at once share one budget: together they send what it pays for, no more', async () => {
    const prefix = `cli-ledger-${process.pid}-${Date.now()}`;
    api.received = 0;
    // $0.01 a day at $0.001 a request: 10 requests in all, of the 30 the two runs hold.
    const run = (name: string) =>
      runCli(ledgerRun(name, 15, REDIS_URL, '0.01usd/day', ['--redis-prefix', prefix]));
    const [a, b] = await Promise.all([run('a'), run('b')]);
    expect(api.received).toBe(10);
    for (const result of [a, b]) {
      // Exit 3: stopped by the budget.
      expect(result.code, result.stderr).toBe(3);
      expect(result.stdout).toContain(
        `ledger     Redis, key prefix ${prefix} (shared with every process using it)`,
      );
      expect(result.stdout).toContain(
        `(or \`tollgate budget reset --redis URL --key-prefix ${prefix} --budget day --yes\`)`,
      );
    }
    const ok = [
      ...readResults(join(dir, 'a.results.jsonl')),
      ...readResults(join(dir, 'b.results.jsonl')),
    ].filter((r) => r['ok'] === true);
    expect(ok).toHaveLength(10);
    // The same ledger `tollgate budget --redis` reads.
    const shown = await runCli(['budget', '--redis', REDIS_URL, '--key-prefix', prefix]);
    expect(shown.stdout).toMatch(/^day +\$0\.01 +\$0\.00 +\$0\.01 +\$0\.00 /m);
    await runCli(['budget', 'reset', '--redis', REDIS_URL, '--key-prefix', prefix, '--yes']);
  }, 60_000);
});

describe('--ledger redis with a Redis that does not answer', () => {
  it('sends nothing that would spend money (fail-closed): the requests wait for it, and a Ctrl-C leaves them for a re-run', async () => {
    const port = await closedPort();
    api.received = 0;
    const out = join(dir, 'down.results.jsonl');
    const cli = spawnCli(ledgerRun('down', 3, `redis://:LEDGER-PW-1@127.0.0.1:${port}`, '1usd/day'));
    await waitFor(
      () => cli.stderr().includes('the budget ledger in Redis is not answering'),
      20_000,
      'the warning',
    );
    // Asked again for a while (250 ms, then 500, 1,000...): still nothing sent, the warning once.
    await sleep(1_000);
    cli.child.kill('SIGINT');
    const result = await cli.done;
    expect(api.received).toBe(0);
    expect(result.code, result.stderr).toBe(130);
    const warnings = result.stderr.split('\n').filter((line) => line.includes('is not answering'));
    expect(warnings).toHaveLength(1);
    // The client's reason, said once (it was repeated after the message that holds it).
    expect(warnings[0]).toMatch(/\(Redis at 127\.0\.0\.1:\d+ ledger reserve failed: \S/);
    expect(warnings[0]).not.toMatch(/(.{20,}): \1/);
    // No results: a re-run sends all three.
    expect(readResults(out)).toEqual([]);
    expect(`${result.stdout}${result.stderr}`).not.toContain('LEDGER-PW-1');
  }, 60_000);

  describe.skipIf(skip !== false || !hasRedisServer())('an outage mid-run', () => {
    it('holds the requests while Redis is down and sends them when it is back: every one once, none failed', async () => {
      const redis = new DedicatedRedis(await freePort());
      await redis.start();
      try {
        api.received = 0;
        const out = join(dir, 'outage.results.jsonl');
        const cli = spawnCli(
          // Three read ahead: the rest reserve as they come (a request reserves when scheduled).
          ledgerRun('outage', 30, redis.url, '1usd/day', ['--rate', '20/s', '--window', '3']),
        );
        await waitFor(() => api.received >= 5, 20_000, 'five requests sent');
        await redis.stop();
        await waitFor(
          () => cli.stderr().includes('the budget ledger in Redis is not answering'),
          20_000,
          'the outage noticed',
        );
        const duringOutage = api.received;
        await sleep(1_000);
        // Nothing goes out without a reservation (the few read ahead and reserved before may go).
        expect(api.received - duringOutage).toBeLessThanOrEqual(3);
        await redis.start();
        const result = await cli.done;
        expect(result.code, result.stderr).toBe(0);
        expect(api.received).toBe(30);
        const results = readResults(out);
        expect(results.map((r) => r['id']).sort((a, b) => Number(a) - Number(b))).toEqual(
          Array.from({ length: 30 }, (_, i) => i + 1),
        );
        expect(results.every((r) => r['ok'] === true)).toBe(true);
        expect(result.stderr).toContain('the budget ledger in Redis answers again: requests go on.');
      } finally {
        await redis.stop();
      }
    }, 90_000);
  });
});
