/**
 * What merging a head revision would do, model by model (pure): added, removed, definition
 * changed (replicas replaced; a parked model unparked), scaling changes, retries requested,
 * engine installs per node, and — from the reconciler's own planner run on the base's usage
 * (simulate.ts) — where each model's replicas go: fits, fits after evicting idle on-demand
 * replicas, or fits nowhere.
 */
import type { DeviceNeed } from '../reconciler/memory.js';
import { SCALE_DEFAULTS, type FleetSpec, type ModelSpec, type ScaleSpec } from '../fleet-spec/types.js';
import { rangeText, scales } from '../scale/range.js';
import { roomForMax } from './scale-room.js';
import { formatDuration } from '../fleet-spec/units.js';
import { scheduleInForce } from '../schedule/schedule.js';
import type { Need } from './needs.js';
import type { ObservedFleet } from './observed.js';
import { rolloutPlan, type RolloutPlan } from './rollout-plan.js';
import { simulateMerge, type ModelOutcome, type NodeUsage, type Simulation } from './simulate.js';
import { planGroups, type PlannedGroup } from './group-plan.js';

export interface PlanRetry {
  readonly model: string;
  readonly commit: string;
}

export type Verdict = 'fits' | 'fits-after-eviction' | 'partly' | 'fits-nowhere' | 'need-unknown' | 'parked' | 'none-wanted' | 'running';

export interface ModelPlan {
  readonly model: string;
  /** The model's file in the head (or the base, when removed). */
  readonly file: string;
  readonly change: 'added' | 'removed' | 'changed' | 'unchanged';
  /** Human sentences, most important first. */
  readonly effects: readonly string[];
  readonly definitionChanged: boolean;
  readonly unparks: boolean;
  readonly retries: readonly string[];
  /** Where the next pass after the merge puts it; null for removed models. */
  readonly placement: {
    readonly verdict: Verdict;
    /** False only for fits-nowhere and partly. */
    readonly fits: boolean;
    /** Nodes new replicas start on. */
    readonly nodes: readonly string[];
    readonly evicts: readonly { readonly model: string; readonly node: string }[];
    readonly text: string;
    /** A spread: rpc model no node holds alone: the RPC groups its replicas run as (#40). */
    readonly groups?: readonly PlannedGroup[];
    /** Lines under the text (each host of a group: its layers, weights, KV and bytes). */
    readonly details?: readonly string[];
  } | null;
  /** Memory per replica as the plan used it; null when unknown. */
  readonly memoryBytes: number | null;
  /** The rollout the definition change runs (checks, canary steps, room for both revisions); null: none. */
  readonly rollout: RolloutPlan | null;
}

export interface EngineInstallPlan {
  readonly engine: string;
  readonly nodes: readonly string[];
}

export interface NodePlan extends NodeUsage {}

export interface PlanReport {
  readonly base: string | null;
  readonly head: string;
  /** What the plan knew of the running fleet: null = nothing (declared capacity, nothing running). */
  readonly status: { readonly source: string; readonly writtenAt: string | null; readonly ageMs: number | null; readonly appliedRevision: string | null; readonly note: string | null } | null;
  /** observed: replicas where the status says; assumed: where the planner would put the base's. */
  readonly usage: Simulation['usage'];
  readonly capacitySource: 'declared' | 'status';
  readonly models: readonly ModelPlan[];
  readonly nodes: readonly NodePlan[];
  readonly engineInstalls: readonly EngineInstallPlan[];
  readonly other: readonly string[];
  readonly changed: boolean;
}

const iso = (t: number): string => new Date(t).toISOString().replace(/:\d\d\.\d{3}Z$/, 'Z');

function scalingText(m: ModelSpec): string {
  const follows = scales(m) ? `; ${followsText(m.scale ?? SCALE_DEFAULTS)}` : '';
  if (m.scaling.mode === 'on_demand') return `on demand (idle ${formatDuration(m.scaling.idleTimeoutMs)}, max ${m.scaling.maxReplicas}${follows})`;
  const n = m.scaling.replicas;
  const max = m.scaling.max ?? n;
  const count = max > n ? `${n}..${max} replicas` : `${n} replica${n === 1 ? '' : 's'}`;
  const sched = m.scaling.schedule;
  if (!sched) return `${count}${follows ? ` (${follows.slice(2)})` : ''}`;
  return `${count} by default; schedule (${sched.timezone}): ${sched.entries.map((e) => `"${e.cron}" → ${rangeText({ min: e.replicas, max: e.max ?? e.replicas })}`).join(', ')}${follows}`;
}

