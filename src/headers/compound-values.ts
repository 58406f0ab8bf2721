import { trimOws } from './decimal.js';
import type { CompoundFormat } from './profiles.js';

/**
 * Small value grammars where one header carries a whole window, or several. Each returns the
 * window fields as text (numbers are checked later, by the shared window rules) and never throws.
 */
export interface CompoundWindow {
  readonly name?: string;
  readonly limit?: string;
  readonly remaining?: string;
  readonly used?: string;
  /** Delta seconds. */
  readonly resetAfter?: string;
}

// Entries beyond this are not a real header; they are ignored to bound the work.
const maxEntries = 32;

const number = String.raw`\d{1,20}(?:\.\d{1,20})?`;
const usedSlashLimit = new RegExp(`^(${number})/(${number})$`);
const namedUsage = new RegExp(`^([A-Za-z0-9_.-]{1,64})=(${number})/(${number})(\\([^()]{0,200}\\))?$`);
const namedRemaining = /^([^;]{1,200});(\d{1,20}(?:\.\d{1,20})?)$/;
const keyValue = /^([a-z-]{1,32})=(.{0,64})$/i;

export const compoundParsers: Readonly<Record<CompoundFormat, (value: string) => CompoundWindow[]>> = {
  // Shopify `X-Shopify-Shop-Api-Call-Limit: 32/40` = used/limit (P12: remaining = limit - used).
  'used-slash-limit': (value) => {
    const match = usedSlashLimit.exec(trimOws(value));
    return match === null ? [] : [{ used: match[1] ?? '', limit: match[2] ?? '' }];
  },
  // Salesforce `Sforce-Limit-Info: api-usage=10018/100000; api-bursts=1/750;
  // per-app-api-usage=17/250(appName=x)`: name=used/limit; the app, if given, is part of the name.
  'named-usage-list': (value) =>
    entries(value, /[;,]/).flatMap((entry) => {
      const match = namedUsage.exec(entry);
      if (match === null) return [];
      const [, name = '', used = '', limit = '', app = ''] = match;
      return [{ name: `${name}${app}`, used, limit }];
    }),
  // Zendesk `Zendesk-RateLimit-Tickets-Index: total=100; remaining=99; resets=41` (delta seconds).
  'key-value-window': (value) => {
    const fields: { limit?: string; remaining?: string; resetAfter?: string } = {};
    for (const entry of entries(value, /[;,]/)) {
      const match = keyValue.exec(entry);
      if (match === null) continue;
      const key = (match[1] ?? '').toLowerCase();
      const text = trimOws(match[2] ?? '');
      if (key === 'total') fields.limit = text;
      else if (key === 'remaining') fields.remaining = text;
      else if (key === 'resets') fields.resetAfter = text;
    }
    return fields.limit === undefined && fields.remaining === undefined ? [] : [fields];
  },
  // Azure `x-ms-ratelimit-remaining-resource: Microsoft.Compute/GetVMScaleSet3Min;197,...`:
  // comma-separated `PolicyName;remaining` (a `;` that is not a Structured Fields parameter).
  'named-remaining-list': (value) =>
    entries(value, /,/).flatMap((entry) => {
      const match = namedRemaining.exec(entry);
      return match === null ? [] : [{ name: trimOws(match[1] ?? ''), remaining: match[2] ?? '' }];
    }),
};

function entries(value: string, separator: RegExp): string[] {
  return value
    .split(separator, maxEntries)
    .map(trimOws)
    .filter((entry) => entry !== '');
}
