/**
 * The state record as entries (pure), for the per-entry layout in etcd (keyed-layout.ts):
 * - `fleet`: the version and the applied revision;
 * - `retries`: the handled retry ids (bounded: MAX_HANDLED_RETRIES);
 * - `models/<name>`: what the record holds of one model: its health, last demand, the starts and
 *   stops of its replicas, and the nodes it avoids;
 * - `replicas/<id>`: what it holds of one replica by id (restart asked, draining, ready or
 *   unresponsive since, failure accounted).
 * So a pass that changes one model writes one or two entries. Each entry is canonical JSON (a
 * record equal in content gives equal entries, whatever its key order).
 */
import type { ModelHealth } from '../reconciler/health.js';
import { stateFromJson, STATE_VERSION, type ControllerState, type StartRecord, type StopRecord } from '../reconciler/state.js';
import { canonicalJson } from './canonical-json.js';
import { group, keyPart, type Entries } from './keyed-layout.js';

interface ModelEntry {
  health?: ModelHealth;
  demand?: number;
  starts?: Record<string, StartRecord>;
  stops?: Record<string, StopRecord>;
  avoid?: Record<string, number>;
}

const REPLICA_MAPS = ['restarts', 'draining', 'readySince', 'unresponsiveSince', 'accounted'] as const;
type ReplicaEntry = Partial<Record<(typeof REPLICA_MAPS)[number], number>>;

/** The model an avoid key (`model@node`) is about. */
function avoidModel(key: string): string {
  const at = key.lastIndexOf('@');
  return at > 0 ? key.slice(0, at) : key;
}

export function stateEntries(s: ControllerState): Map<string, string> {
  const models = new Map<string, ModelEntry>();
  const m = (name: string): ModelEntry => {
    let e = models.get(name);
    if (!e) models.set(name, (e = {}));
    return e;
  };
  for (const [name, h] of Object.entries(s.models)) m(name).health = h;
  for (const [name, t] of Object.entries(s.demand)) m(name).demand = t;
  for (const [id, r] of Object.entries(s.starts)) (m(r.model).starts ??= {})[id] = r;
  for (const [id, r] of Object.entries(s.stops)) (m(r.model).stops ??= {})[id] = r;
  for (const [key, until] of Object.entries(s.avoid)) (m(avoidModel(key)).avoid ??= {})[key] = until;
  const replicas = new Map<string, ReplicaEntry>();
  for (const map of REPLICA_MAPS) {
    for (const [id, v] of Object.entries(s[map])) {
      let e = replicas.get(id);
      if (!e) replicas.set(id, (e = {}));
      e[map] = v;
    }
  }
  const out = new Map<string, string>();
  out.set('fleet', canonicalJson({ version: s.version, appliedRevision: s.appliedRevision }));
  out.set('retries', JSON.stringify(s.handledRetries));
  for (const [name, e] of models) out.set(`models/${keyPart(name)}`, canonicalJson(e));
  for (const [id, e] of replicas) out.set(`replicas/${keyPart(id)}`, canonicalJson(e));
  return out;
}

function parsed(what: string, text: string): Record<string, unknown> {
  const v = JSON.parse(text) as unknown;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error(`${what} is not an object`);
  return v as Record<string, unknown>;
}

/** The record from its entries, checked as the state file is (stateFromJson). Throws saying which entry is wrong. */
export function stateFromEntries(entries: Entries): ControllerState {
  const fleetText = entries.get('fleet');
  if (fleetText === undefined) throw new Error('no fleet entry');
  const fleet = parsed('the fleet entry', fleetText);
  const retries = JSON.parse(entries.get('retries') ?? '[]') as unknown;
  const rec: Record<string, Record<string, unknown>> = { models: {}, demand: {}, starts: {}, stops: {}, avoid: {}, ...Object.fromEntries(REPLICA_MAPS.map((k) => [k, {}])) };
  for (const [name, text] of group(entries, 'models/')) {
    const e = parsed(`the entry of model ${name}`, text) as ModelEntry;
    if (e.health !== undefined) rec.models![name] = e.health;
    if (e.demand !== undefined) rec.demand![name] = e.demand;
    Object.assign(rec.starts!, e.starts ?? {});
    Object.assign(rec.stops!, e.stops ?? {});
    Object.assign(rec.avoid!, e.avoid ?? {});
  }
  for (const [id, text] of group(entries, 'replicas/')) {
    const e = parsed(`the entry of replica ${id}`, text) as ReplicaEntry;
    for (const map of REPLICA_MAPS) if (e[map] !== undefined) rec[map]![id] = e[map];
  }
  return stateFromJson({ version: fleet.version ?? STATE_VERSION, appliedRevision: fleet.appliedRevision ?? null, handledRetries: retries, ...rec });
}
