/**
 * One pass's decision (pure): from the state record, the spec in force, one observation of the nodes
 * and the memory needs, the next state and the actions to apply. The loop around it only does I/O
 * (observe before, apply after) and logs the notes.
 *
 *   liveness (inherited starts, unresponsive replicas, ready-reset) → failures the nodes show counted
 *   → plan (placement + actions) → drains begun → bookkeeping of replicas that are gone pruned
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import { liveness } from './liveness.js';
import { replicaFailed } from './outcomes.js';
import type { Unplaceable } from './placement.js';
import type { DeviceNeed } from './memory.js';
import { keyMatches, observedFailures, planPass, type Action, type InflightStart, type ObservedNode, type PlanInput, type ShortOfRoom } from './planner.js';
import { isInflightStart, moved, type GroupMember } from './replica-life.js';
import { plannedRollout, rolloutSettled, type PlannedRollout } from './rollout-life.js';
import { avoidanceAt, demanded, demandByModel, healthByModel, withReplica, type ControllerState, type ModelRecord, type Note } from './state.js';
import { stopIds, stopsRequested } from './stops.js';
import type { LoadReport, SummedLoad } from '../scale/decide.js';
import { scaled, scaledCounts } from './scale-life.js';

export interface DecideInput {
  readonly state: ControllerState;
  readonly spec: FleetSpec;
  readonly nodes: readonly ObservedNode[];
  /** Memory per replica of each model (override or estimate); null = unknown. */
  readonly memory: Readonly<Record<string, number | null>>;
  /** devices (#24): the device need of models whose profile offloads layers. */
  readonly deviceNeeds?: Readonly<Record<string, DeviceNeed>>;
  /** Why a model's memory need is unknown (replaces the generic unplaceable text). */
  readonly memoryErrors: Readonly<Record<string, string>>;
  /** Starts this process is running right now. */
  readonly running: ReadonlySet<string>;
  /** Stops this process runs right now (the record's `stops` are being stopped too). */
  readonly stopping: ReadonlySet<string>;
  /** Replicas with requests in flight (llama-server's /slots): never stopped as idle or evicted. */
  readonly busy?: ReadonlySet<string>;
  /** Requests in flight per replica, where read (scale-in and an activation's room take the fewest first). */
  readonly inFlight?: ReadonlyMap<string, number>;
  /** Models with requests in this process's router right now (waiting, queued or proxied): active now. */
  readonly active?: ReadonlySet<string>;
  /** The fingerprint of this controller's engine key (replicas started with another are replaced). */
  readonly keyFingerprint?: string | null;
  /** The routers' load reports (scale/decide.ts): what models with a replica range scale on. */
  readonly load?: readonly LoadReport[];
  /** The specs of unpromoted rollouts' stable revisions, by fleet revision: their replicas start again from them. */
  readonly stableSpecs?: StableSpecsByRevision;
  readonly now: number;
  readonly newReplicaId: (model: string, digest: string) => string;
}

export type StableSpecsByRevision = ReadonlyMap<string, FleetSpec>;

export interface Decision {
  readonly state: ControllerState;
  readonly actions: readonly Action[];
  readonly desired: Readonly<Record<string, number>>;
  readonly unplaceable: Readonly<Record<string, Unplaceable>>;
  /** On-demand models waiting for a busy replica's room (planner.ts): look again soon. */
  readonly waitingForRoom: readonly string[];
  /** Scaling models whose extra replicas fit nowhere (planner.ts ShortOfRoom). */
  readonly short: Readonly<Record<string, ShortOfRoom>>;
  /** The routers' summed load each scaling decision read (scale-life.ts). */
  readonly load: Readonly<Record<string, SummedLoad>>;
  /** The observation after liveness (unresponsive replicas marked failed). */
  readonly nodes: readonly ObservedNode[];
  readonly notes: readonly Note[];
}

