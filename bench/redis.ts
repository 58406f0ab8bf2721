// Redis decisions from one process: tollgate's Redis store vs rate-limiter-flexible's RateLimiterRedis
// and Bottleneck's Redis clustering, in one run against the server at REDIS_URL (default local).
// Run alone: `node --import tsx bench/redis.ts`; bench/run.ts calls `redisBench()`.
import { createRequire } from 'node:module';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { createLimit } from '../src/core/create-limit.js';
import { RedisStore } from '../src/redis/redis-store.js';
import { createSharedGate } from '../src/redis/shared-gate.js';
import type { StoreLevel } from '../src/redis/store.js';
import { fmt, median, percentile, table } from './stats.js';

const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const TARGET_PER_SEC = 20_000;
const CLOSED_MS = 1_000;
const OPEN_MS = 2_000;
/**
 * Open-loop runs per contender and load, interleaved across contenders (round 1 of each, then round
 * 2 of each, ...): a tail latency from one run on a shared machine is mostly that moment's noise,
 * so the table gives the median run and the range.
 */
const ROUNDS = Number(process.env['REDIS_BENCH_ROUNDS'] ?? 7);
/**
 * Run only the contenders whose name matches this regular expression (case-insensitive), for a
 * focused comparison run alone: `REDIS_BENCH_ONLY='no auto|Bottleneck' node --import tsx bench/redis.ts`.
 */
const ONLY = process.env['REDIS_BENCH_ONLY'] ? new RegExp(process.env['REDIS_BENCH_ONLY'], 'i') : undefined;
const CONCURRENCY = 64;

interface Contender {
  readonly name: string;
  /** One decision: resolves when the limiter has decided (admitted). */
  decide(): Promise<unknown>;
  /** Commands sent to Redis so far by this contender's clients. */
  commands(): number;
  close(): Promise<void>;
}

/** Count every command a client sends (pipelined ones included: ioredis sends each through sendCommand). */
function counted(client: Redis): { client: Redis; count: () => number } {
  let n = 0;
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
    n++;
    return send(...args);
  }) as Redis['sendCommand'];
  const duplicate = client.duplicate.bind(client);
  const extra: (() => number)[] = [];
  client.duplicate = ((...args: Parameters<Redis['duplicate']>) => {
    const copy = counted(duplicate(...args));
    extra.push(copy.count);
    return copy.client;
  }) as Redis['duplicate'];
  return { client, count: () => n + extra.reduce((sum, c) => sum + c(), 0) };
}

async function client(autoPipelining: boolean): Promise<{ client: Redis; count: () => number }> {
  const c = counted(new Redis(REDIS_URL, { enableAutoPipelining: autoPipelining }));
  await c.client.ping();
  return c;
}

const never = { algorithm: 'token-bucket', limit: 1e9, intervalMs: 1000 } as const;

async function tollgateStore(name: string, autoPipelining: boolean, batch: boolean): Promise<Contender> {
  const c = await client(autoPipelining);
  const store = new RedisStore({ redis: c.client, keyPrefix: `bench-${process.pid}`, batch });
  await store.preload();
  const levels: StoreLevel[] = [{ id: 'g0', spec: createLimit(never).spec }];
  const base = c.count();
  return {
    name,
    decide: () => store.reserve('api-key', levels, [1], 0),
    commands: () => c.count() - base,
    close: async () => {
      await store.close();
      c.client.disconnect();
    },
  };
}

async function tollgateGate(): Promise<Contender> {
  // A client as the store makes from a URL: no auto-pipelining (the store batches).
  const c = await client(false);
  const gate = createSharedGate({ redis: c.client, keyPrefix: `bench-gate-${process.pid}`, limits: [never] });
  await (gate.store as RedisStore).preload();
  const noop = () => {};
  const base = c.count();
  return {
    name: 'tollgate shared gate, schedule(noop)',
    decide: () => gate.schedule(noop),
    commands: () => c.count() - base,
    close: async () => {
      await gate.close();
      c.client.disconnect();
    },
  };
}

/**
 * No limiter: one EVALSHA of a script that returns 1, per decision. The floor of any Redis
 * limiter that decides in one round trip, on this host, at each load.
 */
async function floor(): Promise<Contender> {
  const c = await client(false);
  const sha = (await c.client.script('LOAD', 'return 1')) as string;
  const base = c.count();
  return {
    name: 'floor: one EVALSHA of `return 1` (no limiter)',
    decide: () => c.client.evalsha(sha, 0),
    commands: () => c.count() - base,
    close: async () => c.client.disconnect(),
  };
}

