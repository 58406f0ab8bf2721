import type { ManualClock } from './manual-clock.js';

/** A response as the learned-window scenario's provider gives it (also what `inspect` reads). */
export interface LearnedWindowResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
}

/**
 * The learned-window recount scenario, for any gate on `clock`: a provider of 2 requests per
 * 1000 ms, which its first answer states (1 left) and the others repeat; 4 calls scheduled at once
 * through `schedule` (which passes them to the gate with an `inspect` that reads the response). The
 * probe is answered at 30 ms, the call started at 30 at 130 (the provider may have counted it only
 * then), the others as soon as they start. `afterProbe` runs once the probe's answer is in. Answers
 * the start times, in ms from the clock's time at the call.
 */
export async function learnedWindowStarts(
  clock: ManualClock,
  schedule: (fn: () => Promise<LearnedWindowResponse>) => Promise<unknown>,
  flush: () => Promise<void>,
  afterProbe: () => void = () => {},
): Promise<number[]> {
  const t0 = clock.now();
  const started: number[] = [];
  const answer: (() => void)[] = [];
  const fn = () =>
    new Promise<LearnedWindowResponse>((resolve) => {
      const n = started.push(clock.now() - t0) - 1;
      const headers: Record<string, string> = { 'ratelimit-policy': '"w";q=2;w=1' };
      if (n === 0) headers['ratelimit'] = '"w";r=1;t=1';
      answer.push(() => resolve({ status: 200, headers }));
    });
  const calls = Array.from({ length: 4 }, () => schedule(fn));
  await flush();
  clock.advance(30);
  answer[0]!();
  await flush();
  afterProbe();
  clock.advance(100);
  answer[1]!();
  await flush();
  for (let step = 0; step < 300 && started.length < 4; step++) {
    clock.advance(10);
    await flush();
    for (let i = 2; i < started.length; i++) answer[i]!();
    await flush();
  }
  for (let i = 2; i < started.length; i++) answer[i]!();
  await Promise.all(calls);
  return started;
}
