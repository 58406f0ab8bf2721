/**
 * `tollgate run` options: argv (node:util parseArgs) and an optional JSON config file, validated
 * into a `RunConfig`. Flags win over the config file; the config file wins over defaults. Every
 * error names the flag (or the config key and file) and the value.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { normalizeBudgets } from '../budget/budget.js';
import { type BudgetSpec, type GateOptions, type LimitSpec, type PriceTable, priceTable } from '../index.js';
import { CliError } from './cli-error.js';
import { headerNameProblem, headerValueProblem } from './header-value.js';
import { jsonErrorPosition } from './json-error-position.js';
import { maxLineBytes } from './jsonl.js';
import {
  closest,
  notPositiveRate,
  parseBudget,
  parseDuration,
  parseHeader,
  parseInteger,
  parseLimit,
  parseOnOff,
  parsePrice,
  parseRate,
  priceCurrencyProblem,
  rateExamples,
} from './parse-units.js';
import type { ProgressMode } from './progress.js';
import { safeUrlText } from './redact.js';
import type { RunConfig } from './runner.js';

export const runFlags = {
  rate: { type: 'string' },
  burst: { type: 'string' },
  limit: { type: 'string', multiple: true },
  concurrency: { type: 'string' },
  budget: { type: 'string', multiple: true },
  ledger: { type: 'string' },
  price: { type: 'string' },
  'price-header': { type: 'string' },
  'header-adapt': { type: 'string' },
  'per-host': { type: 'boolean' },
  out: { type: 'string', short: 'o' },
  config: { type: 'string', short: 'c' },
  strict: { type: 'boolean' },
  'retry-failed': { type: 'boolean' },
  'max-queue-time': { type: 'string' },
  timeout: { type: 'string' },
  redis: { type: 'string' },
  'redis-prefix': { type: 'string' },
  'base-url': { type: 'string' },
  header: { type: 'string', short: 'H', multiple: true },
  'keep-header': { type: 'string', multiple: true },
  window: { type: 'string' },
  progress: { type: 'string' },
  'bodies-dir': { type: 'string' },
  'max-inline-body': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies ParseArgsConfig['options'];

export const runHelp = `Usage: tollgate run <requests.jsonl | -> [options]

Sends every request of a JSONL file through one gate and writes one JSONL result per request.
Each input line: {"id", "url", "method"?, "headers"?, "body"?, "cost"?, "price"?, "priority"?, "key"?}.
A re-run with the same --out skips the ids already there (resume).

Limits (repeatable where noted; none means no rate limit of your own):
  --rate 50/s              average rate (token bucket); with --burst N, at most N at once
  --burst 10               the token bucket's size (default: the whole rate)
  --limit 500/min          never more than N per window, as the provider counts (repeatable;
                           units: 90000tokens/min, or one that lines' "cost" names, e.g.
                           900points/min; algorithm: sliding-log:20/min)
  --concurrency 8          at most N requests in flight
  --per-host               apply these limits to each origin separately (default: all together)
  --header-adapt on|off    listen to Retry-After and rate-limit headers, retry 429s (default on)
  --max-queue-time 30s     a request that cannot start within this is not sent (error result)
  --timeout 60s            per HTTP attempt (default 60s; at most 24d, or inf)

Money:
  --budget 5usd/day        hard cap per period, reserved before sending (repeatable;
                           name=5usd/day, $20/month, 2usd/24h rolling, 5eur/day@Europe/Berlin)
  --price 0.002usd         estimate per request (a line's "price" wins)
  --price-header NAME      actual price per response, in major units (e.g. x-request-cost)
  --ledger PATH|memory|redis
                           where budgets are recorded (default .tollgate/ledger.sqlite; redis:
                           in the Redis of --redis, shared by every process using it)

Input and output:
  -o, --out FILE           results (default: <input>.results.jsonl next to the input)
  --strict                 a malformed line stops the run before anything is sent
  --retry-failed           on resume, send again the ids whose last result failed
  --base-url URL           for relative "url" values
  -H, --header "K: V"      add a header to every request (repeatable), e.g. an API key
  --keep-header NAME       keep this response header in results (repeatable)
  --bodies-dir DIR         large or binary bodies go here (default: <out>.bodies)
  --max-inline-body 64kb   larger bodies are written to files (default 64kb, at most 8mb)
  --window 256             most requests read ahead of their results (memory bound)
  --progress auto|bar|plain|none   (auto: a bar on a terminal, plain lines otherwise)
  -c, --config FILE.json   the same options as JSON (keys in camelCase; flags win)
  --redis URL              share limits, pauses and learned limits with every process using
                           the same Redis and prefix (when this build has the shared gate)
  --redis-prefix NAME      key prefix in Redis (default tollgate): one quota per prefix

Ctrl-C stops reading, lets requests in flight finish and writes their results; a second Ctrl-C
aborts them. Run \`tollgate --help\` for the exit codes.`;

const configKeys = [
  'rate',
  'burst',
  'limit',
  'limits',
  'concurrency',
  'budget',
  'budgets',
  'ledger',
  'price',
  'priceHeader',
  'priceTable',
  'headerAdapt',
  'adapt',
  'perHost',
  'out',
  'strict',
  'retryFailed',
  'maxQueueTime',
  'timeout',
  'redis',
  'redisPrefix',
  'baseUrl',
  'headers',
  'keepHeaders',
  'window',
  'progress',
  'bodiesDir',
  'maxInlineBody',
] as const;

type ConfigFile = Partial<Record<(typeof configKeys)[number], unknown>>;

// The longest timer Node keeps (ms): 2^31 - 1, about 24.8 days.
const maxTimerMs = 2 ** 31 - 1;
// An inline body is JSON-escaped in its result line (up to 6 bytes per byte, a control character
// as \u0000): an eighth of the line cap resume reads (64 MiB / 8 = 8 MiB, at most 48 MiB escaped)
// keeps every result line readable.
const maxInlineBodyLimit = maxLineBytes / 8;

/** Options whose value is a number or a rate: a negative one is shown (no secret in it). */
const numericFlags = new Set([
  'rate',
  'burst',
  'limit',
  'concurrency',
  'window',
  'timeout',
  'max-queue-time',
]);

