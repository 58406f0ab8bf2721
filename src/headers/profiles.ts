/**
 * Vendor header conventions as data. The parser (`parse-ratelimit.ts`) walks these tables; adding
 * a provider that follows a known shape is a new row, not a new branch. Sources for every row are in
 * the research corpus (`shared/header-vectors/PROVIDERS.md`, section and provider named below).
 */

/**
 * How a reset value is read.
 * - `auto`: rule P6. A non-negative number by magnitude: `< 1e9` delta seconds, `1e9 <= v < 1e12`
 *   epoch seconds, `>= 1e12` epoch ms (decimals allowed); otherwise an HTTP-date or RFC 3339.
 * - `delta-seconds`, `delta-ms`: a non-negative decimal from the receive time.
 * - `epoch-seconds`, `epoch-ms`: absolute Unix time.
 * - `duration`: a Go duration (`6m0s`, `12ms`).
 * - `date`: an HTTP-date or RFC 3339 timestamp.
 */
export type ResetFormat =
  | 'auto'
  | 'delta-seconds'
  | 'delta-ms'
  | 'epoch-seconds'
  | 'epoch-ms'
  | 'duration'
  | 'date';

/** What one header contributes to a window. `resetAfter` (delta seconds) beats `reset`, which beats `resetAt` (P8). */
export type WindowField =
  | 'limit'
  | 'remaining'
  | 'used'
  | 'reset'
  | 'resetAfter'
  | 'resetAt'
  | 'policy'
  | 'name'
  | 'scope'
  | 'windowMs';

/** A family whose header *names* say which window and field a value belongs to. */
export interface WindowRule {
  readonly source: string;
  /**
   * Tested against the lower-cased name; the first rule that matches a name owns it. Named groups:
   * `field` (looked up in `fields`; absent group = `''`) and `key` (which window of the family).
   */
  readonly name: RegExp;
  readonly fields: Readonly<Record<string, WindowField>>;
  /** Window id when the pattern has no `key` group. */
  readonly key?: string;
  /** The unit of every window, or `'from-key'`: the key, through `unitAliases`. */
  readonly unit: string;
  readonly unitAliases?: Readonly<Record<string, string>>;
  /** Window length implied by the key (`-minute`). */
  readonly windowMsByKey?: Readonly<Record<string, number>>;
  /** Report the key as the window's name (Kong's `minute`, Azure's `subscription-reads`). */
  readonly nameFromKey?: boolean;
  readonly reset: ResetFormat;
}

const second = 1000;
const minute = 60 * second;
const hour = 60 * minute;
const day = 24 * hour;

const tripletFields = { limit: 'limit', remaining: 'remaining', reset: 'reset' } as const;

