/**
 * Liveness (pure), from one observation of the nodes, as moves of each replica's phase
 * (replica-life.ts):
 * - starts that concluded ready (ready, not seen) are seen once a look shows their replica, or
 *   forgotten once a look that began after it was ready does not (it is gone). A look that began
 *   before the replica was on its node settles nothing: until then the record counts it, so a
 *   rolling model never starts a second replacement beside an unseen first one (#23);
 * - starts from before a restart (launching, but no start of this process runs them) are settled
 *   against what the node shows: adopted (ready or unready) when the replica is there (alive or
 *   failed: the planner reaps and counts a failed one), forgotten when a reachable node does not have it;
 * - a live replica that has not answered /health for longer than its profile's start timeout (hung
 *   after ready, or adopted and never ready) is marked failed with REPLICA_UNHEALTHY: counted like a
 *   crash, stopped and replaced. A replica whose start is in flight is timed by the start itself; one
 *   being stopped is left to the stop;
 * - a replica that stays ready for readyResetMs resets its model's failure count.
 * Replicas on unreachable nodes are unknown: their timers neither run nor reset (the /health timer
 * starts afresh when their node is back). An entry a version-2 record kept by id alone gets its
 * model and node from the first look that shows it.
 */
import type { ReplicaObservation } from '../nodes/driver.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { stayedReady } from './health.js';
import type { ObservedNode } from './planner.js';
import type { ReplicaPhase, ReplicaRecord } from './replica-life.js';
import { omit, type ControllerState, type ModelRecord, type Note } from './state.js';

export interface LivenessInput {
  readonly state: ControllerState;
  readonly spec: FleetSpec;
  readonly nodes: readonly ObservedNode[];
  /** Starts this process is running right now (the record's other launching replicas were inherited). */
  readonly running: ReadonlySet<string>;
  /** Replicas being stopped right now. */
  readonly stopping: ReadonlySet<string>;
  readonly now: number;
}

export interface LivenessOutput {
  readonly state: ControllerState;
  /** The observation with unresponsive replicas marked failed. */
  readonly nodes: readonly ObservedNode[];
  readonly notes: readonly Note[];
}

