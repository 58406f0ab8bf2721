// The public names of the header parser. src/index.ts re-exports from here.

export type { BodyReader, BodyReaderContext, BodyReading } from './body-readers.js';
export {
  defaultBodyReaders,
  discordRetryAfter,
  googleRetryInfo,
  salesforceMarketingCloudRetryAfter,
  shopifyGraphqlCost,
  throttleMarkers,
} from './body-readers.js';
export { secondsToMs } from './decimal.js';
export { parseDuration } from './duration.js';
export type { HeadersLike, HeaderValue } from './headers-like.js';
export { parseHttpDate, parseRfc3339Date } from './http-date.js';
export type { ParseRateLimitOptions } from './parse-ratelimit.js';
export { bindingPolicy, parseRateLimitHeaders, summarize } from './parse-ratelimit.js';
export { parseRetryAfter } from './parse-retry-after.js';
export type { ResetFormat } from './profiles.js';
export type { RateLimitObservation, RateLimitPolicy, RateLimitSummary } from './rate-limit-observation.js';
// Deliberately internal: the vendor tables (profiles.ts) and the window assembly (quota-window.ts,
// ietf-structured.ts, compound-values.ts) change shape as providers are added; the exact-decimal
// helpers other than `secondsToMs` are implementation detail.
