/**
 * The pace a shared gate keeps, in its own process, for a key whose provider answers 429 with a
 * Retry-After and nothing else (no quota headers) while no limit is configured or learned for it:
 * the in-memory gate's AIMD on the rate the provider showed in a *round* (`roundRatePerSec`), each
 * process measuring its own calls. The calls a process started in a round before the provider
 * refused (its own refusal, or another process's, heard through the store) were accepted; over the
 * round and the pause together that is its share of what the provider admits, and the shares of
 * every process add up to the provider's rate. Pure: every method takes `now` (ms, gate clock).
 */
import {
  type AimdOptions,
  type AimdState,
  aimdOnRetryAfter,
  aimdOnTick,
  roundRatePerSec,
} from '../core/adaptation.js';

/** The shortest quiet spell (no round ended) after which a pace grows as a slow start again (ms). */
const QUIET_MIN_MS = 3000;
/** A round also begins after this long without a start (the provider's windows have passed), as in the in-memory gate. */
export const ROUND_IDLE_MS = 60_000;

export class RoundPace {
  /** Calls of the key this process started (each attempt), numbered from 1. */
  seq = 0;
  /** The AIMD rate in force (undefined: no pace). */
  aimd: AimdState | undefined = undefined;
  private firstStartAt = 0;
  private lastStartAt = 0;
  /** The last two rounds: the calls numbered above `seq`, started from `at` (a pause's end). */
  private rounds: { seq: number; at: number }[] | undefined = undefined;
  /**
   * The rate a round showed, in force when its pause ends (`at`) unless a call started after the
   * refused one in the same run (up to `endSeq`) is accepted meanwhile (a sporadic refusal).
   */
  private cut:
    | { state: AimdState; from: AimdState | undefined; refusedSeq: number; endSeq: number; at: number }
    | undefined = undefined;
  /** The next free slot (ms): calls are booked one emission interval apart (no burst). */
  private tat = 0;
  /** The slot of the last call that went at the pace. */
  private lastWentAt = Number.NEGATIVE_INFINITY;
  /**
   * Below this rate the pace grows as a slow start (doubling each quiet second, see `slowStart`),
   * at or above it by AIMD's additive increase: `decrease` times the rate in force when a round
   * last cut it, Infinity when none did (a first measure). A share measured while other processes
   * took most of the round (or nothing measured at all) is no estimate of what this process may
   * send: it regains `decrease` times what it had before, or finds its first limit, in seconds
   * rather than the minutes 5% of itself a second would take.
   */
  private ceilingPerSec = Number.POSITIVE_INFINITY;
  /** When the last round ended (its pause's end), and how long the one before it lasted (ms). */
  private roundEndAt = Number.NEGATIVE_INFINITY;
  private roundMs = 0;

  constructor(private readonly options: AimdOptions) {}

  /** A call starts: its number in the rounds. */
  started(now: number): number {
    // After a long idle spell the provider's windows have passed: a new round.
    if (this.seq > 0 && now - this.lastStartAt > ROUND_IDLE_MS) this.newRound(now);
    this.lastStartAt = now;
    if (++this.seq === 1) this.firstStartAt = now;
    return this.seq;
  }

  /**
   * The call numbered `callSeq` was refused with a Retry-After alone, until `pauseUntil`. True when
   * it is the first refusal heard of its round (the other processes are told, see `heard`).
   */
  refused(callSeq: number, pauseUntil: number, now: number): boolean {
    const news = callSeq > this.latestRoundSeq();
    // The first refusal of a round: how long since the last round ended.
    if (news && Number.isFinite(this.roundEndAt)) this.roundMs = pauseUntil - this.roundEndAt;
    this.roundEndAt = Math.max(this.roundEndAt, pauseUntil);
    const rate = this.roundRate(callSeq, pauseUntil);
    const next = aimdOnRetryAfter(this.aimd, rate, callSeq, this.seq, now, this.options);
    const cut = this.cut;
    // Kept for the pause's end (nothing starts before it); the lowest of a round's refusals.
    if (
      next !== undefined &&
      next !== this.aimd &&
      (cut === undefined || next.ratePerSec < cut.state.ratePerSec)
    )
      this.cut = {
        state: next,
        from: this.aimd,
        refusedSeq: Math.min(callSeq, cut?.refusedSeq ?? callSeq),
        endSeq: this.seq,
        at: pauseUntil,
      };
    return news;
  }

  /**
   * Another process was refused so, until `pauseUntil`: every call this one started in the round
   * was accepted before it (a refusal of one of them, answered later, lowers the rate to what it
   * shows). The same round heard twice (its own refusal echoed) finds nothing started since.
   */
  heard(pauseUntil: number, now: number): void {
    if (this.seq > this.latestRoundSeq()) {
      this.refused(this.seq + 1, pauseUntil, now);
      return;
    }
    // Nothing started here since the round began: this process's own refusal, echoed, or a round
    // it sent nothing in (its pace, if any, was not what the provider refused).
    this.newRound(pauseUntil);
    this.roundEndAt = Math.max(this.roundEndAt, pauseUntil);
    if (this.seq > 0 || this.aimd !== undefined || this.cut !== undefined) return;
    // Nothing sent here yet (held by this process's probe): no measure, but the provider is known
    // to refuse so. Sent at once, its queue would take the next round from the processes that
    // measured theirs: it starts at a call a second, and grows as a slow start.
    const ratePerSec = Math.min(this.options.maxRatePerSec, Math.max(this.options.minRatePerSec, 1));
    const state = { ratePerSec, rateAtDecrease: ratePerSec, changedAt: now, decreaseSeq: this.seq };
    this.cut = { state, from: undefined, refusedSeq: this.seq + 1, endSeq: this.seq, at: pauseUntil };
  }

