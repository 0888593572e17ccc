/**
 * What merging a head revision would do, model by model (pure): added, removed, definition
 * changed (replicas replaced; a parked model unparked), scaling changes, retries requested,
 * engine installs per node, and a placement simulation of the head against node capacity.
 */
import { place, type PlacementNode, type PlacementResult } from '../reconciler/placement.js';
import type { PlanStatus } from './status.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { formatDuration } from '../fleet-spec/units.js';

export interface PlanRetry {
  readonly model: string;
  readonly commit: string;
}

export interface ModelPlan {
  readonly model: string;
  readonly change: 'added' | 'removed' | 'changed' | 'unchanged';
  /** Human sentences, most important first. */
  readonly effects: readonly string[];
  readonly definitionChanged: boolean;
  readonly unparks: boolean;
  readonly retries: readonly string[];
  /** "fits on a, b", "fits nowhere: …", or null for removed models. */
  readonly placement: { readonly fits: boolean; readonly nodes: readonly string[]; readonly text: string } | null;
}

export interface EngineInstallPlan {
  readonly engine: string;
  readonly nodes: readonly string[];
}

export interface PlanReport {
  readonly base: string | null;
  readonly head: string;
  readonly capacitySource: 'declared' | 'status';
  readonly models: readonly ModelPlan[];
  readonly engineInstalls: readonly EngineInstallPlan[];
  readonly other: readonly string[];
  readonly changed: boolean;
}

function scalingText(m: ModelSpec): string {
  return m.scaling.mode === 'replicas'
    ? `${m.scaling.replicas} replica${m.scaling.replicas === 1 ? '' : 's'}`
    : `on demand (idle ${formatDuration(m.scaling.idleTimeoutMs)}, max ${m.scaling.maxReplicas})`;
}

function engineOf(spec: FleetSpec, m: ModelSpec): string {
  const p = spec.profiles[m.profile]!;
  return `${p.engine}@${p.engineVersion}`;
}

function memoryOf(spec: FleetSpec, m: ModelSpec, status: PlanStatus | null): number | null {
  return m.memoryBytes ?? status?.models[m.name]?.memoryBytes ?? null;
}

function nodesFor(spec: FleetSpec, status: PlanStatus | null): PlacementNode[] {
  return Object.values(spec.nodes).map((n) => {
    const observed = status?.nodes[n.name];
    const capacity = n.capacity.memoryBytes ?? observed?.memory?.totalBytes ?? null;
    return { name: n.name, labels: n.labels, capacityBytes: capacity, usedBytes: 0, reachable: observed ? observed.reachable || n.capacity.memoryBytes !== null : true };
  });
}

/** Simulates placing every model of a spec from scratch (on-demand models as one replica each). */
export function simulate(spec: FleetSpec, status: PlanStatus | null): Map<string, PlacementResult> {
  const models = Object.values(spec.models);
  const results = place({
    nodes: nodesFor(spec, status),
    reserveBytes: spec.settings.placementReserveBytes,
    requests: models.map((m) => ({
      model: m.name,
      count: m.scaling.mode === 'replicas' ? m.scaling.replicas : 1,
      memoryBytes: memoryOf(spec, m, status),
      nodeSelector: m.nodeSelector,
      existingOn: [],
    })),
  });
  return new Map(results.map((r) => [r.model, r]));
}

