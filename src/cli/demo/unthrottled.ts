/**
 * The demo's "before": the usual client without tollgate. A p-queue keeps `concurrency` requests in
 * flight, and a 429 is retried after an exponential backoff with jitter (what axios-retry and most
 * hand-written loops do), without reading Retry-After or any rate-limit header. Nothing caps spend.
 */
import PQueue from 'p-queue';
import { createProgress, type ProgressMode } from '../progress.js';
import type { AttemptRecord } from '../runner.js';

export interface UnthrottledOptions {
  readonly urls: readonly string[];
  readonly concurrency: number;
  /** Attempts per request, the first included. */
  readonly maxAttempts: number;
  readonly backoffBaseMs: number;
  readonly progress: ProgressMode;
  readonly now: () => number;
  readonly random: () => number;
  /** Price of an accepted request (micros), for the progress line. */
  readonly priceMicros: number;
}

export interface UnthrottledReport {
  readonly attempts: readonly AttemptRecord[];
  readonly results: readonly { id: string; at: number; ok: boolean }[];
  readonly ok: number;
  readonly failed: number;
  readonly firstStart: number;
  readonly lastDone: number;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export async function runUnthrottled(options: UnthrottledOptions): Promise<UnthrottledReport> {
  const { now } = options;
  const attempts: AttemptRecord[] = [];
  const results: { id: string; at: number; ok: boolean }[] = [];
  const progress = createProgress(options.progress, 'unthrottled');
  const queue = new PQueue({ concurrency: options.concurrency });
  let ok = 0;
  let failed = 0;
  let throttled = 0;
  const firstStart = now();
  let lastDone = firstStart;
  const update = () => {
    const elapsed = (now() - firstStart) / 1000;
    progress.update({
      done: results.length,
      total: options.urls.length,
      ratePerSec: elapsed > 0.5 ? results.length / elapsed : 0,
      spend: `$${((ok * options.priceMicros) / 1e6).toFixed(2)}`,
      pauses: 0,
      throttled,
      failed,
    });
  };

  const one = async (url: string, id: string): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      const startedAt = now();
      let status: number | undefined;
      try {
        const response = await fetch(url);
        await response.arrayBuffer();
        status = response.status;
      } catch {
        status = undefined;
      }
      attempts.push({ id, startedAt, endedAt: now(), status });
      if (status === 429) throttled++;
      const retry = status === 429 && attempt < options.maxAttempts;
      if (!retry) {
        const success = status !== undefined && status < 400;
        if (success) ok++;
        else failed++;
        lastDone = now();
        results.push({ id, at: lastDone, ok: success });
        update();
        return;
      }
      // Full jitter: random(0, base · 2^(attempt-1)).
      await sleep(options.random() * options.backoffBaseMs * 2 ** (attempt - 1));
    }
  };

  await Promise.all(options.urls.map((url, i) => queue.add(() => one(url, `r${i + 1}`))));
  update();
  progress.stop({
    done: results.length,
    total: options.urls.length,
    ratePerSec: results.length / Math.max(0.001, (lastDone - firstStart) / 1000),
    spend: `$${((ok * options.priceMicros) / 1e6).toFixed(2)}`,
    pauses: 0,
    throttled,
    failed,
  });
  return { attempts, results, ok, failed, firstStart, lastDone };
}