async function rateLimiterFlexible(name: string, autoPipelining: boolean): Promise<Contender | string> {
  let RateLimiterRedis: new (options: Record<string, unknown>) => { consume(key: string): Promise<unknown> };
  try {
    ({ RateLimiterRedis } = createRequire(import.meta.url)('rate-limiter-flexible'));
  } catch {
    return 'rate-limiter-flexible is not installed (npm i -D rate-limiter-flexible)';
  }
  const c = await client(autoPipelining);
  const limiter = new RateLimiterRedis({
    storeClient: c.client,
    keyPrefix: `bench-rlf-${process.pid}`,
    points: 1e9,
    duration: 1,
  });
  await limiter.consume('warmup');
  const base = c.count();
  return {
    name,
    decide: () => limiter.consume('api-key'),
    commands: () => c.count() - base,
    close: async () => c.client.disconnect(),
  };
}

async function bottleneck(): Promise<Contender> {
  const c = await client(false);
  const connection = new Bottleneck.IORedisConnection({ client: c.client });
  const limiter = new Bottleneck({ id: `bench-bottleneck-${process.pid}`, datastore: 'ioredis', connection });
  await limiter.ready();
  const noop = async () => {};
  await limiter.schedule(noop);
  const base = c.count();
  return {
    name: 'Bottleneck, Redis clustering (ioredis)',
    decide: () => limiter.schedule(noop),
    commands: () => c.count() - base,
    close: async () => {
      await limiter.disconnect(false);
      // A connection passed in is not closed with the limiter: its subscriber kept the process alive.
      await connection.disconnect(false);
      c.client.disconnect();
    },
  };
}

interface Result {
  readonly ratePerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly commandsPerDecision: number;
  /** Event-loop delay p99 during the run: the floor any latency measured in this process sits on. */
  readonly loopDelayP99Ms?: number | undefined;
}

