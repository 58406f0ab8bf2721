/**
 * Redis key names. Every key of one partition carries the same hash tag, `{<prefix>:<hash>}`, so a
 * partition lives in one hash slot (Redis Cluster runs a script only on keys of one slot) and its
 * reservation is one atomic script. Partition names, scopes and level ids may be derived from
 * secrets (an API key is a natural partition key): they appear only as SHA-256 digests, never raw.
 *
 *   {tollgate:<h(partition)>}:s:<h(level)>            a level's state (string or hash), TTL until idle
 *   {tollgate:<h(partition)>}:s:<h(level)>:g          a bucket's give-backs waiting for the takes above
 *                                                      them (mark -> cost), TTL no longer than the state's
 *   {tollgate:<h(partition)>}:m:<h(scope)|->          meta hash: 'p' -> pause end (store time ms),
 *                                                      'l:<id>' -> learned 'algo limit intervalMs burst unit',
 *                                                      'e:<id>' -> when it expires (store time ms);
 *                                                      TTL until the later of the pause's end and the learned TTL
 *   {tollgate:<h(partition)>}:L:<h(scope)|->:<id>     a learned limit's state
 *   {tollgate:<h(partition)>}:q:<h(scope)|->          the gate holding its probe (a random id), TTL 2 s
 *   tollgate:pause                                     pub/sub channel announcing pauses
 *   {tollgate}:probe                                   the recovery probe's write, TTL 1 s
 */
import { createHash } from 'node:crypto';

/** 128 bits of SHA-256, base64url (22 characters): collision-free in practice, short in key names. */
export function digest(value: string): string {
  return createHash('sha256').update(value).digest('base64url').slice(0, 22);
}

/** Bounded memo of digests: partition keys repeat on the hot path. */
export class DigestCache {
  private readonly map = new Map<string, string>();
  constructor(private readonly max = 10_000) {}

  get(value: string): string {
    let hash = this.map.get(value);
    if (hash === undefined) {
      hash = digest(value);
      // Dropping everything at the bound keeps this O(1) and bounded; hot keys come straight back.
      if (this.map.size >= this.max) this.map.clear();
      this.map.set(value, hash);
    }
    return hash;
  }
}

export function partitionTag(prefix: string, partitionHash: string): string {
  return `{${prefix}:${partitionHash}}`;
}

/** The scope part of pause and learned keys: `-` for the partition itself. */
export function scopePart(scopeHash: string | undefined): string {
  return scopeHash === undefined ? '-' : scopeHash;
}

export function pauseChannel(prefix: string): string {
  return `${prefix}:pause`;
}
