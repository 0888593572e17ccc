/**
 * Liveness (pure), from one observation of the nodes:
 * - starts that concluded ready are settled once a look shows their replica (it counts from the
 *   node from then on), or once a look that began after it was ready does not (it is gone). A look
 *   that began before the replica was on its node settles nothing: until then the record counts it,
 *   so a rolling model never starts a second replacement beside an unseen first one (#23);
 * - starts from before a restart (in the state record, but no start of this process runs them)
 *   are settled against what the node shows: adopted when the replica is there (alive or failed:
 *   the planner reaps and counts a failed one), forgotten when a reachable node does not have it;
 * - a live replica that has not answered /health for longer than its profile's start timeout (hung
 *   after ready, or adopted and never ready) is marked failed with REPLICA_UNHEALTHY: counted like a
 *   crash, stopped and replaced. A replica whose start is in flight is timed by the start itself; one
 *   being stopped is left to the stop;
 * - a replica that stays ready for readyResetMs resets its model's failure count.
 * Replicas on unreachable nodes are unknown: their timers neither run nor reset.
 */
import type { ReplicaObservation } from '../nodes/driver.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { stayedReady, type ModelHealth } from './health.js';
import type { ObservedNode } from './planner.js';
import { omit, type ControllerState, type Note } from './state.js';
import { sameEntries } from '../util/equal-data.js';

export interface LivenessInput {
  readonly state: ControllerState;
  readonly spec: FleetSpec;
  readonly nodes: readonly ObservedNode[];
  /** Starts this process is running right now (the rest of state.starts were inherited). */
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

  // Ready starts: settled by a look that shows them, or one begun after they were ready.
  // Inherited starts: settled on the first look at their (reachable) node.
  const settled: string[] = [];
  for (const [id, s] of Object.entries(i.state.starts)) {
    if (s.readyAt !== undefined) {
      const n = reachable.get(s.node);
      if (!spec.nodes[s.node] || n?.replicas.some((x) => x.id === id)) settled.push(id);
      else if (n?.lookedAt !== undefined && n.lookedAt > s.readyAt) {
        settled.push(id);
        notes.push({ level: 'warn', msg: 'replica ready at its start is gone from its node: forgotten', fields: { model: s.model, node: s.node, replica: id } });
      }
      continue;
    }
    if (i.running.has(id)) continue;
    if (!spec.nodes[s.node]) settled.push(id);
    else if (reachable.has(s.node)) {
      settled.push(id);
      const r = reachable.get(s.node)!.replicas.find((x) => x.id === id);
      notes.push({ level: 'info', msg: r ? 'start from before a restart: replica adopted' : 'start from before a restart never launched its replica: forgotten', fields: { model: s.model, node: s.node, replica: id, state: r?.state ?? null } });
    }
  }
  const starts = settled.length ? omit(i.state.starts, settled) : i.state.starts;

  // Unresponsive replicas.
  const unresponsiveSince: Record<string, number> = {};
  const nodes = i.nodes.map((n): ObservedNode => {
    if (!n.reachable) return n;
    let changed = false;
    const replicas = n.replicas.map((r): ReplicaObservation => {
      if (r.state !== 'starting' || starts[r.id] !== undefined || i.stopping.has(r.id)) return r;
      const m = spec.models[r.model];
      const limit = m ? spec.profiles[m.profile]?.startTimeoutMs : undefined;
      if (limit === undefined) return r;
      const since = i.state.unresponsiveSince[r.id] ?? now;
      unresponsiveSince[r.id] = since;
      if (now - since < limit) return r;
      changed = true;
      const message = `replica ${r.id} on ${n.name} is running but has not answered /health for ${Math.round((now - since) / 1000)} s (the profile's start_timeout is ${Math.round(limit / 1000)} s)`;
      if (i.state.accounted[r.id] === undefined) notes.push({ level: 'warn', msg: 'replica unresponsive: stopping it', fields: { model: r.model, node: n.name, replica: r.id, code: 'REPLICA_UNHEALTHY' } });
      return { ...r, state: 'failed', failure: { code: 'REPLICA_UNHEALTHY', message, logTail: '' } };
    });
    return changed ? { ...n, replicas } : n;
  });

  // Ready since when; a replica that stayed ready resets its model's failure count.
  const readySince: Record<string, number> = {};
  let models: Record<string, ModelHealth> | null = null;
  for (const n of reachable.values()) {
    for (const r of n.replicas) {
      if (r.state !== 'ready') continue;
      const since = i.state.readySince[r.id] ?? now;
      readySince[r.id] = since;
      const h = (models ?? i.state.models)[r.model];
      if (!h || r.digest !== h.digest) continue;
      const next = stayedReady(h, since, now, spec.settings);
      if (next !== h) {
        models ??= { ...i.state.models };
        models[r.model] = next;
        notes.push({ level: 'info', msg: 'replica stayed ready: failure count reset', fields: { model: r.model, replica: r.id } });
      }
    }
  }
  for (const n of i.nodes) if (!n.reachable) for (const r of n.replicas) if (i.state.readySince[r.id] !== undefined) readySince[r.id] = i.state.readySince[r.id]!;

  const keepUnresponsive = sameEntries(unresponsiveSince, i.state.unresponsiveSince);
  const keepReady = sameEntries(readySince, i.state.readySince);
  // nothing changed: the same record (an unchanged world keeps its record, and what is derived from it)
  const state: ControllerState = starts === i.state.starts && keepUnresponsive && keepReady && models === null
    ? i.state
    : {
      ...i.state,
      starts,
      unresponsiveSince: keepUnresponsive ? i.state.unresponsiveSince : unresponsiveSince,
      readySince: keepReady ? i.state.readySince : readySince,
      models: models ?? i.state.models,
    };
  return { state, nodes, notes };
}
