// Reproduction + instrumentation for the cold-batch late-reserve behaviour.
// Env: BATCH=1|0  ALG=token-bucket|leaky-bucket|fixed-window  MARGIN=<ms>|default  WARM=1
//      RESTART=1 (restart redis-server 6384 after a warm-up, before the 12)  N=12  STORE=redis|memory
import { Redis } from 'ioredis';
import { createSharedGate, RedisStore, MemoryStore } from './src/redis/index.ts';
import { createGate } from './src/index.ts';
import { execSync } from 'node:child_process';

const PORT = 6384;
const URL = `redis://127.0.0.1:${PORT}`;
const BATCH = (process.env.BATCH ?? '1') === '1';
const ALG = (process.env.ALG ?? 'token-bucket') as 'token-bucket';
const MARGIN = process.env.MARGIN ?? '0';
const WARM = process.env.WARM === '1';
const RESTART = process.env.RESTART === '1';
const N = Number(process.env.N ?? 12);
const STORE = process.env.STORE ?? 'redis';
const QUIET = process.env.QUIET === '1';
const prefix = `cold${process.pid}x${Math.floor(Math.random() * 1e6)}`;

const t0 = performance.now();
const ts = () => (performance.now() - t0).toFixed(1).padStart(7);
const log = (...a: unknown[]) => {
  if (!QUIET) console.log(ts(), ...a);
};

const spy = new Redis(URL, { lazyConnect: false, maxRetriesPerRequest: 1 });
const stateKey = async (): Promise<string[]> => spy.keys(`{${prefix}:*}:s:*`);
const readState = async () => {
  const keys = await stateKey();
  if (keys.length === 0) return '(no key)';
  const out: string[] = [];
  for (const k of keys) {
    const [v, pt] = await Promise.all([spy.get(k), spy.pttl(k)]);
    out.push(`${k.slice(-6)}=${v} pttl=${pt}`);
  }
  return out.join(' ');
};

const limits = [{ algorithm: ALG, limit: 10, intervalMs: 2000, ...(ALG === 'token-bucket' ? { burst: 10 } : {}) }];
const marginOpt = MARGIN === 'default' ? {} : { arrivalMarginMs: Number(MARGIN) };

let store: RedisStore | MemoryStore;
if (STORE === 'memory') store = new MemoryStore();
else store = new RedisStore({ redis: URL, keyPrefix: prefix, batch: BATCH });

// Instrument the store: reserve sent/answered, refund sent/answered + state read right after.
let rid = 0;
const rtts: number[] = [];
const markOf = new Map<string, number>();
const origReserve = store.reserve.bind(store);
(store as any).reserve = (partition: string, levels: any, costs: any, maxWaitMs: number, options: any) => {
  const id = ++rid;
  const sentAt = performance.now();
  log(`reserve#${id} sent maxWait=${maxWaitMs}`);
  const p = Promise.resolve(origReserve(partition, levels, costs, maxWaitMs, options));
  p.then(
    (d: any) => {
      rtts[id] = performance.now() - sentAt;
      log(
        `reserve#${id} answered`,
        d.ok
          ? `ok startAt-serverNow=${(d.startAt - d.serverNow).toFixed(1)} mark=${d.marks.join(',')} id=${d.id}`
          : `refused ${d.reason} retryAfter=${d.retryAfterMs}`,
      );
    },
    (e: any) => log(`reserve#${id} failed ${e?.message}`),
  );
  return p;
};
const origRefund = store.refund.bind(store);
(store as any).refund = (reservation: any, which?: any) => {
  const mark = reservation.marks?.[0];
  log(`refund sent  id=${reservation.id} mark=${mark}`);
  const p = Promise.resolve(origRefund(reservation, which));
  p.then(
    async () => {
      const s = STORE === 'redis' ? await readState() : '';
      log(`refund done  id=${reservation.id} mark=${mark}  state now: ${s}`);
    },
    (e: any) => log(`refund failed ${e?.message}`),
  );
  return p;
};

const gate = createSharedGate({ store, limits, maxQueueTimeMs: 50, ...marginOpt } as any);

if (WARM || RESTART) {
  log('warm-up call');
  await gate.schedule(() => 'warm');
  log('warm-up done; state', STORE === 'redis' ? await readState() : '');
}
if (RESTART) {
  log('restarting redis-server');
  try {
    execSync(`redis-cli -p ${PORT} shutdown nosave`);
  } catch {}
  await new Promise((r) => setTimeout(r, 200));
  execSync(`redis-server --port ${PORT} --save "" --appendonly no --daemonize yes --bind 127.0.0.1`);
  // wait until up, and until the store's client reconnected
  for (let i = 0; i < 50; i++) {
    try {
      if ((await spy.ping()) === 'PONG') break;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  await new Promise((r) => setTimeout(r, Number(process.env.RESTART_WAIT ?? 300)));
  log('redis back; stats', JSON.stringify({ storeUp: gate.stats().storeUp }));
}

if (WARM || RESTART) log('state before burst:', STORE === 'redis' ? await readState() : '');
const results = await Promise.allSettled(
  Array.from({ length: N }, (_, i) =>
    gate.schedule(() => {
      log(`call ${i} RUNS`);
      return i;
    }),
  ),
);
const ok = results.filter((r) => r.status === 'fulfilled').length;
const reasons = new Map<string, number>();
for (const r of results)
  if (r.status === 'rejected') {
    const m = String(r.reason?.message ?? r.reason);
    reasons.set(m, (reasons.get(m) ?? 0) + 1);
  }
await new Promise((r) => setTimeout(r, 100));
log('state after burst:', STORE === 'redis' ? await readState() : '');
const st = gate.stats() as any;
console.log(
  `RESULT batch=${BATCH} alg=${ALG} margin=${MARGIN} warm=${WARM} restart=${RESTART} store=${STORE}: ok=${ok} refused=${N - ok} lateReserves=${st.lateReserves} rtt1=${rtts[1]?.toFixed(1)} rtt(after warm)=${rtts[rid > 12 ? 2 : 1]?.toFixed(1)} reserves=${rid}`,
  JSON.stringify([...reasons]),
);
await gate.close();
if (STORE === 'redis') await (store as RedisStore).close().catch(() => {});
spy.disconnect();
