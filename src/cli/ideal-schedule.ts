/**
 * "Wall time vs the minimum the limits allow": the run's requests replayed, in order, through fresh
 * copies of the configured limits on a virtual clock (the library's own `createLimit` cores, asked
 * for the earliest start of each cost). The span from the first start to the last is the least time
 * those limits allow; what the provider's headers added, and concurrency, are not counted.
 */
import { unitCost } from '../gate/schedule-options.js';
import { createLimit, type LimitCore, type LimitSpec } from '../index.js';

type Cost = number | Readonly<Record<string, number>> | undefined;

interface Replay {
  states: unknown[];
  last: number;
}

export class IdealSchedule {
  private readonly cores: readonly LimitCore[];
  private readonly global: Replay;
  private readonly perKey = new Map<string, Replay>();
  private first: number | undefined;
  private last = 0;

  /** `perHost`: the limits apply to each key separately (else to all requests together). */
  constructor(
    specs: readonly LimitSpec[],
    private readonly perHost: boolean,
  ) {
    // Concurrency waits depend on response times, which a replay does not know: left out.
    this.cores = specs
      .filter((s) => s.algorithm !== 'concurrency')
      .map((s, i) => createLimit(s, `limits[${i}]`));
    this.global = { states: this.cores.map((c) => c.initial(0)), last: 0 };
  }

  /** True when some limit bounds the rate (else the minimum is 0). */
  get bounded(): boolean {
    return this.cores.length > 0;
  }

  /** Add the next request (in send order). Costs above a limit's capacity are skipped (never sent). */
  add(cost: Cost, key: string): void {
    let replay = this.global;
    if (this.perHost) {
      replay = this.perKey.get(key) ?? { states: this.cores.map((c) => c.initial(0)), last: 0 };
      this.perKey.set(key, replay);
    }
    const units = this.cores.map((c) => unitCost(cost, c.unit));
    if (units.some((u, i) => u > this.cores[i]!.capacity)) return;
    // The earliest instant every limit admits the cost at once: raise t until all agree.
    let t = replay.last;
    for (let round = 0; round < 100; round++) {
      let next = t;
      this.cores.forEach((core, i) => {
        if (units[i]! > 0) next = Math.max(next, core.earliestAt(replay.states[i], units[i]!, t));
      });
      if (next === t) break;
      t = next;
    }
    this.cores.forEach((core, i) => {
      if (units[i]! > 0) replay.states[i] = core.take(replay.states[i], units[i]!, t);
    });
    replay.last = t;
    this.first ??= t;
    this.last = Math.max(this.last, t);
  }

  /** Least ms from the first start to the last. */
  get minimumMs(): number {
    return this.first === undefined ? 0 : this.last - this.first;
  }
}
