/**
 * 02: fetch with requests + tokens limits and cost reconciliation (an LLM-style API).
 *
 * The provider limits requests and tokens (OpenAI-style x-ratelimit-*-requests/-tokens headers)
 * and bills by tokens actually used. Each call declares its cost in both units, and a money
 * estimate at the most it can cost (its max_tokens); the response's price settles the budget at
 * what was actually billed, so the unused part of each reservation is given back.
 *
 * Scaled to seconds so it runs in a moment: 20 requests/s and 8,000 tokens/s.
 *
 * Run: node --import tsx examples/02-fetch-llm-tokens.ts
 * In your project: import { createGate, priceTable, wrapFetch } from 'tollgate';
 */
import { createGate, formatMicros, priceTable, wrapFetch } from '../src/index.js';
import { simCostHeader, startSimulatedApi } from '../src/testing/index.js';

const price = priceTable({ per1mInputTokens: 2.5, per1mOutputTokens: 10 });
const inputTokens = 200;
const maxTokens = 800;
// What the model "used" for each request (deterministic per id, between 150 and 650 output tokens).
const usedOutput = (id: string) => 150 + ((Number(id.replace(/\D/g, '')) * 97) % 500);

const api = await startSimulatedApi({
  policy: [
    { kind: 'token-bucket', limit: 20, intervalMs: 1_000 },
    // The provider counts max_tokens at admission (as OpenAI does), so the client does too.
    { kind: 'token-bucket', limit: 8_000, intervalMs: 1_000, unit: 'tokens' },
  ],
  headers: 'openai',
  latencyMs: { min: 50, max: 150 },
  usage: (request) => inputTokens + usedOutput(request.id),
  // The bill: the price of the tokens actually used, in micro-dollars.
  price: (request) => price({ inputTokens, outputTokens: usedOutput(request.id) }).micros,
});

// The provider's limits with a 5% margin: the server counts arrivals, and network jitter can
// bunch requests that left evenly (see docs/algorithms.md, "A margin at the provider").
const gate = createGate({
  limits: [
    { algorithm: 'token-bucket', limit: 19, intervalMs: 1_000 },
    { algorithm: 'token-bucket', limit: 7_600, intervalMs: 1_000, unit: 'tokens' },
  ],
  budget: { budgets: { name: 'llm-example', limit: '$1', period: 'day' }, ledger: 'memory' },
});
const llm = wrapFetch(gate, {
  // The actual bill from the response settles the reservation (here a price header; with a real
  // provider, price the body's usage: costFromUsage(price)).
  price: { actual: (response) => Number(response.headers.get(simCostHeader) ?? Number.NaN) },
});

const estimateMicros = price({ inputTokens, outputTokens: maxTokens }).micros;
const started = performance.now();
const answers = await Promise.all(
  Array.from({ length: 40 }, async (_, i) => {
    const response = await llm(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': `req-${i + 1}` },
      body: JSON.stringify({
        model: 'sim-1',
        max_tokens: maxTokens,
        messages: [{ role: 'user', content: `q${i}` }],
      }),
      tollgate: { cost: { requests: 1, tokens: maxTokens }, priceMicros: estimateMicros },
    });
    return (await response.json()) as { usage: { total_tokens: number } };
  }),
);
const seconds = ((performance.now() - started) / 1000).toFixed(1);

const [spend] = gate.spend();
const stats = api.stats();
const usedTokens = answers.reduce((n, a) => n + a.usage.total_tokens, 0);
console.log(`40 chat calls in ${seconds} s; the tokens limit (7,600/s for 40 × ${maxTokens}) set the pace`);
console.log(`server: ${stats.accepted} accepted, ${stats.rejected} × 429; ${usedTokens} tokens used`);
console.log(
  `budget: reserved up to ${formatMicros(40 * estimateMicros)} at the estimates, settled ${formatMicros(spend!.spentMicros)} ` +
    `(the provider billed ${formatMicros(stats.totalChargedMicros)})`,
);

await gate.close();
await api.close();
if (spend!.spentMicros !== stats.totalChargedMicros || stats.accepted !== 40) process.exitCode = 1;
