/**
 * 03: a script with a daily budget that stops cleanly.
 *
 * Every paid call reserves its price in a persistent ledger before it is sent; when the next call
 * would take the day's spend over the cap, it is refused with `BudgetExceededError` and nothing is
 * sent. The ledger is a file, so a second run the same day (here: a second gate on the same file)
 * starts from what was already spent.
 *
 * Run: node --import tsx examples/03-daily-budget.ts
 * In your project: import { BudgetExceededError, createGate } from 'tollgate';
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BudgetExceededError, createGate, formatMicros } from '../src/index.js';
import { startSimulatedApi } from '../src/testing/index.js';

const api = await startSimulatedApi({ policy: { kind: 'none' }, price: 4_000 }); // $0.004 per call
// A temporary ledger for the example; by default it is ./.tollgate/ledger.sqlite.
const dir = mkdtempSync(join(tmpdir(), 'tollgate-example-'));
const ledger = { path: join(dir, 'ledger.sqlite') };

function dailyGate() {
  return createGate({
    limits: [{ algorithm: 'token-bucket', limit: 20, intervalMs: 1_000 }],
    budget: { budgets: { name: 'enrichment', limit: '$0.05', period: 'day' }, ledger },
  });
}

async function run(label: string): Promise<void> {
  const gate = dailyGate();
  let sent = 0;
  try {
    for (let i = 0; i < 100; i++) {
      await gate.schedule(() => fetch(`${api.url}/v1/enrich/${i}`).then((r) => r.json()), {
        priceMicros: 4_000,
      });
      sent++;
    }
  } catch (error) {
    if (!(error instanceof BudgetExceededError)) throw error;
    const resets = new Date(error.resetAt).toISOString();
    console.log(
      `${label}: sent ${sent}, then stopped: ${formatMicros(error.spentMicros)} spent of ${formatMicros(error.limitMicros)}, resets ${resets}`,
    );
  } finally {
    await gate.close();
  }
}

try {
  await run('first run');
  await run('second run, same day');
  const stats = api.stats();
  console.log(
    `the provider billed ${formatMicros(stats.totalChargedMicros)} for ${stats.accepted} calls (cap $0.05)`,
  );
  if (stats.totalChargedMicros > 50_000) process.exitCode = 1;
} finally {
  await api.close();
  rmSync(dir, { recursive: true, force: true });
}
