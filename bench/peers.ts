// Peer libraries, configured for each bench the way their READMEs suggest. Dev dependencies only.
import Bottleneck from 'bottleneck';
import { RateLimiter, TokenBucket } from 'limiter';
import PQueue from 'p-queue';
import pThrottle from 'p-throttle';
import { createGate } from '../src/index.js';

export type Schedule = (fn: () => Promise<void> | void) => Promise<unknown>;

/** A scheduler admitting `ratePerSec` calls per second with no burst (steady spacing). */
export const paced: Record<string, (ratePerSec: number) => Schedule> = {
  tollgate: (rate) => {
    const gate = createGate({ limits: [{ algorithm: 'leaky-bucket', limit: rate, intervalMs: 1000 }] });
    return (fn) => gate.schedule(fn);
  },
  'p-queue': (rate) => {
    const queue = new PQueue({ intervalCap: 1, interval: 1000 / rate });
    return (fn) => queue.add(fn);
  },
  bottleneck: (rate) => {
    const limiter = new Bottleneck({ minTime: 1000 / rate });
    return (fn) => limiter.schedule(async () => fn());
  },
  'p-throttle (strict)': (rate) => {
    const throttle = pThrottle({ limit: 1, interval: 1000 / rate, strict: true });
    const throttled = throttle((fn: () => unknown) => fn());
    return (fn) => Promise.resolve(throttled(fn));
  },
  limiter: (rate) => {
    const limiter = new RateLimiter({ tokensPerInterval: 1, interval: 1000 / rate });
    return async (fn) => {
      await limiter.removeTokens(1);
      return fn();
    };
  },
};

/** A scheduler whose limit never binds (measures pure overhead). */
export const unbound: Record<string, () => Schedule> = {
  tollgate: () => {
    const gate = createGate({ limits: [{ algorithm: 'token-bucket', limit: 1e9, intervalMs: 1000 }] });
    return (fn) => gate.schedule(fn);
  },
  'p-queue': () => {
    const queue = new PQueue({ concurrency: Number.POSITIVE_INFINITY });
    return (fn) => queue.add(fn);
  },
  bottleneck: () => {
    const limiter = new Bottleneck();
    return (fn) => limiter.schedule(async () => fn());
  },
  'p-throttle': () => {
    // One throttled function for the whole run, as p-throttle's README wraps a function once.
    const throttled = pThrottle({ limit: 1e9, interval: 1000 })((fn: () => unknown) => fn());
    return (fn) => Promise.resolve(throttled(fn));
  },
  limiter: () => {
    const limiter = new RateLimiter({ tokensPerInterval: 1e9, interval: 'second' });
    return async (fn) => {
      await limiter.removeTokens(1);
      return fn();
    };
  },
};

export { Bottleneck, PQueue, TokenBucket };
