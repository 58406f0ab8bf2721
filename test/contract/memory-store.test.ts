import { MemoryStore } from '../../src/redis/memory-store.js';
import { storeContract } from './store-contract.js';

storeContract('memory', () => new MemoryStore(), {
  countKeys: (store, _partition) => (store as MemoryStore).size,
  prune: (store, now) => (store as MemoryStore).prune(now),
});
