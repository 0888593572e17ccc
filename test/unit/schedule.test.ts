import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { createTask } from 'node-cron';
import type { ModelScaling, ScheduleEntry } from '../../src/fleet-spec/types.js';
import { nextFiring, previousFiring } from '../../src/fleet-spec/cron.js';
import { scheduleInForce } from '../../src/schedule/schedule.js';

const T = (iso: string): number => Date.parse(iso);
const iso = (t: number | null): string | null => (t === null ? null : new Date(t).toISOString().replace('.000Z', 'Z'));
const scaling = (timezone: string, entries: ScheduleEntry[], replicas = 1): ModelScaling => ({ mode: 'replicas', replicas, schedule: { timezone, entries } });
/** Two replicas on weekdays 08–20, none at night and at weekends. */
const weekdays: ScheduleEntry[] = [
  { cron: '0 8 * * 1-5', replicas: 2 },
  { cron: '0 20 * * 1-5', replicas: 0 },
];

interface Case {
  readonly name: string;
  readonly scaling: ModelScaling;
  readonly now: string;
  readonly expect: { replicas: number; entry: number | null; since: string | null; next: string | null; nextEntry?: number };
}

const cases: Case[] = [
  // Europe/Berlin: CET (+1) until 2026-03-29 02:00, CEST (+2) until 2026-10-25 03:00.
  { name: 'Berlin, Monday 07:59 after the spring change: Friday 20:00 (CET) is in force, 08:00 (CEST) next', scaling: scaling('Europe/Berlin', weekdays), now: '2026-03-30T05:59:00Z', expect: { replicas: 0, entry: 1, since: '2026-03-27T19:00:00Z', next: '2026-03-30T06:00:00Z', nextEntry: 0 } },
  { name: 'Berlin, the instant 08:00 fires: its count is in force', scaling: scaling('Europe/Berlin', weekdays), now: '2026-03-30T06:00:00Z', expect: { replicas: 2, entry: 0, since: '2026-03-30T06:00:00Z', next: '2026-03-30T18:00:00Z', nextEntry: 1 } },
  { name: 'Berlin, one second before 08:00: still the night', scaling: scaling('Europe/Berlin', weekdays), now: '2026-03-30T05:59:59Z', expect: { replicas: 0, entry: 1, since: '2026-03-27T19:00:00Z', next: '2026-03-30T06:00:00Z', nextEntry: 0 } },
  { name: 'Berlin, a restart mid-window (Wednesday 14:34) sees the day count, not the default', scaling: scaling('Europe/Berlin', weekdays), now: '2026-04-01T12:34:00Z', expect: { replicas: 2, entry: 0, since: '2026-04-01T06:00:00Z', next: '2026-04-01T18:00:00Z', nextEntry: 1 } },
  { name: 'Berlin, the Saturday before the spring change: Monday 08:00 is an hour earlier in UTC than Friday’s', scaling: scaling('Europe/Berlin', weekdays), now: '2026-03-28T12:00:00Z', expect: { replicas: 0, entry: 1, since: '2026-03-27T19:00:00Z', next: '2026-03-30T06:00:00Z', nextEntry: 0 } },
  { name: 'Berlin, Monday 07:59 after the autumn change: Friday 20:00 (CEST) in force, 08:00 (CET) next', scaling: scaling('Europe/Berlin', weekdays), now: '2026-10-26T06:59:00Z', expect: { replicas: 0, entry: 1, since: '2026-10-23T18:00:00Z', next: '2026-10-26T07:00:00Z', nextEntry: 0 } },
  // America/New_York: EST (−5) until 2026-03-08 02:00, EDT (−4) until 2026-11-01 02:00.
  { name: 'New York, Monday 07:59 EDT after the spring change: Friday 20:00 EST (Saturday 01:00 UTC)', scaling: scaling('America/New_York', weekdays), now: '2026-03-09T11:59:00Z', expect: { replicas: 0, entry: 1, since: '2026-03-07T01:00:00Z', next: '2026-03-09T12:00:00Z', nextEntry: 0 } },
  { name: 'New York, Monday after the autumn change: 08:00 EST', scaling: scaling('America/New_York', weekdays), now: '2026-11-02T12:59:00Z', expect: { replicas: 0, entry: 1, since: '2026-10-31T00:00:00Z', next: '2026-11-02T13:00:00Z', nextEntry: 0 } },
  // The same instant in other zones.
  { name: 'UTC, the same instant: the day window began at 08:00 UTC', scaling: scaling('UTC', weekdays), now: '2026-03-09T11:59:00Z', expect: { replicas: 2, entry: 0, since: '2026-03-09T08:00:00Z', next: '2026-03-09T20:00:00Z', nextEntry: 1 } },
  { name: 'Asia/Tokyo, the same instant: 20:59 JST, the night began at 20:00', scaling: scaling('Asia/Tokyo', weekdays), now: '2026-03-09T11:59:00Z', expect: { replicas: 0, entry: 1, since: '2026-03-09T11:00:00Z', next: '2026-03-09T23:00:00Z', nextEntry: 0 } },
  { name: 'Asia/Kolkata (+05:30), 07:59 IST on a Monday', scaling: scaling('Asia/Kolkata', weekdays), now: '2026-03-09T02:29:00Z', expect: { replicas: 0, entry: 1, since: '2026-03-06T14:30:00Z', next: '2026-03-09T02:30:00Z', nextEntry: 0 } },
  // The default, and the look-back of a year.
  { name: 'no entry fired in the last 366 days: replicas: is in force; the next leap day is within a year', scaling: scaling('UTC', [{ cron: '0 0 29 2 *', replicas: 3 }], 1), now: '2027-06-01T00:00:00Z', expect: { replicas: 1, entry: null, since: null, next: '2028-02-29T00:00:00Z', nextEntry: 0 } },
  { name: 'no entry fired nor will within a year: the default, no next change', scaling: scaling('UTC', [{ cron: '0 0 29 2 *', replicas: 3 }], 1), now: '2026-06-01T00:00:00Z', expect: { replicas: 1, entry: null, since: null, next: null } },
  { name: 'a yearly entry is still in force 11 months on', scaling: scaling('UTC', [{ cron: '0 0 1 1 *', replicas: 4 }], 0), now: '2026-12-01T00:00:00Z', expect: { replicas: 4, entry: 0, since: '2026-01-01T00:00:00Z', next: null } },
  // Clock changes hitting an entry's own time.
  { name: 'Berlin, an entry at 02:30 does not fire on the spring day (02:30 does not exist); noon stays in force and its own firing is no change', scaling: scaling('Europe/Berlin', [{ cron: '30 2 * * *', replicas: 2 }, { cron: '0 12 * * *', replicas: 1 }], 0), now: '2026-03-29T05:00:00Z', expect: { replicas: 1, entry: 1, since: '2026-03-28T11:00:00Z', next: '2026-03-30T00:30:00Z', nextEntry: 0 } },
  { name: 'Berlin, the repeated hour: 02:30 CEST fired, 02:45 CEST next', scaling: scaling('Europe/Berlin', [{ cron: '30 2 * * *', replicas: 2 }, { cron: '45 2 * * *', replicas: 1 }], 0), now: '2026-10-25T00:40:00Z', expect: { replicas: 2, entry: 0, since: '2026-10-25T00:30:00Z', next: '2026-10-25T00:45:00Z', nextEntry: 1 } },
  { name: 'Berlin, the repeated hour between the two 02:30s: 02:45 CEST in force, 02:30 CET next', scaling: scaling('Europe/Berlin', [{ cron: '30 2 * * *', replicas: 2 }, { cron: '45 2 * * *', replicas: 1 }], 0), now: '2026-10-25T01:10:00Z', expect: { replicas: 1, entry: 1, since: '2026-10-25T00:45:00Z', next: '2026-10-25T01:30:00Z', nextEntry: 0 } },
  { name: 'Berlin, the repeated hour a second time: 02:30 CET fired', scaling: scaling('Europe/Berlin', [{ cron: '30 2 * * *', replicas: 2 }, { cron: '45 2 * * *', replicas: 1 }], 0), now: '2026-10-25T01:40:00Z', expect: { replicas: 2, entry: 0, since: '2026-10-25T01:30:00Z', next: '2026-10-25T01:45:00Z', nextEntry: 1 } },
  { name: 'New York, the repeated 01:30: EDT and EST both fire', scaling: scaling('America/New_York', [{ cron: '30 1 * * *', replicas: 3 }, { cron: '0 9 * * *', replicas: 1 }], 0), now: '2026-11-01T06:00:00Z', expect: { replicas: 3, entry: 0, since: '2026-11-01T05:30:00Z', next: '2026-11-01T14:00:00Z', nextEntry: 1 } },
  // Ties and seconds.
  { name: 'two entries firing at once: the later one in the file wins', scaling: scaling('UTC', [{ cron: '0 8 * * *', replicas: 2 }, { cron: '0 8 * * 1', replicas: 5 }], 0), now: '2026-03-09T09:00:00Z', expect: { replicas: 5, entry: 1, since: '2026-03-09T08:00:00Z', next: '2026-03-10T08:00:00Z', nextEntry: 0 } },
  { name: 'the entry in force fires again daily: the next change is the Monday the other wins', scaling: scaling('UTC', [{ cron: '0 8 * * *', replicas: 2 }, { cron: '0 8 * * 1', replicas: 5 }], 0), now: '2026-03-10T09:00:00Z', expect: { replicas: 2, entry: 0, since: '2026-03-10T08:00:00Z', next: '2026-03-16T08:00:00Z', nextEntry: 1 } },
  { name: 'six fields (seconds first)', scaling: scaling('UTC', [{ cron: '15 * * * * *', replicas: 1 }, { cron: '45 * * * * *', replicas: 0 }], 0), now: '2026-03-09T09:00:20Z', expect: { replicas: 1, entry: 0, since: '2026-03-09T09:00:15Z', next: '2026-03-09T09:00:45Z', nextEntry: 1 } },
];

