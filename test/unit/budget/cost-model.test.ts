import { describe, expect, it } from 'vitest';
import { createBudgetGuard } from '../../../src/budget/budget-guard.js';
import {
  costFromUsage,
  createCostModel,
  priceFromHeader,
  priceTable,
  readUsage,
} from '../../../src/budget/cost-model.js';
import { InvalidCostError, InvalidOptionError } from '../../../src/errors.js';

describe('priceTable', () => {
  it('prices requests and tokens exactly, rounding the total up to a micro', () => {
    const price = priceTable({ per1mInputTokens: 3, per1mOutputTokens: 15 });
    expect(price({ inputTokens: 1200, outputTokens: 300 })).toEqual({ micros: 8100 });
    expect(price({ inputTokens: 1 })).toEqual({ micros: 3 });
    const cheap = priceTable({ per1mInputTokens: '0.15' });
    expect(cheap({ inputTokens: 1 })).toEqual({ micros: 1 }); // 0.15 micro rounds up
    expect(cheap({ inputTokens: 1_000_000 })).toEqual({ micros: 150_000 });
    expect(cheap({ inputTokens: 7 })).toEqual({ micros: 2 }); // 1.05 micros -> 2
  });

  it('per-1k prices and a price per request', () => {
    const price = priceTable({ perRequest: '$0.001', per1kInputTokens: 0.0025, per1kOutputTokens: 0.01 });
    expect(price({ inputTokens: 1000, outputTokens: 500 })).toEqual({ micros: 1000 + 2500 + 5000 });
    expect(price()).toEqual({ micros: 1000 });
    expect(price({ requests: 3 })).toEqual({ micros: 3000 });
  });

  it.each([
    [{ perRequest: -1 }, /`priceTable.perRequest`/],
    [{ per1kInputTokens: Number.NaN }, /`priceTable.per1kInputTokens`/],
    [{ per1kOutputTokens: Infinity }, /`priceTable.per1kOutputTokens`/],
    [{ per1mInputTokens: '0.0000000001' }, /at most 9 decimals/],
    [{ per1kInputTokens: 1, per1mInputTokens: 1 }, /`priceTable.per1mInputTokens` to be unset/],
    [{ perToken: 1 }, /`priceTable.perToken`/],
  ])('rejects %j', (table, message) => {
    expect(() => priceTable(table as never)).toThrow(InvalidOptionError);
    expect(() => priceTable(table as never)).toThrow(message);
  });

  it('rejects bad usage counts with InvalidCostError', () => {
    const price = priceTable({ per1kInputTokens: 1 });
    expect(() => price({ inputTokens: -1 })).toThrow(InvalidCostError);
    expect(() => price({ inputTokens: 1.5 })).toThrow(InvalidCostError);
    expect(() => price({ inputTokens: Number.NaN })).toThrow(InvalidCostError);
  });
});

describe('reading the actual cost from a response', () => {
  it('priceFromHeader reads a price header from Headers or a plain record', () => {
    const read = priceFromHeader('x-request-cost');
    expect(read({ headers: new Headers({ 'X-Request-Cost': '0.0042' }) })).toBe('0.0042');
    expect(read({ headers: { 'x-request-cost': '$0.01' } })).toBe('$0.01');
    expect(read({ headers: {} })).toBeUndefined();
  });

  it('priceFromHeader reads a header that is not an amount as no answer', () => {
    const read = priceFromHeader('x-request-cost');
    for (const value of ['0,0042', '0,5', '1,00', 'n/a', '-1']) {
      expect(read({ headers: { 'x-request-cost': value } })).toBeUndefined();
    }
    expect(read({ headers: { 'x-request-cost': '1,000.5' } })).toBe('1,000.5');
  });

  it('a cost header with a decimal comma leaves the estimate standing', () => {
    const model = createCostModel<unknown, { headers: Record<string, string> }>({
      estimate: '$0.01',
      actual: priceFromHeader('x-request-cost'),
    });
    expect(model.actualMicros({ headers: { 'x-request-cost': '0,0042' } }, undefined, 10_000)).toBe(10_000);
    expect(model.actualMicros({ headers: { 'x-request-cost': '0.0042' } }, undefined, 10_000)).toBe(4_200);
  });

  it('readUsage understands OpenAI, Anthropic and Gemini bodies', () => {
    expect(readUsage({ usage: { prompt_tokens: 10, completion_tokens: 5 } })).toEqual({
      inputTokens: 10,
      outputTokens: 5,
    });
    expect(readUsage({ usage: { input_tokens: 7, output_tokens: 3 } })).toEqual({
      inputTokens: 7,
      outputTokens: 3,
    });
    expect(readUsage({ usageMetadata: { promptTokenCount: 4, candidatesTokenCount: 2 } })).toEqual({
      inputTokens: 4,
      outputTokens: 2,
    });
    expect(readUsage({ choices: [] })).toBeUndefined();
    expect(readUsage('text')).toBeUndefined();
  });

  it("a Gemini thinking model's thoughts are charged as output, its tool-use prompt as input", () => {
    const body = {
      usageMetadata: {
        promptTokenCount: 100,
        toolUsePromptTokenCount: 50,
        candidatesTokenCount: 20,
        thoughtsTokenCount: 1_000,
        totalTokenCount: 1_170,
      },
    };
    expect(readUsage(body)).toEqual({ inputTokens: 150, outputTokens: 1_020 });
    const actual = costFromUsage(priceTable({ per1mInputTokens: 1, per1mOutputTokens: 10 }));
    expect(actual(body)).toEqual({ micros: 150 + 10_200 });
    // Cut off while thinking: no candidates at all, the thoughts are still billed.
    expect(readUsage({ usageMetadata: { promptTokenCount: 10, thoughtsTokenCount: 500 } })).toEqual({
      inputTokens: 10,
      outputTokens: 500,
    });
  });

  it('costFromUsage prices the usage in a body', () => {
    const actual = costFromUsage(priceTable({ per1mInputTokens: 3, per1mOutputTokens: 15 }));
    expect(actual({ usage: { input_tokens: 1000, output_tokens: 1000 } })).toEqual({ micros: 18_000 });
    expect(actual({})).toBeUndefined();
  });
});

