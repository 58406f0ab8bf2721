import fc from 'fast-check';

/**
 * One step of a simulated provider's life in the quota property tests: calls scheduled, a started
 * call counted (in any order), a counted call answered (in any order), time passing.
 */
export type ProviderStep =
  | { kind: 'schedule'; count: number }
  | { kind: 'count'; pick: number }
  | { kind: 'answer'; pick: number }
  | { kind: 'tick'; ms: number };

/** Random steps, counts and answers twice as likely as the rest; ticks of 1 to `maxTickMs`. */
export function providerSteps(maxTickMs: number): fc.Arbitrary<ProviderStep> {
  return fc.oneof(
    fc.record({ kind: fc.constant('schedule' as const), count: fc.integer({ min: 1, max: 6 }) }),
    fc.record({ kind: fc.constant('count' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('count' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('answer' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('answer' as const), pick: fc.nat() }),
    fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: maxTickMs }) }),
  );
}

/** How `replayProvider` drives one property test's gate and provider. */
export interface ProviderReplay<H> {
  /** Calls started so far, in order (the scheduled `fn` pushes each). */
  readonly started: H[];
  /** Schedule one call through the gate. */
  readonly schedule: () => void;
  readonly counted: (call: H) => boolean;
  /** The provider counts `call` (and prepares its answer). */
  readonly count: (call: H) => void;
  readonly answer: (call: H) => void;
  /** Time passes `ms`; `countAll` counts every started call, `answerAll` answers every counted one. */
  readonly tick: (ms: number, provider: { countAll(): void; answerAll(): Promise<void> }) => Promise<void>;
  readonly flush: () => Promise<void>;
}

/**
 * Replay `steps`: a first call counted and answered (the gate learns the quota from it), then the
 * steps, then whatever starts is counted and answered (in order) until nothing more starts.
 */
export async function replayProvider<H>(steps: readonly ProviderStep[], r: ProviderReplay<H>): Promise<void> {
  const { started, counted, count, answer, flush } = r;
  r.schedule();
  await flush();
  count(started[0]!);
  answer(started[0]!);
  await flush();
  const unanswered: H[] = [];
  const uncounted = () => started.filter((call) => !counted(call));
  const countAll = () => {
    for (const call of uncounted()) {
      count(call);
      unanswered.push(call);
    }
  };
  const answerAll = async () => {
    for (const call of unanswered.splice(0)) answer(call);
    await flush();
  };
  for (const step of steps) {
    if (step.kind === 'schedule') {
      for (let i = 0; i < step.count; i++) r.schedule();
    } else if (step.kind === 'count') {
      const waiting = uncounted();
      if (waiting.length === 0) continue;
      const call = waiting[step.pick % waiting.length]!;
      count(call);
      unanswered.push(call);
    } else if (step.kind === 'answer') {
      if (unanswered.length === 0) continue;
      const [call] = unanswered.splice(step.pick % unanswered.length, 1);
      answer(call!);
    } else {
      await r.tick(step.ms, { countAll, answerAll });
    }
    await flush();
  }
  for (let seen = 0; seen < started.length; ) {
    const batch = started.slice(seen);
    seen = started.length;
    for (const call of batch) if (!counted(call)) count(call);
    for (const call of unanswered.splice(0)) answer(call);
    for (const call of batch) answer(call);
    await flush();
  }
}
