import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { StoreUnavailableError } from '../../../src/errors.js';
import { CommandRunner, loadedScript, type RedisClient } from '../../../src/redis/redis-client.js';

/** A client whose commands answer only when the test says so, in any order. */
function fakeClient() {
  const calls: {
    command: string;
    args: unknown[];
    answer: (v: unknown) => void;
    fail: (e: unknown) => void;
  }[] = [];
  const client = {
    call(command: string, args: unknown[]) {
      return new Promise((answer, fail) => calls.push({ command, args, answer, fail }));
    },
  } as unknown as RedisClient;
  return { client, calls };
}

const script = loadedScript('test script', 'return 1');

/** Run `n` EVALSHAs; each records how it ended. */
function run(runner: CommandRunner, n: number) {
  const outcomes: string[] = Array.from({ length: n }, () => 'pending');
  for (let i = 0; i < n; i++) {
    runner.evalshaArgs(
      script,
      [script.sha, 0, i],
      (reply) => {
        outcomes[i] = outcomes[i] === 'pending' ? `reply ${String(reply)}` : 'settled twice';
      },
      (error) => {
        expect(error).toBeInstanceOf(StoreUnavailableError);
        outcomes[i] = outcomes[i] === 'pending' ? `error ${error.message}` : 'settled twice';
      },
    );
  }
  return outcomes;
}