describe('createCostModel', () => {
  type Req = { model: string; maxTokens: number; prompt: string };
  type Res = { headers: Record<string, string>; body: unknown };
  const price = priceTable({ per1mInputTokens: 3, per1mOutputTokens: 15 });

  it('estimates from the request and settles from the response', () => {
    const model = createCostModel<Req, Res>({
      estimate: (req) => price({ inputTokens: req.prompt.length, outputTokens: req.maxTokens }),
      actual: (res) => costFromUsage(price)(res.body),
    });
    const req = { model: 'm', maxTokens: 1000, prompt: 'x'.repeat(400) };
    const estimate = model.estimateMicros(req);
    expect(estimate).toBe(1200 + 15_000);
    const res = { headers: {}, body: { usage: { input_tokens: 400, output_tokens: 100 } } };
    expect(model.actualMicros(res, req, estimate)).toBe(1200 + 1500);
    expect(model.actualMicros({ headers: {}, body: {} }, req, estimate)).toBe(estimate);
  });

  it('a fixed estimate is parsed once; without `actual` the estimate settles', () => {
    const model = createCostModel({ estimate: '$0.002' });
    expect(model.estimateMicros(undefined)).toBe(2000);
    expect(model.actualMicros(undefined, undefined, 2000)).toBe(2000);
  });

  it('a dollar amount with float noise from a function is rounded up to whole micros, never down', () => {
    const model = createCostModel<number, unknown>({ estimate: (tokens) => tokens * 0.000003 });
    expect(model.estimateMicros(1234)).toBe(3702);
    expect(model.estimateMicros(1)).toBe(3);
  });

  it.each([
    [
      'throws',
      () => {
        throw new Error('boom');
      },
      /costModel.estimate threw: boom/,
    ],
    ['returns NaN', () => Number.NaN, /NaN/],
    ['returns a negative amount', () => -0.01, /negative/],
    ['returns Infinity', () => Infinity, /not finite/],
    ['returns garbage', () => 'ten dollars', /costModel.estimate result/],
    ['returns another currency', () => '1 eur', /EUR/],
  ])(
    'an estimate function that %s -> InvalidCostError, and nothing is reserved',
    (_name, estimate, message) => {
      const model = createCostModel({ estimate: estimate as () => number });
      const guard = createBudgetGuard({ budgets: { limit: 1, period: 'day' }, ledger: 'memory' });
      const send = () => {
        const micros = model.estimateMicros(undefined);
        guard.reserve(micros);
        throw new Error('sent');
      };
      expect(send).toThrow(InvalidCostError);
      expect(send).toThrow(message);
      expect(guard.spend()[0]).toMatchObject({ spentMicros: 0, reservedMicros: 0 });
    },
  );

  it('an actual function that throws -> InvalidCostError with the cause', () => {
    const boom = new Error('bad body');
    const model = createCostModel({
      estimate: 0.01,
      actual: () => {
        throw boom;
      },
    });
    try {
      model.actualMicros(undefined, undefined, 10_000);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidCostError);
      expect((error as Error).cause).toBe(boom);
    }
  });

  it.each([
    [{ estimate: -1 }, /`costModel.estimate`/],
    [{ estimate: Number.NaN }, /`costModel.estimate`/],
    [{ estimate: undefined }, /`costModel.estimate`/],
    [{ estimate: 1, currency: 'zzz' }, /`costModel.currency`/],
    [{ estimate: '1 eur' }, /`costModel.estimate` to be an amount in USD/],
    [{ estimate: 1, actual: 5 }, /`costModel.actual`/],
  ])('rejects options %j', (options, message) => {
    expect(() => createCostModel(options as never)).toThrow(InvalidOptionError);
    expect(() => createCostModel(options as never)).toThrow(message);
  });
});
