/**
 * Header names and values, checked before anything is sent. fetch refuses a value holding CR, LF
 * or NUL (or a character above U+00FF) only when the request is built, and its message quotes the
 * value, which is often an API key. Every message from here names the header, never its value.
 */

const tokenChars = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]*/;

/** Why `name` cannot be a header name (showing only its valid start), or undefined when it can. */
export function headerNameProblem(name: string): string | undefined {
  const valid = tokenChars.exec(name)![0];
  if (valid.length === name.length && name.length > 0) return undefined;
  if (name.length === 0) return 'a header name is empty';
  // What follows the first bad character may be a value pasted into the name ("Authorization: Bearer …").
  return valid === ''
    ? 'a header name starts with a character not allowed in a name'
    : `header name "${valid.length > 40 ? `${valid.slice(0, 40)}…` : valid}…" has a character not allowed in a name at position ${valid.length + 1}`;
}

/** Why `value` cannot be sent as a header value, or undefined when it can. Never quotes the value. */
export function headerValueProblem(value: string): string | undefined {
  if (/[\r\n\0]/.test(value)) return 'contains a line break (CR or LF) or NUL';
  try {
    // Whatever else fetch's Headers refuses (a character above U+00FF).
    new Headers([['x', value]]);
  } catch {
    return 'contains a character not allowed in a header value (above U+00FF)';
  }
  return undefined;
}
