/**
 * What the fetch and undici adapters hand the gate as a call's outcome: the response's status and
 * headers, with the adapter's own result (a `Response`, an undici attempt) kept out of sight.
 *
 * Why: when the gate gives up on a throttled response, that outcome becomes `RateLimitedError`'s
 * `cause`, and errors get logged whole (`console.error(err)`, `util.inspect(err)`). A `Response`
 * prints its URL (whose query may carry `?api_key=`); undici's request state holds the request
 * headers (`authorization`, `x-api-key`). A head prints the status and the response headers (what a
 * caller wants from the last response: `Retry-After`, the rate-limit fields) and nothing of the
 * request. The adapter finds its result again through `resultOf`, which is not exported from the
 * package: no caller can reach the request from the error either.
 */

/** The last response of a call, as `RateLimitedError.cause` carries it: status and response headers, nothing of the request. */
export class ResponseHead<H = Headers> {
  readonly status: number;
  readonly statusText: string;
  /** The response headers: a `Headers` from `wrapFetch`, undici's header record from `tollgateInterceptor`. */
  readonly headers: H;

  constructor(status: number, statusText: string, headers: H) {
    this.status = status;
    this.statusText = statusText;
    this.headers = headers;
  }

  /**
   * What `console.log(error)` and `util.inspect` print of it: the status and the response headers,
   * `Set-Cookie` redacted (a session credential the provider gave; it belongs in no log). The
   * headers themselves stay whole for a caller who asks them.
   */
  [Symbol.for('nodejs.util.inspect.custom')](): object {
    return this.toJSON();
  }

  toJSON(): object {
    return { status: this.status, statusText: this.statusText, headers: printable(this.headers) };
  }
}

const credentialHeader = /^set-cookie2?$/i;

/** The headers as a plain record, credentials redacted: a `Headers`, axios' headers or undici's record. */
function printable(headers: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const put = (name: string, value: unknown) => {
    out[name] = credentialHeader.test(name) ? '[redacted]' : value;
  };
  try {
    if (typeof Headers !== 'undefined' && headers instanceof Headers)
      headers.forEach((value, name) => {
        put(name, value);
      });
    else if (typeof headers === 'object' && headers !== null) {
      const record =
        typeof (headers as { toJSON?: unknown }).toJSON === 'function'
          ? (headers as { toJSON(): unknown }).toJSON()
          : headers;
      for (const [name, value] of Object.entries(record as object)) put(name, value);
    }
  } catch {
    // Headers that cannot be read print as none.
  }
  return out;
}

// Beside the head rather than on it: util.inspect (showHidden) prints non-enumerable and
// symbol-keyed properties too.
const results = new WeakMap<ResponseHead<unknown>, unknown>();

/** A head for `result`, which `resultOf` gives back. */
export function headOf<H, R extends object>(
  result: R,
  status: number,
  statusText: string,
  headers: H,
): ResponseHead<H> {
  const head = new ResponseHead(status, statusText, headers);
  results.set(head, result);
  return head;
}

/** The result a head was made for (undefined for anything else). */
export function resultOf<R>(head: unknown): R | undefined {
  return typeof head === 'object' && head !== null
    ? (results.get(head as ResponseHead<unknown>) as R | undefined)
    : undefined;
}
