// Repro: N workers (fork) sharing a sliding-log 57/1s via Redis 6385 (or in-memory createGate with MODE=memory),
// against a local server allowing 60 per sliding 1 s by arrival; one trap 429 (Retry-After: 3) at +4 s.
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import { writeFileSync } from 'node:fs';
const now = () => performance.timeOrigin + performance.now();
const MODE = process.env.MODE ?? 'shared';
const WORKERS = Number(process.env.WORKERS ?? 4);
const INFLIGHT = Number(process.env.INFLIGHT ?? 20);
const DURATION = Number(process.env.DURATION ?? 10000);
const LATENCY = Number(process.env.LATENCY ?? 0);
const OUT = process.env.OUT ?? '/tmp/pause-diag/run.json';

if (process.env.PAUSE_WORKER) {
  const { id, url, goAt, prefix } = JSON.parse(process.env.PAUSE_WORKER);
  const { wrapFetch } = await import('./src/adapters/fetch.ts');
  let gate: any;
  const storeLog: any[] = [];
  if (MODE === 'memory') {
    const { createGate } = await import('./src/gate/gate.ts');
    gate = createGate({ limits: [{ algorithm: 'sliding-log', limit: 57, intervalMs: 1000 }] });
  } else {
    const { createSharedGate } = await import('./src/redis/shared-gate.ts');
    gate = createSharedGate({ redis: 'redis://127.0.0.1:6385', keyPrefix: prefix, limits: [{ algorithm: 'sliding-log', limit: 57, intervalMs: 1000 }] });
    if (process.env.TRACE) {
      const store = (gate as any).store;
      for (const m of ['reserve', 'recount', 'refund', 'recountAt']) {
        const orig = store[m]?.bind(store);
        if (!orig) continue;
        store[m] = (...a: any[]) => {
          const t = now();
          const r = orig(...a);
          Promise.resolve(r).then((v: any) => storeLog.push({ m, t, done: now(), startAt: m === 'reserve' ? v?.startAt ?? v?.reservation?.startAt : a[0]?.startAt, kind: v?.kind ?? v?.ok, v: m === 'reserve' ? JSON.stringify(v, (k, x) => (k === 'levels' || k === 'partition' ? undefined : x)).slice(0, 300) : undefined }), () => {});
          return r;
        };
      }
    }
  }
  const recs: any[] = [];
  let seq = 0;
  let cur: any = undefined;
  if (MODE !== 'memory') {
    const origStart = gate.start.bind(gate);
    gate.start = (call: any, n: number) => { cur = call; try { origStart(call, n); } finally { cur = undefined; } };
    const store = gate.store;
    const origRecount = store.recount.bind(store);
    store.recount = (r: any, m: number) => { const c = r.__rec; const t = now(); const p = origRecount(r, m); if (c) { c.rcSent = t; Promise.resolve(p).then(() => { c.rcDone = now(); }); } return p; };
  }
  const myFetch = async (input: any, init: any) => {
    const s = seq++;
    const rec: any = { w: id, s, start: now() };
    if (cur) { rec.storeStartAt = cur.storeStartAt; rec.sentAt = cur.sentAt; rec.lateRes = cur.lateReserves; if (cur.reservation) cur.reservation.__rec = rec; }
    recs.push(rec);
    const res = await fetch(input, { ...init, headers: { 'x-w': String(id), 'x-s': String(s), 'x-t0': String(rec.start) } });
    rec.resp = now();
    rec.status = res.status;
    rec.arr = Number(res.headers.get('x-arr'));
    return res;
  };
  const f = wrapFetch(gate, { fetch: myFetch as any });
  const wait = goAt - Date.now();
  await new Promise((r) => setTimeout(r, wait));
  const end = goAt + DURATION;
  const loop = async () => {
    while (Date.now() < end) {
      try { const r = await f(url); await r.arrayBuffer(); } catch (e) { recs.push({ w: id, err: String(e) }); }
    }
  };
  await Promise.all(Array.from({ length: INFLIGHT }, loop));
  await gate.close?.();
  process.send!({ recs, storeLog }, () => process.exit(0));
} else {
  const arrivals: any[] = [];
  const accepted: number[] = [];
  let goAt = 0;
  let trapped = false;
  const server = createServer((req, res) => {
    const t = now();
    const w = Number(req.headers['x-w']);
    let status = 200, ra: string | undefined;
    // sliding 60 per 1 s by arrival (accepted only)
    while (accepted.length && accepted[0]! <= t - 1000) accepted.shift();
    if (!trapped && goAt && t >= goAt + 4000 && w === 0) { trapped = true; status = 429; ra = '3'; }
    else if (accepted.length >= 60) { status = 429; ra = '1'; }
    else accepted.push(t);
    arrivals.push({ t, w, s: Number(req.headers['x-s']), t0: Number(req.headers['x-t0']), status });
    const send = () => { res.writeHead(status, { 'x-arr': String(t), ...(ra ? { 'retry-after': ra } : {}) }); res.end('ok'); };
    if (LATENCY) setTimeout(send, LATENCY); else send();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as any).port}/x`;
  const prefix = `pausediag-${Date.now()}`;
  goAt = Date.now() + 2500;
  const results = await Promise.all(Array.from({ length: WORKERS }, (_, id) => new Promise<any>((resolve, reject) => {
    const p = fork(new URL(import.meta.url).pathname, [], { execArgv: ['--import', 'tsx'], env: { ...process.env, PAUSE_WORKER: JSON.stringify({ id, url, goAt, prefix }) } });
    p.on('message', resolve);
    p.on('exit', (c) => c && reject(new Error('worker exit ' + c)));
  })));
  server.close();
  server.closeAllConnections?.();
  writeFileSync(OUT, JSON.stringify({ goAt, arrivals, workers: results }));
  console.log('wrote', OUT, 'arrivals', arrivals.length);
}
