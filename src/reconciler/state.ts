/**
 * The controller's one state record: everything that must outlive a pass, as plain data, one entry
 * per thing it is about. It is what the state file stores and what etcd stores key by key
 * (ha/state-layout.ts); nothing else in the controller survives a pass or a restart. The
 * transitions here are pure: (state, event, now) → state.
 *
 * - models: per model, its health (failures, backoff, parked, last error, digest, last handled
 *   retry), its last demand (on-demand idle timeouts survive a restart) and the nodes it avoids for a
 *   while after they failed its start (a full disk, no free port);
 * - replicas: per replica, its model, node, digest and its life as one phase (replica-life.ts);
 * - handledRetries: retry ids handled, most recent last (bounded);
 * - retriesTrimmed: how many ids were dropped from the front of handledRetries so far, always a
 *   multiple of RETRY_CHUNK. An id's absolute position (retriesTrimmed + index) never changes, so
 *   the etcd layout keys the ids in chunks by it: a retry rewrites one chunk, a trim deletes one.
 * Older records (version 1: health and retries; version 2: seven maps by replica id) are read by
 * state-migrate.ts; a newer one is refused with STATE_VERSION_NEWER, never written over.
 */
import { retried, withDigest, type ModelHealth } from './health.js';
import type { Note } from './note.js';
import { rolloutOnDefinition, rolloutRetried, type RolloutRecord } from './rollout-life.js';
import { moved, type ReplicaPhase, type ReplicaRecord } from './replica-life.js';
import type { ScaleRecord } from '../scale/decide.js';

export type { Note } from './note.js';
export type { ReplicaPhase, ReplicaRecord } from './replica-life.js';

export const STATE_VERSION = 3;
export const MAX_HANDLED_RETRIES = 2000;
/** Ids per chunk of handledRetries, and what a trim drops at once (so chunks keep their contents). */
export const RETRY_CHUNK = 40;

export interface ModelRecord {
  readonly health: ModelHealth;
  /** Epoch ms of the last request for it (on-demand activity). */
  readonly demand?: number;
  /** Node → epoch ms until which the model is placed elsewhere (the node failed its start). */
  readonly avoid?: Readonly<Record<string, number>>;
  /** Its rollout while a new revision proves itself or is held back (rollout-life.ts). */
  readonly rollout?: RolloutRecord;
  /** Its count and scaling windows, for a model whose count follows its load (scale-life.ts). */
  readonly scale?: ScaleRecord;
}

/** What the record needs of a spec's model: its name, definition digest, and whether its rollout proves a revision (checks or a canary). */
export interface SpecModel {
  readonly name: string;
  readonly digest: string;
  readonly rollout?: { readonly checks: readonly unknown[]; readonly canary?: unknown } | null;
}

export interface ControllerState {
  readonly version: typeof STATE_VERSION;
  readonly appliedRevision: string | null;
  readonly models: Readonly<Record<string, ModelRecord>>;
  readonly replicas: Readonly<Record<string, ReplicaRecord>>;
  readonly handledRetries: readonly string[];
  readonly retriesTrimmed: number;
}

export const emptyState: ControllerState = Object.freeze({
  version: STATE_VERSION,
  appliedRevision: null,
  models: {},
  replicas: {},
  handledRetries: [],
  retriesTrimmed: 0,
});

export function omit<V>(rec: Readonly<Record<string, V>>, keys: Iterable<string>): Record<string, V> {
  const out = { ...rec };
  for (const k of keys) delete out[k];
  return out;
}

/** Each model's health, by the record's models object (derived once per models object). */
const healthOf = new WeakMap<object, Readonly<Record<string, ModelHealth>>>();
export function healthByModel(s: Pick<ControllerState, 'models'>): Readonly<Record<string, ModelHealth>> {
  let out = healthOf.get(s.models);
  if (out === undefined) {
    const h: Record<string, ModelHealth> = {};
    for (const name in s.models) h[name] = s.models[name]!.health;
    healthOf.set(s.models, (out = h));
  }
  return out;
}

/** Each model's rollout, for the models that have one (by the record's models object). */
const rolloutsOfModels = new WeakMap<object, Readonly<Record<string, RolloutRecord>>>();
export function rolloutsByModel(s: Pick<ControllerState, 'models'>): Readonly<Record<string, RolloutRecord>> {
  let out = rolloutsOfModels.get(s.models);
  if (out === undefined) {
    const r: Record<string, RolloutRecord> = {};
    for (const name in s.models) {
      const x = s.models[name]!.rollout;
      if (x !== undefined) r[name] = x;
    }
    rolloutsOfModels.set(s.models, (out = r));
  }
  return out;
}

/** Each model's last demand (epoch ms), for the models that have one. */
export function demandByModel(s: Pick<ControllerState, 'models'>): Readonly<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const name in s.models) {
    const t = s.models[name]!.demand;
    if (t !== undefined) out[name] = t;
  }
  return out;
}

/** The record with one model's entry replaced (the same record when it is the same entry). */
export function withModel(s: ControllerState, name: string, m: ModelRecord): ControllerState {
  return s.models[name] === m ? s : { ...s, models: { ...s.models, [name]: m } };
}

