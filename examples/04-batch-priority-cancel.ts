/**
 * 04: a batch job with priority and cancellation.
 *
 * 30 background jobs are queued behind a limit of 10 calls/s; 3 urgent ones arrive later with a
 * higher priority and go first among the calls still waiting. Then the rest of the background
 * batch is cancelled with one AbortController: those calls reject with `AbortedError`, are never
 * sent, and give their place back.
 *
 * Run: node --import tsx examples/04-batch-priority-cancel.ts
 * In your project: import { AbortedError, createGate } from 'tollgate';
 */
import { setMaxListeners } from 'node:events';
import { AbortedError, createGate } from '../src/index.js';
import { startSimulatedApi } from '../src/testing/index.js';

const api = await startSimulatedApi({ policy: { kind: 'sliding-window', limit: 10, intervalMs: 1_000 } });
const gate = createGate({ limits: [{ algorithm: 'leaky-bucket', limit: 10, intervalMs: 1_000 }] });

const order: string[] = [];
const call = (name: string) => () => {
  order.push(name);
  return fetch(`${api.url}/v1/jobs/${name}`).then((r) => r.status);
};

const background = new AbortController();
setMaxListeners(50, background.signal); // 30 queued calls listen to this one signal
const batch = Array.from({ length: 30 }, (_, i) =>
  gate.schedule(call(`bg-${i + 1}`), { signal: background.signal }).then(
    (status) => ({ status }),
    (error: unknown) => ({ error }),
  ),
);

// Half a second later, urgent work arrives: priority 10 starts before every waiting background job.
await new Promise((resolve) => setTimeout(resolve, 500));
const urgent = await Promise.all([1, 2, 3].map((i) => gate.schedule(call(`urgent-${i}`), { priority: 10 })));

// The operator cancels the rest of the background batch.
background.abort(new Error('batch cancelled'));
const outcomes = await Promise.all(batch);

const done = outcomes.filter((o) => 'status' in o).length;
const cancelled = outcomes.filter((o) => 'error' in o && o.error instanceof AbortedError).length;
console.log(
  `urgent calls: ${urgent.join(', ')}; started at positions ${[1, 2, 3].map((i) => order.indexOf(`urgent-${i}`) + 1).join(', ')} of ${order.length}`,
);
console.log(
  `background: ${done} done, ${cancelled} cancelled before sending; server received ${api.stats().received} requests`,
);

await gate.close();
await api.close();
if (cancelled === 0 || done + cancelled !== 30 || api.stats().received !== order.length) process.exitCode = 1;
