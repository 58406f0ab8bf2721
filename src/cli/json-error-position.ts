/**
 * Where a JSON text stops being valid, for error messages that must not quote the text: V8's
 * `JSON.parse` message shows the characters around the error (`..."api-key": sk-live-12"...`),
 * which in a config file or a request line is often a secret.
 */

export interface JsonErrorPosition {
  /** 0-based offset in the text (UTF-16 code units; the text's length for a text cut short). */
  readonly offset: number;
  /** 1-based. */
  readonly line: number;
  /** 1-based. */
  readonly column: number;
}

const whitespace = new Set([' ', '\t', '\n', '\r']);
const escapes = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);
const hex = /^[0-9a-fA-F]{4}$/;
const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';

/** The first offset where `text` is not JSON (RFC 8259), or undefined when it is valid. */
function errorOffset(text: string): number | undefined {
  const n = text.length;
  let i = 0;
  // Open containers, innermost last. Iterative, so deep nesting cannot overflow the stack.
  const open: ('[' | '{')[] = [];
  const skipSpace = () => {
    while (i < n && whitespace.has(text[i]!)) i++;
  };
  /** A string starting at i; false at the offending character (left in i). */
  const string = (): boolean => {
    if (text[i] !== '"') return false;
    i++;
    while (i < n) {
      const c = text[i]!;
      if (c === '"') {
        i++;
        return true;
      }
      if (c === '\\') {
        const e = text[i + 1];
        if (e === 'u') {
          if (!hex.test(text.slice(i + 2, i + 6))) {
            i += 2;
            return false;
          }
          i += 6;
        } else if (e !== undefined && escapes.has(e)) i += 2;
        else {
          i++;
          return false;
        }
      } else if (c.charCodeAt(0) < 0x20) return false;
      else i++;
    }
    return false;
  };
  const digits = () => {
    const from = i;
    while (isDigit(text[i])) i++;
    return i > from;
  };
  const number = (): boolean => {
    if (text[i] === '-') i++;
    if (text[i] === '0') i++;
    else if (!digits()) return false;
    if (text[i] === '.') {
      i++;
      if (!digits()) return false;
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i++;
      if (text[i] === '+' || text[i] === '-') i++;
      if (!digits()) return false;
    }
    return true;
  };
  const literal = (word: string): boolean => {
    for (const c of word) {
      if (text[i] !== c) return false;
      i++;
    }
    return true;
  };
  /** A key and its colon, inside an object. */
  const key = (): boolean => {
    skipSpace();
    if (!string()) return false;
    skipSpace();
    if (text[i] !== ':') return false;
    i++;
    return true;
  };

  for (;;) {
    // A value.
    skipSpace();
    const c = text[i];
    let scalar = true;
    if (c === '{' || c === '[') {
      i++;
      skipSpace();
      if (text[i] === (c === '{' ? '}' : ']')) i++;
      else {
        open.push(c);
        if (c === '{' && !key()) return i;
        scalar = false;
      }
    } else if (c === '"') {
      if (!string()) return i;
    } else if (c === '-' || isDigit(c)) {
      if (!number()) return i;
    } else if (c === 't' || c === 'f' || c === 'n') {
      if (!literal(c === 't' ? 'true' : c === 'f' ? 'false' : 'null')) return i;
    } else return i;
    if (!scalar) continue;
    // After a value: a separator, the end of containers, or the end of the text.
    for (;;) {
      skipSpace();
      const inner = open[open.length - 1];
      if (inner === undefined) return i < n ? i : undefined;
      const d = text[i];
      if (d === ',') {
        i++;
        if (inner === '{' && !key()) return i;
        break;
      }
      if (d !== (inner === '{' ? '}' : ']')) return i;
      i++;
      open.pop();
    }
  }
}

/** Where `text` stops being JSON, as an offset and a line and column; undefined when it is valid. */
export function jsonErrorPosition(text: string): JsonErrorPosition | undefined {
  const offset = errorOffset(text);
  if (offset === undefined) return undefined;
  let line = 1;
  let lineStart = 0;
  for (let nl = text.indexOf('\n'); nl !== -1 && nl < offset; nl = text.indexOf('\n', nl + 1)) {
    line++;
    lineStart = nl + 1;
  }
  return { offset, line, column: offset - lineStart + 1 };
}