describe('scheduleInForce', () => {
  for (const c of cases) {
    it(c.name, () => {
      const s = scheduleInForce(c.scaling, T(c.now));
      assert.deepEqual(
        { replicas: s.replicas, entry: s.entry, since: iso(s.since), next: iso(s.nextChangeAt), ...(c.expect.nextEntry !== undefined ? { nextEntry: s.next?.entry } : {}) },
        c.expect,
      );
      if (s.next) assert.equal(s.next.replicas, (c.scaling.mode === 'replicas' && c.scaling.schedule!.entries[s.next.entry]!.replicas) as number);
    });
  }

  it('is computed from now alone: a restart at any minute of a day agrees with a controller that ran through it', () => {
    const sc = scaling('Europe/Berlin', weekdays);
    const start = T('2026-03-29T22:00:00Z'); // Monday 00:00 CEST
    let expected = scheduleInForce(sc, start);
    for (let t = start; t < start + 26 * 3_600_000; t += 60_000) {
      const s = scheduleInForce(sc, t);
      // Walking minute by minute, the count changes exactly at the announced instants.
      if (expected.nextChangeAt !== null && t >= expected.nextChangeAt) {
        assert.equal(s.entry, expected.next!.entry, `at ${iso(t)}`);
        assert.equal(s.since, expected.nextChangeAt);
        expected = s;
      }
      assert.deepEqual(s, expected, `at ${iso(t)}`);
      assert.deepEqual(scheduleInForce(sc, t), s, 'the same answer twice');
      if (t % 600_000 === 0) assert.deepEqual(scheduleInForce(structuredClone(sc), t), s, `computed afresh at ${iso(t)}: the same as the reused answer`);
    }
    assert.equal(expected.entry, 1, 'the walk ended in the night of Monday to Tuesday');
  });

  it('a reused answer moves with the entry in force firing again (since) and with the look-back', () => {
    const daily = scaling('UTC', [{ cron: '0 8 * * *', replicas: 2 }, { cron: '0 8 1 1 *', replicas: 0 }], 1);
    const first = scheduleInForce(daily, T('2026-03-09T09:00:00Z'));
    const later = scheduleInForce(daily, T('2026-03-10T09:00:00Z'));
    assert.equal(iso(first.since), '2026-03-09T08:00:00Z');
    assert.equal(iso(later.since), '2026-03-10T08:00:00Z', 'the next day the entry fired again');
    assert.equal(iso(later.nextChangeAt), '2027-01-01T08:00:00Z');
    const yearly = scaling('UTC', [{ cron: '0 0 1 3 *', replicas: 3 }], 1);
    assert.equal(scheduleInForce(yearly, T('2027-02-28T00:00:00Z')).replicas, 3);
    assert.equal(scheduleInForce(yearly, T('2027-03-02T00:00:00Z')).replicas, 3, 'fired again on 2027-03-01');
    const leap = scaling('UTC', [{ cron: '0 0 29 2 *', replicas: 3 }], 1);
    assert.equal(scheduleInForce(leap, T('2028-03-01T00:00:00Z')).replicas, 3);
    assert.equal(scheduleInForce(leap, T('2029-03-01T00:00:00Z')).replicas, 3, '366 days on: still in the look-back');
    assert.equal(scheduleInForce(leap, T('2029-03-01T00:00:01Z')).replicas, 1, 'out of the 366-day look-back: the default');
  });

  it('without a schedule: replicas: always, no change due', () => {
    assert.deepEqual(scheduleInForce({ mode: 'replicas', replicas: 3 }, T('2026-03-09T09:00:00Z')), { replicas: 3, entry: null, since: null, nextChangeAt: null, next: null });
  });
});

