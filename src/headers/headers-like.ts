/**
 * The header containers users hand us, reduced to one `Map<lower-case name, value>`.
 */

/** One field's value as the common HTTP clients expose it. */
export type HeaderValue = string | readonly string[] | number | null | undefined;

/**
 * Any of: a WHATWG `Headers` (fetch, undici), a `Map`, a plain record (Node's
 * `IncomingHttpHeaders`, axios' headers), or an iterable of `[name, value]` pairs. Names are
 * case-insensitive; repeated lines (arrays, duplicate pairs) are joined with `", "`, exactly as
 * `Headers#get()` joins them (RFC 9110 §5.3).
 */
export type HeadersLike =
  | Headers
  | ReadonlyMap<string, HeaderValue>
  | Iterable<readonly [string, HeaderValue]>
  | Readonly<Record<string, HeaderValue>>;

// Bounds on hostile input. A field value longer than this is ignored whole: every value we read is
// under a few hundred bytes, Node's default limit for *all* headers is 16 KB, and a cap keeps every
// later scan (splits, structured-field parsing, regexes) proportional to it.
export const maxFieldValueChars = 8192;
// Names longer than this are not any field we read; responses carry a few dozen fields.
const maxFieldNameChars = 256;
// Stop reading after this many field lines (an endless iterator must not hang the parser).
const maxFieldLines = 4096;

/**
 * Lower-cased name -> value with repeated lines joined by `", "`. Values are not trimmed here (each
 * reader trims OWS where its grammar allows). Oversized or non-text values are dropped. Never
 * throws: a container whose iteration or getters throw yields the fields read so far.
 */
export function normalizeHeaders(headers: HeadersLike | null | undefined): Map<string, string> {
  const fields = new Map<string, string>();
  const oversized = new Set<string>();
  if (headers === null || typeof headers !== 'object') return fields;

  const addLine = (name: string, line: string): void => {
    if (oversized.has(name)) return;
    const previous = fields.get(name);
    const joined = previous === undefined ? line : `${previous}, ${line}`;
    // Rule: a field whose (joined) value exceeds the cap is dropped whole, not truncated: a
    // truncated list or date would be read as a different, wrong value.
    if (joined.length > maxFieldValueChars) {
      oversized.add(name);
      fields.delete(name);
      return;
    }
    fields.set(name, joined);
  };

  const add = (rawName: unknown, value: unknown): void => {
    if (typeof rawName !== 'string' || rawName.length === 0 || rawName.length > maxFieldNameChars) return;
    const name = rawName.trim().toLowerCase();
    if (Array.isArray(value)) {
      let index = 0;
      for (const line of value) {
        if (++index > maxFieldLines) break;
        const text = lineText(line);
        if (text !== undefined) addLine(name, text);
      }
      return;
    }
    const text = lineText(value);
    if (text !== undefined) addLine(name, text);
  };

  try {
    let count = 0;
    if (Symbol.iterator in headers) {
      for (const entry of headers as Iterable<unknown>) {
        if (++count > maxFieldLines) break;
        if (Array.isArray(entry)) add(entry[0], entry[1]);
      }
    } else {
      const record = headers as Readonly<Record<string, unknown>>;
      for (const name of Object.keys(record)) {
        if (++count > maxFieldLines) break;
        add(name, record[name]);
      }
    }
  } catch {
    // Rule: a throwing container (a getter, a broken iterator) is not a reason to lose the
    // response; keep what was read.
  }
  return fields;
}

function lineText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  // axios and Node's outgoing headers may hold numbers (content-length); a header line is text.
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}
