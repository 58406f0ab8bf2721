import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseRateLimitHeaders, summarize } from '../../../src/headers/index.js';

interface Vector {
  readonly id: string;
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body?: unknown;
  readonly receivedAt: string;
  readonly expect: {
    readonly retryAfterMs: number | null;
    readonly remaining: number | null;
    readonly limit: number | null;
    readonly resetMs: number | null;
    readonly notes: string;
  };
}

// /work/shared sits beside the repository root (../shared from the project root).
const vectorsUrl = new URL('../../../../shared/header-vectors/vectors.json', import.meta.url);
const vectors = JSON.parse(readFileSync(vectorsUrl, 'utf8')) as Vector[];

describe('header vectors (shared/header-vectors/vectors.json)', () => {
  it('loads the corpus (83 vectors when written)', () => {
    expect(vectors.length).toBeGreaterThanOrEqual(83);
  });

  for (const vector of vectors) {
    it(vector.id, () => {
      const now = Date.parse(vector.receivedAt);
      const observation = parseRateLimitHeaders(vector.status, vector.headers, { now, body: vector.body });
      const { notes: _notes, ...expected } = vector.expect;
      expect(summarize(observation)).toEqual(expected);
    });
  }
});