export function liveness(i: LivenessInput): LivenessOutput {
  const { spec, now } = i;
  const notes: Note[] = [];
  const reachable = new Map(i.nodes.filter((n) => n.reachable).map((n) => [n.name, n]));
  const before = i.state.replicas;
  let replicas: Record<string, ReplicaRecord> | null = null;
  const put = (id: string, r: ReplicaRecord | undefined): void => {
    replicas ??= { ...before };
    if (r === undefined) delete replicas[id];
    else replicas[id] = r;
  };
  const get = (id: string): ReplicaRecord | undefined => (replicas ?? before)[id];

  // Starts: a ready one is seen or forgotten; an inherited one is settled on the first look at its node.
  for (const id in before) {
    const s = before[id]!;
    if (s.phase.kind === 'ready' && !s.phase.seen) {
      const n = reachable.get(s.node);
      if (!spec.nodes[s.node]) put(id, undefined);
      else if (n?.replicas.some((x) => x.id === id)) put(id, { ...s, phase: { ...s.phase, seen: true } });
      else if (n?.lookedAt !== undefined && n.lookedAt > s.phase.since) {
        put(id, undefined);
        notes.push({ level: 'warn', msg: 'replica ready at its start is gone from its node: forgotten', fields: { model: s.model, node: s.node, replica: id } });
      }
      continue;
    }
    if (s.phase.kind !== 'launching' || i.running.has(id)) continue;
    if (!spec.nodes[s.node]) put(id, undefined);
    else if (reachable.has(s.node)) {
      const r = reachable.get(s.node)!.replicas.find((x) => x.id === id);
      put(id, r ? { ...s, phase: r.state === 'ready' ? { kind: 'ready', since: now, seen: true } : { kind: 'unready' } } : undefined);
      notes.push({ level: 'info', msg: r ? 'start from before a restart: replica adopted' : 'start from before a restart never launched its replica: forgotten', fields: { model: s.model, node: s.node, replica: id, state: r?.state ?? null } });
    }
  }

  // Each replica a reachable node shows: ready since when, or unready and timed for /health.
  let models: Record<string, ModelRecord> | null = null;
  const nodes = i.nodes.map((n): ObservedNode => {
    if (!n.reachable) {
      // unknown: the /health timer of its replicas starts afresh when the node is back
      for (const x of n.replicas) {
        const rec = get(x.id);
        if (rec?.phase.kind === 'unready' && rec.phase.since !== undefined) put(x.id, { ...rec, phase: { kind: 'unready' } });
      }
      return n;
    }
    let changed = false;
    const observed = n.replicas.map((x): ReplicaObservation => {
      let rec = get(x.id);
      if (rec !== undefined && rec.model === '') put(x.id, (rec = { ...rec, model: x.model, node: n.name, digest: x.digest, startedAt: x.startedAt }));
      if (rec?.phase.kind === 'leaving' || rec?.phase.kind === 'launching') return x;
      if (x.state === 'ready') {
        if (rec?.phase.kind !== 'ready') put(x.id, (rec = { ...(rec ?? baseOf(x, n.name)), phase: { kind: 'ready', since: now, seen: true } }));
        const since = (rec.phase as Extract<ReplicaPhase, { kind: 'ready' }>).since;
        const m = (models ?? i.state.models)[x.model];
        if (m && x.digest === m.health.digest) {
          const next = stayedReady(m.health, since, now, spec.settings);
          if (next !== m.health) {
            models ??= { ...i.state.models };
            models[x.model] = { ...m, health: next };
            notes.push({ level: 'info', msg: 'replica stayed ready: failure count reset', fields: { model: x.model, replica: x.id } });
          }
        }
        return x;
      }
      const m = spec.models[x.model];
      const limit = m ? spec.profiles[m.profile]?.startTimeoutMs : undefined;
      if (x.state !== 'starting' || i.stopping.has(x.id) || limit === undefined) {
        // failed (or not timed): no /health timer; a ready one is no longer ready
        if (rec !== undefined && (rec.phase.kind === 'ready' || rec.phase.since !== undefined)) put(x.id, { ...rec, phase: { kind: 'unready' } });
        return x;
      }
      const since = rec?.phase.kind === 'unready' && rec.phase.since !== undefined ? rec.phase.since : now;
      if (rec?.phase.kind !== 'unready' || rec.phase.since !== since) put(x.id, { ...(rec ?? baseOf(x, n.name)), phase: { kind: 'unready', since } });
      if (now - since < limit) return x;
      changed = true;
      const message = `replica ${x.id} on ${n.name} is running but has not answered /health for ${Math.round((now - since) / 1000)} s (the profile's start_timeout is ${Math.round(limit / 1000)} s)`;
      if (get(x.id)?.counted === undefined) notes.push({ level: 'warn', msg: 'replica unresponsive: stopping it', fields: { model: x.model, node: n.name, replica: x.id, code: 'REPLICA_UNHEALTHY' } });
      return { ...x, state: 'failed', failure: { code: 'REPLICA_UNHEALTHY', message, logTail: '' } };
    });
    return changed ? { ...n, replicas: observed } : n;
  });

  // nothing changed: the same record (an unchanged world keeps its record, and what is derived from it)
  const state: ControllerState = replicas === null && models === null
    ? i.state
    : { ...i.state, replicas: replicas ?? before, models: models ?? i.state.models };
  return { state, nodes, notes };
}

/** A new entry for a replica a look shows and the record did not have (adopted). */
function baseOf(x: ReplicaObservation, node: string): ReplicaRecord {
  return { model: x.model, node, digest: x.digest, startedAt: x.startedAt, phase: { kind: 'unready' } };
}

/** The record without the given replicas' entries. */
export function withoutReplicas(s: ControllerState, ids: readonly string[]): ControllerState {
  return ids.length === 0 ? s : { ...s, replicas: omit(s.replicas, ids) };
}