export const windowRules: readonly WindowRule[] = [
  // OpenAI (and Azure OpenAI): the suffix is the UNIT; resets are Go durations. Must precede the
  // Kong row, whose suffix is a window. `*_usage_based` variants match no row and are ignored.
  {
    source: 'openai',
    name: /^x-ratelimit-(?<field>limit|remaining|reset)-(?<key>requests|tokens|input-tokens|output-tokens)$/,
    fields: tripletFields,
    unit: 'from-key',
    reset: 'duration',
  },
  // Kong-style gateways (draft-01 survey): the suffix is the WINDOW; no per-window reset.
  {
    source: 'kong',
    name: /^x-ratelimit-(?<field>limit|remaining)-(?<key>second|minute|hour|day|month|year)$/,
    fields: tripletFields,
    unit: 'requests',
    // Calendar months and years have no fixed length: no windowMs for them.
    windowMsByKey: { second, minute, hour, day },
    nameFromKey: true,
    reset: 'auto',
  },
  // Anthropic: four triplets, RFC 3339 resets ("fully replenished").
  {
    source: 'anthropic',
    name: /^anthropic-ratelimit-(?<key>requests|tokens|input-tokens|output-tokens)-(?<field>limit|remaining|reset)$/,
    fields: tripletFields,
    unit: 'from-key',
    reset: 'date',
  },
  // X (Twitter) per-app and per-user daily caps beside the x-rate-limit-* window.
  {
    source: 'x',
    name: /^x-(?<key>app|user)-limit-24hour-(?<field>limit|remaining|reset)$/,
    fields: tripletFields,
    unit: 'requests',
    windowMsByKey: { app: day, user: day },
    nameFromKey: true,
    reset: 'auto',
  },
  // Linear names the endpoint whose budget the endpoint-requests triplet describes.
  {
    source: 'x-ratelimit',
    name: /^x-ratelimit-endpoint-name$/,
    fields: { '': 'name' },
    key: 'endpoint-requests',
    unit: 'requests',
    reset: 'auto',
  },
  // Linear and RapidAPI: the infix is the unit (`requests`, `complexity`, `api-units`, ...).
  // Linear resets are epoch ms, RapidAPI's delta seconds: P6 tells them apart by magnitude.
  {
    source: 'x-ratelimit',
    name: /^x-ratelimit-(?<key>[a-z][a-z0-9]{0,30}(?:-[a-z0-9]{1,30}){0,3})-(?<field>limit|remaining|reset)$/,
    fields: tripletFields,
    unit: 'from-key',
    unitAliases: { 'endpoint-requests': 'requests' },
    reset: 'auto',
  },
  // The common X-RateLimit-* family: GitHub (used, resource), Discord (reset-after, bucket, scope),
  // Reddit (used, float remaining), Brave (lists + policy), WHOOP, SCAYLE, Rachio, lemlist...
  {
    source: 'x-ratelimit',
    name: /^x-ratelimit-(?<field>limit|remaining|reset|used|reset-after|policy|resource|bucket|scope)$/,
    fields: {
      ...tripletFields,
      used: 'used',
      'reset-after': 'resetAfter',
      policy: 'policy',
      resource: 'name',
      bucket: 'name',
      scope: 'scope',
    },
    key: 'x-ratelimit',
    unit: 'requests',
    reset: 'auto',
  },
  // Okta, X, Omnisend, Prisjakt spell it X-Rate-Limit-*; Zendesk's bare `X-Rate-Limit` IS the limit.
  {
    source: 'x-ratelimit',
    name: /^x-rate-limit(?:-(?<field>limit|remaining|reset))?$/,
    fields: { '': 'limit', ...tripletFields },
    key: 'x-rate-limit',
    unit: 'requests',
    reset: 'auto',
  },
  // Brevo: vendor prefix, reset in seconds.
  {
    source: 'brevo',
    name: /^x-sib-ratelimit-(?<field>limit|remaining|reset)$/,
    fields: tripletFields,
    key: 'brevo',
    unit: 'requests',
    reset: 'delta-seconds',
  },
  // IETF drafts -00..-06 separate fields. GitLab sends the same names with EPOCH resets plus
  // Observed/Name/ResetTime, Heroku only Remaining, polli-00 allowed an IMF-fixdate: all `auto`.
  {
    source: 'ietf-fields',
    name: /^ratelimit-(?<field>limit|remaining|reset|observed|name|resettime|policy)$/,
    fields: { ...tripletFields, observed: 'used', name: 'name', resettime: 'resetAt', policy: 'policy' },
    key: 'ratelimit',
    unit: 'requests',
    reset: 'auto',
  },
  // HubSpot daily and secondly pairs: the bare name is the limit.
  {
    source: 'hubspot',
    name: /^x-hubspot-ratelimit-(?<key>daily|secondly)(?:-(?<field>remaining))?$/,
    fields: { '': 'limit', remaining: 'remaining' },
    unit: 'requests',
    windowMsByKey: { daily: day, secondly: second },
    nameFromKey: true,
    reset: 'auto',
  },
  // HubSpot rolling window: Interval-Milliseconds is the window LENGTH, never a reset.
  {
    source: 'hubspot',
    name: /^x-hubspot-ratelimit-(?<field>max|remaining|interval-milliseconds)$/,
    fields: { max: 'limit', remaining: 'remaining', 'interval-milliseconds': 'windowMs' },
    key: 'interval',
    unit: 'requests',
    reset: 'auto',
  },
  // Azure Resource Manager: remaining only, one header per scope and operation. The
  // `-resource` list has its own format (compound rule below).
  {
    source: 'azure',
    name: /^x-ms-ratelimit-remaining-(?<key>(?!resource$)[a-z][a-z-]{0,60})$/,
    fields: { '': 'remaining' },
    unit: 'requests',
    nameFromKey: true,
    reset: 'auto',
  },
];