/** The starts in flight in the planner's terms. */
export function inflightStarts(s: ControllerState): InflightStart[] {
  const out: InflightStart[] = [];
  for (const replicaId in s.replicas) {
    const r = s.replicas[replicaId]!;
    if (isInflightStart(r)) out.push({ replicaId, model: r.model, node: r.node, digest: r.digest });
  }
  return out;
}

/** The hosts of the record's RPC groups, by replica id (none: the same empty map). */
const NO_GROUPS: ReadonlyMap<string, readonly GroupMember[]> = new Map();
const groupsOfReplicas = new WeakMap<object, ReadonlyMap<string, readonly GroupMember[]>>();
export function groupsOf(s: Pick<ControllerState, 'replicas'>): ReadonlyMap<string, readonly GroupMember[]> {
  let out = groupsOfReplicas.get(s.replicas);
  if (out === undefined) {
    const m = new Map<string, readonly GroupMember[]>();
    for (const id in s.replicas) {
      const g = s.replicas[id]!.group;
      if (g !== undefined) m.set(id, g);
    }
    groupsOfReplicas.set(s.replicas, (out = m.size ? m : NO_GROUPS));
  }
  return out;
}

/** The rollouts the planner keeps the stable revision for, by model (none: the same empty object). */
const NO_ROLLOUTS: Readonly<Record<string, PlannedRollout>> = Object.freeze({});
function rolloutsOf(s: ControllerState, stableSpecs: StableSpecsByRevision | undefined): Readonly<Record<string, PlannedRollout>> {
  let out: Record<string, PlannedRollout> | null = null;
  for (const name in s.models) {
    const r = s.models[name]!.rollout;
    const p = plannedRollout(r, r?.stableRevision !== undefined ? stableSpecs?.get(r.stableRevision)?.models[name] : undefined);
    if (p) (out ??= {})[name] = p;
  }
  return out ?? NO_ROLLOUTS;
}

/** The replica facts the planner reads by id: restarts asked, surge drains (since), failures counted. */
function replicaFacts(s: ControllerState): { restarts: Set<string>; draining: Record<string, number>; counted: Set<string> } {
  const restarts = new Set<string>();
  const draining: Record<string, number> = {};
  const counted = new Set<string>();
  for (const id in s.replicas) {
    const r = s.replicas[id]!;
    if (r.restartAsked !== undefined) restarts.add(id);
    if (r.counted !== undefined) counted.add(id);
    if (r.phase.kind === 'leaving' && r.phase.why === 'surge') draining[id] = r.phase.since;
  }
  return { restarts, draining, counted };
}

/** The planner's input from the state record and one observation. */
/** Every replica being stopped: the record's stops and those this process runs. */
export function stoppingOf(s: ControllerState, running: ReadonlySet<string>): ReadonlySet<string> {
  return new Set([...stopIds(s), ...running]);
}

export function planInputOf(i: Pick<DecideInput, 'state' | 'spec' | 'nodes' | 'memory' | 'deviceNeeds' | 'stopping' | 'busy' | 'inFlight' | 'keyFingerprint' | 'stableSpecs' | 'now' | 'newReplicaId'>): PlanInput {
  const s = i.state;
  const facts = replicaFacts(s);
  return {
    spec: i.spec,
    nodes: i.nodes,
    health: healthByModel(s),
    inflightStarts: inflightStarts(s),
    stopping: stoppingOf(s, i.stopping),
    ...(i.busy ? { busy: i.busy } : {}),
    ...(i.inFlight ? { inFlight: i.inFlight } : {}),
    demand: Object.fromEntries(Object.entries(demandByModel(s)).map(([m, t]) => [m, { lastRequestAt: t }])),
    scaled: scaledCounts(s),
    restarts: facts.restarts,
    draining: facts.draining,
    memory: i.memory,
    groups: groupsOf(s),
    ...(i.deviceNeeds ? { deviceNeeds: i.deviceNeeds } : {}),
    accountedFailures: facts.counted,
    rollouts: rolloutsOf(s, i.stableSpecs),
    avoid: avoidanceAt(s, i.now).avoided,
    keyFingerprint: i.keyFingerprint ?? null,
    now: i.now,
    newReplicaId: i.newReplicaId,
  };
}