/**
 * parseArgs refuses a value starting with a dash (it may be the next flag, the value forgotten):
 * `--rate -5/s` is a negative number, said as such; any other option's value is not shown (an `-H`
 * value may be a secret, an `--out` path is the user's).
 */
function dashValueMessage(message: string, args: readonly string[]): string {
  // "Option '-o' argument is ambiguous. … use '--out=-XYZ' or '-o-XYZ'."
  const given = /'([^']+)'/.exec(message)?.[1] ?? '';
  const name = /use '--([^=']+)=/.exec(message)?.[1] ?? given.replace(/^-+/, '');
  const at = args.findIndex((arg, i) => arg === given && args[i + 1]?.startsWith('-') === true);
  const value = at === -1 ? undefined : args[at + 1]!;
  if (value !== undefined && numericFlags.has(name) && /^-\s*\.?\d/.test(value)) {
    const example = (rateExamples as Readonly<Record<string, string>>)[name];
    return example === undefined
      ? `Expected --${name} not to be negative, got \`${value}\``
      : notPositiveRate(`--${name}`, value, example);
  }
  return `Option --${name} needs a value, and the argument after it starts with a dash (not shown): give the value, or write --${name}=<value> for one that starts with a dash`;
}

/** parseArgs with its errors turned into one-line messages (and a "did you mean"). */
export function parseArgv<O extends NonNullable<ParseArgsConfig['options']>>(
  command: string,
  args: readonly string[],
  options: O,
  allowPositionals: boolean,
) {
  try {
    return parseArgs({ args: [...args], options, allowPositionals, strict: true });
  } catch (error) {
    const e = error as Error & { code?: string };
    if (e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      const flag = /'([^']+)'/.exec(e.message)?.[1] ?? '';
      const name = flag.replace(/^-+/, '');
      const suggestion = closest(name, Object.keys(options));
      throw new CliError(
        `Unknown option ${flag} for \`tollgate ${command}\`${suggestion ? ` (did you mean --${suggestion}?)` : ''}. See \`tollgate ${command} --help\`.`,
      );
    }
    if (e.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && e.message.includes('argument is ambiguous')) {
      throw new CliError(`${dashValueMessage(e.message, args)}. See \`tollgate ${command} --help\`.`);
    }
    if (e.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      throw new CliError(`${e.message.replace(/^Option /, 'Option ')}. See \`tollgate ${command} --help\`.`);
    }
    if (e.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
      throw new CliError(`Unexpected argument: ${e.message}. See \`tollgate ${command} --help\`.`);
    }
    throw error;
  }
}