/**
 * Sources refined by a marker header in the same family (the `x-ratelimit` window is GitHub's when
 * `x-ratelimit-resource` is present). Cosmetic: it changes `source`, never the numbers.
 */
export const sourceMarkers: ReadonlyArray<{
  readonly key: string;
  readonly header: string;
  readonly source: string;
}> = [
  { key: 'x-ratelimit', header: 'x-ratelimit-resource', source: 'github' },
  { key: 'x-ratelimit', header: 'x-ratelimit-bucket', source: 'discord' },
  { key: 'x-ratelimit', header: 'x-ratelimit-reset-after', source: 'discord' },
  { key: 'ratelimit', header: 'ratelimit-observed', source: 'gitlab' },
];

/** Values with their own small grammar: one header carries a whole window (or several). */
export type CompoundFormat =
  /** `32/40`: used / limit (Shopify REST leaky bucket). */
  | 'used-slash-limit'
  /** `api-usage=18/5000; per-app-api-usage=17/250(appName=x)`: name=used/limit entries. */
  | 'named-usage-list'
  /** `total=100; remaining=99; resets=41`: one window, reset in delta seconds. */
  | 'key-value-window'
  /** `Policy/One;197,Policy/Two;1297`: name;remaining entries (a `;` that is not a parameter). */
  | 'named-remaining-list';

export interface CompoundRule {
  readonly source: string;
  /** Lower-cased name; a `key` group, if any, names the window. */
  readonly name: RegExp;
  readonly format: CompoundFormat;
  readonly unit: string;
}

export const compoundRules: readonly CompoundRule[] = [
  {
    source: 'shopify',
    name: /^x-shopify-shop-api-call-limit$/,
    format: 'used-slash-limit',
    unit: 'requests',
  },
  { source: 'salesforce', name: /^sforce-limit-info$/, format: 'named-usage-list', unit: 'requests' },
  {
    source: 'zendesk',
    name: /^zendesk-ratelimit-(?<key>[a-z0-9][a-z0-9-]{0,60})$/,
    format: 'key-value-window',
    unit: 'requests',
  },
  {
    source: 'azure',
    name: /^x-ms-ratelimit-remaining-resource$/,
    format: 'named-remaining-list',
    unit: 'requests',
  },
];

/**
 * IETF structured fields (draft-08+ Lists; draft-07 Dictionary in the same field). `resetAt` names
 * an absolute reset header for the same windows, used only when an item has no `t` (P8).
 */
export interface StructuredFamily {
  readonly source: string;
  readonly field: string;
  readonly policyField: string;
  readonly resetAtField?: string;
}

export const structuredFamilies: readonly StructuredFamily[] = [
  { source: 'ietf-structured', field: 'ratelimit', policyField: 'ratelimit-policy' },
  // Atlassian Jira's 2026 points quota uses draft-08 syntax under Beta- names.
  {
    source: 'atlassian-beta',
    field: 'beta-ratelimit',
    policyField: 'beta-ratelimit-policy',
    resetAtField: 'x-beta-ratelimit-reset',
  },
];

/** How an explicit retry directive's value is read. */
export type RetryFormat = 'retry-after' | 'delay-seconds' | 'milliseconds' | 'duration';

/** Explicit retry directives (PROVIDERS §0). All are read; the maximum wins (P5). */
export const retryDirectives: ReadonlyArray<{ readonly header: string; readonly format: RetryFormat }> = [
  { header: 'retry-after', format: 'retry-after' },
  { header: 'retry-after-ms', format: 'milliseconds' }, // OpenAI, Azure OpenAI
  { header: 'x-ms-retry-after-ms', format: 'milliseconds' }, // Azure Cosmos DB
  { header: 'x-amz-retry-after', format: 'milliseconds' }, // botocore standard retry v2.1
  { header: 'x-retry-in', format: 'duration' }, // vulcand/oxy, Traefik 1.x
  // MailerLite classic. Not in the corpus' §0 list, but it is a documented explicit directive in
  // seconds (ky honours it too), never a reset.
  { header: 'x-ratelimit-retry-after', format: 'delay-seconds' },
];

