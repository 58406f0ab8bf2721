/**
 * What a log line can show: an error printed whole (`console.error(err)`, `util.inspect`, JSON)
 * must not carry a credential, whether the response's (`Set-Cookie` on the last response, the
 * cause of `RateLimitedError`) or the caller's (a headers record passed as a misplaced option).
 */
import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { wrapFetch } from '../../../src/adapters/fetch.js';
import { headOf } from '../../../src/adapters/response-head.js';
import { tollgateInterceptor } from '../../../src/adapters/undici.js';
import { createGate } from '../../../src/gate/gate.js';

const printed = (value: unknown) => [
  inspect(value, { depth: 10 }),
  inspect(value, { depth: 10, showHidden: true }),
  JSON.stringify(value),
];

describe('credentials never printed', () => {
  it('the last response of a throttled call prints its headers with Set-Cookie redacted', () => {
    const fetchHeaders = new Headers({ 'retry-after': '30', 'set-cookie': 'sid=COOKIESECRET' });
    const fromFetch = headOf({}, 429, 'Too Many Requests', fetchHeaders);
    const fromUndici = headOf({}, 429, 'Too Many Requests', {
      'retry-after': '30',
      'set-cookie': ['sid=COOKIESECRET', 'b=2'],
      'set-cookie2': 'old=COOKIESECRET',
    });
    for (const head of [fromFetch, fromUndici]) {
      for (const text of printed(head)) {
        expect(text).not.toContain('COOKIESECRET');
        expect(text).toContain('retry-after');
        expect(text).toContain('429');
      }
    }
    // The caller who asks still gets them.
    expect(fromFetch.headers.get('set-cookie')).toBe('sid=COOKIESECRET');
  });

  it('an option error names the option and the keys of a record, never its values', () => {
    const gate = createGate();
    for (const make of [
      () => wrapFetch(gate, { headers: { authorization: 'Bearer sk-SECRET-1' } } as never),
      () => tollgateInterceptor(gate, { headers: { 'x-api-key': 'SECRET-2' } } as never),
    ]) {
      let message = '';
      try {
        make();
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toContain('`headers`');
      expect(message).not.toMatch(/SECRET/);
    }
  });
});