/** An unknown memory need says why it is unknown (the estimator's error) rather than the generic text. */
export function withMemoryError(u: Unplaceable, errors: Readonly<Record<string, string>>, model: string): Unplaceable {
  const err = errors[model];
  return u.code === 'PLACEMENT_MEMORY_UNKNOWN' && err ? { ...u, reason: err } : u;
}

export function decide(i: DecideInput): Decision {
  const { spec, now } = i;
  const live = liveness({ state: avoidanceAt(i.state, now).state, spec, nodes: i.nodes, running: i.running, stopping: stoppingOf(i.state, i.stopping), now });
  const notes: Note[] = [...live.notes];
  let state = activityNow(live.state, spec, i.busy, i.active, live.nodes, now);
  // models whose count follows their load: this pass's decision, in the record (scale-life.ts)
  const sc = scaled(state, spec, i.load ?? [], now);
  state = sc.state;
  notes.push(...sc.notes);
  // Failures the nodes show are counted before planning, so the replacement waits out its backoff.
  for (const f of observedFailures(planInputOf({ ...i, state, nodes: live.nodes }))) {
    const r = replicaFailed(state, { model: f.model, digest: f.digest, replicaId: f.replicaId, node: f.node, error: { code: f.failure.code, message: f.failure.message }, ...(f.failure.silent ? { silent: true } : {}) }, now, spec.settings);
    state = r.state;
    notes.push(...r.notes);
  }
  const out = planPass(planInputOf({ ...i, state, nodes: live.nodes }));
  const mismatched = new Map(live.nodes.flatMap((n) => n.replicas.filter((r) => !keyMatches(r, i.keyFingerprint)).map((r) => [r.id, r] as const)));
  for (const a of out.actions) {
    if (a.kind === 'stop' && mismatched.has(a.replicaId)) notes.push({ level: 'warn', msg: 'replica started with another engine key (it refuses the router): replaced', fields: { model: a.model, node: a.node, replica: a.replicaId } });
  }
  for (const id of out.drainStarted) {
    const r = moved(state.replicas[id], id, { kind: 'leaving', why: 'surge', since: now });
    if (r.refused) notes.push(r.refused);
    else state = withReplica(state, id, r.rec);
  }
  const stopped = stopsRequested(state, out.actions, now);
  state = stopped.state;
  notes.push(...stopped.notes);
  for (const id of out.drainStarted) notes.push({ level: 'info', msg: 'no room to surge: draining the old replica before replacing it', fields: { replica: id, graceMs: spec.settings.drainGraceMs } });
  const unplaceable: Record<string, Unplaceable> = {};
  for (const [model, u] of Object.entries(out.unplaceable)) unplaceable[model] = withMemoryError(u, i.memoryErrors, model);
  return { state: pruned(state, live.nodes, i.stopping, now), actions: out.actions, desired: out.desired, unplaceable, waitingForRoom: out.waitingForRoom, short: out.short ?? {}, load: sc.load, nodes: live.nodes, notes };
}

/**
 * Activity now, for on-demand models: a request in this router (waiting for activation, queued or
 * proxied), and a replica llama-server reports busy (GET /slots). An on-demand model's idle timeout
 * counts from the last time work was seen, not only from the requests' touches — so it is never
 * stopped as idle while a request waits for its replica, nor in the moment between a stream's last
 * token (the slot free) and the router's touch at its end; requests another instance proxied count too.
 */
