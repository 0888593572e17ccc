/**
 * The state record as entries (pure), for the per-entry layout in etcd (keyed-layout.ts):
 * - `fleet`: the version, the applied revision and how many retry ids were trimmed;
 * - `retries/<chunk>`: the handled retry ids, RETRY_CHUNK a key, keyed by their absolute position
 *   (retriesTrimmed + index): a retry rewrites the last chunk, a trim deletes the first. (Before,
 *   one `retries` key held all of them: up to ~160 KiB. It is still read, and deleted on the next save);
 * - `models/<name>`: what the record holds of one model: its health, last demand, the starts and
 *   stops of its replicas, and the nodes it avoids;
 * - `replicas/<id>`: what it holds of one replica by id (restart asked, draining, ready or
 *   unresponsive since, failure accounted).
 * So a pass that changes one model writes one or two entries. Each entry is canonical JSON (a
 * record equal in content gives equal entries, whatever its key order).
 */
import type { ModelHealth } from '../reconciler/health.js';
import { RETRY_CHUNK, stateFromJson, STATE_VERSION, type ControllerState, type StartRecord, type StopRecord } from '../reconciler/state.js';
import { canonicalJson } from './canonical-json.js';
import { group, keyPart, type Entries } from './keyed-layout.js';

interface ModelEntry {
  health?: ModelHealth;
  demand?: number;
  starts?: Record<string, StartRecord>;
  stops?: Record<string, StopRecord>;
  avoid?: Record<string, number>;
}

/** In key order: an entry's text is built in it (the canonical JSON of the entry). */
const REPLICA_MAPS = ['accounted', 'draining', 'readySince', 'restarts', 'unresponsiveSince'] as const;

/**
 * Canonical JSON of a model's health, by object: the record's transitions are immutable, so a model
 * whose health did not change keeps its object and its text is not computed again each pass.
 */
const healthText = new WeakMap<ModelHealth, string>();
function healthJson(h: ModelHealth): string {
  let t = healthText.get(h);
  if (t === undefined) healthText.set(h, (t = canonicalJson(h)));
  return t;
}

/** canonicalJson(e), built from its parts in key order (avoid, demand, health, starts, stops). */
function modelEntryJson(e: ModelEntry): string {
  const parts: string[] = [];
  if (e.avoid !== undefined) parts.push(`"avoid":${canonicalJson(e.avoid)}`);
  if (e.demand !== undefined) parts.push(`"demand":${JSON.stringify(e.demand)}`);
  if (e.health !== undefined) parts.push(`"health":${healthJson(e.health)}`);
  if (e.starts !== undefined) parts.push(`"starts":${canonicalJson(e.starts)}`);
  if (e.stops !== undefined) parts.push(`"stops":${canonicalJson(e.stops)}`);
  return `{${parts.join(',')}}`;
}
type ReplicaEntry = Partial<Record<(typeof REPLICA_MAPS)[number], number>>;

/** The model an avoid key (`model@node`) is about. */
function avoidModel(key: string): string {
  const at = key.lastIndexOf('@');
  return at > 0 ? key.slice(0, at) : key;
}

/** One model's part of the record while it is gathered (fixed fields: one object shape). */
class Gathered implements ModelEntry {
  health?: ModelHealth = undefined;
  demand?: number = undefined;
  starts?: Record<string, StartRecord> = undefined;
  stops?: Record<string, StopRecord> = undefined;
  avoid?: Record<string, number> = undefined;
}

export function stateEntries(s: ControllerState): Map<string, string> {
  const models = new Map<string, Gathered>();
  const m = (name: string): Gathered => {
    let e = models.get(name);
    if (!e) models.set(name, (e = new Gathered()));
    return e;
  };
  for (const name in s.models) m(name).health = s.models[name];
  for (const name in s.demand) m(name).demand = s.demand[name];
  for (const [id, r] of Object.entries(s.starts)) (m(r.model).starts ??= {})[id] = r;
  for (const [id, r] of Object.entries(s.stops)) (m(r.model).stops ??= {})[id] = r;
  for (const [key, until] of Object.entries(s.avoid)) (m(avoidModel(key)).avoid ??= {})[key] = until;
  // each replica's entry, its fields appended in key order: the canonical JSON of the entry
  const replicas = new Map<string, string[]>();
  for (const map of REPLICA_MAPS) {
    for (const [id, v] of Object.entries(s[map])) {
      let e = replicas.get(id);
      if (!e) replicas.set(id, (e = []));
      e.push(`"${map}":${JSON.stringify(v)}`);
    }
  }
  const out = new Map<string, string>();
  out.set('fleet', canonicalJson({ version: s.version, appliedRevision: s.appliedRevision, ...(s.retriesTrimmed > 0 ? { retriesTrimmed: s.retriesTrimmed } : {}) }));
  for (const [key, ids] of retryChunks(s)) out.set(key, JSON.stringify(ids));
  for (const [name, e] of models) out.set(`models/${keyPart(name)}`, modelEntryJson(e));
  for (const [id, e] of replicas) out.set(`replicas/${keyPart(id)}`, `{${e.join(',')}}`);
  return out;
}

/** The handled retry ids in chunks, by key (`retries/<chunk>`, zero-padded so keys sort as numbers). */
function retryChunks(s: Pick<ControllerState, 'handledRetries' | 'retriesTrimmed'>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  s.handledRetries.forEach((id, i) => {
    const key = `retries/${String(Math.floor((s.retriesTrimmed + i) / RETRY_CHUNK)).padStart(10, '0')}`;
    let ids = out.get(key);
    if (!ids) out.set(key, (ids = []));
    ids.push(id);
  });
  return out;
}

/** The handled ids from the chunks in key order, after those of a legacy `retries` key. */
function retriesOf(entries: Entries): unknown[] {
  const chunks = group(entries, 'retries/').sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const ids: unknown[] = [];
  for (const text of [entries.get('retries') ?? '[]', ...chunks.map(([, t]) => t)]) {
    const v = JSON.parse(text) as unknown;
    if (!Array.isArray(v)) throw new Error('a retries entry is not a list');
    ids.push(...(v as unknown[]));
  }
  return ids;
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
  const retries = retriesOf(entries);
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
  return stateFromJson({ version: fleet.version ?? STATE_VERSION, appliedRevision: fleet.appliedRevision ?? null, retriesTrimmed: fleet.retriesTrimmed, handledRetries: retries, ...rec });
}
