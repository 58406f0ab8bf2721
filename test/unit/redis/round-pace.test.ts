/**
 * RoundPace, the shared gate's per-process pace after Retry-After refusals that say nothing else:
 * explicit times, no gate.
 */
import { describe, expect, it } from 'vitest';
import { defaultAdaptOptions } from '../../../src/core/adaptation.js';
import { RoundPace } from '../../../src/redis/round-pace.js';

const aimd = defaultAdaptOptions.aimd as Exclude<typeof defaultAdaptOptions.aimd, false>;

/** A pace whose process started `n` calls at `at`. */
function startedAt(n: number, at: number): RoundPace {
  const pace = new RoundPace(aimd);
  for (let i = 0; i < n; i++) pace.started(at);
  return pace;
}

describe('RoundPace', () => {
  it("a refusal of its own sets the round's rate, in force when the pause ends", () => {
    // 5 accepted from 0, the 6th refused until 1,000: 5 over 1 s.
    const pace = startedAt(6, 0);
    expect(pace.refused(6, 1000, 20)).toBe(true);
    expect(pace.update(999)).toBe(false);
    expect(pace.aimd).toBeUndefined();
    expect(pace.update(1000)).toBe(true);
    expect(pace.aimd?.ratePerSec).toBe(5);
  });

  it('a refusal heard from another process counts every call started here in the round as accepted', () => {
    const pace = startedAt(3, 0);
    pace.heard(1500, 30);
    pace.update(1500);
    expect(pace.aimd?.ratePerSec).toBe(2);
  });

  it('its own refusal heard back (the store echoes the mark) changes nothing', () => {
    const pace = startedAt(6, 0);
    expect(pace.refused(6, 1000, 20)).toBe(true);
    pace.heard(1000, 25);
    pace.update(1000);
    expect(pace.aimd?.ratePerSec).toBe(5);
  });

  it('a later refusal of the same round is no news: it only lowers the rate to what it shows', () => {
    const pace = startedAt(10, 0);
    expect(pace.refused(8, 1000, 20)).toBe(true);
    // The 4th was refused too (answered later): 3 accepted before it.
    expect(pace.refused(4, 1000, 30)).toBe(false);
    pace.update(1000);
    expect(pace.aimd?.ratePerSec).toBe(3);
  });

  it('a call started after the refused one and accepted before the pause ends leaves the pace alone (a sporadic 429)', () => {
    const pace = startedAt(10, 0);
    pace.refused(6, 1000, 20);
    pace.accepted(8);
    expect(pace.update(1000)).toBe(false);
    expect(pace.aimd).toBeUndefined();
  });

  it('a process that sent nothing yet starts at a call a second when it hears a round end', () => {
    const pace = new RoundPace(aimd);
    pace.heard(1000, 20);
    pace.update(1000);
    expect(pace.aimd?.ratePerSec).toBe(1);
  });

  it('books slots one interval apart, and gives the last back', () => {
    const pace = startedAt(6, 0);
    pace.refused(6, 1000, 20);
    pace.update(1000);
    // 5 a second: 200 ms apart.
    expect([pace.book(1000), pace.book(1000), pace.book(1000)]).toEqual([1000, 1200, 1400]);
    pace.unbook(1400);
    expect(pace.book(1000)).toBe(1400);
  });

  it('grows as a slow start up to 0.7 of the rate a round cut, then by 5% of it a quiet second', () => {
    const pace = startedAt(11, 0);
    pace.refused(11, 1000, 20);
    pace.update(1000);
    expect(pace.aimd?.ratePerSec).toBe(10);
    // A first measure: doubles while calls wait (slots booked past the next), once a quiet second.
    for (let i = 0; i < 15; i++) pace.book(1000);
    expect(pace.went(1500)).toBe(false);
    expect(pace.went(2000)).toBe(true);
    expect(pace.aimd?.ratePerSec).toBe(20);
    // Then a round at 20/s ends: 30 accepted over 2,000 ms (15/s), news: min(20 x 0.7, 15) = 14.
    for (let i = 0; i < 31; i++) pace.started(2000);
    pace.refused(42, 3000, 2900);
    pace.update(3000);
    expect(pace.aimd?.ratePerSec).toBe(14);
    // 14 is 0.7 of 20: additive from here, 5% of 14 a quiet second.
    for (let i = 0; i < 30; i++) pace.book(3000);
    pace.went(4000);
    expect(pace.aimd?.ratePerSec).toBeCloseTo(14.7, 10);
  });

  it('grows as a slow start again after twice as long as the last round without a round end', () => {
    const pace = startedAt(11, 0);
    pace.refused(11, 1000, 20);
    pace.update(1000);
    // 20 accepted in the next round, 1 s: news, min(10 x 0.7, 20) = 7, at its ceiling (0.7 of 10).
    for (let i = 0; i < 21; i++) pace.started(1000);
    pace.refused(32, 2000, 1900);
    pace.update(2000);
    const cut = pace.aimd!.ratePerSec;
    expect(cut).toBeCloseTo(7, 10);
    // Rounds 1 s apart: quiet for up to 3 s (the least) it grows additively, past that it doubles.
    for (let i = 0; i < 50; i++) pace.book(2000);
    pace.went(4000);
    expect(pace.aimd!.ratePerSec).toBeLessThan(cut * 1.2);
    pace.went(5500);
    expect(pace.aimd!.ratePerSec).toBeGreaterThan(cut * 2);
  });

  it('is dropped when the provider states a quota', () => {
    const pace = startedAt(6, 0);
    pace.refused(6, 1000, 20);
    pace.update(1000);
    pace.reset();
    expect(pace.aimd).toBeUndefined();
    expect(pace.update(2000)).toBe(false);
  });
});
