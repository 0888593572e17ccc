/**
 * What the controller's next pass would do after a merge (pure): the reconciler's own planner
 * (planPass) run on the head spec against the base's usage — the replicas the status says run
 * where (or, when it does not say, where the planner would put the base's) — so "fits", "fits
 * after evicting idle on-demand replicas" and "fits nowhere" are the controller's answers.
 * On-demand models that run count as recently used; a changed on-demand model counts as just
 * asked for (its placement is what a request would get).
 */
import type { DeviceNeed } from '../reconciler/memory.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { ReplicaObservation } from '../nodes/driver.js';
import { initialHealth, type ModelHealth } from '../reconciler/health.js';
import { planPass, type Action, type Demand, type ObservedNode as PlannerNode } from '../reconciler/planner.js';
import type { ObservedFleet } from './observed.js';

export interface SimReplica {
  readonly model: string;
  readonly node: string;
  readonly digest: string;
}

export interface NodeUsage {
  readonly name: string;
  readonly capacityBytes: number | null;
  /** What replicas may use: capacity − placement_reserve. */
  readonly roomBytes: number | null;
  readonly reachable: boolean;
  /** Memory of the replicas running before the merge (by the needs given). */
  readonly usedBefore: number;
  readonly usedAfter: number;
  readonly starts: readonly string[];
  readonly stops: readonly { readonly model: string; readonly reason: string }[];
}

export interface ModelOutcome {
  readonly desired: number;
  /** Replicas running before, by node. */
  readonly before: readonly string[];
  /** Nodes new replicas start on in the pass after the merge. */
  readonly starts: readonly string[];
  /** Other models' replicas stopped to make room for this one. */
  readonly evicts: readonly { readonly model: string; readonly node: string }[];
  /** Its own replicas stopped (surplus, removed, replaced, idle). */
  readonly stops: readonly { readonly node: string; readonly reason: string }[];
  /** An outdated replica that starts draining because no node has room to surge. */
  readonly drains: number;
  readonly unplaceable: string | null;
  readonly parked: boolean;
}

export interface Simulation {
  /** Where the usage came from: the status, or (not in it) the planner's placement of the base. */
  readonly usage: 'observed' | 'assumed' | 'empty';
  readonly models: Readonly<Record<string, ModelOutcome>>;
  readonly nodes: readonly NodeUsage[];
}

export interface SimulationInput {
  readonly base: FleetSpec | null;
  readonly head: FleetSpec;
  readonly observed: ObservedFleet | null;
  /** Memory per replica, per model (base and head); null = unknown. */
  readonly memory: Readonly<Record<string, number | null>>;
  /** Device need of the models whose profile offloads layers (where the header was read). */
  readonly deviceNeeds?: Readonly<Record<string, DeviceNeed>>;
  /** Models the merge unparks (definition change or retry). */
  readonly unparks: ReadonlySet<string>;
  /** Models the merge adds or changes (on-demand ones count as asked for). */
  readonly changed: ReadonlySet<string>;
  readonly now: number;
}

function plannerNodes(spec: FleetSpec, observed: ObservedFleet | null, replicas: readonly SimReplica[], now: number): PlannerNode[] {
  return Object.values(spec.nodes).map((n) => {
    const o = observed?.nodes[n.name];
    const mine = replicas.filter((r) => r.node === n.name);
    return {
      name: n.name,
      reachable: o ? o.reachable : true,
      memoryTotalBytes: o?.memoryTotalBytes ?? null,
      devices: o?.devices ?? [],
      // a replica of a GPU profile is taken to hold all its layers on the node's first device
      replicas: mine.map((r, i): ReplicaObservation => ({ id: `${r.model}@${r.node}#${i}`, model: r.model, digest: r.digest, port: 0, pid: 0, startedAt: now - 3_600_000 + i, endpoint: '', state: 'ready', ...simDevices(spec, r.model, o?.devices ?? []) })),
    };
  });
}

function simDevices(spec: FleetSpec, model: string, devices: readonly { readonly name: string }[]): Pick<ReplicaObservation, 'devices' | 'gpuLayers'> {
  const m = spec.models[model];
  const p = m ? spec.profiles[m.profile] : undefined;
  const first = devices[0];
  return p && p.gpuLayers != null && p.gpuLayers !== 0 && first ? { devices: [first.name], gpuLayers: 'all' } : {};
}

function pass(spec: FleetSpec, nodes: PlannerNode[], health: Record<string, ModelHealth>, demand: Record<string, Demand>, memory: Readonly<Record<string, number | null>>, now: number, deviceNeeds?: Readonly<Record<string, DeviceNeed>>) {
  let n = 0;
  return planPass({
    spec,
    nodes,
    health,
    inflightStarts: [],
    stopping: new Set(),
    demand,
    restarts: new Set(),
    draining: {},
    memory,
    ...(deviceNeeds ? { deviceNeeds } : {}),
    accountedFailures: new Set(),
    now,
    newReplicaId: (model) => `sim-${model}-${n++}`,
  });
}

