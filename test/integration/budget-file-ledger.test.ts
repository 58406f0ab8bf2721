import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type BudgetReservation, createBudgetGuard } from '../../src/budget/budget-guard.js';
import { BudgetExceededError } from '../../src/budget/errors.js';
import { FileLedger } from '../../src/budget/file-ledger.js';
import { type SimulatedApi, startSimulatedApi } from '../../src/testing/index.js';

/** The simulated paid API, charging each request the estimate its client reserved. */
function chargingApi(): Promise<SimulatedApi> {
  return startSimulatedApi({
    policy: { kind: 'none' },
    price: (request) => Number(request.headers['x-estimate-micros'] ?? 0),
  });
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-budget-int-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const child = join(import.meta.dirname, '..', 'helpers', 'budget-child.ts');
const T0 = Date.parse('2026-06-15T12:00:00Z');
const LIMIT = 1_000_000; // $1.00 in micros

function run(config: Record<string, unknown>): { proc: ChildProcess; done: Promise<string> } {
  const proc = spawn(process.execPath, ['--import', 'tsx', child, JSON.stringify(config)], {
    cwd: join(import.meta.dirname, '..', '..'),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => {
    out += d;
  });
  proc.stderr!.on('data', (d) => {
    err += d;
  });
  const done = new Promise<string>((resolve, reject) => {
    proc.on('exit', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`child exited ${code ?? signal}: ${err}`));
    });
  });
  return { proc, done };
}

/** Lines `sent <id> <micros>` / `settled <id> <micros>` written by the children. */
function readSide(path: string): { sent: Map<string, number>; settled: Set<string> } {
  const sent = new Map<string, number>();
  const settled = new Set<string>();
  if (!existsSync(path)) return { sent, settled };
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const [what, id, micros] = line.split(' ');
    if (what === 'sent' && id !== undefined) sent.set(id, Number(micros));
    if (what === 'settled' && id !== undefined) settled.add(id);
  }
  return { sent, settled };
}

const sum = (values: Iterable<number>) => {
  let total = 0;
  for (const v of values) total += v;
  return total;
};

