// Store-level check: a batch of 10 takes, then refunds in schedule order vs latest-first,
// reading the bucket key after each refund.
import { Redis } from 'ioredis';
import { RedisStore } from './src/redis/index.ts';
import { createLimit } from './src/index.ts';

const URL = 'redis://127.0.0.1:6384';
const spy = new Redis(URL);
const spec = { algorithm: 'token-bucket' as const, limit: 10, intervalMs: 2000, burst: 10 };
const level = { spec: createLimit(spec).spec } as any;

for (const order of ['schedule-order', 'latest-first']) {
  const prefix = `coldref${process.pid}${order.length}`;
  const store = new RedisStore({ redis: URL, keyPrefix: prefix, batch: true });
  const ds = await Promise.all(Array.from({ length: 10 }, () => store.reserve('p', [level], [1], 50)));
  const key = (await spy.keys(`{${prefix}:*}:s:*`))[0]!;
  const get = async () => Number(await spy.get(key));
  const first = ds[0] as any;
  const now0 = first.serverNow;
  console.log(`${order}: ok=${ds.filter((d) => d.ok).length} state=${((await get()) - now0).toFixed(1)} ms past now0 (=${10} takes x 200ms)`);
  const list = order === 'latest-first' ? [...ds].reverse() : ds;
  let applied = 0;
  for (const d of list as any[]) {
    const before = await get();
    await store.refund(d);
    const after = await get();
    const did = before !== after;
    if (did) applied++;
    console.log(`  refund ${d.id} mark-now0=${(Number(d.marks[0]) - now0).toFixed(1)} state before=${(before - now0).toFixed(1)} after=${after === 0 ? '(deleted)' : (after - now0).toFixed(1)} applied=${did}`);
  }
  console.log(`  ${order}: refunds applied ${applied}/10`);
  await store.close();
}
spy.disconnect();