/** The record with one replica's entry replaced, or deleted (undefined). */
export function withReplica(s: ControllerState, id: string, r: ReplicaRecord | undefined): ControllerState {
  if (s.replicas[id] === r) return s;
  if (r === undefined) return { ...s, replicas: omit(s.replicas, [id]) };
  return { ...s, replicas: { ...s.replicas, [id]: r } };
}

/** The ids of the replicas whose record matches. */
export function replicaIds(s: ControllerState, pred: (r: ReplicaRecord) => boolean): string[] {
  const out: string[] = [];
  for (const id in s.replicas) if (pred(s.replicas[id]!)) out.push(id);
  return out;
}

// ------------------------------------------------------------------ transitions

export function revisionApplied(s: ControllerState, revision: string | null): ControllerState {
  return revision === null || revision === s.appliedRevision ? s : { ...s, appliedRevision: revision };
}

/** The key the planner knows an avoided pair by. */
export const avoidKey = (model: string, node: string): string => `${model}@${node}`;

/** The model@node pairs still avoided at `now`; expired ones leave the record. */
export function avoidanceAt(s: ControllerState, now: number): { state: ControllerState; avoided: ReadonlySet<string> } {
  let models: Record<string, ModelRecord> | null = null;
  const avoided = new Set<string>();
  for (const name in s.models) {
    const m = s.models[name]!;
    if (m.avoid === undefined) continue;
    const live = Object.entries(m.avoid).filter(([, until]) => until > now);
    for (const [node] of live) avoided.add(avoidKey(name, node));
    if (live.length === Object.keys(m.avoid).length) continue;
    models ??= { ...s.models };
    const { avoid: _gone, ...rest } = m;
    models[name] = live.length ? { ...rest, avoid: Object.fromEntries(live) } : rest;
  }
  return { state: models ? { ...s, models } : s, avoided };
}

/** A request wants a model: activity for an on-demand model's idle timeout and eviction order. */
export function demanded(s: ControllerState, model: string, now: number): ControllerState {
  const m = s.models[model];
  if (m === undefined || m.demand === now) return s;
  return withModel(s, model, { ...m, demand: now });
}

export function restartRequested(s: ControllerState, ids: readonly string[], now: number): ControllerState {
  let out = s;
  for (const id of ids) {
    const r = out.replicas[id];
    if (r !== undefined && r.restartAsked === undefined) out = withReplica(out, id, { ...r, restartAsked: now });
  }
  return out;
}

/** The record with `id` handled last; past the bound, the oldest ids go, in whole chunks (RETRY_CHUNK). */
function rememberRetry(s: ControllerState, id: string): Pick<ControllerState, 'handledRetries' | 'retriesTrimmed'> {
  const out = [...s.handledRetries, id];
  if (out.length <= MAX_HANDLED_RETRIES) return { handledRetries: out, retriesTrimmed: s.retriesTrimmed };
  const trimmed = Math.ceil((s.retriesTrimmed + out.length - MAX_HANDLED_RETRIES) / RETRY_CHUNK) * RETRY_CHUNK;
  return { handledRetries: out.slice(trimmed - s.retriesTrimmed), retriesTrimmed: trimmed };
}

/** What a retry did to its model: unparked it, or (not parked) cleared its backoff. The admin API and `ctl retry` answer this. */
export type RetryOutcome = 'unparked' | 'backoff-cleared';
/** A retry transition's outcome: also 'already-handled' (its id was handled before, or the trailer names no model). */
export type RetryHandled = RetryOutcome | 'already-handled';

/**
 * A retry (admin call or `Llmgw-Retry:` trailer) for a model with the given digest: handled once per
 * id. A model name of null (the trailer names no model in the spec) only remembers the id. A held
 * rollout of the model runs its checks again from `now`.
 */
export function retryHandled(s: ControllerState, model: { name: string; digest: string } | null, id: string, now = 0): { state: ControllerState; outcome: RetryHandled; note: Note } {
  if (s.handledRetries.includes(id)) return { state: s, outcome: 'already-handled', note: { level: 'debug', msg: 'retry already handled', fields: { retry: id } } };
  if (!model) return { state: { ...s, ...rememberRetry(s, id) }, outcome: 'already-handled', note: { level: 'warn', msg: 'retry trailer names no model; ignored', fields: { retry: id } } };
  const before = s.models[model.name];
  const { health, outcome } = retried(withDigest(before?.health, model.digest), id);
  const rollout = rolloutRetried(before?.rollout, now);
  const entry: ModelRecord = { ...before, health, ...(rollout ? { rollout } : {}) };
  return {
    state: { ...s, models: { ...s.models, [model.name]: entry }, ...rememberRetry(s, id) },
    outcome,
    note: { level: 'info', msg: 'retry handled', fields: { model: model.name, retry: id, outcome } },
  };
}

/**
 * The spec in force: every model's health follows its definition digest (a new digest resets
 * failures and unparks); models that left the spec leave the record (their health, demand and
 * avoidances). Their replicas stay until they are gone from their nodes.
 */
