/**
 * Budgets through the CLI: `tollgate run --budget` stops cleanly at the cap (exit 3, nothing
 * over-spent, a re-run resumes), and `tollgate budget show|reset` reads and resets the ledger file.
 */
import { mkdtempSync, rmSync } from 'node:fs';
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
});