describe('cron firings (node-cron’s matcher, both directions)', () => {
  const exprs = ['0 8 * * 1-5', '*/7 3-5 * * *', '0 0 1 * *', '30 2 * * 0', '0 12 L * *', '0 9 * * 1#2', '5 4 * feb,aug sun', '*/10 * * * * *'];
  const zones = ['UTC', 'Europe/Berlin', 'America/New_York', 'Australia/Lord_Howe', 'Asia/Kathmandu'];

  it('the next firing agrees with node-cron’s own walker (from the real clock)', () => {
    for (const tz of zones) {
      for (const e of exprs) {
        const task = createTask(e, () => undefined, { timezone: tz });
        const before = Date.now();
        const [theirs] = task.getNextRuns(1);
        void task.destroy();
        const mine = nextFiring(e, tz, before);
        // node-cron walks from its own clock reading, taken just after ours.
        assert.ok(mine !== null && theirs !== undefined, `${e} in ${tz}`);
        if (mine !== theirs.getTime()) assert.ok(mine > before && mine <= Date.now() && nextFiring(e, tz, mine) === theirs.getTime(), `${e} in ${tz}: ${iso(mine)} vs ${theirs.toISOString()}`);
      }
    }
  });

  it('previous and next firings are each other’s neighbours', () => {
    const now = T('2026-03-29T00:30:00Z');
    for (const tz of zones) {
      for (const e of exprs) {
        const prev = previousFiring(e, tz, now);
        const next = nextFiring(e, tz, now);
        assert.ok(prev !== null && next !== null, `${e} in ${tz}`);
        assert.ok(prev <= now && next > now);
        assert.equal(nextFiring(e, tz, prev), next, `${e} in ${tz}: nothing fires between ${iso(prev)} and ${iso(next)}`);
        assert.equal(previousFiring(e, tz, next - 1), prev);
        assert.equal(previousFiring(e, tz, next), next, 'a firing at now counts as fired');
      }
    }
  });
});