/** "scales at 80 % busy, up after 10s, down after 5m" */
function followsText(s: ScaleSpec): string {
  return `scales at ${Math.round(s.target * 100)} % busy, up after ${formatDuration(s.upAfterMs)}, down after ${formatDuration(s.downAfterMs)}`;
}

/** "schedule: 2 replicas in force now (\"0 8 * * 1-5\" since …); next 0 at …" */
function scheduleText(m: ModelSpec, now: number): string | null {
  if (m.scaling.mode !== 'replicas' || !m.scaling.schedule) return null;
  const s = scheduleInForce(m.scaling, now);
  const entries = m.scaling.schedule.entries;
  const by = s.entry === null ? 'the default; no entry fired in the last year' : `"${entries[s.entry]!.cron}" since ${iso(s.since!)}`;
  const next = s.next && s.nextChangeAt !== null ? `; next: ${s.next.replicas} at ${iso(s.nextChangeAt)} ("${entries[s.next.entry]!.cron}")` : '; no change within a year';
  return `schedule: ${s.replicas} replica${s.replicas === 1 ? '' : 's'} in force now (${by})${next}`;
}

function engineOf(spec: FleetSpec, m: ModelSpec): string {
  const p = spec.profiles[m.profile]!;
  return `${p.engine}@${p.engineVersion}`;
}

const nodesText = (nodes: readonly string[]): string => [...new Set(nodes)].sort().join(', ');