  /** The call numbered `callSeq` was answered without throttling. */
  accepted(callSeq: number): void {
    const cut = this.cut;
    // A call started after the refused one, in the same run, was accepted: not the limit.
    if (cut !== undefined && callSeq > cut.refusedSeq && callSeq <= cut.endSeq) this.cut = undefined;
  }

  /** A round's rate comes into force when its pause has ended. True when the rate changed. */
  update(now: number): boolean {
    const cut = this.cut;
    if (cut === undefined || now < cut.at) return false;
    this.cut = undefined;
    // Lowered since by another round's refusal: the lower of the two holds.
    if (this.aimd !== cut.from && this.aimd !== undefined && this.aimd.ratePerSec <= cut.state.ratePerSec)
      return false;
    this.ceilingPerSec =
      this.aimd === undefined ? Number.POSITIVE_INFINITY : this.aimd.ratePerSec * this.options.decrease;
    this.aimd = { ...cut.state, changedAt: now };
    return true;
  }

  /** The slot of a call that asks at `now` (>= now), booked: the next call's is one interval later. */
  book(now: number): number {
    const at = Math.max(now, this.tat);
    this.tat = at + this.intervalMs();
    return at;
  }

  /** The call booked at `at` will not go (refused): its slot is free again if it was the last. */
  unbook(at: number): void {
    if (this.tat === at + this.intervalMs()) this.tat = at;
  }

  /**
   * The bookings start over (the rate changed): the first is due one interval after the last call
   * that went, or now. Book the waiting calls again, in their order.
   */
  restart(now: number): void {
    this.tat = Math.max(now, this.lastWentAt + this.intervalMs());
  }

  /** The bookings start over after the slot `at` (the calls booked after it are booked again, in their order). */
  restartAfter(at: number): void {
    this.tat = at + this.intervalMs();
  }

  /**
   * A booked call goes at its slot, now. While calls wait behind it (later slots are booked), AIMD
   * may add to the rate after a quiet second. True when the rate changed.
   */
  went(now: number): boolean {
    this.lastWentAt = now;
    const aimd = this.aimd;
    if (aimd === undefined) return false;
    const bottleneck = this.tat > now + this.intervalMs();
    // No round has ended for twice as long as the last one lasted: the provider refuses nobody at
    // the rates in force (another process's calls stopped, say). Slow start finds the room again.
    if (now - this.roundEndAt > Math.max(QUIET_MIN_MS, 2 * this.roundMs))
      this.ceilingPerSec = Number.POSITIVE_INFINITY;
    const next =
      aimd.ratePerSec < this.ceilingPerSec
        ? slowStart(aimd, bottleneck, now, this.ceilingPerSec, this.options)
        : aimdOnTick(aimd, bottleneck, now, this.options);
    if (next === aimd) return false;
    this.aimd = next;
    return true;
  }

  /** The provider states a quota, or limits were learned: they govern, and the pace is dropped. */
  reset(): void {
    this.aimd = undefined;
    this.cut = undefined;
    this.ceilingPerSec = Number.POSITIVE_INFINITY;
  }

  /** ms between two slots: 1000 ms / (calls per second). */
  private intervalMs(): number {
    return this.aimd === undefined ? 0 : 1000 / this.aimd.ratePerSec;
  }

  /**
   * The rate the provider showed in the round `callSeq` started in, now that it refused that call
   * until `pauseUntil`; then the next round starts after the pause, with the calls started from now.
   */
  private roundRate(callSeq: number, pauseUntil: number): number | undefined {
    // No round yet: the first one began with the key's first call here.
    const rounds = this.rounds ?? [{ seq: 0, at: this.firstStartAt }];
    let rate: number | undefined;
    for (let i = rounds.length - 1; i >= 0; i--) {
      const round = rounds[i]!;
      if (round.seq >= callSeq) continue;
      // The calls numbered round.seq + 1 ... callSeq - 1 went before it in its round.
      rate = roundRatePerSec(callSeq - round.seq - 1, round.at, pauseUntil);
      break;
    }
    this.newRound(pauseUntil);
    return rate;
  }

  /** The calls numbered above this started in the latest round. */
  private latestRoundSeq(): number {
    return this.rounds?.[this.rounds.length - 1]?.seq ?? 0;
  }

  /** A new round begins at `at` with the calls started from now on (numbered above `seq`). */
  private newRound(at: number): void {
    this.rounds ??= [{ seq: 0, at: this.firstStartAt }];
    const rounds = this.rounds;
    const last = rounds[rounds.length - 1]!;
    if (last.seq === this.seq) last.at = Math.max(last.at, at);
    else {
      rounds.push({ seq: this.seq, at });
      if (rounds.length > 2) rounds.shift();
    }
  }
}

/**
 * The rate doubles once per quiet second while calls wait, up to `ceilingPerSec` (TCP's slow start
 * up to its threshold); the additive increase then goes on from there.
 */
function slowStart(
  state: AimdState,
  bottleneck: boolean,
  now: number,
  ceilingPerSec: number,
  options: AimdOptions,
): AimdState {
  if (!bottleneck || now - state.changedAt < 1000) return state;
  const ratePerSec = Math.min(options.maxRatePerSec, ceilingPerSec, state.ratePerSec * 2);
  return { ...state, ratePerSec, rateAtDecrease: ratePerSec, changedAt: now };
}
