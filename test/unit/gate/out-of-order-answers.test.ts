/**
 * The provider does not always answer calls in the order they were sent: a call on a new
 * connection reaches it after a later call on a reused one. What a response says about the quota
 * must hold whatever the order the provider saw the calls in.
 */
import { describe, expect, it } from 'vitest';
import { createGate, type Inspection } from '../../../src/gate/gate.js';
import { ManualClock } from '../../helpers/manual-clock.js';

const flush = async () => {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

const T0 = Date.parse('2026-11-30T12:00:00Z');

interface Reply {
  status: number;
  headers: Record<string, string>;
}

/** A provider whose answers the test hands out one by one, in any order. */
function heldProvider(clock: ManualClock) {
  const started: { at: number; answer: (reply: Reply) => void }[] = [];
  const fn = () =>
    new Promise<Reply>((resolve) => {
      started.push({ at: clock.now(), answer: resolve });
    });
  const inspect = (r: Reply): Inspection => ({ status: r.status, headers: r.headers, method: 'GET' });
  return { started, fn, inspect };
}

/** A gate on a manual clock before a held provider, and a way to schedule calls through both. */
function scenario() {
  const clock = new ManualClock(T0);
  const gate = createGate({ clock });
  const api = heldProvider(clock);
  const calls: Promise<unknown>[] = [];
  const schedule = () => calls.push(gate.schedule(api.fn, { key: 'api', inspect: api.inspect }));
  /**
   * The first call, answered "9 left until `resetEpochSeconds`" (or with `first`), then `more`
   * calls scheduled.
   */
  const open = async (resetEpochSeconds: number, more: number, first?: Reply) => {
    schedule();
    await flush();
    api.started[0]!.answer(first ?? quota(9, resetEpochSeconds));
    await flush();
    for (let i = 0; i < more; i++) schedule();
    await flush();
  };
  return { clock, gate, api, calls, schedule, open };
}

const limited = (limit: number, remaining: number, resetEpochSeconds: number): Reply => ({
  status: 200,
  headers: {
    'x-ratelimit-limit': String(limit),
    'x-ratelimit-remaining': String(remaining),
    'x-ratelimit-reset': String(resetEpochSeconds),
  },
});

const quota = (remaining: number, resetEpochSeconds: number): Reply => ({
  status: 200,
  headers: {
    'x-ratelimit-limit': '10',
    'x-ratelimit-remaining': String(remaining),
    'x-ratelimit-reset': String(resetEpochSeconds),
  },
});

/**
 * 12 calls on a quota of 10 per minute: the first and the 9 the quota allows are out, and the last
 * of them is answered first, with `remaining` left.
 */
async function lastAnsweredFirst(remaining: number) {
  const s = scenario();
  const reset = T0 / 1000 + 60;
  await s.open(reset, 12);
  expect(s.api.started).toHaveLength(10);
  s.api.started[9]!.answer(quota(remaining, reset));
  await flush();
  return { ...s, reset };
}

describe('quota from answers out of order', () => {
  it('an answer to a later call does not lend the units of earlier calls still in flight', async () => {
    const { clock, api, calls, open } = scenario();
    const reset = T0 / 1000 + 60;
    await open(reset, 12);
    // The 9 the quota allows are out; 3 wait.
    expect(api.started).toHaveLength(10);
    // The provider sees the last of them first (its connection was ready): 8 left, it says. The
    // other 8 are still on their way and will count too.
    api.started[9]!.answer(quota(8, reset));
    await flush();
    expect(api.started).toHaveLength(10);
    // Then the others, oldest first: older answers, each true when given.
    for (let i = 1; i <= 8; i++) api.started[i]!.answer(quota(8 - i, reset));
    await flush();
    expect(api.started).toHaveLength(10);
    // The window renews at the reset: the waiting calls go then, not before.
    clock.advance(59_999);
    await flush();
    expect(api.started).toHaveLength(10);
    clock.advance(1);
    await flush();
    expect(api.started.length).toBeGreaterThan(10);
    expect(api.started.slice(10).every((s) => s.at === T0 + 60_000)).toBe(true);
    for (let i = 10; i < api.started.length; i++) api.started[i]!.answer(quota(9, reset + 60));
    await flush();
    await Promise.all(calls);
  });

  it('an older answer that moves the reset later holds the renewal until then', async () => {
    const { clock, api, calls, open } = scenario();
    const second = T0 / 1000;
    await open(second + 1, 14);
    expect(api.started).toHaveLength(10);
    // The newest call is answered first, in the window ending at +1 s; the older ones after it,
    // by which time the provider's reset has moved to +2 s.
    api.started[9]!.answer(quota(8, second + 1));
    await flush();
    for (let i = 1; i <= 8; i++) api.started[i]!.answer(quota(8 - i, second + 2));
    await flush();
    clock.advance(1000);
    await flush();
    // Renewing at +1 s would send 5 calls the provider refuses.
    expect(api.started).toHaveLength(10);
    clock.advance(1000);
    await flush();
    expect(api.started).toHaveLength(15);
    expect(api.started.slice(10).every((s) => s.at === T0 + 2000)).toBe(true);
    for (let i = 10; i < 15; i++) api.started[i]!.answer(quota(9, second + 3));
    await flush();
    await Promise.all(calls);
  });

  it('an older answer from the window before does not take from the renewed one', async () => {
    const { clock, api, calls, schedule, open } = scenario();
    const second = T0 / 1000;
    await open(second + 1, 2);
    api.started[2]!.answer(quota(7, second + 1));
    await flush();
    // At the reset the gate renews the window (limit 10, a window of 1 s) and starts a call in it.
    clock.advance(1000);
    schedule();
    await flush();
    expect(api.started).toHaveLength(4);
    // The late answer is from the window before ("0 left until now"): it says nothing of this one.
    api.started[1]!.answer(quota(0, second + 1));
    await flush();
    for (let i = 0; i < 5; i++) schedule();
    await flush();
    expect(api.started).toHaveLength(9);
    for (let i = 3; i < api.started.length; i++) api.started[i]!.answer(quota(5, second + 2));
    await flush();
    await Promise.all(calls);
  });

  it('a call the gate does not inspect counts as unseen while it is in flight', async () => {
    const { clock, gate, api, calls, schedule } = scenario();
    const reset = T0 / 1000 + 60;
    schedule();
    await flush();
    api.started[0]!.answer(quota(9, reset));
    await flush();
    // Sent through the same partition without reading its answer, then an inspected call.
    let finishQuiet = () => {};
    const quiet = gate.schedule(() => new Promise<void>((resolve) => (finishQuiet = resolve)), {
      key: 'api',
    });
    schedule();
    await flush();
    expect(api.started).toHaveLength(2);
    // The provider answers the inspected call first: 2 left. The quiet call may not be counted yet.
    api.started[1]!.answer(quota(2, reset));
    await flush();
    for (let i = 0; i < 4; i++) schedule();
    await flush();
    expect(api.started).toHaveLength(3);
    finishQuiet();
    await quiet;
    for (let i = 2; i < api.started.length; i++) api.started[i]!.answer(quota(0, reset));
    clock.advance(60_000);
    await flush();
    for (let i = 3; i < api.started.length; i++) api.started[i]!.answer(quota(9, reset + 60));
    await flush();
    await Promise.all(calls);
  });

  it('answers in order: a burst leaves the quota at what the provider has left, not lower', async () => {
    const { clock, gate, api, calls, schedule } = scenario();
    const reset = T0 / 1000 + 60;
    const limit20 = (remaining: number): Reply => ({
      status: 200,
      headers: {
        'x-ratelimit-limit': '20',
        'x-ratelimit-remaining': String(remaining),
        'x-ratelimit-reset': String(reset),
      },
    });
    schedule();
    await flush();
    api.started[0]!.answer(limit20(19));
    await flush();
    for (let i = 0; i < 14; i++) schedule();
    await flush();
    expect(api.started).toHaveLength(15);
    // The provider counts them in order and answers in order: 18, 17, ... 5 left.
    for (let i = 1; i < 15; i++) api.started[i]!.answer(limit20(19 - i));
    await flush();
    for (let i = 0; i < 8; i++) schedule();
    await flush();
    // Its 5 go at once; 3 wait for the reset.
    expect(api.started).toHaveLength(20);
    expect(gate.stats('api').partition.adaptive[0]).toMatchObject({
      algorithm: 'server-quota',
      available: 0,
    });
    for (let i = 15; i < 20; i++) api.started[i]!.answer(limit20(19 - i));
    clock.advance(60_000);
    await flush();
    expect(api.started).toHaveLength(23);
    for (let i = 20; i < 23; i++) api.started[i]!.answer(limit20(19));
    await flush();
    await Promise.all(calls);
  });

  it('older answers that the provider counted first give back what a newer answer held for them', async () => {
    const { clock, api, calls, schedule, open } = scenario();
    const reset = T0 / 1000 + 60;
    const limit20 = (remaining: number) => limited(20, remaining, reset);
    await open(reset, 14, limit20(19));
    expect(api.started).toHaveLength(15);
    // The provider counts them in order (18, 17, ... 5 left) but the last answer comes back first:
    // 13 calls before it are still in flight, so the gate holds the 5 as possibly theirs.
    api.started[14]!.answer(limit20(5));
    await flush();
    for (let i = 0; i < 5; i++) schedule();
    await flush();
    expect(api.started).toHaveLength(15);
    // Their answers say more was left than the last one did: counted before it. The 5 go now, not
    // at the reset a minute later.
    for (let i = 1; i < 14; i++) api.started[i]!.answer(limit20(19 - i));
    await flush();
    expect(api.started).toHaveLength(20);
    expect(api.started.slice(15).every((s) => s.at === T0)).toBe(true);
    for (let i = 15; i < 20; i++) api.started[i]!.answer(limit20(19 - i));
    await flush();
    clock.advance(60_000);
    await Promise.all(calls);
  });

  it('an older answer of 0 left after a newer answer of 0 gives nothing back (0 is as low as it goes)', async () => {
    const { clock, api, calls, reset } = await lastAnsweredFirst(0);
    // Counted after it or before it, they cannot say less than 0.
    for (let i = 1; i <= 8; i++) api.started[i]!.answer(quota(0, reset));
    await flush();
    expect(api.started).toHaveLength(10);
    clock.advance(60_000);
    await flush();
    expect(api.started).toHaveLength(13);
    for (let i = 10; i < 13; i++) api.started[i]!.answer(quota(9, reset + 60));
    await flush();
    await Promise.all(calls);
  });

  it('a refilling quota (OpenAI): older answers counted first give back their units', async () => {
    const { clock, api, calls, open } = scenario();
    // 10 requests a minute, refilled continuously: "reset" is the time until full again.
    const openai = (remaining: number): Reply => ({
      status: 200,
      headers: {
        'x-ratelimit-limit-requests': '10',
        'x-ratelimit-remaining-requests': String(remaining),
        'x-ratelimit-reset-requests': `${(10 - remaining) * 6}s`,
      },
    });
    await open(0, 12, openai(9));
    expect(api.started).toHaveLength(10);
    api.started[9]!.answer(openai(0));
    await flush();
    // The provider counted the other 8 first (8 ... 1 left): nothing is owed for them, so the next
    // call waits for one refill (6 s), not for nine (54 s).
    for (let i = 1; i <= 8; i++) api.started[i]!.answer(openai(9 - i));
    await flush();
    clock.advance(5_999);
    await flush();
    expect(api.started).toHaveLength(10);
    clock.advance(1);
    await flush();
    expect(api.started).toHaveLength(11);
    for (let t = 0; t < 10 && api.started.length < 13; t++) {
      for (const s of api.started.slice(10)) s.answer(openai(0));
      clock.advance(60_000);
      await flush();
    }
    for (const s of api.started.slice(10)) s.answer(openai(0));
    await Promise.all(calls);
  });

  it('garbage remaining values in answers out of order neither crash the gate nor lend units out', async () => {
    const { clock, api, calls, reset } = await lastAnsweredFirst(0);
    // Unreadable or absurd remaining values: none may give back what the 0 above holds.
    const garbage = ['NaN', '-1', '1e999', 'Infinity', '', '9'.repeat(400), '0x10', '  ', '7.5.1'];
    for (let i = 1; i <= 8; i++) {
      api.started[i]!.answer({
        status: 200,
        headers: {
          'x-ratelimit-limit': '10',
          'x-ratelimit-remaining': garbage[i]!,
          'x-ratelimit-reset': String(reset),
        },
      });
    }
    await flush();
    expect(api.started).toHaveLength(10);
    clock.advance(60_000);
    await flush();
    for (let i = 10; i < api.started.length; i++) api.started[i]!.answer(quota(9, reset + 60));
    await flush();
    // Every call settles.
    await Promise.all(calls);
  });

  it("a late answer from the provider's window before does not take from the window after", async () => {
    const { clock, api, calls, schedule, open } = scenario();
    const second = T0 / 1000;
    await open(second + 1, 2);
    clock.advance(1200);
    // The newer call is answered first, from the window that began at +1 s: 9 left until +2 s.
    api.started[2]!.answer(quota(9, second + 2));
    await flush();
    // The older one was counted in the window before, which ended at +1 s: 0 left then.
    api.started[1]!.answer(quota(0, second + 1));
    await flush();
    for (let i = 0; i < 5; i++) schedule();
    await flush();
    expect(api.started).toHaveLength(8);
    for (let i = 3; i < 8; i++) api.started[i]!.answer(quota(9 - i, second + 2));
    await flush();
    await Promise.all(calls);
  });

  it('a cost record changed by the caller while its call is in flight counts as it was at the start', async () => {
    const { clock, gate, api } = scenario();
    const tokens = (remaining: number): Reply => ({
      status: 200,
      headers: {
        'x-ratelimit-limit-tokens': '10000',
        'x-ratelimit-remaining-tokens': String(remaining),
        'x-ratelimit-reset-tokens': '60s',
      },
    });
    const cost = { requests: 1, tokens: 100 };
    const first = gate.schedule(api.fn, { key: 'api', inspect: api.inspect, cost });
    await flush();
    // A later call in flight, then the caller reuses its record for something bigger.
    const second = gate.schedule(api.fn, {
      key: 'api',
      inspect: api.inspect,
      cost: { requests: 1, tokens: 10 },
    });
    await flush();
    cost.tokens = 5000;
    api.started[0]!.answer(tokens(9900));
    await first;
    api.started[1]!.answer(tokens(9890));
    await second;
    await flush();
    // The provider says 1000 left: so does the gate, whatever the record says now.
    clock.advance(120_000);
    const third = gate.schedule(api.fn, {
      key: 'api',
      inspect: api.inspect,
      cost: { requests: 1, tokens: 10 },
    });
    await flush();
    api.started[2]!.answer(tokens(1000));
    await third;
    await flush();
    const quotaLevel = gate.stats('api').partition.adaptive.find((level) => level.unit === 'tokens');
    expect(quotaLevel?.available).toBe(1000);
  });

  it('an uninspected call returning a thenable (not a Promise) counts until it settles', async () => {
    const { clock, gate, api, calls, schedule } = scenario();
    const reset = T0 / 1000 + 60;
    schedule();
    await flush();
    api.started[0]!.answer(quota(9, reset));
    await flush();
    let settle = (_: unknown) => {};
    // biome-ignore lint/suspicious/noThenProperty: a thenable that is not a promise is what this test feeds the gate
    const thenable = { then: (resolve: (value: unknown) => void) => (settle = resolve) };
    const quiet = gate.schedule(() => thenable as never, { key: 'api' });
    schedule();
    await flush();
    api.started[1]!.answer(quota(2, reset));
    await flush();
    for (let i = 0; i < 4; i++) schedule();
    await flush();
    // 2 left, less the thenable call the provider may not have counted yet: 1 starts.
    expect(api.started).toHaveLength(3);
    settle('done');
    await quiet;
    for (let i = 2; i < api.started.length; i++) api.started[i]!.answer(quota(0, reset));
    clock.advance(60_000);
    await flush();
    for (let i = 3; i < api.started.length; i++) api.started[i]!.answer(quota(9, reset + 60));
    await flush();
    await Promise.all(calls);
  });
});
