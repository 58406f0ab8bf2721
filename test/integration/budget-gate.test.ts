/**
 * Budgets through the whole gate and the fetch adapter against the simulated paid API: the
 * server's own charge counter is the judge.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { wrapFetch } from '../../src/adapters/fetch.js';
import { createGate } from '../../src/gate/gate.js';
import { startSimulatedApi } from '../../src/testing/index.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-budget-gate-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const priceHeader = 'x-sim-cost-micros';

describe('budget through the gate (fetch adapter, simulated API charging per request)', () => {
  it('500 concurrent calls at random prices against $1.00: the server charges <= $1.00 and nothing is sent after the cap', async () => {
    // The server charges what the client estimated, or less (never more): the client's estimate
    // is an upper bound, as a price table is for a request with max_tokens.
    const api = await startSimulatedApi({
      policy: { kind: 'none' },
      price: (request) => {
        const estimate = Number(request.headers['x-estimate-micros']);
        return Math.floor(estimate * (0.5 + ((estimate * 7919) % 50) / 100));
      },
    });
    try {
      const gate = createGate({
        budget: {
          budgets: { name: 'day', limit: 1, period: 'day' },
          ledger: { path: join(dir, 'gate.sqlite') },
        },
      });
      const fetch = wrapFetch(gate, {
        price: {
          estimate: (request) => Number(request.headers.get('x-estimate-micros')),
          actual: (response) => Number(response.headers.get(priceHeader)),
        },
      });
      const estimates = Array.from({ length: 500 }, (_, i) => 1_000 + ((i * 7_919) % 9_000));
      const outcomes = await Promise.allSettled(
        estimates.map(async (estimate) => {
          const response = await fetch(`${api.url}/v1/complete`, {
            headers: { 'x-estimate-micros': String(estimate) },
          });
          await response.arrayBuffer();
          return response.status;
        }),
      );
      const stats = api.stats();
      const refused = outcomes.filter((o) => o.status === 'rejected');
      expect(refused.length).toBeGreaterThan(0);
      for (const o of refused)
        expect((o as PromiseRejectedResult).reason).toMatchObject({ code: 'ERR_BUDGET_EXCEEDED' });
      // Every accepted call reached the server, every refused one did not.
      expect(stats.accepted).toBe(outcomes.length - refused.length);
      expect(stats.totalChargedMicros).toBeLessThanOrEqual(1_000_000);
      // The ledger agrees with the server to the micro-dollar.
      const [spend] = gate.spend();
      expect(spend).toMatchObject({ spentMicros: stats.totalChargedMicros, reservedMicros: 0 });
      await gate.close();
    } finally {
      await api.close();
    }
  });

  it('a second gate on the same ledger file (a re-run of the script) sees the day’s spend', async () => {
    const path = join(dir, 'rerun.sqlite');
    const api = await startSimulatedApi({ policy: { kind: 'none' }, price: 400_000 });
    try {
      for (let run = 0; run < 2; run++) {
        const gate = createGate({
          budget: { budgets: { name: 'day', limit: 1, period: 'day' }, ledger: { path } },
        });
        const fetch = wrapFetch(gate, { price: { estimate: () => 400_000 } });
        const statuses = await Promise.allSettled(
          [0, 1].map(() => fetch(`${api.url}/v1/x`).then((r) => r.status)),
        );
        if (run === 0) expect(statuses.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled']);
        else expect(statuses.map((s) => s.status)).toEqual(['rejected', 'rejected']);
        await gate.close();
      }
      // 2 × $0.40 charged; the re-run's calls would have crossed $1.00 and were never sent.
      expect(api.stats().totalChargedMicros).toBe(800_000);
      expect(api.stats().accepted).toBe(2);
    } finally {
      await api.close();
    }
  });
});
