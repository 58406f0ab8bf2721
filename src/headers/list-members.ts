import { trimOws } from './decimal.js';
import { httpDateWeekdayPattern } from './http-date.js';

/**
 * Comma-separated field values that are not Structured Fields: legacy `X-RateLimit-*` lists
 * (Brave `1, 15000`, WHOOP `100, 100;window=60`), duplicated lines joined with `", "`, and
 * `Retry-After` values whose HTTP-dates carry their own comma.
 */

// More members than this is not a rate-limit list; the rest are ignored to bound the work.
const maxMembers = 64;

/** Splits on commas, re-joining `Mon, 30 Nov ...` split at its comma. Members are OWS-trimmed. */
export function splitFieldMembers(value: string): string[] {
  const parts = value.split(',', maxMembers * 2);
  const members: string[] = [];
  for (let i = 0; i < parts.length && members.length < maxMembers; i++) {
    const part = trimOws(parts[i] ?? '');
    const next = parts[i + 1];
    if (next !== undefined && httpDateWeekdayPattern.test(part)) {
      members.push(`${part}, ${trimOws(next)}`);
      i++;
    } else {
      members.push(part);
    }
  }
  return members;
}

/** A list member `15000;w=2592000`: the bare value and its window parameter, if any. */
export interface ListMember {
  readonly value: string;
  /** `w=` (drafts >= polli-01) or `window=` (polli-00), in seconds, as text. */
  readonly windowSeconds?: string;
}

export function parseListMembers(value: string | undefined): ListMember[] {
  if (value === undefined) return [];
  return value
    .split(',', maxMembers)
    .map((text) => {
      const [bare = '', ...params] = text.split(';');
      let windowSeconds: string | undefined;
      for (const param of params) {
        const [key = '', paramValue = ''] = param.split('=', 2);
        const name = trimOws(key).toLowerCase();
        if (windowSeconds === undefined && (name === 'w' || name === 'window'))
          windowSeconds = trimOws(paramValue);
      }
      const member: ListMember = { value: trimOws(bare) };
      return windowSeconds === undefined ? member : { ...member, windowSeconds };
    })
    .filter((member) => member.value !== '');
}
