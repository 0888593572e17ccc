/**
 * The fleet snapshot as the leader publishes it in etcd for the standbys (pure): what routing and
 * `ctl status` need — models with their phases, reasons and replicas (endpoints included), and nodes
 * — without what moves on every pass (times of the pass, sync and status write, nodes' free memory
 * and disk), so an unchanged fleet publishes nothing. A model's spec is not published: a standby
 * reads the same fleet repo and attaches its own.
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import type { ControlView, DemandResult, FleetSnapshot, ModelView, NodeView, ReplicaView } from '../reconciler/view.js';
import { keyPart, nameOfPart, type Entries } from './keyed-layout.js';

type PublishedModel = Omit<ModelView, 'spec'>;
type PublishedNode = Omit<NodeView, 'memory' | 'diskFreeBytes'>;

export interface PublishedSnapshot {
  readonly v: 1;
  readonly appliedRevision: string | null;
  readonly specValid: boolean;
  readonly rejected: FleetSnapshot['rejected'];
  readonly lastSyncError: FleetSnapshot['lastSyncError'];
  readonly stateError: FleetSnapshot['stateError'];
  readonly models: readonly PublishedModel[];
  readonly nodes: readonly PublishedNode[];
}

/** Each model view as published, by the view: an unchanged model keeps its view (summarize.ts keptView), and so its published object. */
const publishedModels = new WeakMap<ModelView, PublishedModel>();
function publishedModel(v: ModelView): PublishedModel {
  let p = publishedModels.get(v);
  if (p === undefined) {
    const { spec: _spec, ...m } = v;
    publishedModels.set(v, (p = m));
  }
  return p;
}

/** The JSON of each published model, by its object (above): an unchanged model is not serialized again. */
const modelTexts = new WeakMap<PublishedModel, string>();
function modelText(m: PublishedModel): string {
  let t = modelTexts.get(m);
  if (t === undefined) modelTexts.set(m, (t = JSON.stringify(m)));
  return t;
}

export function publishedOf(s: FleetSnapshot): PublishedSnapshot {
  return {
    v: 1,
    appliedRevision: s.appliedRevision,
    specValid: s.specValid,
    rejected: s.rejected,
    lastSyncError: s.lastSyncError,
    stateError: s.stateError,
    models: s.models.map(publishedModel),
    nodes: s.nodes.map(({ memory: _m, diskFreeBytes: _d, ...n }) => (n.devices ? { ...n, devices: n.devices.map((d) => ({ ...d, freeBytes: null })) } : n)),
  };
}

/** The published value as stored: one JSON string (equal strings = nothing to write). */
export function publishedJson(s: FleetSnapshot): string {
  return JSON.stringify(publishedOf(s));
}

export function parsePublished(json: string | object): PublishedSnapshot | null {
  try {
    const v = (typeof json === 'string' ? JSON.parse(json) : json) as Partial<PublishedSnapshot> | null;
    return v && v.v === 1 && Array.isArray(v.models) && Array.isArray(v.nodes) ? (v as PublishedSnapshot) : null;
  } catch {
    return null;
  }
}

/**
 * The published snapshot as entries for the per-entry layout in etcd (keyed-layout.ts): `fleet`
 * (what is not per model or node), `models/<name>` and `nodes/<name>`, each JSON. A pass that
 * changes one model's phase or replicas changes one entry.
 */
export function publishedEntries(p: PublishedSnapshot): Map<string, string> {
  const { models, nodes, ...fleet } = p;
  const out = new Map<string, string>();
  out.set('fleet', JSON.stringify(fleet));
  for (const m of models) out.set(`models/${keyPart(m.name)}`, modelText(m));
  for (const n of nodes) out.set(`nodes/${keyPart(n.name)}`, JSON.stringify(n));
  return out;
}

/** Parsed entries, cached by their text: a standby re-parses only the entries that changed. */
export type EntryCache = Map<string, { readonly text: string; readonly value: unknown }>;

function cachedParse(cache: EntryCache, key: string, text: string): unknown {
  const hit = cache.get(key);
  if (hit?.text === text) return hit.value;
  let value: unknown = null;
  try {
    value = JSON.parse(text);
  } catch {
    value = null;
  }
  cache.set(key, { text, value });
  return value;
}

const named = (v: unknown, name: string): boolean => typeof v === 'object' && v !== null && !Array.isArray(v) && (v as { name?: unknown }).name === name;

/**
 * The snapshot from its entries, held to parsePublished's checks; entries that are not JSON objects
 * named as their key are left out and named in `bad`. Models and nodes in name order, as the leader
 * summarizes them. Null when there is no fleet entry of this format.
 */