describe('budget with the file ledger', () => {
  it('500 concurrent calls at random prices against $1.00: charged <= $1.00 exactly, nothing sent past the cap', async () => {
    const path = join(dir, 'concurrent.sqlite');
    let now = T0;
    const guard = createBudgetGuard({
      budgets: { name: 'day', limit: '$1.00', period: 'day' },
      ledger: { path },
      clock: { now: () => now },
    });
    // The simulated provider: counts what it has charged and what is in flight to it. A call that
    // arrives when that could exceed $1.00 would be a call sent past the cap.
    let charged = 0;
    let inFlight = 0;
    let refusedCount = 0;
    let maxExposure = 0;
    const call = async (i: number) => {
      await new Promise((r) => setTimeout(r, i % 7));
      now += 1;
      const estimate = 1_000 + Math.floor(Math.random() * 9_000); // $0.001 .. $0.01
      let reservation: BudgetReservation;
      try {
        reservation = guard.reserve(estimate);
      } catch (error) {
        expect(error).toBeInstanceOf(BudgetExceededError);
        const e = error as BudgetExceededError;
        // A refusal is right: the estimate really did not fit.
        expect(e.spentMicros + e.reservedMicros + e.estimateMicros).toBeGreaterThan(LIMIT);
        refusedCount++;
        return;
      }
      if (Math.random() < 0.1) {
        guard.release(reservation); // failed before sending: nothing charged
        return;
      }
      // Sent: the provider may charge up to the estimate.
      inFlight += estimate;
      maxExposure = Math.max(maxExposure, charged + inFlight);
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 5)));
      // It charges the estimate or less (a refund settles the difference).
      const actual = Math.random() < 0.5 ? estimate : Math.floor(estimate * Math.random());
      inFlight -= estimate;
      charged += actual;
      guard.settle(reservation, actual);
    };
    await Promise.all(Array.from({ length: 500 }, (_, i) => call(i)));
    const [spend] = guard.spend();
    guard.close();
    expect(maxExposure).toBeLessThanOrEqual(LIMIT);
    expect(charged).toBeLessThanOrEqual(LIMIT);
    expect(spend).toMatchObject({ spentMicros: charged, reservedMicros: 0 });
    expect(refusedCount).toBeGreaterThan(0);
  });

  it('500 concurrent calls each charged its estimate: the sum of admitted estimates is <= $1.00 exactly', async () => {
    const path = join(dir, 'exact.sqlite');
    const guard = createBudgetGuard({
      budgets: { name: 'day', limit: 1, period: 'day' },
      ledger: { path },
      clock: { now: () => T0 },
    });
    const admitted: number[] = [];
    await Promise.all(
      Array.from({ length: 500 }, async () => {
        await new Promise((r) => setImmediate(r));
        const estimate = 1 + Math.floor(Math.random() * 5_000);
        const decision = guard.tryReserve(estimate);
        if (!decision.ok) return;
        admitted.push(estimate);
        await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 3)));
        guard.settle(decision.reservation, estimate);
      }),
    );
    const [spend] = guard.spend();
    guard.close();
    expect(sum(admitted)).toBeLessThanOrEqual(LIMIT);
    expect(spend!.spentMicros).toBe(sum(admitted));
  });

  it('4 processes sharing one ledger file never commit more than the budget together', async () => {
    const ledgerPath = join(dir, 'shared.sqlite');
    const sides = [0, 1, 2, 3].map((i) => join(dir, `side-${i}.log`));
    // Start all four together (each needs ~1 s to load TypeScript) so they contend for the ledger.
    const startAt = Date.now() + 3_000;
    const api = await chargingApi();
    const children = sides.map((sideFile, i) =>
      run({
        url: api.url,
        ledgerPath,
        limit: 1,
        concurrency: 4,
        attempts: 60,
        maxDelayMs: 3,
        sideFile,
        seed: 1000 + i,
        t0: T0,
        startAt,
      }),
    );
    const outputs = await Promise.all(children.map((c) => c.done));
    const summaries = outputs.map(
      (o) => JSON.parse(o.trim()) as { sent: number; sentMicros: number; refused: number },
    );
    const sentMicros = sum(summaries.map((s) => s.sentMicros));
    expect(sentMicros).toBeLessThanOrEqual(LIMIT);
    // The judge: what the server charged, across the four processes.
    const charged = api.stats().totalChargedMicros;
    await api.close();
    expect(charged).toBe(sentMicros);
    expect(charged).toBeLessThanOrEqual(LIMIT);
    // All four took part, and together they reached the cap.
    expect(summaries.filter((s) => s.sent > 0).length).toBeGreaterThanOrEqual(2);
    expect(sum(summaries.map((s) => s.refused))).toBeGreaterThan(0);
    const ledger = new FileLedger({ path: ledgerPath });
    const [window] = ledger.snapshot(T0 + 1_000);
    ledger.close();
    expect(window).toMatchObject({ spentMicros: sentMicros, reservedMicros: 0 });
    for (const side of sides) {
      const { sent, settled } = readSide(side);
      expect(settled.size).toBe(sent.size);
    }
    console.log(
      `[budget] 4 processes: ${summaries.map((s) => s.sent).join('+')} calls sent, ` +
        `${sum(summaries.map((s) => s.refused))} refused, $${(sentMicros / 1e6).toFixed(6)} of $1.00 committed`,
    );
  }, 15_000);

  it('4 processes sharing one ledger file fire each threshold once between them', async () => {
    const ledgerPath = join(dir, 'thresholds.sqlite');
    const thresholds = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1];
    const startAt = Date.now() + 3_000;
    // Each call settles at half its estimate: committed spend rises at a reserve and falls back at
    // the settle, so the processes cross each threshold many times between them.
    const children = [0, 1, 2, 3].map((i) =>
      run({
        ledgerPath,
        limit: 1,
        concurrency: 4,
        attempts: 60,
        maxDelayMs: 3,
        sideFile: join(dir, `side-thresholds-${i}.log`),
        seed: 2000 + i,
        t0: T0,
        startAt,
        thresholds,
        settleFraction: 0.5,
      }),
    );
    const outputs = await Promise.all(children.map((c) => c.done));
    const fired = outputs.map((o) => (JSON.parse(o.trim()) as { fired: number[] }).fired);
    const ledger = new FileLedger({ path: ledgerPath });
    const [window] = ledger.snapshot(T0 + 1_000);
    ledger.close();
    const all = fired.flat().sort((a, b) => a - b);
    // Every threshold the spend reached fired once, by one of the four; none fired twice.
    const reached = thresholds.filter((t) => window!.spentMicros >= t * LIMIT);
    expect(reached.length).toBeGreaterThanOrEqual(5);
    expect(all.filter((t) => reached.includes(t))).toEqual(reached);
    expect(new Set(all).size).toBe(all.length);
    console.log(
      `[budget] thresholds fired by the 4 processes: ${fired.map((f) => `[${f.join(',')}]`).join(' ')}, ` +
        `spent $${(window!.spentMicros / 1e6).toFixed(6)}`,
    );
  }, 15_000);

  it('a process killed with SIGKILL mid-run leaves at least what it sent counted', async () => {
    const ledgerPath = join(dir, 'killed.sqlite');
    const sideFile = join(dir, 'side-killed.log');
    const api = await chargingApi();
    const { proc, done } = run({
      url: api.url,
      ledgerPath,
      limit: 1000,
      concurrency: 8,
      attempts: 100_000,
      maxDelayMs: 40,
      sideFile,
      seed: 7,
      t0: T0,
    });
    const exited = done.catch((e: Error) => e);
    // Wait until it has sent a good number of calls, then kill it without warning.
    const deadline = Date.now() + 10_000;
    while (readSide(sideFile).sent.size < 150 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    proc.kill('SIGKILL');
    const error = await exited;
    expect(String(error)).toMatch(/SIGKILL/);

    const { sent, settled } = readSide(sideFile);
    const inFlight = [...sent.keys()].filter((id) => !settled.has(id));
    // Let requests already on the wire land, then read what the server charged.
    await new Promise((r) => setTimeout(r, 200));
    const charged = api.stats().totalChargedMicros;
    await api.close();
    const sentMicros = sum(sent.values()); // what the provider charged: every call sent
    expect(sent.size).toBeGreaterThanOrEqual(150);

    const ledger = new FileLedger({ path: ledgerPath });
    // Soon after the crash the unsettled reservations are still in flight...
    const [early] = ledger.snapshot(T0 + 30_000);
    expect(early!.spentMicros + early!.reservedMicros).toBeGreaterThanOrEqual(sentMicros);
    // ...and once past their TTL they count as spent at their estimate: never less than was charged.
    const [late] = ledger.snapshot(T0 + 3_600_000);
    expect(late!.reservedMicros).toBe(0);
    expect(late!.spentMicros).toBeGreaterThanOrEqual(sentMicros);
    // Measured at the server: the ledger never counts less than the provider charged.
    expect(charged).toBeGreaterThan(0);
    expect(early!.spentMicros + early!.reservedMicros).toBeGreaterThanOrEqual(charged);
    expect(late!.spentMicros).toBeGreaterThanOrEqual(charged);
    // A new process still refuses against that spend.
    expect(late!.remainingMicros).toBe(1000 * 1_000_000 - late!.spentMicros);
    ledger.close();
    console.log(
      `[budget] SIGKILL: ${sent.size} sent (${inFlight.length} in flight at the kill), server charged ` +
        `${charged} micros, ledger counts ${late!.spentMicros}`,
    );
  }, 15_000);
});
