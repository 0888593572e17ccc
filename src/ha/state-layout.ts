/**
 * The state record as entries (pure), for the per-entry layout in etcd (keyed-layout.ts): the
 * identity map of the record, key by key.
 * - `fleet`: the version, the applied revision and how many retry ids were trimmed;
 * - `retries/<chunk>`: the handled retry ids, RETRY_CHUNK a key, keyed by their absolute position
 *   (retriesTrimmed + index): a retry rewrites the last chunk, a trim deletes the first. (Before,
 *   one `retries` key held all of them: up to ~160 KiB. It is still read, and deleted on the next save);
 * - `models/<name>`: the record's entry of one model (health, demand, avoided nodes);
 * - `replicas/<id>`: the record's entry of one replica (model, node, digest, phase, …).
 * So a pass that changes one model writes one or two entries. Each entry is canonical JSON (a
 * record equal in content gives equal entries, whatever its key order). A version-2 layout (models
 * holding starts and stops, replicas holding five maps' facts) is read and migrated
 * (state-migrate.ts); the next save writes this one.
 */
import { RETRY_CHUNK, STATE_VERSION, type ControllerState, type ModelRecord, type ReplicaRecord } from '../reconciler/state.js';
import { stateFromJson } from '../reconciler/state-migrate.js';
import { canonicalJson } from './canonical-json.js';
import { group, keyPart, type Entries } from './keyed-layout.js';

/**
 * Canonical JSON of an entry, by object: the record's transitions are immutable, so a model or a
 * replica whose entry did not change keeps its object, and its text is not computed again each pass.
 */
const entryText = new WeakMap<object, string>();
function textOf(e: ModelRecord | ReplicaRecord): string {
  let t = entryText.get(e);
  if (t === undefined) entryText.set(e, (t = canonicalJson(e)));
  return t;
}

/** The entries of each record, by the record: a pass on an unchanged world saves the same record again. */
const entriesOf = new WeakMap<ControllerState, Entries>();

export function stateEntries(s: ControllerState): Entries {
  let out = entriesOf.get(s);
  if (out === undefined) entriesOf.set(s, (out = entriesFor(s)));
  return out;
}

function entriesFor(s: ControllerState): Map<string, string> {
  const out = new Map<string, string>();
  out.set('fleet', canonicalJson({ version: s.version, appliedRevision: s.appliedRevision, ...(s.retriesTrimmed > 0 ? { retriesTrimmed: s.retriesTrimmed } : {}) }));
  for (const [key, ids] of retryChunks(s)) out.set(key, JSON.stringify(ids));
  for (const name in s.models) out.set(`models/${keyPart(name)}`, textOf(s.models[name]!));
  for (const id in s.replicas) out.set(`replicas/${keyPart(id)}`, textOf(s.replicas[id]!));
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

/** The version-2 entries as a version-2 record (state-migrate.ts migrates it). */
function v2FromEntries(fleet: Record<string, unknown>, entries: Entries, retries: unknown[]): Record<string, unknown> {
  const maps = ['accounted', 'draining', 'readySince', 'restarts', 'unresponsiveSince'] as const;
  const rec: Record<string, Record<string, unknown>> = { models: {}, demand: {}, starts: {}, stops: {}, avoid: {}, ...Object.fromEntries(maps.map((k) => [k, {}])) };
  for (const [name, text] of group(entries, 'models/')) {
    const e = parsed(`the entry of model ${name}`, text);
    if (e.health !== undefined) rec.models![name] = e.health;
    if (e.demand !== undefined) rec.demand![name] = e.demand;
    Object.assign(rec.starts!, e.starts ?? {});
    Object.assign(rec.stops!, e.stops ?? {});
    Object.assign(rec.avoid!, e.avoid ?? {});
  }
  for (const [id, text] of group(entries, 'replicas/')) {
    const e = parsed(`the entry of replica ${id}`, text);
    for (const map of maps) if (e[map] !== undefined) rec[map]![id] = e[map];
  }
  return { version: fleet.version, appliedRevision: fleet.appliedRevision ?? null, retriesTrimmed: fleet.retriesTrimmed, handledRetries: retries, ...rec };
}

/** The record from its entries, checked as the state file is (stateFromJson). Throws saying which entry is wrong. */
export function stateFromEntries(entries: Entries): ControllerState {
  const fleetText = entries.get('fleet');
  if (fleetText === undefined) throw new Error('no fleet entry');
  const fleet = parsed('the fleet entry', fleetText);
  const retries = retriesOf(entries);
  const version = fleet.version ?? STATE_VERSION;
  if (version !== STATE_VERSION) return stateFromJson(typeof version === 'number' && version < STATE_VERSION ? v2FromEntries({ ...fleet, version }, entries, retries) : { version });
  const models: Record<string, unknown> = {};
  for (const [name, text] of group(entries, 'models/')) models[name] = parsed(`the entry of model ${name}`, text);
  const replicas: Record<string, unknown> = {};
  for (const [id, text] of group(entries, 'replicas/')) replicas[id] = parsed(`the entry of replica ${id}`, text);
  return stateFromJson({ version, appliedRevision: fleet.appliedRevision ?? null, retriesTrimmed: fleet.retriesTrimmed, handledRetries: retries, models, replicas });
}