describe('CommandRunner: one deadline per command, watched by one timer', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('times out only the commands past their deadline, each once, and ignores their late answers', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 100);
    const first = run(runner, 2);
    await vi.advanceTimersByTimeAsync(60);
    const second = run(runner, 1);
    calls[1]!.answer('b');
    await vi.advanceTimersByTimeAsync(0);
    expect(first).toEqual(['pending', 'reply b']);
    // The first command's deadline passes; the third (sent 60 ms later) still has 60 ms.
    await vi.advanceTimersByTimeAsync(41);
    expect(first[0]).toMatch(/^error Redis did not answer within commandTimeoutMs 100/);
    expect(second).toEqual(['pending']);
    calls[0]!.answer('late');
    calls[2]!.answer('c');
    await vi.advanceTimersByTimeAsync(200);
    expect(first[0]).toMatch(/^error /);
    expect(second).toEqual(['reply c']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a reply read in the poll phase after its deadline timer counts: a busy process is not a slow Redis', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 100);
    const first = run(runner, 1);
    // The timer fires at the deadline; the reply the socket held is read before the check runs.
    await vi.advanceTimersByTimeAsync(100);
    calls[0]!.answer('in time');
    // Sent while that check waits: its own deadline comes later and is judged on its own.
    const second = run(runner, 1);
    await vi.advanceTimersByTimeAsync(1);
    expect(first).toEqual(['reply in time']);
    expect(second).toEqual(['pending']);
    // Nothing answers the second: it times out once its deadline and the check after it pass.
    await vi.advanceTimersByTimeAsync(101);
    expect(second).toEqual(['error Redis did not answer within commandTimeoutMs 100']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('keeps watching commands answered out of order, across its compaction', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 1_000);
    // Command 1,500 hangs while the 2,999 others answer: the queue compacts when it reaches the head.
    const outcomes = run(runner, 3_000);
    for (let i = 0; i < calls.length; i++) if (i !== 1_500) calls[i]!.answer(i);
    await vi.advanceTimersByTimeAsync(0);
    expect(outcomes.filter((o) => o.startsWith('reply')).length).toBe(2_999);
    const late = run(runner, 1);
    await vi.advanceTimersByTimeAsync(1_000);
    // The deadline is judged after the poll phase that follows its timer (a setImmediate, which
    // the fake timers run once the clock moves on): the replies received by then count.
    await vi.advanceTimersByTimeAsync(1);
    expect(outcomes[1_500]).toMatch(/^error Redis did not answer/);
    expect(late).toEqual(['error Redis did not answer within commandTimeoutMs 1000']);
    expect(outcomes.filter((o) => o === 'settled twice')).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a failed command is reported once, as StoreUnavailableError naming the script', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 1_000);
    const outcomes = run(runner, 1);
    calls[0]!.fail(new Error('connection lost'));
    await vi.advanceTimersByTimeAsync(2_000);
    expect(outcomes).toEqual(['error Redis test script failed: connection lost']);
  });

  it('abandon rejects what is in flight and a later answer changes nothing', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 1_000);
    const outcomes = run(runner, 3);
    calls[1]!.answer('b');
    await vi.advanceTimersByTimeAsync(0);
    runner.abandon();
    calls[0]!.answer('a');
    await vi.advanceTimersByTimeAsync(5_000);
    expect(outcomes).toEqual([
      'error Redis store closed with a command in flight',
      'reply b',
      'error Redis store closed with a command in flight',
    ]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('call() shares the deadline watch', async () => {
    const { client } = fakeClient();
    const runner = new CommandRunner(client, 50);
    const answer = runner.call('PING');
    const seen = answer.catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(51);
    expect(await seen).toBeInstanceOf(StoreUnavailableError);
  });

  it('NOSCRIPT reloads and runs the script again, unless its caller was told of a timeout meanwhile', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 100);
    // In time: NOSCRIPT, SCRIPT LOAD, EVALSHA again, answered.
    const inTime = run(runner, 1);
    calls[0]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.map((c) => c.command)).toEqual(['EVALSHA', 'SCRIPT']);
    calls[1]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.map((c) => c.command)).toEqual(['EVALSHA', 'SCRIPT', 'EVALSHA']);
    expect(calls[2]!.args).toEqual(calls[0]!.args);
    calls[2]!.answer('ok');
    await vi.advanceTimersByTimeAsync(0);
    expect(inTime).toEqual(['reply ok']);
    // Late: the NOSCRIPT answer comes after the deadline (a busy server): nothing more is sent.
    const late = run(runner, 1);
    await vi.advanceTimersByTimeAsync(101);
    expect(late[0]).toMatch(/^error Redis did not answer within commandTimeoutMs 100/);
    calls[3]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(4);
    // Timed out while the script loads: the EVALSHA is not sent.
    const loading = run(runner, 1);
    calls[4]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.map((c) => c.command).slice(4)).toEqual(['EVALSHA', 'SCRIPT']);
    await vi.advanceTimersByTimeAsync(101);
    calls[5]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(6);
    expect(loading[0]).toMatch(/^error Redis did not answer/);
  });

  it('with scripts of its own: the first commands wait for every script to load, then go in order', async () => {
    const { client, calls } = fakeClient();
    const other = loadedScript('other script', 'return 2');
    const runner = new CommandRunner(client, 1_000, [script, other]);
    const outcomes = run(runner, 2);
    expect(calls.map((c) => `${c.command} ${String(c.args[1]).slice(0, 8)}`)).toEqual([
      'SCRIPT return 1',
      'SCRIPT return 2',
    ]);
    calls[0]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    // Not before every load answered.
    expect(calls).toHaveLength(2);
    calls[1]!.answer(other.sha);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.slice(2).map((c) => [c.command, c.args[2]])).toEqual([
      ['EVALSHA', 0],
      ['EVALSHA', 1],
    ]);
    // Loaded: the next goes at once.
    run(runner, 1);
    expect(calls).toHaveLength(5);
    calls[2]!.answer('a');
    calls[3]!.answer('b');
    await vi.advanceTimersByTimeAsync(0);
    expect(outcomes).toEqual(['reply a', 'reply b']);
  });

  it('NOSCRIPT with commands in flight: they go again in their order, before those asked for while the scripts load', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 1_000, [script]);
    const order: number[] = [];
    const send = (i: number) =>
      runner.evalshaArgs(
        script,
        [script.sha, 0, i],
        () => order.push(i),
        () => order.push(-i),
      );
    send(0);
    calls[0]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    calls[1]!.answer('ok');
    send(1);
    send(2);
    // The server was flushed: both fail; 3 is asked for while the scripts load.
    calls[2]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    send(3);
    calls[3]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.map((c) => c.command)).toEqual(['SCRIPT', 'EVALSHA', 'EVALSHA', 'EVALSHA', 'SCRIPT']);
    calls[4]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.slice(5).map((c) => c.args[2])).toEqual([1, 2, 3]);
    for (const c of calls.slice(5)) c.answer('ok');
    await vi.advanceTimersByTimeAsync(0);
    expect(order).toEqual([0, 1, 2, 3]);
    // A second NOSCRIPT for the same command (flushed again) fails it rather than loop.
    send(4);
    calls[8]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    calls[9]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    calls[10]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    expect(order).toEqual([0, 1, 2, 3, -4]);
  });

  it('loads that do not answer within the timeout fail the commands held for them; later commands wait for those loads, not new ones', async () => {
    const { client, calls } = fakeClient();
    const runner = new CommandRunner(client, 100, [script]);
    const held = run(runner, 2);
    const loading = runner.load().then(
      () => 'loaded',
      (error: unknown) => (error as Error).message,
    );
    expect(calls.map((c) => c.command)).toEqual(['SCRIPT']);
    await vi.advanceTimersByTimeAsync(101);
    expect(held[0]).toMatch(/^error Redis did not answer/);
    expect(held[1]).toMatch(/^error Redis did not answer/);
    expect(await loading).toMatch(/did not answer/);
    // A server still away: the next commands wait for the same loads (nothing more piles up in a
    // client that queues while disconnected), and fail in their turn.
    const away = run(runner, 1);
    await vi.advanceTimersByTimeAsync(101);
    expect(away[0]).toMatch(/^error Redis did not answer/);
    expect(calls.map((c) => c.command)).toEqual(['SCRIPT']);
    // The loads answer at last: the next command goes at once after them.
    const next = run(runner, 1);
    calls[0]!.answer(script.sha);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.map((c) => c.command)).toEqual(['SCRIPT', 'EVALSHA']);
    calls[1]!.answer('ok');
    await vi.advanceTimersByTimeAsync(0);
    expect(next).toEqual(['reply ok']);
    // Answered: a load after that sends again.
    const again = runner.load();
    expect(calls.map((c) => c.command)).toEqual(['SCRIPT', 'EVALSHA', 'SCRIPT']);
    calls[2]!.answer(script.sha);
    await again;
    await vi.advanceTimersByTimeAsync(200);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a runner given no scripts loads each one that meets NOSCRIPT, also while another loads', async () => {
    // A server that knows the scripts loaded into it, answering at once.
    const loaded = new Set<string>();
    const sent: string[] = [];
    const client = {
      call(command: string, args: unknown[]) {
        sent.push(command);
        if (command === 'SCRIPT') {
          const source = String(args[1]);
          loaded.add(loadedScript('', source).sha);
          return Promise.resolve('sha');
        }
        const sha = String(args[0]);
        return loaded.has(sha)
          ? Promise.resolve(`ran ${sha.slice(0, 4)}`)
          : Promise.reject(new Error('NOSCRIPT No matching script.'));
      },
    } as unknown as RedisClient;
    const runner = new CommandRunner(client, 1_000);
    const a = loadedScript('a', 'return 1');
    const b = loadedScript('b', 'return 2');
    const out: string[] = [];
    runner.evalshaArgs(
      a,
      [a.sha, 0],
      (r) => out.push(`a ${String(r)}`),
      (e) => out.push(`a ${e.message}`),
    );
    runner.evalshaArgs(
      b,
      [b.sha, 0],
      (r) => out.push(`b ${String(r)}`),
      (e) => out.push(`b ${e.message}`),
    );
    await vi.advanceTimersByTimeAsync(0);
    expect(out).toEqual([`a ran ${a.sha.slice(0, 4)}`, `b ran ${b.sha.slice(0, 4)}`]);
    expect(sent).toEqual(['EVALSHA', 'EVALSHA', 'SCRIPT', 'SCRIPT', 'EVALSHA', 'EVALSHA']);
  });

  it('quit() gives QUIT the command timeout, then drops the connection; it never hangs', async () => {
    let disconnects = 0;
    const hanging = {
      quit: () => new Promise(() => {}),
      disconnect: () => {
        disconnects++;
      },
    } as unknown as RedisClient;
    let done = false;
    new CommandRunner(hanging, 100).quit().then(() => {
      done = true;
    });
    await vi.advanceTimersByTimeAsync(99);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(done).toBe(true);
    expect(disconnects).toBe(1);
    // A QUIT that answers closes without a disconnect; one that fails disconnects.
    const answering = { quit: async () => 'OK', disconnect: () => disconnects++ } as unknown as RedisClient;
    await new CommandRunner(answering, 100).quit();
    expect(disconnects).toBe(1);
    const failing = {
      quit: async () => {
        throw new Error('Connection is closed.');
      },
      disconnect: () => disconnects++,
    } as unknown as RedisClient;
    await new CommandRunner(failing, 100).quit();
    expect(disconnects).toBe(2);
    expect(vi.getTimerCount()).toBe(0);
  });
});