export function specApplied(s: ControllerState, models: readonly SpecModel[], now = 0, appliedBefore: string | null = null): { state: ControllerState; notes: Note[] } {
  const notes: Note[] = [];
  const out: Record<string, ModelRecord> = {};
  let changed = Object.keys(s.models).length !== models.length;
  for (const m of models) {
    const before = s.models[m.name];
    const h = withDigest(before?.health, m.digest);
    if (before && before.health.digest !== m.digest) notes.push({ level: 'info', msg: 'definition changed: failures reset, unparked', fields: { model: m.name, digest: m.digest } });
    const checks = (m.rollout?.checks.length ?? 0) > 0 || (m.rollout?.canary ?? null) !== null;
    if (before === undefined || h !== before.health || (before.rollout !== undefined && !checks)) {
      changed = true;
      // a definition change (or rollout checks gone) decides the model's rollout afresh
      const r = before && before.health.digest !== m.digest ? rolloutOnDefinition(before, m.name, m.digest, checks, s.replicas, now, appliedBefore) : { rollout: checks ? before?.rollout : undefined, note: null };
      if (r.note) notes.push(r.note);
      const { rollout: _was, ...rest } = before ?? { health: h };
      out[m.name] = { ...rest, health: h, ...(r.rollout ? { rollout: r.rollout } : {}) };
    } else out[m.name] = before;
  }
  return { state: changed ? { ...s, models: out } : s, notes };
}

/** Records specApplied left as they were, by their models: the spec's models then. */
const fixedPoints = new WeakMap<object, object>();

/**
 * specApplied for a spec's models, skipped when it would change nothing: specApplied is idempotent,
 * so a record whose models are those it last returned for the same spec's models (a spec's objects
 * are per revision, the record's immutable) is left as it is — without a look at each model.
 */
export function specModelsApplied(s: ControllerState, models: Readonly<Record<string, SpecModel>>, now = 0, appliedBefore: string | null = null): { state: ControllerState; notes: Note[] } {
  if (fixedPoints.get(s.models) === models) return { state: s, notes: [] };
  const r = specApplied(s, Object.values(models), now, appliedBefore);
  fixedPoints.set(r.state.models, models);
  return r;
}

const shift = (rec: Readonly<Record<string, number>>, by: number): Record<string, number> => Object.fromEntries(Object.entries(rec).map(([k, t]) => [k, t + by]));

function phaseShifted(p: ReplicaPhase, by: number): ReplicaPhase {
  switch (p.kind) {
    case 'launching':
      return p;
    case 'unready':
      return p.since === undefined ? p : { ...p, since: p.since + by };
    default:
      return { ...p, since: p.since + by };
  }
}

/**
 * The wall clock stepped by `by` ms (NTP, a VM resumed, an operator): the timers in the record move
 * with it, so a backoff, an idle timeout, a drain grace or the wait for /health still lasts the same
 * real time. What is history (when a model was parked, when it last failed, when a failure was
 * counted) stays as it was.
 */
export function clockStepped(s: ControllerState, by: number): ControllerState {
  if (by === 0) return s;
  const models: Record<string, ModelRecord> = {};
  for (const [name, m] of Object.entries(s.models)) {
    const h = m.health.nextAttemptAt === null ? m.health : { ...m.health, nextAttemptAt: m.health.nextAttemptAt + by };
    models[name] = { ...m, health: h, ...(m.demand !== undefined ? { demand: m.demand + by } : {}), ...(m.avoid !== undefined ? { avoid: shift(m.avoid, by) } : {}), ...(m.rollout !== undefined ? { rollout: { ...m.rollout, since: m.rollout.since + by } } : {}), ...(m.scale !== undefined ? { scale: scaleShifted(m.scale, by) } : {}) };
  }
  const replicas: Record<string, ReplicaRecord> = {};
  for (const [id, r] of Object.entries(s.replicas)) {
    replicas[id] = { ...r, startedAt: r.startedAt + by, phase: phaseShifted(r.phase, by), ...(r.restartAsked !== undefined ? { restartAsked: r.restartAsked + by } : {}) };
  }
  return { ...s, models, replicas };
}

/** A scale record's windows moved with the clock (its last change is history and stays). */
function scaleShifted(r: ScaleRecord, by: number): ScaleRecord {
  const at = (t: number | undefined): number | undefined => (t === undefined ? undefined : t + by);
  const { upSince, downSince, lookAt, ...rest } = r;
  return { ...rest, ...(upSince !== undefined ? { upSince: at(upSince)! } : {}), ...(downSince !== undefined ? { downSince: at(downSince)! } : {}), ...(lookAt !== undefined ? { lookAt: at(lookAt)! } : {}) };
}

/** A start was launched (before any I/O for it): it is in flight from now until its outcome. */
export function startLaunched(s: ControllerState, replicaId: string, start: Omit<ReplicaRecord, 'phase'>): ControllerState {
  const r = moved(s.replicas[replicaId], replicaId, { kind: 'launching' }, start);
  return r.refused ? s : withReplica(s, replicaId, r.rec);
}
