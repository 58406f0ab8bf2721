/**
 * Secrets kept out of what a run prints and writes. Error messages from fetch and the network stack
 * quote what they refused: a header value (an API key), a URL with `user:password@`, a query string
 * with `?api_key=`. Results files are shared and committed, so such messages are scrubbed first.
 */

export const redacted = '[redacted]';

// Shorter values are too likely to be ordinary words of a message ("json", "1", "true").
const minSecretChars = 8;

/** A query string with every value (and every parameter without one) replaced. */
function redactQuery(query: string): string {
  return query
    .split('&')
    .map((pair) => {
      if (pair === '') return pair;
      const eq = pair.indexOf('=');
      return eq === -1 ? redacted : `${pair.slice(0, eq + 1)}${redacted}`;
    })
    .join('&');
}

/**
 * URL text, valid or not, without its userinfo, query values and fragment values:
 * `http://[redacted]@host/p?key=[redacted]#access_token=[redacted]`. Userinfo is whatever precedes
 * the last `@` of the authority (after `//`, or from the start when there is no `//`), as the URL
 * parser reads it.
 */
export function safeUrlText(text: string): string {
  const hash = text.indexOf('#');
  const beforeHash = hash === -1 ? text : text.slice(0, hash);
  // OAuth's implicit flow returns `#access_token=…`: a fragment is read as a query is.
  const fragment = hash === -1 ? '' : `#${redactQuery(text.slice(hash + 1))}`;
  const q = beforeHash.indexOf('?');
  let head = q === -1 ? beforeHash : beforeHash.slice(0, q);
  const slashes = head.indexOf('//');
  const authorityStart = slashes === -1 ? 0 : slashes + 2;
  const pathStart = head.slice(authorityStart).search(/[/\\]/);
  const authorityEnd = pathStart === -1 ? head.length : authorityStart + pathStart;
  const at = head.lastIndexOf('@', authorityEnd - 1);
  if (at >= authorityStart) head = `${head.slice(0, authorityStart)}${redacted}${head.slice(at)}`;
  return q === -1 ? `${head}${fragment}` : `${head}?${redactQuery(beforeHash.slice(q + 1))}${fragment}`;
}

const urlInText = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`]+/gi;

/** Every `scheme://…` URL in `text` with its userinfo, query and fragment values replaced. */
export function scrubUrls(text: string): string {
  return text.replace(urlInText, (url) => {
    // Punctuation that ends the sentence or closes a parenthesis is the message's, not the URL's.
    const end = /[.,;]*\)?[.,;]*$/.exec(url)![0];
    const own = end !== '' && !(end.includes(')') && url.includes('(')) ? url.slice(0, -end.length) : url;
    return `${safeUrlText(own)}${url.slice(own.length)}`;
  });
}

/**
 * The values of a URL that may be secrets: user, password, query and fragment values, as written
 * and decoded.
 */
export function urlSecrets(url: URL): string[] {
  const raw = [url.username, url.password];
  for (const pair of [...url.search.slice(1).split('&'), ...url.hash.slice(1).split('&')]) {
    const eq = pair.indexOf('=');
    if (eq !== -1) raw.push(pair.slice(eq + 1));
  }
  const secrets: string[] = [];
  for (const value of raw) {
    secrets.push(value);
    try {
      secrets.push(decodeURIComponent(value.replace(/\+/g, ' ')));
      secrets.push(decodeURIComponent(value));
    } catch {
      // Not percent-encoded text: the raw form is enough.
    }
  }
  return secrets;
}

/**
 * `text` with every secret of at least 8 characters replaced (longest first, so one inside another
 * goes whole), then the userinfo, query and fragment values of any URL it still holds.
 */
export function redact(text: string, secrets: Iterable<string>): string {
  const long = [...new Set(secrets)]
    .filter((s) => s.length >= minSecretChars)
    .sort((a, b) => b.length - a.length);
  let out = text;
  for (const secret of long) out = out.split(secret).join(redacted);
  return scrubUrls(out);
}
