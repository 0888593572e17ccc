/**
 * Which replica count a model's schedule puts in force at an instant (pure: computed from `now`
 * alone, nothing remembered, so a controller that restarts mid-window gets it right). The count in
 * force is the one of the entry that fired last (entries firing at the same instant: the later
 * one in the file wins); `replicas:` is the default while no entry fired in the last SEARCH_DAYS.
 */
import type { FleetSpec, ModelScaling, ReplicaSchedule } from '../fleet-spec/types.js';
import { nextFiring, previousFiring, SEARCH_DAYS } from '../fleet-spec/cron.js';

export interface ScheduleInForce {
  readonly replicas: number;
  /** Index of the schedule entry in force; null for the default (`replicas:`). */
  readonly entry: number | null;
  /** Epoch ms when that entry fired; null for the default. */
  readonly since: number | null;
  /** Epoch ms when another entry takes over; null when none will within SEARCH_DAYS (or no schedule). */
  readonly nextChangeAt: number | null;
  /** The entry and count that take over then. */
  readonly next: { readonly entry: number; readonly replicas: number } | null;
}

/** Safety bound: instants at which the entry in force fires together with others and wins. */
const MAX_STEPS = 64;

/**
 * Answers per schedule (specs are frozen: one object per revision), valid from the instant they
 * were computed for until the next change: a pass or a scrape in between reuses the answer.
 */
const answers = new WeakMap<object, { readonly from: number; readonly until: number; readonly answer: ScheduleInForce }>();

export function scheduleInForce(scaling: ModelScaling, now: number): ScheduleInForce {
  if (scaling.mode !== 'replicas') return { replicas: 0, entry: null, since: null, nextChangeAt: null, next: null };
  const schedule = scaling.schedule;
  if (!schedule || schedule.entries.length === 0) return { replicas: scaling.replicas, entry: null, since: null, nextChangeAt: null, next: null };
  const hit = answers.get(schedule);
  if (hit && now >= hit.from && now < hit.until) return hit.answer;
  const answer = compute(scaling.replicas, schedule, now);
  answers.set(schedule, { from: now, until: validUntil(schedule, answer, now), answer });
  return answer;
}

/**
 * Until when an answer stays exactly right: the next change, the next time the entry in force
 * fires again (its `since` moves), the instant its firing leaves the look-back window — and at
 * most a minute when none of these is known (the window moves).
 */
function validUntil(schedule: ReplicaSchedule, a: ScheduleInForce, now: number): number {
  const bounds = [a.nextChangeAt ?? now + 60_000];
  if (a.entry !== null && a.since !== null) {
    bounds.push(a.since + SEARCH_DAYS * 86_400_000);
    bounds.push(nextFiring(schedule.entries[a.entry]!.cron, schedule.timezone, now) ?? now + 60_000);
  }
  return Math.min(...bounds);
}

function compute(defaultReplicas: number, schedule: ReplicaSchedule, now: number): ScheduleInForce {
  const { timezone, entries } = schedule;

  let inForce: number | null = null;
  let since: number | null = null;
  for (const [i, e] of entries.entries()) {
    const t = previousFiring(e.cron, timezone, now);
    if (t !== null && (since === null || t >= since)) {
      inForce = i;
      since = t;
    }
  }
  const replicas = inForce === null ? defaultReplicas : entries[inForce]!.replicas;

  // The next instant at which another entry wins: the others' next firings, in order; at each,
  // the winner is the last in the file among the entries firing then (the one in force included).
  const upcoming = entries.map((e, i) => (i === inForce ? null : nextFiring(e.cron, timezone, now)));
  for (let step = 0; step < MAX_STEPS; step++) {
    const times = upcoming.filter((t): t is number => t !== null);
    if (times.length === 0) break;
    const at = Math.min(...times);
    if (at - now > SEARCH_DAYS * 86_400_000) break;
    let winner = upcoming.lastIndexOf(at);
    if (inForce !== null && inForce > winner && previousFiring(entries[inForce]!.cron, timezone, at) === at) winner = inForce;
    if (winner !== inForce) return { replicas, entry: inForce, since, nextChangeAt: at, next: { entry: winner, replicas: entries[winner]!.replicas } };
    upcoming.forEach((t, i) => {
      if (t === at) upcoming[i] = nextFiring(entries[i]!.cron, timezone, at);
    });
  }
  return { replicas, entry: inForce, since, nextChangeAt: null, next: null };
}

/**
 * The earliest instant after `now` at which some model's scheduled count changes, or null: the
 * reconciler wakes then (add it to the times its wake timer considers).
 */
/** The scaling of the spec's models with a schedule, found once per spec (a pass asks every time). */
const scheduled = new WeakMap<FleetSpec['models'], readonly ModelScaling[]>();
function scheduledOf(spec: FleetSpec): readonly ModelScaling[] {
  let out = scheduled.get(spec.models);
  if (out === undefined) scheduled.set(spec.models, (out = Object.values(spec.models).flatMap((m) => (m.scaling.mode === 'replicas' && m.scaling.schedule ? [m.scaling] : []))));
  return out;
}

export function nextScheduleChange(spec: FleetSpec, now: number): number | null {
  let at: number | null = null;
  for (const scaling of scheduledOf(spec)) {
    const t = scheduleInForce(scaling, now).nextChangeAt;
    if (t !== null && (at === null || t < at)) at = t;
  }
  return at;
}

/** The schedule part of the admin API's model JSON (`ctl models` shows it). */
export interface ScheduleJson {
  readonly timezone: string;
  /** Replicas the schedule puts in force. */
  readonly replicas: number;
  /** The entry that set it; null: the default (`replicas:`), no entry fired in the last year. */
  readonly entry: { readonly index: number; readonly cron: string } | null;
  /** ISO time the entry fired. */
  readonly since: string | null;
  /** The next change: when, to what, by which entry; null when none within a year. */
  readonly next: { readonly at: string; readonly replicas: number; readonly entry: { readonly index: number; readonly cron: string } } | null;
}

export function scheduleJson(scaling: ModelScaling, now: number): ScheduleJson | null {
  if (scaling.mode !== 'replicas' || !scaling.schedule) return null;
  const s = scheduleInForce(scaling, now);
  const entries = scaling.schedule.entries;
  const ref = (i: number) => ({ index: i, cron: entries[i]!.cron });
  return {
    timezone: scaling.schedule.timezone,
    replicas: s.replicas,
    entry: s.entry === null ? null : ref(s.entry),
    since: s.since === null ? null : new Date(s.since).toISOString(),
    next: s.next && s.nextChangeAt !== null ? { at: new Date(s.nextChangeAt).toISOString(), replicas: s.next.replicas, entry: ref(s.next.entry) } : null,
  };
}