function readConfig(path: string): ConfigFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new CliError(`Cannot read --config ${path}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // V8's message quotes the text around the error, which may be an API key: the position only.
    const at = jsonErrorPosition(text);
    throw new CliError(
      `--config ${path} is not valid JSON${at === undefined ? '' : ` (at line ${at.line}, column ${at.column})`}`,
    );
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CliError(`--config ${path} must hold a JSON object`);
  }
  for (const key of Object.keys(value)) {
    if (!(configKeys as readonly string[]).includes(key)) {
      const suggestion = closest(key, configKeys);
      throw new CliError(
        `Unknown key \`${key}\` in --config ${path}${suggestion ? ` (did you mean \`${suggestion}\`?)` : ''}; known keys: ${configKeys.join(', ')}`,
      );
    }
  }
  return value as ConfigFile;
}

function asStringOrNumber(label: string, value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  throw new CliError(`Expected ${label} to be a string, got \`${JSON.stringify(value)}\``);
}

function asBoolean(label: string, value: unknown): boolean {
  if (typeof value === 'boolean') return value;
  if (typeof value === 'string') return parseOnOff(label, value);
  throw new CliError(`Expected ${label} to be true or false, got \`${JSON.stringify(value)}\``);
}

function asList(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [value];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Sizes: `65536`, `64kb`, `1mb`. */
function parseBytes(flag: string, text: string): number {
  const m = /^(\d+)\s*(b|kb|k|kib|mb|m|mib)?$/i.exec(text.trim());
  if (m === null) throw new CliError(`Expected ${flag} like 65536, 64kb or 1mb, got \`${text}\``);
  const unit = (m[2] ?? 'b').toLowerCase();
  const scale = unit.startsWith('k') ? 1024 : unit.startsWith('m') ? 1024 * 1024 : 1;
  return Number(m[1]) * scale;
}

/**
 * A path the run will create (the results file, the bodies directory): a directory where a file is
 * expected, or a file where a directory is on the way, is said now and not as EISDIR mid-run.
 */
function checkPath(flag: string, path: string, kind: 'file' | 'directory'): void {
  const isDirectory = (p: string) => statSync(p).isDirectory();
  if (existsSync(path)) {
    if (kind === 'file' && isDirectory(path)) {
      throw new CliError(`Expected ${flag} to be a file, got ${path}, which is a directory`);
    }
    if (kind === 'directory' && !isDirectory(path)) {
      throw new CliError(`Expected ${flag} to be a directory, got ${path}, which is a file`);
    }
    return;
  }
  // The nearest existing ancestor must be a directory (the rest is created).
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    if (existsSync(dir)) {
      if (!isDirectory(dir)) {
        throw new CliError(`Cannot create ${flag} ${path}: ${dir} is a file, not a directory`);
      }
      return;
    }
    if (dirname(dir) === dir) return;
  }
}

/**
 * A response header name to keep: a header name can never hold a space or a colon, so such a value
 * would keep nothing, silently. The message shows the name only up to its first bad character: what
 * follows may be a pasted credential ("Authorization: Bearer …").
 */
function keptHeaderName(flag: string, name: string): string {
  const problem = headerNameProblem(name);
  if (problem === undefined) return name;
  throw new CliError(
    `Expected ${flag} to be a header name like x-request-id (letters, digits and !#$%&'*+-.^_\`|~; no spaces or colons): ${problem}`,
  );
}