/** Statuses that mean "refused for rate or quota" by themselves. */
export const throttleStatuses: ReadonlySet<number> = new Set([429]);

// botocore's union of throttling error codes (`botocore/retries/standard.py`).
const awsThrottleCodeList =
  'throttling|throttlingexception|throttledexception|requestthrottledexception|toomanyrequestsexception|' +
  'provisionedthroughputexceededexception|transactioninprogressexception|requestlimitexceeded|' +
  'bandwidthlimitexceeded|limitexceededexception|requestthrottled|slowdown|priorrequestnotcomplete|' +
  'ec2throttledexception';

/** An AWS error code (the part after `#` in a body `__type`) that means throttling. */
export const awsThrottleCode = new RegExp(`^(?:${awsThrottleCodeList})$`, 'i');

/** Header values that mark a response as throttled whatever its status (P13). */
export const throttleHeaders: ReadonlyArray<{ readonly header: string; readonly value: RegExp }> = [
  { header: 'x-ratelimit-global', value: /^true$/i }, // Discord global limit
  // AWS: `x-amzn-ErrorType: ThrottlingException:http://internal.amazon.com/...`
  { header: 'x-amzn-errortype', value: new RegExp(`^(?:${awsThrottleCodeList})(?::|$)`, 'i') },
];

/** A value somewhere in a parsed JSON body that marks the response as throttled (P13). */
export interface BodyThrottleMarker {
  /** Dotted path from the body root; `*` steps into every element of an array. */
  readonly path: string;
  readonly value: RegExp | number | ((value: unknown) => boolean);
  /**
   * The statuses on which the marker counts. Absent: any status, because a provider's own
   * throttling code means throttling wherever it appears (P13: Shopify on 200, Linear on 400).
   */
  readonly statuses?: ReadonlySet<number>;
}

export const bodyThrottleMarkers: readonly BodyThrottleMarker[] = [
  { path: 'errors.*.extensions.code', value: /^(?:THROTTLED|RATELIMITED|RATE_LIMITED)$/ }, // Shopify, Linear (on 400)
  { path: 'errors.*.message', value: /^Throttled$/ }, // Shopify GraphQL, older shape (on 200)
  { path: 'errors.*.type', value: /^RATE_LIMITED$/ }, // GitHub GraphQL
  { path: 'errors.*.code', value: 88 }, // X API v1.1
  { path: 'error.status', value: /^RESOURCE_EXHAUSTED$/ }, // Google
  { path: 'error.code', value: /^(?:rate_limit_exceeded|rate_limit)$/ }, // OpenAI, Stripe
  { path: 'error.type', value: /^rate_limit_error$/ }, // Anthropic
  { path: '*.errorCode', value: /^REQUEST_LIMIT_EXCEEDED$/ }, // Salesforce REST (403, array body)
  { path: 'errorcode', value: 50100 }, // Salesforce Marketing Cloud
  { path: 'errorCode', value: /^E0000047$/ }, // Okta
  { path: 'errorType', value: /^RATE_LIMIT$/ }, // HubSpot
  { path: 'code', value: /^rate_limited$/ }, // Notion (also on 529)
  { path: 'code', value: 20429 }, // Twilio
  { path: 'id', value: /^rate_limit$/ }, // Heroku
  { path: 'type', value: /#quota-exceeded$/ }, // IETF problem type (draft-09+)
  // AWS JSON protocols: `com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException` on 400.
  {
    path: '__type',
    value: (value) =>
      typeof value === 'string' && awsThrottleCode.test(value.slice(value.lastIndexOf('#') + 1)),
  },
  // GitHub's limits come as a 403 (or 429) whose only marker is the message. Prose is no code: the
  // same words in a validation error (`422 "rate limit must be positive"`) are not throttling.
  { path: 'message', value: /\brate limit/i, statuses: new Set([403, 429]) },
];
