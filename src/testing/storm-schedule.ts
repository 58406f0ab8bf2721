/**
 * Cooldown storms of the simulated API: outages during which every request gets a 5xx (503 by
 * default) with Retry-After, triggered every N requests or at scheduled times. Pure: arrival times
 * are passed in.
 */
import { finiteNumber, integer, invalid, plainObject } from '../validate.js';
import { ceilSeconds } from './rate-limit-headers.js';

/** One scheduled outage, relative to the server's start (or its last `reset()`). */
export interface SimulatedOutage {
  /** ms after start when the outage begins. Finite, >= 0. */
  startMs: number;
  /** Length in ms. Finite, > 0. */
  durationMs: number;
}

export interface SimulatedStorms {
  /**
   * Start an outage of `durationMs` at every Nth request that arrives outside an outage (the Nth
   * itself gets the 5xx). Requests arriving during an outage are not counted. Integer >= 1.
   */
  every?: number;
  /** Length of each `every` outage in ms. Required with `every`. Finite, > 0. */
  durationMs?: number;
  /** Outage windows at fixed times. */
  schedule?: readonly SimulatedOutage[];
  /**
   * Status of outage responses. Integer 500..599.
   * @default 503
   */
  status?: number;
  /**
   * Retry-After (seconds) on outage responses; `false` sends none.
   * @default the seconds left in the outage, rounded up (at least 1)
   */
  retryAfterSec?: number | false;
}

/** Normalized storm options. */
export interface StormConfig {
  readonly every: number | undefined;
  readonly durationMs: number;
  readonly schedule: readonly SimulatedOutage[];
  readonly status: number;
  readonly retryAfterSec: number | false | undefined;
}

export function normalizeStorms(value: unknown, option = 'storms'): StormConfig {
  const o = plainObject(option, value);
  const every = o['every'] === undefined ? undefined : integer(`${option}.every`, o['every'], 1);
  let durationMs = 0;
  if (every !== undefined || o['durationMs'] !== undefined) {
    durationMs = finiteNumber(`${option}.durationMs`, o['durationMs'], { min: 0, minExclusive: true });
  }
  let schedule: SimulatedOutage[] = [];
  if (o['schedule'] !== undefined) {
    if (!Array.isArray(o['schedule']))
      throw invalid(`${option}.schedule`, 'an array of outages', o['schedule']);
    schedule = o['schedule'].map((entry: unknown, i: number) => {
      const path = `${option}.schedule[${i}]`;
      const e = plainObject(path, entry);
      return Object.freeze({
        startMs: finiteNumber(`${path}.startMs`, e['startMs'], { min: 0 }),
        durationMs: finiteNumber(`${path}.durationMs`, e['durationMs'], { min: 0, minExclusive: true }),
      });
    });
  }
  if (every === undefined && schedule.length === 0) {
    throw invalid(`${option}.every`, 'an integer >= 1 (or give a non-empty `storms.schedule`)', o['every']);
  }
  let status = 503;
  if (o['status'] !== undefined) {
    status = integer(`${option}.status`, o['status'], 500);
    if (status > 599) throw invalid(`${option}.status`, 'an integer from 500 to 599', status);
  }
  let retryAfterSec: number | false | undefined;
  if (o['retryAfterSec'] === false) retryAfterSec = false;
  else if (o['retryAfterSec'] !== undefined)
    retryAfterSec = integer(`${option}.retryAfterSec`, o['retryAfterSec'], 0);
  return Object.freeze({ every, durationMs, schedule: Object.freeze(schedule), status, retryAfterSec });
}

/** What an outage answers: its status and Retry-After seconds (undefined: none). */
export interface OutageResponse {
  readonly status: number;
  readonly retryAfterSec: number | undefined;
}

/** Outage state over a run. `arriveAt` must be called once per request, in arrival order. */
export class StormSchedule {
  private counted = 0;
  private outageUntil = -Infinity;

  constructor(
    private readonly config: StormConfig,
    private startedAt: number,
  ) {}

  /** Forget past outages and count scheduled ones from `startedAt`. */
  reset(startedAt: number): void {
    this.startedAt = startedAt;
    this.counted = 0;
    this.outageUntil = -Infinity;
  }

  /** Register one arrival at `now`; returns the outage response if the request falls in an outage. */
  arriveAt(now: number): OutageResponse | undefined {
    let endsAt = this.outageUntil > now ? this.outageUntil : -Infinity;
    for (const o of this.config.schedule) {
      const start = this.startedAt + o.startMs;
      if (now >= start && now < start + o.durationMs) endsAt = Math.max(endsAt, start + o.durationMs);
    }
    if (endsAt === -Infinity && this.config.every !== undefined) {
      this.counted++;
      if (this.counted % this.config.every === 0) {
        this.outageUntil = now + this.config.durationMs;
        endsAt = this.outageUntil;
      }
    }
    if (endsAt === -Infinity) return undefined;
    const { retryAfterSec } = this.config;
    return {
      status: this.config.status,
      // By default: the time left in the outage, rounded up to whole seconds (at least 1).
      retryAfterSec:
        retryAfterSec === false ? undefined : (retryAfterSec ?? Math.max(1, ceilSeconds(endsAt - now))),
    };
  }
}