function placementText(m: ModelSpec, r: PlacementResult | undefined): ModelPlan['placement'] {
  if (!r) return null;
  const wanted = m.scaling.mode === 'replicas' ? m.scaling.replicas : 1;
  if (wanted === 0) return { fits: true, nodes: [], text: 'no replicas wanted' };
  const onDemand = m.scaling.mode === 'on_demand' ? ' when activated' : '';
  if (r.unplaceable) {
    const partial = r.nodes.length ? ` (${r.nodes.length} of ${wanted} fit on ${[...new Set(r.nodes)].join(', ')})` : '';
    return { fits: false, nodes: r.nodes, text: `fits nowhere${onDemand}: ${r.unplaceable.reason}${partial}` };
  }
  return { fits: true, nodes: r.nodes, text: `fits on ${[...new Set(r.nodes)].join(', ')}${onDemand}` };
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function planChanges(input: {
  readonly base: FleetSpec | null;
  /** The base revision, even when its spec was invalid (base null). */
  readonly baseRevision?: string | null;
  readonly head: FleetSpec;
  readonly status: PlanStatus | null;
  readonly retries: readonly PlanRetry[];
}): PlanReport {
  const { base, head, status } = input;
  const headPlacement = simulate(head, status);
  const names = [...new Set([...Object.keys(base?.models ?? {}), ...Object.keys(head.models)])].sort();
  const retriesByModel = new Map<string, string[]>();
  for (const r of input.retries) {
    const model = head.modelNames[r.model] ?? r.model;
    retriesByModel.set(model, [...(retriesByModel.get(model) ?? []), r.commit]);
  }
  const other: string[] = [];
  const models: ModelPlan[] = [];
  for (const name of names) {
    const b = base?.models[name];
    const h = head.models[name];
    const parked = status?.models[name]?.parked ?? null;
    const retries = retriesByModel.get(name) ?? [];
    if (!h) {
      models.push({ model: name, change: 'removed', effects: ['removed: its replicas are stopped'], definitionChanged: false, unparks: false, retries: [], placement: null });
      continue;
    }
    const effects: string[] = [];
    let definitionChanged = false;
    if (!b) {
      effects.push(`added: ${scalingText(h)}, profile ${h.profile} (${engineOf(head, h)})`);
    } else {
      if (b.digest !== h.digest) {
        definitionChanged = true;
        const what: string[] = [];
        if (b.source !== h.source) what.push('source');
        if (b.sha256 !== h.sha256) what.push('sha256');
        if (b.profile !== h.profile) what.push(`profile ${b.profile} → ${h.profile}`);
        if (engineOf(base!, b) !== engineOf(head, h)) what.push(`engine ${engineOf(base!, b)} → ${engineOf(head, h)}`);
        if (what.length === 0) what.push(`profile ${h.profile} settings`);
        effects.push(`definition changed (${what.join(', ')}): replicas are replaced one at a time`);
      }
      if (!sameJson(b.scaling, h.scaling)) effects.push(`scaling: ${scalingText(b)} → ${scalingText(h)}`);
      if (!sameJson(b.aliases, h.aliases)) effects.push(`aliases: [${b.aliases.join(', ')}] → [${h.aliases.join(', ')}]`);
      if (!sameJson(b.nodeSelector, h.nodeSelector)) effects.push('node selector changed: replicas may move');
      if (b.memoryBytes !== h.memoryBytes) effects.push('memory override changed: placement is redone');
      if (b.maxConcurrency !== h.maxConcurrency) effects.push(`max_concurrency: ${b.maxConcurrency ?? 'none'} → ${h.maxConcurrency ?? 'none'}`);
      if (b.token !== h.token) effects.push(`download token: ${b.token ?? 'none'} → ${h.token ?? 'none'} (the next download uses it; running replicas stay)`);
    }
    let unparks = false;
    if (parked && definitionChanged) {
      unparks = true;
      effects.push(`unparks the model (parked since ${parked.since}: ${parked.lastError.message})`);
    }
    if (retries.length) {
      const short = retries.map((c) => c.slice(0, 12)).join(', ');
      if (parked && !unparks) {
        unparks = true;
        effects.push(`retry requested (${short}): unparks the model (parked since ${parked.since}: ${parked.lastError.message})`);
      } else if (!parked && status) effects.push(`retry requested (${short}): clears the model's backoff (it is not parked)`);
      else if (!parked) effects.push(`retry requested (${short}): unparks the model if it is parked, else clears its backoff`);
      else effects.push(`retry requested (${short})`);
    }
    if (parked && !unparks && b && b.token !== h.token) {
      effects.push(`still parked: a new download token does not unpark; add the trailer "Llmgw-Retry: ${name}" to this commit, or run \`llmgw ctl retry ${name}\``);
    }
    const change = !b ? 'added' : effects.length ? 'changed' : 'unchanged';
    models.push({ model: name, change, effects, definitionChanged, unparks, retries, placement: placementText(h, headPlacement.get(name)) });
  }
  for (const r of input.retries) {
    if (!head.modelNames[r.model]) other.push(`retry trailer in ${r.commit.slice(0, 12)} names "${r.model}", which is not a model: ignored`);
  }

  // engines to install: head's placement needs engine@version on a node that neither the status
  // reports installed nor base's placement already put there.
  const basePlacement = base ? simulate(base, status) : new Map<string, PlacementResult>();
  const present = new Set<string>();
  for (const [node, ns] of Object.entries(status?.nodes ?? {})) for (const e of ns.engines) present.add(`${node}|${e}`);
  if (base && !status) {
    for (const m of Object.values(base.models)) for (const n of basePlacement.get(m.name)?.nodes ?? []) present.add(`${n}|${engineOf(base, m)}`);
  }
  const installs = new Map<string, Set<string>>();
  for (const m of Object.values(head.models)) {
    const engine = engineOf(head, m);
    for (const n of headPlacement.get(m.name)?.nodes ?? []) {
      if (present.has(`${n}|${engine}`)) continue;
      installs.set(engine, (installs.get(engine) ?? new Set()).add(n));
    }
  }
  const engineInstalls = [...installs.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([engine, nodes]) => ({ engine, nodes: [...nodes].sort() }));

  if (base) {
    diffNames('node', Object.keys(base.nodes), Object.keys(head.nodes), other);
    for (const n of Object.keys(head.nodes)) {
      if (base.nodes[n] && !sameJson({ ...base.nodes[n], file: '' }, { ...head.nodes[n], file: '' })) other.push(`node ${n} changed`);
    }
    diffNames('engine', Object.keys(base.engines), Object.keys(head.engines), other);
    for (const [e, spec] of Object.entries(head.engines)) {
      const before = base.engines[e];
      if (!before) continue;
      for (const v of Object.keys(spec.versions)) {
        if (!before.versions[v]) other.push(`engine ${e}: version ${v} added`);
        else if (!sameJson(before.versions[v], spec.versions[v])) other.push(`engine ${e}: version ${v} changed`);
      }
      for (const v of Object.keys(before.versions)) if (!spec.versions[v]) other.push(`engine ${e}: version ${v} removed`);
    }
    diffNames('profile', Object.keys(base.profiles), Object.keys(head.profiles), other);
    if (!sameJson(base.settings, head.settings)) other.push('fleet.yaml settings changed');
    if (!sameJson(base.access.keys, head.access.keys)) {
      const bk = new Map(base.access.keys.map((k) => [k.name, k]));
      const hk = new Map(head.access.keys.map((k) => [k.name, k]));
      for (const k of hk.keys()) if (!bk.has(k)) other.push(`router key ${k} added`);
      for (const k of bk.keys()) if (!hk.has(k)) other.push(`router key ${k} removed`);
      for (const [k, v] of hk) if (bk.has(k) && !sameJson(bk.get(k), v)) other.push(`router key ${k} changed`);
    }
  }
  const changed = models.some((m) => m.change !== 'unchanged') || engineInstalls.length > 0 || other.length > 0;
  return { base: input.baseRevision ?? base?.revision ?? null, head: head.revision ?? '', capacitySource: status ? 'status' : 'declared', models, engineInstalls, other, changed };
}

function diffNames(kind: string, before: readonly string[], after: readonly string[], out: string[]): void {
  const b = new Set(before);
  const a = new Set(after);
  for (const n of [...a].sort()) if (!b.has(n)) out.push(`${kind} ${n} added`);
  for (const n of [...b].sort()) if (!a.has(n)) out.push(`${kind} ${n} removed`);
}