export function activityNow(s: ControllerState, spec: FleetSpec, busy: ReadonlySet<string> | undefined, active: ReadonlySet<string> | undefined, nodes: readonly ObservedNode[], now: number): ControllerState {
  const models = new Set(active ?? []);
  if (busy && busy.size > 0) for (const n of nodes) for (const r of n.replicas) if (busy.has(r.id)) models.add(r.model);
  let out = s;
  for (const m of models) if (spec.models[m]?.scaling.mode === 'on_demand' && (out.models[m]?.demand ?? -Infinity) < now) out = demanded(out, m, now);
  return out;
}

/** How long a counted failure is remembered after its replica is out of sight. */
export const ACCOUNTED_KEEP_MS = 10 * 60_000;

/**
 * Replicas no node shows any more leave the record ("gone"), unless their start is in flight or a
 * stop of this process runs for them; a counted failure stays a while after its replica is out of
 * sight: an observation that began before the replica was removed can still show it (failed, maybe
 * with its log gone), and it must never be counted again — with a reason that is not its own.
 */
export function pruned(s: ControllerState, nodes: readonly ObservedNode[], stopsRunning: ReadonlySet<string> = new Set(), now = Infinity): ControllerState {
  const seen = new Set<string>();
  for (const n of nodes) for (const r of n.replicas) seen.add(r.id);
  const gone: string[] = [];
  for (const id in s.replicas) {
    const r = s.replicas[id]!;
    if (seen.has(id) || isInflightStart(r) || stopsRunning.has(id)) continue;
    if (r.counted !== undefined && now - r.counted < ACCOUNTED_KEEP_MS) continue;
    gone.push(id);
  }
  let out = s;
  if (gone.length > 0) {
    const replicas = { ...s.replicas };
    for (const id of gone) delete replicas[id];
    out = { ...s, replicas };
  }
  return rolloutsSettled(out);
}

/** Promoted rollouts whose stable replicas are all gone end. */
function rolloutsSettled(s: ControllerState): ControllerState {
  let models: Record<string, ModelRecord> | null = null;
  for (const name in s.models) {
    const m = s.models[name]!;
    if (m.rollout?.phase !== 'promoted' || rolloutSettled(m.rollout, name, s.replicas) !== undefined) continue;
    const { rollout: _done, ...rest } = m;
    (models ??= { ...s.models })[name] = rest;
  }
  return models ? { ...s, models } : s;
}

/**
 * A fresh placement of one model against the controller's current view (the last observation plus
 * the starts and stops it knows of), for a request that found no ready replica: 'start' when it
 * should start and starts are all a pass would do, 'pass' when something else should happen first
 * (evictions, other actions, or the memory need is not known yet), the reason when it fits
 * nowhere, null when there is nothing to do now (parked, already starting, backing off).
 */
export function freshPlacement(i: Pick<DecideInput, 'state' | 'spec' | 'nodes' | 'memory' | 'deviceNeeds' | 'memoryErrors' | 'stopping' | 'busy' | 'keyFingerprint' | 'now'>, model: string): 'pass' | 'start' | Unplaceable | null {
  if (i.memory[model] === undefined) return 'pass';
  if (i.state.models[model]?.health.parked) return null;
  const out = planPass(planInputOf({ ...i, newReplicaId: () => 'preview' }));
  // Evictions that make room for it (it starts in the pass after they are gone), or a start for it
  // among other actions: a whole pass. A start for it, and only starts: 'start' (#38: may be taken
  // on this look, without a sync and a look of every node first).
  const starts = out.actions.some((a) => a.model === model && a.kind === 'start');
  if (starts && out.actions.every((a) => a.kind === 'start')) return 'start';
  if (starts || out.actions.some((a) => a.kind === 'stop' && a.reason === 'evicted')) return 'pass';
  const u = out.unplaceable[model];
  // A replica became ready since the last look (a start the record still holds): it may be evictable
  // once looked at, so look again rather than refuse on a view that does not show it yet.
  if (u && Object.values(i.state.replicas).some((r) => r.phase.kind === 'ready' && !r.phase.seen)) return 'pass';
  return u ? withMemoryError(u, i.memoryErrors, model) : null;
}