export function publishedFromEntries(entries: Entries, cache: EntryCache = new Map()): { readonly snapshot: PublishedSnapshot | null; readonly bad: readonly string[] } {
  const fleetText = entries.get('fleet');
  const fleet = fleetText === undefined ? null : cachedParse(cache, 'fleet', fleetText);
  const bad: string[] = [];
  const pick = (prefix: string): unknown[] => {
    const out: Array<{ name: string }> = [];
    for (const [k, text] of entries) {
      if (!k.startsWith(prefix)) continue;
      const v = cachedParse(cache, k, text);
      if (named(v, nameOfPart(k.slice(prefix.length)))) out.push(v as { name: string });
      else bad.push(k);
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  };
  for (const k of cache.keys()) if (!entries.has(k)) cache.delete(k);
  if (typeof fleet !== 'object' || fleet === null || Array.isArray(fleet)) return { snapshot: null, bad: fleetText === undefined ? bad : ['fleet', ...bad] };
  const snapshot = parsePublished({ ...(fleet as object), models: pick('models/'), nodes: pick('nodes/') });
  return { snapshot, bad };
}

/**
 * Why a published replica's endpoint is not one the fleet's spec allows, or null. Whoever can write
 * the etcd prefix could otherwise point routers (and the engine key they send) anywhere: an
 * endpoint is used only when it is http://<its node's host>:<a port in that node's ports range>
 * (a local node's replicas listen on 127.0.0.1).
 */
export function endpointProblem(r: Pick<ReplicaView, 'node' | 'endpoint'>, spec: FleetSpec): string | null {
  const node = Object.hasOwn(spec.nodes, r.node) ? spec.nodes[r.node] : undefined;
  if (!node) return `names node ${JSON.stringify(r.node)}, which the spec does not hold`;
  let u: URL;
  try {
    u = new URL(r.endpoint);
  } catch {
    return 'is not a URL';
  }
  const hosts = new Set([node.host.toLowerCase(), node.host.includes(':') ? `[${node.host.toLowerCase()}]` : '', node.transport === 'local' ? '127.0.0.1' : ''].filter(Boolean));
  if (u.protocol !== 'http:' || u.username !== '' || u.password !== '' || (u.pathname !== '/' && u.pathname !== '') || u.search !== '' || u.hash !== '') return 'is not http://host:port';
  if (!hosts.has(u.hostname.toLowerCase())) return `is not on node ${node.name}'s host`;
  const port = Number(u.port);
  if (!Number.isInteger(port) || u.port === '' || port < node.ports.from || port > node.ports.to) return `is outside node ${node.name}'s ports ${node.ports.from}-${node.ports.to}`;
  return null;
}

/**
 * Why a published replica may not be shown, or null: one that is not ready and has no endpoint yet
 * (starting) names nothing to route to and is shown as it is; any other is held to endpointProblem.
 */
export function replicaProblem(r: Pick<ReplicaView, 'node' | 'endpoint' | 'phase'>, spec: FleetSpec): string | null {
  return r.endpoint === '' && r.phase !== 'ready' ? null : endpointProblem(r, spec);
}

/**
 * The leader's answer to a standby's forwarded demand, held to the same rule as the published
 * snapshot: only replicas whose endpoints the spec allows (a forged `responses/` entry names no
 * listener of its own); none left is 'starting' (the router then waits on the filtered snapshot).
 */
export function allowedDemand(r: DemandResult, spec: FleetSpec | null): DemandResult {
  if (r.kind !== 'ready') return r;
  const replicas = spec ? r.replicas.filter((x) => endpointProblem(x, spec) === null) : [];
  return replicas.length > 0 ? { kind: 'ready', replicas } : { kind: 'starting' };
}

/** The published replicas whose endpoints the spec does not allow, with why (for the standby's log). */
export function refusedEndpoints(p: PublishedSnapshot | null, spec: FleetSpec | null): Array<{ model: string; replica: string; endpoint: string; why: string }> {
  if (!p || !spec) return [];
  const out: Array<{ model: string; replica: string; endpoint: string; why: string }> = [];
  for (const m of p.models) {
    for (const r of Array.isArray(m.replicas) ? m.replicas : []) {
      const why = replicaProblem(r, spec);
      if (why) out.push({ model: m.name, replica: String(r.id), endpoint: String(r.endpoint), why });
    }
  }
  return out;
}

/**
 * A standby's snapshot: the leader's published one with this instance's spec attached (a model the
 * standby's spec does not hold yet is left out until its fleet repo catches up), and only the
 * replicas whose endpoints the spec allows (replicaProblem: a starting one without an endpoint is kept).
 */
export function standbySnapshot(p: PublishedSnapshot | null, spec: FleetSpec | null, control: ControlView, now: number): FleetSnapshot {
  const models: ModelView[] = [];
  for (const m of p?.models ?? []) {
    const ms = spec?.models[m.name];
    if (ms && spec) {
      const replicas = (Array.isArray(m.replicas) ? m.replicas : []).filter((r) => replicaProblem(r, spec) === null);
      models.push({ ...m, replicas, ready: Math.min(m.ready, replicas.filter((r) => r.phase === 'ready').length), spec: ms });
    }
  }
  return {
    at: now,
    leader: false,
    control,
    appliedRevision: p?.appliedRevision ?? null,
    specValid: p?.specValid ?? true,
    rejected: p?.rejected ?? null,
    lastSyncOk: null,
    lastSyncError: p?.lastSyncError ?? null,
    lastStatusWriteOk: null,
    stateError: p?.stateError ?? null,
    models,
    nodes: (p?.nodes ?? []).map((n) => ({ ...n, memory: null, diskFreeBytes: null })),
    lastPass: null,
  };
}
