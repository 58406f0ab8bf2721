/**
 * A provider that counts calls in any order and answers them in any order (connections of
 * different speeds, handlers of different latencies): whatever the gate learns from the answers,
 * it never starts a call the provider then counts over its limit. Both kinds of quota: a window
 * ("remaining until the reset") and a refilling bucket (OpenAI: "reset" is the time until full).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createGate, type Inspection } from '../../src/gate/gate.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { type ProviderStep, providerSteps, replayProvider } from '../helpers/provider-steps.js';

const numRuns = Number(process.env['GATE_PROPERTY_RUNS'] ?? 300);

const T0 = Date.parse('2026-11-30T12:00:00Z');

const stepArb = providerSteps(3_000);

interface Held {
  readonly answer: (remaining: number) => void;
  /** What the provider had left after counting it (set when counted). */
  remaining?: number;
}

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** Replay `steps`; returns how many calls the provider counted with nothing left. */
async function run(
  mode: 'window' | 'refill',
  limit: number,
  steps: readonly ProviderStep[],
): Promise<number> {
  const clock = new ManualClock(T0);
  const gate = createGate({ clock });
  // The provider: `tokens` left (refilled at `perMs` in refill mode; a window that never ends here).
  const perMs = limit / 60_000;
  let tokens = limit;
  let refilledAt = clock.now();
  const refill = () => {
    if (mode === 'refill') tokens = Math.min(limit, tokens + (clock.now() - refilledAt) * perMs);
    refilledAt = clock.now();
  };
  const headers = (remaining: number): Record<string, string> =>
    mode === 'window'
      ? {
          'x-ratelimit-limit': String(limit),
          'x-ratelimit-remaining': String(remaining),
          'x-ratelimit-reset': String(T0 / 1000 + 3600),
        }
      : {
          'x-ratelimit-limit-requests': String(limit),
          'x-ratelimit-remaining-requests': String(remaining),
          // Until full again, from what it says is left: (limit - remaining) units at perMs.
          'x-ratelimit-reset-requests': `${(limit - remaining) / perMs}ms`,
        };
  const started: Held[] = [];
  const fn = () =>
    new Promise<{ status: number; headers: Record<string, string> }>((resolve) => {
      started.push({ answer: (remaining) => resolve({ status: 200, headers: headers(remaining) }) });
    });
  const inspect = (r: { status: number; headers: Record<string, string> }): Inspection => ({
    status: r.status,
    headers: r.headers,
    method: 'GET',
  });
  const calls: Promise<unknown>[] = [];
  const schedule = () => calls.push(gate.schedule(fn, { key: 'api', inspect }).catch(() => undefined));
  let overLimit = 0;
  const count = (held: Held) => {
    refill();
    if (tokens < 1) overLimit++;
    tokens -= 1;
    held.remaining = Math.max(0, Math.floor(tokens));
  };
  await replayProvider(steps, {
    started,
    schedule,
    counted: (held) => held.remaining !== undefined,
    count,
    answer: (held) => held.answer(held.remaining!),
    tick: async (ms, provider) => {
      if (mode !== 'refill') return;
      // Time passes only once the provider has counted every call started: a call counted long
      // after its start, when the provider's bucket is full, loses refill the gate counts (see
      // arrivalMarginMs); what is tested here is the order, not the delay.
      provider.countAll();
      clock.advance(ms);
    },
    flush,
  });
  await gate.close({ queued: 'reject' });
  await Promise.all(calls);
  return overLimit;
}

describe('quota learned from answers in any order', () => {
  for (const mode of ['window', 'refill'] as const) {
    it(`${mode}: the provider never counts a call over its limit`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 3, max: 12 }),
          fc.array(stepArb, { minLength: 10, maxLength: 120, size: 'max' }),
          async (limit, steps) => {
            expect(await run(mode, limit, steps)).toBe(0);
          },
        ),
        { numRuns },
      );
    });
  }
});
