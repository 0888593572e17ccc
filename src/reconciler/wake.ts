/**
 * When the next pass is due for a time-based change (pure), rather than at the next poll: a backoff
 * that expires, a drain grace that ends, an on-demand model that goes idle, a failure count that
 * resets after a replica stayed ready, a replica that has not answered /health for too long.
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import { nextScheduleChange } from '../schedule/schedule.js';
import { canaryDue } from './canary-steps.js';
import { scaleDue } from './scale-life.js';
import type { ControllerState } from './state.js';

export interface WakeInput {
  readonly state: ControllerState;
  readonly spec: FleetSpec;
  /** What each model should have now (from the last plan). */
  readonly desired: Readonly<Record<string, number>>;
  /** Replica ids by model that are ready right now. */
  readonly readyReplicas: (model: string) => readonly string[];
  /** The model of a replica being timed for /health (an entry of an older record may not know it). */
  readonly modelOf: (replicaId: string) => string | undefined;
  /** Further due times from elsewhere (e.g. a schedule's next change). */
  readonly extra?: readonly number[];
  readonly now: number;
}

/** What the record's health holds that is due some time: backoffs' ends, and the models whose failure count may reset. */
interface HealthDue {
  readonly attempts: readonly number[];
  readonly failing: readonly string[];
}

/** By the record's health object (unchanged from pass to pass while nothing happens to any model). */
const healthDue = new WeakMap<ControllerState['models'], HealthDue>();

function healthDueOf(models: ControllerState['models']): HealthDue {
  let due = healthDue.get(models);
  if (due !== undefined) return due;
  const attempts: number[] = [];
  const failing: string[] = [];
  for (const [name, { health: h }] of Object.entries(models)) {
    if (h.nextAttemptAt !== null) attempts.push(h.nextAttemptAt);
    if (h.consecutiveFailures > 0 && !h.parked) failing.push(name);
  }
  healthDue.set(models, (due = { attempts, failing }));
  return due;
}

/** The earliest due time after now, or null when nothing is due. */
export function nextWake(i: WakeInput): number | null {
  const { state, spec, now } = i;
  const health = healthDueOf(state.models);
  const times: number[] = [...(i.extra ?? []), ...health.attempts];
  for (const id in state.replicas) {
    const r = state.replicas[id]!;
    if (r.phase.kind === 'leaving' && r.phase.why === 'surge') times.push(r.phase.since + spec.settings.drainGraceMs);
    if (r.phase.kind === 'unready' && r.phase.since !== undefined) {
      const m = spec.models[r.model || (i.modelOf(id) ?? '')];
      const limit = m ? spec.profiles[m.profile]?.startTimeoutMs : undefined;
      if (limit !== undefined) times.push(r.phase.since + limit);
    }
  }
  for (const name in state.models) {
    const asked = state.models[name]!.demand;
    const m = spec.models[name];
    if (asked !== undefined && m?.scaling.mode === 'on_demand' && (i.desired[name] ?? 0) > 0) times.push(asked + m.scaling.idleTimeoutMs);
  }
  for (const name of health.failing) {
    if (!spec.models[name]) continue;
    const since = i.readyReplicas(name).map((id) => {
      const p = state.replicas[id]?.phase;
      return p?.kind === 'ready' && p.seen ? p.since : Infinity;
    });
    const first = Math.min(...since);
    if (Number.isFinite(first)) times.push(first + spec.settings.readyResetMs);
  }
  const step = canaryDue(state, spec, now);
  if (step !== null) times.push(step);
  const scale = scaleDue(state, now);
  if (scale !== null) times.push(scale);
  let at: number | null = null;
  for (const t of times) if (t > now && (at === null || t < at)) at = t;
  return at;
}

/** How soon a model waiting for a busy replica's room is looked at again (its work may have ended). */
export const ROOM_RECHECK_MS = 1000;

/**
 * When the pass that decided at `now` wants the next one: the earliest of nextWake, the schedule's
 * next change, and a look again soon while a model waits for a busy replica's room.
 */
export function wakeAfterPass(i: Omit<WakeInput, 'extra'> & { readonly waitingForRoom: boolean }): number | null {
  const scheduled = nextScheduleChange(i.spec, i.now);
  const extra = [...(scheduled === null ? [] : [scheduled]), ...(i.waitingForRoom ? [i.now + ROOM_RECHECK_MS] : [])];
  return nextWake({ ...i, extra });
}
