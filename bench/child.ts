// One measurement in a fresh process (clean heap, timers that peers cannot cancel die with it).
// Usage: node --expose-gc --import tsx bench/child.ts <memory|timers> <contender>

import { createGate } from '../src/index.js';
import { Bottleneck, PQueue, TokenBucket } from './peers.js';

const [mode, contender] = process.argv.slice(2);
const KEYS = 100_000;
const QUEUED = 10_000;
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

function heap(): number {
  for (let i = 0; i < 4; i++) gc!();
  return process.memoryUsage().heapUsed;
}

const noop = () => {};

async function memory(): Promise<void> {
  const keys = Array.from({ length: KEYS }, (_, i) => `tenant-${i}`);
  let holder: unknown;
  let use: (key: string) => Promise<unknown>;
  switch (contender) {
    case 'tollgate': {
      const gate = createGate({ perKey: [{ algorithm: 'token-bucket', limit: 10, intervalMs: 60_000 }] });
      holder = gate;
      use = (key) => gate.schedule(noop, { key });
      break;
    }
    case 'bottleneck-group': {
      const group = new Bottleneck.Group({ maxConcurrent: 10, minTime: 100 });
      holder = group;
      use = (key) => group.key(key).schedule(async () => {});
      break;
    }
    case 'map-of-p-queue': {
      const map = new Map<string, PQueue>();
      holder = map;
      use = (key) => {
        let queue = map.get(key);
        if (!queue) {
          queue = new PQueue({ intervalCap: 10, interval: 60_000 });
          map.set(key, queue);
        }
        return queue.add(noop);
      };
      break;
    }
    case 'map-of-limiter': {
      const map = new Map<string, TokenBucket>();
      holder = map;
      use = (key) => {
        let bucket = map.get(key);
        if (!bucket) {
          bucket = new TokenBucket({ bucketSize: 10, tokensPerInterval: 10, interval: 60_000 });
          map.set(key, bucket);
        }
        return Promise.resolve(bucket.tryRemoveTokens(1));
      };
      break;
    }
    default:
      throw new Error(`unknown contender ${contender}`);
  }
  const before = heap();
  for (let i = 0; i < KEYS; i += 1000) {
    await Promise.all(keys.slice(i, i + 1000).map((key) => use(key)));
  }
  const after = heap();
  process.stdout.write(
    JSON.stringify({ bytesPerKey: (after - before) / KEYS, keys: keys.length, holder: !!holder }),
  );
}

function liveTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

async function timers(): Promise<void> {
  const before = liveTimers();
  let queued = 0;
  const swallow = () => {};
  switch (contender) {
    case 'tollgate': {
      const gate = createGate({
        limits: [{ algorithm: 'leaky-bucket', limit: 1, intervalMs: 1000 }],
        maxQueue: QUEUED + 1,
      });
      for (let i = 0; i <= QUEUED; i++) gate.schedule(noop).catch(swallow);
      queued = gate.stats().queued;
      break;
    }
    case 'p-queue': {
      const queue = new PQueue({ intervalCap: 1, interval: 1000 });
      for (let i = 0; i <= QUEUED; i++) queue.add(noop).catch(swallow);
      queued = queue.size;
      break;
    }
    case 'bottleneck': {
      const limiter = new Bottleneck({ minTime: 1000 });
      for (let i = 0; i <= QUEUED; i++) limiter.schedule(async () => {}).catch(swallow);
      await new Promise((r) => setTimeout(r, 200));
      const counts = limiter.counts();
      queued = (counts.RECEIVED ?? 0) + (counts.QUEUED ?? 0);
      break;
    }
    case 'p-throttle': {
      const { default: pThrottle } = await import('p-throttle');
      const throttled = pThrottle({ limit: 1, interval: 1000 })(noop);
      for (let i = 0; i <= QUEUED; i++) Promise.resolve(throttled()).catch(swallow);
      queued = QUEUED;
      break;
    }
    case 'limiter': {
      const { RateLimiter } = await import('limiter');
      const limiter = new RateLimiter({ tokensPerInterval: 1, interval: 1000 });
      for (let i = 0; i <= QUEUED; i++) limiter.removeTokens(1).catch(swallow);
      queued = QUEUED;
      break;
    }
    default:
      throw new Error(`unknown contender ${contender}`);
  }
  await new Promise((r) => setImmediate(r));
  // setImmediate is not a Timeout; the baseline is subtracted all the same.
  process.stdout.write(JSON.stringify({ timers: liveTimers() - before, queued }));
}

await (mode === 'memory' ? memory() : timers());
process.exit(0);
