import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type AbortOutcome,
  abortWorkloadArb,
  calmWorkloadArb,
  checkAcceptedStart,
  checkDeadlines,
  checkLimits,
  checkOrder,
  checkSettlement,
  checkTimers,
  type RunTrace,
  runAbortWorkload,
  runWorkload,
  workloadArb,
} from '../helpers/gate-workload.js';

// Random workloads against the gate on a manual clock (see test/helpers/gate-workload.ts): a random
// config (1-2 global time-based limits, 0-1 per-key ones, sometimes a concurrency limit at either
// level, units `requests` and `tokens`) and a random script (schedule with random cost, priority,
// key, deadline and signal; abort; move the clock; pause/resume a key or the gate; finish calls in
// flight; setLimits; close). Each property replays the script and checks one promise of the gate.

// GATE_PROPERTY_RUNS=50000 for a long bug hunt (it also prints how often a known bug was tolerated).
const numRuns = Number(process.env['GATE_PROPERTY_RUNS'] ?? 1000);

/** Run a workload and fail with the check's description (fast-check shrinks to a small script). */
function holds(check: (trace: RunTrace) => string | undefined) {
  return async (workload: Parameters<typeof runWorkload>[0]) => {
    const trace = await runWorkload(workload);
    const problem = check(trace);
    if (problem !== undefined) throw new Error(problem);
  };
}

describe('gate: properties under random workloads', () => {
  it('(a) every limit holds on the actual starts, between limit changes', async () => {
    // Starts are grouped by the limits in force when they happened (a setLimits opens a new segment)
    // and by partition for per-key limits. Token bucket: any closed interval [s, e] between starts
    // holds <= burst + r·(e - s + 1 ms); leaky bucket: from any start, the next starts come no
    // sooner than the units before them drain (less 1 ms); fixed and sliding window: <= limit per
    // aligned window; sliding log: <= limit in every window (t - intervalMs, t]; concurrency: units
    // of calls started in the segment and not yet finished never exceed the limit. The 1 ms on GCRA
    // limits is the documented late-start credit: a timer due at a fractional time fires at the next
    // whole ms and the start counts at its due time.
    await fc.assert(fc.asyncProperty(workloadArb(), holds(checkLimits)), { numRuns });
  });

  it('(b) every call settles exactly once, with its fn outcome or a refusal that never called fn', async () => {
    // Each schedule() promise settles exactly once; each fn runs at most once; a call whose fn ran
    // settles with the fn's value or error (identity); a call whose fn never ran is refused with a
    // tollgate refusal code (queue full, queue timeout, aborted, gate closed, invalid cost). After
    // resume + all timers + finishing every call: nothing queued, nothing in flight, close() resolved,
    // stats().started equals the fns called.
    await fc.assert(fc.asyncProperty(workloadArb(), holds(checkSettlement)), { numRuns });
  });

  it('(c) within a partition, a call never starts before an earlier call of >= priority', async () => {
    // For every pair A, B in the same partition that both started: if A was scheduled before B and
    // A.priority >= B.priority, A started first. (FIFO among equals; a later call never barges past
    // queued calls of its own or higher priority; only a strictly higher priority may overtake.)
    await fc.assert(fc.asyncProperty(workloadArb(), holds(checkOrder)), { numRuns });
  });

  it('(d) an aborted queued call leaves every other call exactly as if it had never been scheduled', async () => {
    // Deterministic scripts on integer times with time-based limits: calls scheduled in instants
    // separated by clock moves, some aborted right after schedule() or at the end of their instant
    // before the clock moves. Deadlines (so predictions, which aborts must refund) are used when
    // every admission falls on a whole ms and no abort is deferred; otherwise none.
    // Replaying the script without the calls that were refused ERR_ABORTED gives every other call
    // the same outcome: the same start time, or the same refusal (code, predicted, predictedWaitMs).
    // Either all calls share one partition, or there are only per-key limits (partitions are
    // independent): cross-partition contention for a global limit depends on timer order, not on refunds.
    let disturbed = 0;
    await fc.assert(
      fc.asyncProperty(abortWorkloadArb, async (workload) => {
        const full = await runAbortWorkload(workload, new Set());
        // A higher-priority call queued for an instant may push lower ones past their deadline
        // (refused then): the aborted call then did change something. Those runs prove nothing here.
        if (full.disturbed) {
          disturbed++;
          return;
        }
        const without = await runAbortWorkload(workload, full.aborted);
        for (const [id, outcome] of without.outcomes) {
          const before: AbortOutcome | undefined = full.outcomes.get(id);
          expect({ id, outcome: before }).toEqual({ id, outcome });
        }
        expect(without.outcomes.size + full.aborted.size).toBe(full.outcomes.size);
      }),
      { numRuns },
    );
    expect(disturbed).toBeLessThan(numRuns / 4);
  });

  it('(e) one timer at most per partition with queued work, none when idle; queued counts agree', async () => {
    // After every step (and after the final drain): the pending timers have distinct callbacks (no
    // partition holds two), number at most the partitions with queued calls, and are zero when
    // stats().queued is 0; stats().queued equals the sum of stats(key).partition.queued and the
    // number of calls neither started nor settled.
    // (The zero-timers-when-idle rule is the case queuedPartitions = 0 of the second.)
    await fc.assert(fc.asyncProperty(workloadArb(), holds(checkTimers)), { numRuns });
  });

  it('(f) deadlines: predicted refusals exceed maxQueueTimeMs; no call starts or is refused after its deadline', async () => {
    // A QueueTimeoutError with predicted=true comes at schedule time with predictedWaitMs >
    // maxQueueTimeMs (the call's effective one, also in the error). No call starts after
    // scheduledAt + maxQueueTimeMs, whatever intervenes (pause, concurrency wait, setLimits, other
    // partitions); a call refused for its deadline is refused no later than that deadline.
    await fc.assert(fc.asyncProperty(workloadArb(), holds(checkDeadlines)), { numRuns });
  });

  it('(f) with nothing to take a promise back, an accepted call starts within its deadline', async () => {
    // Calm workloads: no pause, setLimits, close or concurrency limit, one priority, no contention
    // between partitions for a global limit; aborts allowed. Then a call the gate accepted (did not
    // refuse at schedule time) must start by its deadline: no ERR_QUEUE_TIMEOUT with predicted=false.
    await fc.assert(fc.asyncProperty(calmWorkloadArb(), holds(checkAcceptedStart)), { numRuns });
  });
});
