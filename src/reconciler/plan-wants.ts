/**
 * A pass's second step (pure, planner.ts): what each model wants — its count now (a rollout's new
 * revision, a schedule, its load, its demand) against what it has: the stops of its extra,
 * outdated and drained replicas, and the replicas it is missing, to be placed (plan-place.ts).
 */
import type { ModelSpec } from '../fleet-spec/types.js';
import { rangeNow, scales } from '../scale/range.js';
import { mayStart } from './health.js';
import { desiredNow, keyMatches, stopIn, type Located, type PlanDraft, type PlanInput, type Seen, type StopReason } from './planner.js';
import { modelsInOrder } from './spec-order.js';
import { stablePlan, stableRank } from './stable-replicas.js';

/** What a model is missing, for placement. */
export interface Want {
  model: ModelSpec;
  count: number;
  existingOn: string[];
  surge: boolean;
  outdated: Located[];
  /** A replica of the model is being stopped: room comes when it is gone (wait, not unplaceable). */
  roomComing: boolean;
  /** Replicas it serves with anyway (its range's min, 1 on demand): those above are extras (scaling); null: none are. */
  floor: number | null;
  /** Of `count`, those below the floor (all of them when the model does not scale). */
  floorCount: number;
}

/** Each model's stops of this pass (into `out`) and what it is missing. */
export function wantsOf(input: PlanInput, seen: Seen, out: PlanDraft): Want[] {
  const { spec, now } = input;
  const { byModel, stoppingByModel, inflightByModel } = seen;
  const stop = (model: string, l: Located, reason: StopReason): void => stopIn(out, model, l, reason);
  const busy = input.busy ?? new Set<string>();
  const wants: Want[] = [];
  for (const m of modelsInOrder(spec)) {
    const rollout = input.rollouts?.[m.name];
    const asked = desiredNow(m, input.demand[m.name], now, input.scaled?.[m.name]);
    out.desired[m.name] = asked;
    // a rollout: the new revision's replicas are what it wants of the current digest
    const want = rollout ? rollout.want : asked;
    const located = byModel.get(m.name);
    const inflight = inflightByModel.get(m.name) ?? [];
    // a rollout's stable replicas starting again (stable-replicas.ts) are not the current revision's
    const pending = rollout ? inflight.filter((p) => p.digest !== rollout.stable) : inflight;
    // nothing of it anywhere and nothing wanted (most on-demand models): nothing to plan
    if (want === 0 && located === undefined && inflight.length === 0) continue;
    const h = input.health[m.name];
    const alive = (located ?? []).filter((l) => l.r.state !== 'failed');
    const isCurrent = (l: Located): boolean => l.r.digest === m.digest && !input.restarts.has(l.r.id) && keyMatches(l.r, input.keyFingerprint);
    const current = alive.filter(isCurrent);
    const outdated = alive.filter((l) => !isCurrent(l));
    const currentReady = current.filter((l) => l.r.state === 'ready' && l.reachable).length;
    const currentStarting = current.filter((l) => l.r.state === 'starting').length + pending.length;
    const haveCurrent = current.length + pending.length;

    // Too many current replicas: stop the extras (starting, then idle ones, newest first: the oldest is warmest).
    if (haveCurrent > want) {
      const inUse = (l: Located): number => input.inFlight?.get(l.r.id) ?? (busy.has(l.r.id) ? 1 : 0);
      const extra = [...current]
        .filter((l) => l.reachable)
        .sort((a, b) => (a.r.state === 'ready' ? 1 : 0) - (b.r.state === 'ready' ? 1 : 0) || inUse(a) - inUse(b) || b.r.startedAt - a.r.startedAt)
        .slice(0, haveCurrent - want);
      const reason: StopReason = m.scaling.mode === 'on_demand' && want === 0 ? 'idle' : 'surplus';
      // A request in flight is activity: an idle replica serving one is not stopped yet.
      for (const l of extra) if (!(reason === 'idle' && busy.has(l.r.id))) stop(m.name, l, reason);
    }

    // Outdated replicas (new digest or a restart): keep as many as still needed to serve — during a
    // rollout, every replica of the stable revision (and only those) until it is promoted.
    const stable = rollout ? stablePlan({ stable: outdated.filter((l) => l.r.digest === rollout.stable), restarts: input.restarts, pending: inflight.length - pending.length, asked: Math.max(0, asked - rollout.want), canStart: rollout.stableModel !== undefined }) : null;
    if (outdated.length) {
      const rank = (l: Located): number => (rollout ? stableRank(l, rollout.stable, input.restarts) : 0);
      const byAge = [...outdated].sort((a, b) => rank(a) - rank(b) || a.r.startedAt - b.r.startedAt || a.r.id.localeCompare(b.r.id));
      const keep = stable ? stable.keep : Math.max(0, want - currentReady);
      const toStop = byAge.slice(0, Math.max(0, byAge.length - keep));
      for (const l of toStop) if (l.reachable) stop(m.name, l, 'replaced');
      // A drain that has run its grace: stop it now, its room goes to the new replica.
      for (const l of byAge.slice(toStop.length)) {
        const since = input.draining[l.r.id];
        if (since !== undefined && now - since >= spec.settings.drainGraceMs && l.reachable) stop(m.name, l, 'drained');
      }
    }

    // a stable replica missing while the rollout is unpromoted: started again from the stable definition
    if (stable?.start && rollout?.stableModel && h && mayStart(h, now)) {
      const roomComing = (stoppingByModel.get(m.name) ?? []).length > 0 || out.actions.some((a) => a.kind === 'stop' && a.model === m.name);
      wants.push({ model: rollout.stableModel, count: 1, floorCount: 1, existingOn: alive.map((l) => l.node), surge: false, outdated: [], roomComing, floor: null });
    }

    const missing = want - haveCurrent;
    if (missing <= 0 || !h || !mayStart(h, now)) continue;
    // One start at a time while failing or rolling; all at once otherwise. A rolling model's next
    // replacement waits for the previous replaced replica's stop to finish (never more than
    // replicas + 1 processes): a stop of this pass or one still running holds it.
    const stoppingHere = (stoppingByModel.get(m.name) ?? []).length > 0 || out.actions.some((a) => a.kind === 'stop' && a.model === m.name && a.reason !== 'failed');
    const rolling = outdated.length > 0 || stoppingHere;
    if ((h.consecutiveFailures > 0 || rolling) && currentStarting > 0) continue;
    if (stoppingHere) continue;
    const count = h.consecutiveFailures > 0 || rolling ? 1 : missing;
    const floor = scales(m) && !rollout ? (m.scaling.mode === 'on_demand' ? 1 : rangeNow(m, now).min) : null;
    wants.push({
      model: m,
      count,
      existingOn: [...current.map((l) => l.node), ...pending.map((p) => p.node)],
      surge: outdated.length > 0,
      outdated,
      roomComing: stoppingHere,
      floor,
      // what is missing below the floor first; the rest are extras (placed last, under the cores rule)
      floorCount: floor === null ? count : Math.min(count, Math.max(0, floor - haveCurrent)),
    });
  }
  return wants;
}