/** Closed loop: `concurrency` decisions in flight for `durationMs`; each completion issues the next. */
async function closedLoop(c: Contender, concurrency: number, durationMs: number): Promise<Result> {
  const latencies: number[] = [];
  const commands0 = c.commands();
  const t0 = performance.now();
  const end = t0 + durationMs;
  const worker = async () => {
    while (performance.now() < end) {
      const start = performance.now();
      await c.decide();
      latencies.push(performance.now() - start);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = performance.now() - t0;
  return {
    ratePerSec: (latencies.length / elapsed) * 1000,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    commandsPerDecision: (c.commands() - commands0) / latencies.length,
  };
}

/**
 * How an open loop issues its decisions:
 * - 'spin': every turn of the event loop (setImmediate) issues those due by then, about one at a time
 *   at 20,000/s; the loop never sleeps, so the bench keeps one of the machine's cores busy;
 * - 'ticks': a 1 ms timer issues those due by then, about 20 at a time (arrivals that reach a service
 *   together, as many requests read in one turn), and the process sleeps in between.
 */
type Pacing = 'spin' | 'ticks';

/**
 * Open loop: decisions issued at `ratePerSec` for `durationMs` whatever the replies do (as callers
 * arrive in a service), latency from issue to decision. A contender that falls behind is cut off
 * at 5,000 outstanding decisions: its achieved rate shows it. The issuing loop is callbacks, not a
 * promise per turn: the harness itself should allocate (and collect) as little as possible.
 */
async function openLoop(
  c: Contender,
  ratePerSec: number,
  durationMs: number,
  pacing: Pacing,
): Promise<Result> {
  // Preallocated, for the same reason.
  const latencies = new Float64Array(Math.ceil((ratePerSec * durationMs) / 1000) + 1);
  let answered = 0;
  let outstanding = 0;
  let issued = 0;
  let drained: (() => void) | undefined;
  const answer = (start: number) => () => {
    latencies[answered++] = performance.now() - start;
    if (--outstanding === 0) drained?.();
  };
  const commands0 = c.commands();
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const t0 = performance.now();
  await new Promise<void>((finished) => {
    const turn = () => {
      const elapsed = performance.now() - t0;
      if (elapsed >= durationMs) return finished();
      // Due so far: rate (per s) × elapsed (ms) / 1000.
      const due = Math.floor((elapsed * ratePerSec) / 1000) - issued;
      for (let i = 0; i < due; i++) {
        issued++;
        if (outstanding >= 5_000) continue;
        outstanding++;
        // The clock is read before the call: a contender that writes to Redis synchronously inside
        // decide() must not have that write left out of its latency.
        const start = performance.now();
        c.decide().then(answer(start));
      }
      if (pacing === 'spin') setImmediate(turn);
      else setTimeout(turn, 1);
    };
    turn();
  });
  if (outstanding > 0) await new Promise<void>((resolve) => (drained = resolve));
  delay.disable();
  const elapsed = performance.now() - t0;
  const measured = Array.from(latencies.subarray(0, answered));
  return {
    ratePerSec: (answered / elapsed) * 1000,
    p50Ms: percentile(measured, 50),
    p99Ms: percentile(measured, 99),
    commandsPerDecision: (c.commands() - commands0) / answered,
    // ns -> ms
    loopDelayP99Ms: delay.percentile(99) / 1e6,
  };
}

async function answers(): Promise<boolean> {
  const probe = new Redis(REDIS_URL, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on('error', () => {});
  try {
    await probe.connect();
    await probe.ping();
    return true;
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

/** The median run of `runs` (by p99), with the p99 range across them. */
function summary(runs: readonly Result[]): { median: Result; p99Min: number; p99Max: number } {
  const byP99 = [...runs].sort((a, b) => a.p99Ms - b.p99Ms);
  return {
    median: {
      ratePerSec: median(runs.map((r) => r.ratePerSec)),
      p50Ms: median(runs.map((r) => r.p50Ms)),
      p99Ms: median(runs.map((r) => r.p99Ms)),
      commandsPerDecision: median(runs.map((r) => r.commandsPerDecision)),
      loopDelayP99Ms:
        runs[0]!.loopDelayP99Ms === undefined ? undefined : median(runs.map((r) => r.loopDelayP99Ms!)),
    },
    p99Min: byP99[0]!.p99Ms,
    p99Max: byP99[byP99.length - 1]!.p99Ms,
  };
}

interface Spec {
  readonly make: () => Promise<Contender | string>;
  /** Also measure one decision at a time. */
  readonly sequential: boolean;
  /** Rounds of every load (Bottleneck gets one: it cannot keep up, and each run drains a long backlog). */
  readonly rounds: number;
}

/** decisions/s, p50/p99 decision latency and commands per decision for each contender. */
export async function redisBench(): Promise<{ markdown: string }> {
  if (!(await answers())) return { markdown: `_Skipped: no Redis server answers at ${REDIS_URL}._` };
  const rows: (string | number)[][] = [];
  const notes: string[] = [];
  const row = (name: string, mode: string, r: Result, range?: [number, number]) =>
    rows.push([
      name,
      mode,
      fmt(r.ratePerSec),
      fmt(r.p50Ms, 3),
      fmt(r.p99Ms, 3),
      range === undefined ? '' : `${fmt(range[0], 2)}–${fmt(range[1], 2)}`,
      r.loopDelayP99Ms === undefined ? '' : fmt(r.loopDelayP99Ms, 2),
      fmt(r.commandsPerDecision, 2),
    ]);

  const specs: Spec[] = [
    {
      make: () => tollgateStore('tollgate RedisStore, batched, auto-pipelining', true, true),
      sequential: false,
      rounds: ROUNDS,
    },
    {
      make: () => tollgateStore('tollgate RedisStore, batched, no auto-pipelining', false, true),
      sequential: true,
      rounds: ROUNDS,
    },
    {
      make: () => tollgateStore('tollgate RedisStore, unbatched, auto-pipelining', true, false),
      sequential: false,
      rounds: ROUNDS,
    },
    {
      make: () => tollgateStore('tollgate RedisStore, unbatched, no auto-pipelining', false, false),
      sequential: true,
      rounds: ROUNDS,
    },
    { make: () => tollgateGate(), sequential: true, rounds: ROUNDS },
    {
      make: () => rateLimiterFlexible('rate-limiter-flexible RateLimiterRedis, auto-pipelining', true),
      sequential: false,
      rounds: ROUNDS,
    },
    {
      make: () => rateLimiterFlexible('rate-limiter-flexible RateLimiterRedis, no auto-pipelining', false),
      sequential: true,
      rounds: ROUNDS,
    },
    { make: () => bottleneck(), sequential: true, rounds: 1 },
    { make: () => floor(), sequential: true, rounds: ROUNDS },
  ];
  const contenders: { spec: Spec; contender: Contender }[] = [];
  for (const spec of specs) {
    const contender = await spec.make();
    if (typeof contender === 'string') {
      notes.push(contender);
      continue;
    }
    if (ONLY !== undefined && !ONLY.test(contender.name)) {
      await contender.close();
      continue;
    }
    // Warm-up: scripts loaded, JIT settled.
    await closedLoop(contender, CONCURRENCY, 300);
    contenders.push({ spec, contender });
  }
  // Every load, closed loops included, runs in the interleaved rounds: one run of a closed loop is
  // as much that moment's noise as an open loop's tail.
  const loads: { mode: string; run: (c: Contender) => Promise<Result>; applies: (s: Spec) => boolean }[] = [
    { mode: 'one at a time', run: (c) => closedLoop(c, 1, CLOSED_MS), applies: (s) => s.sequential },
    {
      mode: `${CONCURRENCY} in flight`,
      run: (c) => closedLoop(c, CONCURRENCY, CLOSED_MS),
      applies: () => true,
    },
    {
      mode: `offered ${fmt(TARGET_PER_SEC)}/s`,
      run: (c) => openLoop(c, TARGET_PER_SEC, OPEN_MS, 'spin'),
      applies: () => true,
    },
    {
      mode: `offered ${fmt(TARGET_PER_SEC)}/s, 1 ms ticks`,
      run: (c) => openLoop(c, TARGET_PER_SEC, OPEN_MS, 'ticks'),
      applies: () => true,
    },
  ];
  const runs = contenders.map(() => loads.map((): Result[] => []));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [l, load] of loads.entries()) {
      // Each round starts one contender further along: a run's place in the round (what ran just
      // before it) measurably moves its tail here, so no contender always follows the same one.
      for (let j = 0; j < contenders.length; j++) {
        const i = (j + round) % contenders.length;
        const { spec, contender } = contenders[i]!;
        if (round >= spec.rounds || !load.applies(spec)) continue;
        runs[i]![l]!.push(await load.run(contender));
      }
    }
  }
  for (const [i, { contender }] of contenders.entries()) {
    for (const [l, load] of loads.entries()) {
      const done = runs[i]![l]!;
      if (done.length === 0) continue;
      const s = summary(done);
      row(contender.name, done.length > 1 ? `${load.mode} (${done.length} runs)` : load.mode, s.median, [
        s.p99Min,
        s.p99Max,
      ]);
    }
    await contender.close();
  }
  const markdown = [
    table(
      [
        'contender',
        'load',
        'decisions/s',
        'p50 ms',
        'p99 ms',
        'p99 range ms',
        'event-loop delay p99 ms',
        'Redis commands per decision',
      ],
      rows,
    ),
    '',
    `Every limit is set so it never binds (each decision admits). "one at a time" and "${CONCURRENCY} in flight": closed loops of ${fmt(CLOSED_MS / 1000, 1)} s, each answer issues the next; ` +
      `"offered ${fmt(TARGET_PER_SEC)}/s": decisions issued at that rate regardless of answers for ${fmt(OPEN_MS / 1000, 1)} s, latency from issue to decision, ` +
      'issued on every turn of the event loop (about one at a time; the issuing loop never sleeps and keeps a core busy); ' +
      '"1 ms ticks": the same rate issued by a 1 ms timer (about 20 decisions at a time, the process sleeping in between). ' +
      `Each load runs ${ROUNDS} times per contender (Bottleneck once), interleaved (every contender's first run, then every contender's second, ...; each round starts one contender further along, so none always runs after the same one); ` +
      'its row gives the median of the runs (decisions/s, p50, p99, event-loop delay) and the range of their p99s. ' +
      'The loads are the same for every contender; the issuing loop runs on callbacks (no promise per turn) so the harness allocates little. ' +
      '"batched": the tollgate store sends the decisions of one tick as one EVALSHA (its default, option `batch`); "unbatched": `batch: false`, one EVALSHA per decision. ' +
      'Commands are counted at the client (every command ioredis sends, pipelined or not); a command is one request and one reply. ' +
      "The event-loop delay column is the bench process's own scheduling noise during the open-loop run (a floor under its p99). " +
      'The "floor" row is no limiter at all: one EVALSHA of a script that returns 1 per decision, the least any one-round-trip limiter can cost on this host at each load.',
    ...notes.map((n) => `Not measured: ${n}.`),
  ].join('\n');
  return { markdown };
}

// Run directly: print the table.
if (import.meta.url === `file://${process.argv[1]}`) {
  const { markdown } = await redisBench();
  console.log(markdown);
}
