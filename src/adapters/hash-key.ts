import { createHash } from 'node:crypto';
import { integer, invalid } from '../validate.js';

/**
 * A partition key derived from a secret (an API key, a bearer token) that never contains the
 * secret: the first `length` hex digits of its SHA-256. Keys appear in stats, events and (with a
 * shared store) in Redis key names, so a raw secret must never be one.
 *
 * 16 hex digits (64 bits) make an accidental collision between two keys of one process
 * vanishingly unlikely (birthday bound ~2^32 keys) while keeping key names short.
 *
 * @example wrapFetch(gate, { key: (request) => hashKey(request.headers.get('authorization') ?? '') })
 */
export function hashKey(value: string, length = 16): string {
  if (typeof value !== 'string') throw invalid('value', 'a string', value);
  integer('length', length, 1);
  if (length > 64) throw invalid('length', 'an integer from 1 to 64 (hex digits of SHA-256)', length);
  return createHash('sha256').update(value).digest('hex').slice(0, length);
}