/** A Cluster client of `n` primaries: keyless commands sent through it reach one node only. */
function fakeCluster(n: number, status: string) {
  const nodes = Array.from({ length: n }, () => fakeClient());
  const { client: routed, calls: routedCalls } = fakeClient();
  const listeners = new Map<string, (() => void)[]>();
  const cluster = {
    isCluster: true,
    status,
    call: (routed as unknown as { call: (c: string, a: unknown[]) => Promise<unknown> }).call,
    nodes: (role: string) => {
      expect(role).toBe('master');
      return nodes.map((node) => node.client);
    },
    once(event: string, listener: () => void) {
      listeners.set(event, [...(listeners.get(event) ?? []), listener]);
    },
    off(event: string, listener: () => void) {
      listeners.set(
        event,
        (listeners.get(event) ?? []).filter((l) => l !== listener),
      );
    },
    emit(event: string) {
      const ls = listeners.get(event) ?? [];
      listeners.delete(event);
      for (const l of ls) l();
    },
  };
  return { cluster, client: cluster as unknown as RedisClient, nodes, routedCalls, listeners };
}

describe('CommandRunner on a Cluster: scripts load on every primary', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('each script goes to every primary, and commands wait until all of them answered', async () => {
    const other = loadedScript('other script', 'return 2');
    const { client, nodes, routedCalls } = fakeCluster(3, 'ready');
    const runner = new CommandRunner(client, 1_000, [script, other]);
    const outcomes = run(runner, 2);
    for (const node of nodes) {
      expect(node.calls.map((c) => `${c.command} ${String(c.args[1])}`)).toEqual([
        'SCRIPT return 1',
        'SCRIPT return 2',
      ]);
    }
    // Nothing through the routed client until every node has both scripts.
    expect(routedCalls).toEqual([]);
    for (const node of nodes.slice(0, 2)) for (const c of node.calls) c.answer('sha');
    nodes[2]!.calls[0]!.answer('sha');
    await vi.advanceTimersByTimeAsync(0);
    expect(routedCalls).toEqual([]);
    nodes[2]!.calls[1]!.answer('sha');
    await vi.advanceTimersByTimeAsync(0);
    expect(routedCalls.map((c) => [c.command, c.args[2]])).toEqual([
      ['EVALSHA', 0],
      ['EVALSHA', 1],
    ]);
    // A NOSCRIPT from one primary (restarted) loads them on every primary again.
    routedCalls[0]!.answer('a');
    routedCalls[1]!.fail(new Error('NOSCRIPT No matching script.'));
    await vi.advanceTimersByTimeAsync(0);
    for (const node of nodes) expect(node.calls).toHaveLength(4);
    for (const node of nodes) for (const c of node.calls.slice(2)) c.answer('sha');
    await vi.advanceTimersByTimeAsync(0);
    expect(routedCalls.map((c) => c.args[2])).toEqual([0, 1, 1]);
    routedCalls[2]!.answer('b');
    await vi.advanceTimersByTimeAsync(0);
    expect(outcomes).toEqual(['reply a', 'reply b']);
  });

  it('a Cluster still connecting is waited for: it loads on the primaries it knows once ready', async () => {
    const { cluster, client, nodes, routedCalls } = fakeCluster(2, 'connecting');
    const runner = new CommandRunner(client, 1_000, [script]);
    const outcomes = run(runner, 1);
    await vi.advanceTimersByTimeAsync(10);
    for (const node of nodes) expect(node.calls).toEqual([]);
    cluster.status = 'ready';
    cluster.emit('ready');
    await vi.advanceTimersByTimeAsync(0);
    for (const node of nodes) expect(node.calls.map((c) => c.command)).toEqual(['SCRIPT']);
    for (const node of nodes) node.calls[0]!.answer('sha');
    await vi.advanceTimersByTimeAsync(0);
    routedCalls[0]!.answer('ok');
    await vi.advanceTimersByTimeAsync(0);
    expect(outcomes).toEqual(['reply ok']);
  });

  it('a Cluster that ends before it is ready, or never gets ready, fails the held commands once', async () => {
    const ended = fakeCluster(2, 'connecting');
    const failed = run(new CommandRunner(ended.client, 1_000, [script]), 2);
    ended.cluster.emit('end');
    await vi.advanceTimersByTimeAsync(0);
    expect(failed).toEqual([
      'error Redis Cluster connection ended before it was ready: scripts not loaded',
      'error Redis Cluster connection ended before it was ready: scripts not loaded',
    ]);
    // Its 'ready' listener was removed with it.
    expect(ended.listeners.get('ready') ?? []).toEqual([]);
    const never = fakeCluster(2, 'connecting');
    const waiting = run(new CommandRunner(never.client, 100, [script]), 1);
    await vi.advanceTimersByTimeAsync(101);
    expect(waiting[0]).toMatch(/^error Redis Cluster did not answer/);
    for (const node of never.nodes) expect(node.calls).toEqual([]);
  });
});