function defaultOut(input: string): string {
  const ext = extname(input);
  const stem =
    ext === '.jsonl' || ext === '.json' || ext === '.ndjson' ? basename(input, ext) : basename(input);
  return join(dirname(input), `${stem}.results.jsonl`);
}

export interface ParsedRun {
  readonly help: boolean;
  readonly config: RunConfig;
  /** Things worth saying before starting (not errors). */
  readonly warnings: readonly string[];
}

/** argv after `run` → a validated RunConfig. Throws CliError (exit 2). */
export function parseRunOptions(args: readonly string[], cwd: string = process.cwd()): ParsedRun {
  const { values, positionals } = parseArgv('run', args, runFlags, true);
  if (values.help) return { help: true, config: undefined as unknown as RunConfig, warnings: [] };
  if (positionals.length === 0) {
    throw new CliError('Missing the requests file: tollgate run <requests.jsonl> [options] (or - for stdin)');
  }
  if (positionals.length > 1) {
    // The extra arguments are most often the rest of an unquoted `-H Authorization: Bearer <key>`:
    // their count is shown, never their text.
    throw new CliError(
      `Expected one requests file, got ${positionals.length} arguments (${positionals[0]} and ${positionals.length - 1} more, not shown): ` +
        'quote values with spaces, e.g. -H "Authorization: Bearer …"',
    );
  }
  const warnings: string[] = [];
  const input = positionals[0] === '-' ? '-' : resolve(cwd, positionals[0]!);
  if (input !== '-' && !existsSync(input)) throw new CliError(`Requests file not found: ${positionals[0]}`);

  let file: ConfigFile = {};
  let fileDir = cwd;
  let fileName = '';
  if (values.config !== undefined) {
    const path = resolve(cwd, values.config);
    file = readConfig(path);
    fileDir = dirname(path);
    fileName = values.config;
  }
  const label = (key: string) => `\`${key}\` in ${fileName}`;
  /** How a value is named in messages: the flag when given, else its key in the config file. */
  const named = (flag: keyof typeof values, key: string) =>
    values[flag] !== undefined ? `--${flag}` : label(key);

  // Limits: --rate/--burst, --limit, --concurrency; each flag replaces its config key.
  const limits: LimitSpec[] = [];
  const burstText =
    values.burst ?? (file.burst === undefined ? undefined : asStringOrNumber(label('burst'), file.burst));
  const burstLabel = named('burst', 'burst');
  const burst = burstText === undefined ? undefined : parseInteger(burstLabel, burstText, 1);
  if (values.rate !== undefined) limits.push(parseRate(values.rate, burst));
  else if (file.rate !== undefined)
    limits.push(parseRate(asStringOrNumber(label('rate'), file.rate), burst, label('rate')));
  else if (burst !== undefined)
    throw new CliError(`${burstLabel} needs a rate: add --rate, e.g. --rate 50/s --burst ${burst}`);

  if (values.limit !== undefined) for (const text of values.limit) limits.push(parseLimit(text));
  else {
    const fromFile = file.limits ?? file.limit;
    if (fromFile !== undefined) {
      asList(fromFile).forEach((item, i) => {
        const where = label(`limits[${i}]`);
        if (typeof item === 'string') limits.push(parseLimit(item, where));
        else if (isRecord(item))
          limits.push(item as unknown as LimitSpec); // validated by the gate, naming limits[i]
        else
          throw new CliError(
            `Expected ${where} to be like "500/min" or a limit object, got \`${JSON.stringify(item)}\``,
          );
      });
    }
  }
  const concurrencyText =
    values.concurrency ??
    (file.concurrency === undefined ? undefined : asStringOrNumber(label('concurrency'), file.concurrency));
  if (concurrencyText !== undefined) {
    const n = parseInteger(named('concurrency', 'concurrency'), concurrencyText, 1);
    limits.push({ algorithm: 'concurrency', limit: n });
  }

  // Budgets and prices.
  const budgets: BudgetSpec[] = [];
  if (values.budget !== undefined) for (const text of values.budget) budgets.push(parseBudget(text));
  else {
    const fromFile = file.budgets ?? file.budget;
    if (fromFile !== undefined) {
      asList(fromFile).forEach((item, i) => {
        const where = label(`budgets[${i}]`);
        if (typeof item === 'string') budgets.push(parseBudget(item, where));
        else if (isRecord(item))
          budgets.push(item as unknown as BudgetSpec); // validated by the guard
        else
          throw new CliError(
            `Expected ${where} to be like "5usd/day" or a budget object, got \`${JSON.stringify(item)}\``,
          );
      });
    }
  }
  // The budgets' currency (one for all; the guard reports a bad budget itself, with its own message).
  let currency: string | undefined;
  if (budgets.length > 0) {
    try {
      currency = normalizeBudgets(budgets)[0]?.currency;
    } catch {
      currency = undefined;
    }
  }
  const priceText = values.price ?? (file.price === undefined ? undefined : file.price);
  let priceMicros: number | undefined;
  if (priceText !== undefined) {
    const priceFlag = named('price', 'price');
    const parsed = parsePrice(priceFlag, priceText);
    const problem = priceCurrencyProblem(parsed, currency);
    if (problem !== undefined)
      throw new CliError(
        `Expected ${priceFlag} ${problem}, got \`${String(priceText)}\` (${parsed.currency!.toUpperCase()})`,
      );
    priceMicros = parsed.micros;
  }
  const priceHeader =
    values['price-header'] ??
    (file.priceHeader === undefined ? undefined : asStringOrNumber(label('priceHeader'), file.priceHeader));
  const priceHeaderProblem =
    priceHeader === undefined ? undefined : headerNameProblem(String(priceHeader).trim());
  if (priceHeaderProblem !== undefined) {
    const flag = named('price-header', 'priceHeader');
    throw new CliError(
      `Expected ${flag} to be a header name like x-request-cost, got \`${String(priceHeader)}\` (${priceHeaderProblem})`,
    );
  }
  let price: ReturnType<typeof priceTable> | undefined;
  if (file.priceTable !== undefined) {
    try {
      price = priceTable(file.priceTable as PriceTable, 'priceTable');
    } catch (error) {
      throw new CliError(`${label('priceTable')}: ${(error as Error).message}`);
    }
  }
  // 'memory' and 'redis' are words, not files (a file of that name: ./memory, ./redis).
  let ledger: string | undefined;
  const ledgerWord = (text: string) => (text === 'memory' || text === 'redis' ? text : undefined);
  if (values.ledger !== undefined) ledger = ledgerWord(values.ledger) ?? resolve(cwd, values.ledger);
  else if (file.ledger !== undefined) {
    const text = asStringOrNumber(label('ledger'), file.ledger);
    ledger = ledgerWord(text) ?? resolve(fileDir, text);
  }
  if (budgets.length > 0 && priceMicros === undefined) {
    warnings.push(
      'A budget is set but no --price: requests without a "price" field reserve nothing before they are sent ' +
        '(only prices read from responses are charged, after the fact). Set --price for a hard cap.',
    );
  }
  if (budgets.length === 0 && ledger !== undefined) warnings.push('--ledger has no effect without --budget.');

  // Adaptation and time.
  const adaptText = values['header-adapt'] ?? file.headerAdapt;
  const headerAdapt =
    adaptText === undefined
      ? true
      : typeof adaptText === 'boolean'
        ? adaptText
        : parseOnOff(named('header-adapt', 'headerAdapt'), String(adaptText));
  if (file.adapt !== undefined && !isRecord(file.adapt)) {
    throw new CliError(
      `Expected ${label('adapt')} to be an object of adapt options (e.g. {"pacing": "spread"})`,
    );
  }
  const durationOf = (
    flag: string,
    key: keyof ConfigFile,
    fallback: number,
    allowInfinity: boolean,
  ): number => {
    const flagValue = (values as Record<string, unknown>)[flag];
    if (typeof flagValue === 'string') return parseDuration(`--${flag}`, flagValue, { allowInfinity });
    const v = file[key];
    if (v === undefined) return fallback;
    if (typeof v === 'number' && v >= 0) return Math.ceil(v); // ms in a config file; timers take integers
    return parseDuration(label(key), asStringOrNumber(label(key), v), { allowInfinity });
  };
  const maxQueueTimeMs = durationOf('max-queue-time', 'maxQueueTime', Number.POSITIVE_INFINITY, true);
  const timeoutMs = durationOf('timeout', 'timeout', 60_000, true);
  if (timeoutMs === 0)
    throw new CliError(`Expected ${named('timeout', 'timeout')} to be more than 0 (or \`inf\` for none)`);
  // Node's timers hold a signed 32-bit ms count: a longer timeout fires after 1 ms (or throws).
  if (Number.isFinite(timeoutMs) && timeoutMs > maxTimerMs) {
    throw new CliError(
      `Expected ${named('timeout', 'timeout')} to be at most 24d (${maxTimerMs} ms), or \`inf\` for none`,
    );
  }

  // Input and output.
  const outText =
    values.out ?? (file.out === undefined ? undefined : asStringOrNumber(label('out'), file.out));
  let out: string;
  if (outText !== undefined)
    out = values.out !== undefined ? resolve(cwd, outText) : resolve(fileDir, outText);
  else if (input === '-') throw new CliError('Reading requests from stdin needs --out <results.jsonl>');
  else out = defaultOut(input);
  if (input !== '-' && resolve(out) === resolve(input)) {
    throw new CliError('--out must not be the requests file itself');
  }
  checkPath('--out', out, 'file');
  const bodiesText =
    values['bodies-dir'] ?? (file.bodiesDir === undefined ? undefined : String(file.bodiesDir));
  const bodiesDir =
    bodiesText === undefined
      ? `${out.replace(/\.jsonl$/, '')}.bodies`
      : resolve(values['bodies-dir'] !== undefined ? cwd : fileDir, bodiesText);
  checkPath('--bodies-dir', bodiesDir, 'directory');
  const inlineText =
    values['max-inline-body'] ?? (file.maxInlineBody === undefined ? undefined : String(file.maxInlineBody));
  const inlineLabel = named('max-inline-body', 'maxInlineBody');
  const maxInlineBodyBytes = inlineText === undefined ? 64 * 1024 : parseBytes(inlineLabel, inlineText);
  if (maxInlineBodyBytes > maxInlineBodyLimit) {
    throw new CliError(
      `Expected ${inlineLabel} to be at most 8mb (a result line must stay readable on resume), got \`${inlineText}\``,
    );
  }

  const baseText = values['base-url'] ?? (file.baseUrl === undefined ? undefined : String(file.baseUrl));
  let baseUrl: URL | undefined;
  if (baseText !== undefined) {
    try {
      baseUrl = new URL(baseText);
    } catch {
      throw new CliError(
        `Expected --base-url to be an absolute URL like https://api.example.com/, got \`${safeUrlText(baseText)}\``,
      );
    }
    if (baseUrl.username !== '' || baseUrl.password !== '') {
      // fetch refuses them (quoting the URL); credentials belong in a header.
      throw new CliError(
        `Expected --base-url without credentials (user:password@), got \`${safeUrlText(baseText)}\`; send them with -H`,
      );
    }
  }
  const headers: Record<string, string> = {};
  if (file.headers !== undefined) {
    if (!isRecord(file.headers))
      throw new CliError(`Expected ${label('headers')} to be an object of strings`);
    for (const [k, v] of Object.entries(file.headers)) {
      const nameProblem = headerNameProblem(k);
      if (nameProblem !== undefined) throw new CliError(`In ${label('headers')}, ${nameProblem}`);
      if (typeof v !== 'string' && !(typeof v === 'number' && Number.isFinite(v))) {
        throw new CliError(`Expected ${label(`headers.${k}`)} to be a string (value not shown)`);
      }
      const value = String(v);
      const valueProblem = headerValueProblem(value);
      if (valueProblem !== undefined) {
        throw new CliError(
          `Expected ${label(`headers.${k}`)} to be a valid header value: it ${valueProblem} (value not shown)`,
        );
      }
      headers[k.toLowerCase()] = value;
    }
  }
  for (const text of values.header ?? []) {
    const [k, v] = parseHeader(text);
    headers[k.toLowerCase()] = v;
  }
  const keepHeaders = [
    ...(values['keep-header'] ?? []).map((h) => keptHeaderName('--keep-header', h)),
    ...(file.keepHeaders === undefined
      ? []
      : asList(file.keepHeaders).map((h) =>
          keptHeaderName(label('keepHeaders'), asStringOrNumber(label('keepHeaders'), h)),
        )),
  ].map((h) => h.toLowerCase());

  const windowText =
    values.window ?? (file.window === undefined ? undefined : asStringOrNumber(label('window'), file.window));
  const window = windowText === undefined ? 256 : parseInteger(named('window', 'window'), windowText, 1);

  const progressText = values.progress ?? (file.progress === undefined ? 'auto' : String(file.progress));
  if (!['auto', 'bar', 'plain', 'none'].includes(progressText)) {
    throw new CliError(`Expected --progress to be auto, bar, plain or none, got \`${progressText}\``);
  }
  const strict =
    values.strict ?? (file.strict === undefined ? false : asBoolean(label('strict'), file.strict));
  const retryFailed =
    values['retry-failed'] ??
    (file.retryFailed === undefined ? false : asBoolean(label('retryFailed'), file.retryFailed));
  const perHost =
    values['per-host'] ?? (file.perHost === undefined ? false : asBoolean(label('perHost'), file.perHost));
  const redis =
    values.redis ?? (file.redis === undefined ? undefined : asStringOrNumber(label('redis'), file.redis));
  // Anything else reaches ioredis as a host name (`--redis notaurl` ran on the local fallback); a
  // path is a Unix socket.
  if (redis !== undefined && !/^(rediss?:\/\/[^/?#]|\/)/i.test(String(redis).trim()))
    throw new CliError(
      `Expected ${named('redis', 'redis')} to be a URL like redis://127.0.0.1:6379 or rediss://host:6380 (or a socket path), got ${/^[a-z][a-z0-9+.-]*:\/\/|@/i.test(String(redis)) ? 'another value (not shown: it may hold a password)' : `\`${String(redis)}\``}`,
    );
  const redisPrefix =
    values['redis-prefix'] ??
    (file.redisPrefix === undefined ? undefined : asStringOrNumber(label('redisPrefix'), file.redisPrefix));
  if (redisPrefix !== undefined && redis === undefined)
    warnings.push('--redis-prefix has no effect without --redis.');
  if (ledger === 'redis' && redis === undefined)
    throw new CliError(
      `${named('ledger', 'ledger')} redis records budgets in the Redis that --redis names: give --redis URL too`,
    );
  if (redis !== undefined && budgets.length > 0 && ledger === undefined)
    warnings.push(
      "Budgets are recorded in this machine's ledger file, not shared through --redis: processes elsewhere each " +
        'spend the whole budget. Add --ledger redis to share them (a budget already spent in the file starts from zero there).',
    );

  const config: RunConfig = {
    input,
    out,
    limits,
    perHost,
    budgets,
    ledger,
    headerAdapt,
    adapt: file.adapt as GateOptions['adapt'] | undefined,
    maxQueueTimeMs,
    maxQueue: Math.max(10_000, window + 1),
    redis,
    redisPrefix,
    strict,
    retryFailed,
    timeoutMs,
    priceMicros,
    currency,
    pricing: {
      priceHeader: priceHeader?.toLowerCase(),
      price,
      reconcileTokens: limits.some((l) => (l.unit ?? 'requests') === 'tokens'),
      currency,
    },
    baseUrl,
    headers,
    window,
    progress: progressText as ProgressMode,
    bodiesDir,
    maxInlineBodyBytes,
    keepHeaders,
  };
  return { help: false, config, warnings };
}
