import * as S from './src/redis/redis-scripts.ts';
import { createHash } from 'node:crypto';
for (const [k, v] of Object.entries(S)) if (typeof v === 'string' && k.endsWith('_LUA')) console.log(createHash('sha1').update(v).digest('hex'), k);