function placementOf(m: ModelSpec, o: ModelOutcome | undefined, need: Need | undefined, drainGraceMs: number, rolling: boolean): NonNullable<ModelPlan['placement']> {
  const none = { nodes: [] as string[], evicts: [] as { model: string; node: string }[] };
  const onDemand = m.scaling.mode === 'on_demand' ? ' when activated' : '';
  if (!o) return { verdict: 'none-wanted', fits: true, ...none, text: 'not placed' };
  if (o.parked) return { verdict: 'parked', fits: true, ...none, text: 'stays parked: not placed until it is unparked' };
  if (o.desired === 0) return { verdict: 'none-wanted', fits: true, ...none, text: o.before.length ? `no replicas wanted now: the ${o.before.length} running stop` : 'no replicas wanted now' };
  if (need && 'error' in need && o.starts.length === 0) return { verdict: 'need-unknown', fits: true, ...none, text: need.error };
  if (o.unplaceable !== null && o.starts.length === 0 && m.memoryBytes === null && !(need && 'bytes' in need)) {
    return { verdict: 'need-unknown', fits: true, ...none, text: `memory need unknown: its GGUF header was not read; set memory: in ${m.file}` };
  }
  if (o.unplaceable !== null && o.starts.length === 0) return { verdict: 'fits-nowhere', fits: false, ...none, text: `fits nowhere${onDemand}: ${o.unplaceable}` };
  if (o.unplaceable !== null) return { verdict: 'partly', fits: false, nodes: o.starts, evicts: o.evicts, text: `${o.starts.length} of ${o.desired} fit${onDemand}, on ${nodesText(o.starts)}; the rest fit nowhere: ${o.unplaceable}` };
  if (o.evicts.length) {
    const victims = o.evicts.map((e) => `${e.model} on ${e.node}`).join(', ');
    return { verdict: 'fits-after-eviction', fits: true, nodes: o.starts, evicts: o.evicts, text: `fits on ${nodesText(o.starts)}${onDemand}, after evicting the idle on-demand replica${o.evicts.length === 1 ? '' : 's'} of ${victims}` };
  }
  // The planner starts what fits and tries the rest on later passes (not while rolling or failing).
  const short = o.desired - o.before.length - o.starts.length;
  if (!rolling && o.starts.length && short > 0) {
    return { verdict: 'partly', fits: false, nodes: o.starts, evicts: o.evicts, text: `${o.starts.length + o.before.length} of ${o.desired} fit${onDemand}, on ${nodesText([...o.before, ...o.starts])}; the other ${short} fit${short === 1 ? 's' : ''} nowhere beside them` };
  }
  const beside = o.before.length ? ` (beside ${o.before.length} running on ${nodesText(o.before)})` : '';
  if (o.starts.length) return { verdict: 'fits', fits: true, nodes: o.starts, evicts: [], text: `fits on ${nodesText(o.starts)}${onDemand}${beside}` };
  if (o.drains) return { verdict: 'running', fits: true, ...none, text: `no room beside the running replica: it drains (drain grace ${formatDuration(drainGraceMs)}), then the new one takes its place` };
  return { verdict: 'running', fits: true, ...none, text: `runs on ${nodesText(o.before)}` };
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function planChanges(input: {
  readonly base: FleetSpec | null;
  /** The base revision, even when its spec was invalid (base null). */
  readonly baseRevision?: string | null;
  readonly head: FleetSpec;
  /** What the controller reported (status branch or --status); null for nothing. */
  readonly observed: ObservedFleet | null;
  /** Set when the status is not for the base revision. */
  readonly statusNote?: string | null;
  /** Memory needs of the head's models (see needs.ts). */
  readonly needs: Readonly<Record<string, Need>>;
  readonly retries: readonly PlanRetry[];
  /** The time the plan is for (schedules, on-demand activity). */
  readonly now: number;
}): PlanReport {
  const { base, head, observed, now } = input;
  const status = observed;
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
    const parked = observed?.models[name]?.parked ?? null;
    const retries = retriesByModel.get(name) ?? [];
    if (!h) {
      models.push({ model: name, file: b?.file ?? `models/${name}.yaml`, change: 'removed', effects: ['removed: its replicas are stopped'], definitionChanged: false, unparks: false, retries: [], placement: null, memoryBytes: null, rollout: null });
      continue;
    }
    const effects: string[] = [];
    let definitionChanged = false;
    if (!b) {
      effects.push(`added: ${scalingText(h)}, profile ${h.profile} (${engineOf(head, h)})`);
      const st = scheduleText(h, now);
      if (st) effects.push(st);
    } else {
      if (b.digest !== h.digest) {
        definitionChanged = true;
        const what: string[] = [];
        if (b.source !== h.source) what.push('source');
        if (b.sha256 !== h.sha256) what.push('sha256');
        if (b.profile !== h.profile) what.push(`profile ${b.profile} → ${h.profile}`);
        if (engineOf(base!, b) !== engineOf(head, h)) what.push(`engine ${engineOf(base!, b)} → ${engineOf(head, h)}`);
        if ((b.placement?.spread ?? 'none') !== (h.placement?.spread ?? 'none')) what.push(`placement spread ${b.placement?.spread ?? 'none'} → ${h.placement?.spread ?? 'none'}`);
        if (what.length === 0) what.push(`profile ${h.profile} settings`);
        effects.push(`definition changed (${what.join(', ')}): replicas are replaced one at a time`);
      }
      if (!sameJson(b.scaling, h.scaling)) effects.push(`scaling: ${scalingText(b)} → ${scalingText(h)}`);
      if (!sameJson(b.scaling, h.scaling)) {
        const st = scheduleText(h, now);
        if (st) effects.push(st);
      }
      if (!sameJson(b.aliases, h.aliases)) effects.push(`aliases: [${b.aliases.join(', ')}] → [${h.aliases.join(', ')}]`);
      if (!sameJson(b.nodeSelector, h.nodeSelector)) effects.push('node selector changed: replicas may move');
      if (b.memoryBytes !== h.memoryBytes) effects.push('memory override changed: placement is redone');
      if (h.placement?.spread === 'rpc' && b.placement?.spread === 'rpc' && b.placement.maxHosts !== h.placement.maxHosts) effects.push(`placement max_hosts: ${b.placement.maxHosts} → ${h.placement.maxHosts} (a bound on a group's hosts: nothing running is replaced)`);
      if (b.maxConcurrency !== h.maxConcurrency) effects.push(`max_concurrency: ${b.maxConcurrency ?? 'none'} → ${h.maxConcurrency ?? 'none'}`);
      if (b.routing !== h.routing) effects.push(`routing: ${b.routing} → ${h.routing}`);
      if (!sameJson(b.queue, h.queue)) effects.push(`queue: max ${b.queue.max}, timeout ${b.queue.timeoutMs / 1000}s → max ${h.queue.max}, timeout ${h.queue.timeoutMs / 1000}s`);
      if (!definitionChanged && !sameJson(b.rollout, h.rollout)) {
        effects.push(h.rollout ? 'rollout changed: it applies from the next definition change; nothing rolls out now' : 'rollout removed: the next definition change rolls out as a plain surge; nothing rolls out now');
      }
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
    models.push({ model: name, file: h.file, change, effects, definitionChanged, unparks, retries, placement: null, memoryBytes: null, rollout: null });
  }

  // Where the replicas go: the planner on the base's usage.
  const memory: Record<string, number | null> = {};
  for (const m of Object.values(base?.models ?? {})) memory[m.name] = m.memoryBytes ?? observed?.models[m.name]?.memoryBytes ?? null;
  for (const m of Object.values(head.models)) {
    const n = input.needs[m.name];
    memory[m.name] = m.memoryBytes ?? (n && 'bytes' in n ? n.bytes : null) ?? observed?.models[m.name]?.memoryBytes ?? null;
  }
  const deviceNeeds: Record<string, DeviceNeed> = {};
  for (const [name, n] of Object.entries(input.needs)) if (n && 'bytes' in n && n.device) deviceNeeds[name] = n.device;
  const sim = simulateMerge({
    base,
    head,
    observed,
    memory,
    deviceNeeds,
    unparks: new Set(models.filter((m) => m.unparks).map((m) => m.model)),
    changed: new Set(models.filter((m) => m.change === 'added' || m.change === 'changed').map((m) => m.model)),
    now,
  });
  const nodes = [...sim.nodes]; // with the memory of RPC groups added
  const groupHosts = new Map<string, string[]>();
  for (const [i, mp] of models.entries()) {
    const h = head.models[mp.model];
    if (!h) continue;
    // Nothing runs: nothing is replaced.
    const replaced = (sim.models[mp.model]?.before.length ?? 0) > 0 ? mp.effects : mp.effects.map((e) => e.replace(/^(definition changed \(.*\)): replicas are replaced one at a time$/, '$1'));
    // the rollout's sentences right after the definition change's
    const rollout = mp.definitionChanged && mp.change === 'changed' ? rolloutPlan(h, sim.models[mp.model]) : null;
    const at = replaced.findIndex((e) => e.startsWith('definition changed')) + 1;
    const withRollout = rollout ? [...replaced.slice(0, at), ...rollout.effects, ...replaced.slice(at)] : replaced;
    const room = mp.change === 'unchanged' ? null : roomForMax(h, head, sim, memory[mp.model] ?? null); // scaling (#42)
    const effects = room ? [...withRollout, room] : withRollout;
    models[i] = { ...mp, effects, rollout: rollout?.plan ?? null, placement: placementOf(h, sim.models[mp.model], input.needs[mp.model], head.settings.drainGraceMs, mp.definitionChanged && (sim.models[mp.model]?.before.length ?? 0) > 0), memoryBytes: memory[mp.model] ?? null };
    const g = models[i]!.placement?.verdict === 'fits-nowhere' ? planGroups(head, h, sim.models[mp.model], input.needs[mp.model], nodes) : null;
    if (g) {
      const hosts = g.groups.flatMap((x) => x.hosts.map((y) => y.node));
      groupHosts.set(mp.model, hosts);
      const verdict = g.groups.length === 0 ? 'fits-nowhere' : g.unplaceable ? 'partly' : 'fits';
      models[i] = { ...models[i]!, placement: { verdict, fits: g.unplaceable === null, nodes: hosts, evicts: [], text: g.text, groups: g.groups, details: g.details } };
    }
  }
  for (const r of input.retries) {
    if (!head.modelNames[r.model]) other.push(`retry trailer in ${r.commit.slice(0, 12)} names "${r.model}", which is not a model: ignored`);
  }

  // engines to install: a node a replica starts on after the merge that the status does not
  // report having the engine (without a status: that runs none of the base's replicas on it).
  const present = new Set<string>();
  for (const [node, ns] of Object.entries(observed?.nodes ?? {})) for (const e of ns.engines) present.add(`${node}|${e}`);
  if (base && !observed) {
    for (const [name, o] of Object.entries(sim.models)) {
      const bm = base.models[name];
      if (bm) for (const n of o.before) present.add(`${n}|${engineOf(base, bm)}`);
    }
  }
  const installs = new Map<string, Set<string>>();
  for (const m of Object.values(head.models)) {
    const engine = engineOf(head, m);
    for (const n of [...(sim.models[m.name]?.starts ?? []), ...(groupHosts.get(m.name) ?? [])]) {
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
  const statusInfo = observed
    ? {
        source: observed.source,
        writtenAt: observed.writtenAt === null ? null : new Date(observed.writtenAt).toISOString(),
        ageMs: observed.writtenAt === null ? null : Math.max(0, now - observed.writtenAt),
        appliedRevision: observed.appliedRevision,
        note: input.statusNote ?? null,
      }
    : null;
  return {
    base: input.baseRevision ?? base?.revision ?? null,
    head: head.revision ?? '',
    status: statusInfo,
    usage: sim.usage,
    capacitySource: status ? 'status' : 'declared',
    models,
    nodes,
    engineInstalls,
    other,
    changed,
  };
}

function diffNames(kind: string, before: readonly string[], after: readonly string[], out: string[]): void {
  const b = new Set(before);
  const a = new Set(after);
  for (const n of [...a].sort()) if (!b.has(n)) out.push(`${kind} ${n} added`);
  for (const n of [...b].sort()) if (!a.has(n)) out.push(`${kind} ${n} removed`);
}