/** The base's replicas: as observed, else where the planner would place the base from scratch. */
function baseReplicas(input: SimulationInput): { replicas: SimReplica[]; usage: Simulation['usage'] } {
  const { base, observed } = input;
  const known = observed && Object.values(observed.models).some((m) => m.replicas !== null);
  if (observed && known) {
    const replicas: SimReplica[] = [];
    for (const [model, m] of Object.entries(observed.models)) for (const r of m.replicas ?? []) replicas.push({ model, node: r.node, digest: r.digest || (base?.models[model]?.digest ?? '') });
    return { replicas, usage: 'observed' };
  }
  if (!base) return { replicas: [], usage: 'empty' };
  const health: Record<string, ModelHealth> = {};
  for (const m of Object.values(base.models)) health[m.name] = { ...initialHealth(m.digest), parked: observed?.models[m.name]?.parked ? { since: 0, lastError: observed.models[m.name]!.parked!.lastError } : null };
  // On-demand models the status counts replicas of were in use: place them too.
  const demand: Record<string, Demand> = {};
  for (const m of Object.values(base.models)) if (m.scaling.mode === 'on_demand' && (observed?.models[m.name]?.running ?? 0) > 0) demand[m.name] = { lastRequestAt: input.now - 1 };
  const out = pass(base, plannerNodes(base, observed, [], input.now), health, demand, input.memory, input.now, input.deviceNeeds);
  const replicas = out.actions.filter((a): a is Extract<Action, { kind: 'start' }> => a.kind === 'start').map((a) => ({ model: a.model, node: a.node, digest: a.digest }));
  return { replicas, usage: 'assumed' };
}

export function simulateMerge(input: SimulationInput): Simulation {
  const { head, observed, now } = input;
  const { replicas, usage } = baseReplicas(input);
  const health: Record<string, ModelHealth> = {};
  const demand: Record<string, Demand> = {};
  for (const m of Object.values(head.models)) {
    const parked = observed?.models[m.name]?.parked;
    health[m.name] = { ...initialHealth(m.digest), parked: parked && !input.unparks.has(m.name) ? { since: 0, lastError: parked.lastError } : null };
    if (m.scaling.mode !== 'on_demand') continue;
    if (input.changed.has(m.name)) demand[m.name] = { lastRequestAt: now };
    else if (replicas.some((r) => r.model === m.name)) demand[m.name] = { lastRequestAt: now - 1 };
  }
  const nodes = plannerNodes(head, observed, replicas, now);
  const out = pass(head, nodes, health, demand, input.memory, now, input.deviceNeeds);
  const mem = (model: string): number => input.memory[model] ?? 0;

  const allStarts = out.actions.filter((a): a is Extract<Action, { kind: 'start' }> => a.kind === 'start');
  // RPC groups (#40) are placed again by group-plan.ts, with the layers the plan knows, for the split it shows
  const grouped = new Set(allStarts.filter((a) => a.group !== undefined).map((a) => a.model));
  const starts = allStarts.filter((a) => a.group === undefined);
  const stops = out.actions.filter((a): a is Extract<Action, { kind: 'stop' }> => a.kind === 'stop');
  // An eviction's newcomer starts in the pass after its victims are gone (their memory is in use
  // until then): the pass after is simulated too.
  const evicted = new Set(stops.filter((a) => a.reason === 'evicted').map((a) => a.replicaId));
  if (evicted.size > 0) {
    const after = pass(head, nodes.map((n) => ({ ...n, replicas: n.replicas.filter((r) => !evicted.has(r.id)) })), health, demand, input.memory, now);
    const started = new Set(starts.map((a) => a.model));
    starts.push(...after.actions.filter((a): a is Extract<Action, { kind: 'start' }> => a.kind === 'start' && !started.has(a.model)));
  }
  const drained = new Set(out.drainStarted);
  const models: Record<string, ModelOutcome> = {};
  for (const m of Object.values(head.models)) {
    const mine = starts.filter((s) => s.model === m.name).map((s) => s.node);
    const landing = new Set(mine);
    const evicts = m.scaling.mode === 'on_demand' ? stops.filter((s) => s.reason === 'evicted' && landing.has(s.node)).map((s) => ({ model: s.model, node: s.node })) : [];
    models[m.name] = {
      desired: out.desired[m.name] ?? 0,
      before: replicas.filter((r) => r.model === m.name).map((r) => r.node),
      starts: mine,
      evicts,
      stops: stops.filter((s) => s.model === m.name).map((s) => ({ node: s.node, reason: s.reason })),
      drains: nodes.flatMap((n) => n.replicas).filter((r) => r.model === m.name && drained.has(r.id)).length,
      unplaceable: out.unplaceable[m.name]?.reason ?? (grouped.has(m.name) ? 'no node holds it alone' : null),
      parked: health[m.name]!.parked !== null,
    };
  }
  const nodeUsage: NodeUsage[] = nodes.map((n) => {
    const ns = head.nodes[n.name];
    const before = n.replicas.reduce((s, r) => s + mem(r.model), 0);
    const myStarts = starts.filter((s) => s.node === n.name);
    const myStops = stops.filter((s) => s.node === n.name);
    const capacity = ns?.capacity.memoryBytes ?? n.memoryTotalBytes;
    return {
      name: n.name,
      capacityBytes: capacity,
      roomBytes: capacity === null ? null : capacity - head.settings.placementReserveBytes,
      reachable: n.reachable,
      usedBefore: before,
      usedAfter: before + myStarts.reduce((s, a) => s + mem(a.model), 0) - myStops.reduce((s, a) => s + mem(a.model), 0),
      starts: myStarts.map((s) => s.model),
      stops: myStops.map((s) => ({ model: s.model, reason: s.reason })),
    };
  });
  return { usage, models, nodes: nodeUsage };
}
