// The public names of the HTTP adapters that need no optional dependency. src/index.ts re-exports
// from here.

export type { FetchLike, WrapFetchOptions } from './fetch.js';
export { withTollgate, wrapFetch } from './fetch.js';
export { hashKey } from './hash-key.js';
export type { ActualCost, ErrorBodyOptions, GateLike, TollgateRequestOptions } from './request-options.js';
// A type only: heads are made by the adapters (`RateLimitedError.cause`), never by callers.
export type { ResponseHead } from './response-head.js';
// Deliberately not here: `tollgate/axios` (src/adapters/axios.ts) and `tollgate/undici`
// (src/adapters/undici.ts) are their own entry points, so that importing `tollgate` never needs
// axios' or undici's types. The option checks and merges of request-options.ts are internal, and so
// are `headOf`/`resultOf` of response-head.ts: from an error's head, no caller may reach the request.
