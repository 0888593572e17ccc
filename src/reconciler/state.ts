/**
 * The controller's one state record: everything that must outlive a pass, as plain data. It is what
 * the state file stores (and what an etcd store will store); nothing else in the controller
 * survives a pass or a restart. The transitions here are pure: (state, event, now) → state.
 *
 * - models: per-model health (failures, backoff, parked, last error, digest, last handled retry);
 * - starts: replica starts launched and not yet settled. A start counts as in flight until its
 *   outcome is applied, whatever the node shows meanwhile (a replica that died on the node before
 *   its start reported is still one start, never a reason to launch another); one that concluded
 *   ready stays (with `readyAt`) until a look at its node shows the replica, or a look begun after
 *   it was ready does not: a look taken before the replica was on its node never hides it (#23);
 * - demand: the last request time per on-demand model (idle timeouts survive a restart);
 * - restarts: replicas an operator asked to replace, and when;
 * - draining: replicas draining because a restart had no room to surge, and since when;
 * - stops: replicas being stopped (stops.ts): out of routing from the record's `since`, waiting for
 *   their in-flight requests (bounded by drain_grace), then SIGTERM, stop_grace, SIGKILL. In the
 *   record so a controller restart or a failover continues a stop, never forgets or restarts it;
 * - readySince / unresponsiveSince: liveness bookkeeping per replica;
 * - accounted: replicas whose failure was counted already (never counted twice);
 * - avoid: "model@node" → until when a model is placed elsewhere after the node failed it (a full
 *   disk, no free port);
 * - handledRetries: retry ids handled, most recent last (bounded);
 * - retriesTrimmed: how many ids were dropped from the front of handledRetries so far, always a
 *   multiple of RETRY_CHUNK. An id's absolute position (retriesTrimmed + index) never changes, so
 *   the etcd layout keys the ids in chunks by it: a retry rewrites one chunk, a trim deletes one.
 */
import type { ReasonRef } from '../errors/catalogue.js';
import { retried, withDigest, type ModelHealth } from './health.js';

export const STATE_VERSION = 2;
export const MAX_HANDLED_RETRIES = 2000;
/** Ids per chunk of handledRetries, and what a trim drops at once (so chunks keep their contents). */
export const RETRY_CHUNK = 40;

export interface StartRecord {
  readonly model: string;
  readonly node: string;
  readonly digest: string;
  /**
   * Epoch ms (controller clock) when the start was launched; once it is ready, when the node
   * launched the replica (as a look at the node shows it).
   */
  readonly startedAt: number;
  /**
   * Epoch ms (controller clock) when the start concluded ready; absent while it runs. The replica
   * counts as the model's from the record until a look shows it (liveness.ts).
   */
  readonly readyAt?: number;
  /** Where a ready start's replica answers: the snapshot offers it to the router before a look shows it. */
  readonly endpoint?: string;
}

export interface StopRecord {
  readonly model: string;
  readonly node: string;
  /** Why (planner StopReason); 'failed' replicas skip the drain. */
  readonly reason: string;
  /** Epoch ms when the replica left routing (the drain's start). */
  readonly since: number;
  /** Whether the replica drains (waits for its in-flight requests) before SIGTERM. */
  readonly drain: boolean;
}

export interface ControllerState {
  readonly version: typeof STATE_VERSION;
  readonly appliedRevision: string | null;
  readonly models: Readonly<Record<string, ModelHealth>>;
  readonly starts: Readonly<Record<string, StartRecord>>;
  readonly demand: Readonly<Record<string, number>>;
  readonly restarts: Readonly<Record<string, number>>;
  readonly draining: Readonly<Record<string, number>>;
  readonly stops: Readonly<Record<string, StopRecord>>;
  readonly readySince: Readonly<Record<string, number>>;
  readonly unresponsiveSince: Readonly<Record<string, number>>;
  readonly accounted: Readonly<Record<string, number>>;
  readonly avoid: Readonly<Record<string, number>>;
  readonly handledRetries: readonly string[];
  readonly retriesTrimmed: number;
}

export const emptyState: ControllerState = Object.freeze({
  version: STATE_VERSION,
  appliedRevision: null,
  models: {},
  starts: {},
  demand: {},
  restarts: {},
  draining: {},
  stops: {},
  readySince: {},
  unresponsiveSince: {},
  accounted: {},
  avoid: {},
  handledRetries: [],
  retriesTrimmed: 0,
});

/** Something a transition decided that the shell logs (object-first, like pino). */
export interface Note {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly msg: string;
  readonly fields: Readonly<Record<string, unknown>>;
}

export function omit<V>(rec: Readonly<Record<string, V>>, keys: Iterable<string>): Record<string, V> {
  const out = { ...rec };
  for (const k of keys) delete out[k];
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function numbers(v: unknown): Record<string, number> {
  if (!isRecord(v)) return {};
  return Object.fromEntries(Object.entries(v).filter((e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1])));
}

/**
 * A state record from parsed JSON (version 1 files migrate: they held health, retries and the
 * revision). Throws with `what` for anything that is not one.
 */
export function stateFromJson(v: unknown): ControllerState {
  if (!isRecord(v) || (v.version !== 1 && v.version !== STATE_VERSION) || !isRecord(v.models) || !Array.isArray(v.handledRetries)) {
    throw new Error(`not an llmgw state record (version ${STATE_VERSION})`);
  }
  const starts: Record<string, StartRecord> = {};
  if (isRecord(v.starts)) {
    for (const [id, s] of Object.entries(v.starts)) {
      if (isRecord(s) && typeof s.model === 'string' && typeof s.node === 'string' && typeof s.digest === 'string' && typeof s.startedAt === 'number') {
        starts[id] = { model: s.model, node: s.node, digest: s.digest, startedAt: s.startedAt, ...(typeof s.readyAt === 'number' && Number.isFinite(s.readyAt) ? { readyAt: s.readyAt } : {}), ...(typeof s.endpoint === 'string' && s.endpoint !== '' ? { endpoint: s.endpoint } : {}) };
      }
    }
  }
  const stops: Record<string, StopRecord> = {};
  if (isRecord(v.stops)) {
    for (const [id, s] of Object.entries(v.stops)) {
      if (isRecord(s) && typeof s.model === 'string' && typeof s.node === 'string' && typeof s.reason === 'string' && typeof s.since === 'number' && typeof s.drain === 'boolean') {
        stops[id] = { model: s.model, node: s.node, reason: s.reason, since: s.since, drain: s.drain };
      }
    }
  }
  return {
    version: STATE_VERSION,
    appliedRevision: typeof v.appliedRevision === 'string' ? v.appliedRevision : null,
    models: v.models as Record<string, ModelHealth>,
    starts,
    demand: numbers(v.demand),
    restarts: numbers(v.restarts),
    draining: numbers(v.draining),
    stops,
    readySince: numbers(v.readySince),
    unresponsiveSince: numbers(v.unresponsiveSince),
    accounted: numbers(v.accounted),
    avoid: numbers(v.avoid),
    handledRetries: v.handledRetries.filter((x): x is string => typeof x === 'string'),
    retriesTrimmed: typeof v.retriesTrimmed === 'number' && Number.isSafeInteger(v.retriesTrimmed) && v.retriesTrimmed >= 0 ? v.retriesTrimmed : 0,
  };
}

// ------------------------------------------------------------------ transitions

export function revisionApplied(s: ControllerState, revision: string | null): ControllerState {
  return revision === null || revision === s.appliedRevision ? s : { ...s, appliedRevision: revision };
}

export const avoidKey = (model: string, node: string): string => `${model}@${node}`;

/** The model@node pairs still avoided at `now`; expired ones leave the record. */
export function avoidanceAt(s: ControllerState, now: number): { state: ControllerState; avoided: ReadonlySet<string> } {
  const live = Object.entries(s.avoid).filter(([, until]) => until > now);
  const state = live.length === Object.keys(s.avoid).length ? s : { ...s, avoid: Object.fromEntries(live) };
  return { state, avoided: new Set(live.map(([k]) => k)) };
}

/** A start was launched (before any I/O for it): it is in flight from now until its outcome. */
export function startLaunched(s: ControllerState, replicaId: string, start: StartRecord): ControllerState {
  return { ...s, starts: { ...s.starts, [replicaId]: start } };
}

/** A request wants a model: activity for an on-demand model's idle timeout and eviction order. */
export function demanded(s: ControllerState, model: string, now: number): ControllerState {
  return s.demand[model] === now ? s : { ...s, demand: { ...s.demand, [model]: now } };
}

export function restartRequested(s: ControllerState, ids: readonly string[], now: number): ControllerState {
  if (ids.length === 0) return s;
  const restarts = { ...s.restarts };
  for (const id of ids) restarts[id] ??= now;
  return { ...s, restarts };
}

export function drainStarted(s: ControllerState, ids: readonly string[], now: number): ControllerState {
  if (ids.length === 0) return s;
  const draining = { ...s.draining };
  for (const id of ids) draining[id] ??= now;
  return { ...s, draining };
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
 * id. A model name of null (the trailer names no model in the spec) only remembers the id.
 */
export function retryHandled(s: ControllerState, model: { name: string; digest: string } | null, id: string): { state: ControllerState; outcome: RetryHandled; note: Note } {
  if (s.handledRetries.includes(id)) return { state: s, outcome: 'already-handled', note: { level: 'debug', msg: 'retry already handled', fields: { retry: id } } };
  if (!model) return { state: { ...s, ...rememberRetry(s, id) }, outcome: 'already-handled', note: { level: 'warn', msg: 'retry trailer names no model; ignored', fields: { retry: id } } };
  const { health, outcome } = retried(withDigest(s.models[model.name], model.digest), id);
  return {
    state: { ...s, models: { ...s.models, [model.name]: health }, ...rememberRetry(s, id) },
    outcome,
    note: { level: 'info', msg: 'retry handled', fields: { model: model.name, retry: id, outcome } },
  };
}

/**
 * The spec in force: every model's health follows its definition digest (a new digest resets
 * failures and unparks); models that left the spec lose their health and demand.
 */
export function specApplied(s: ControllerState, models: readonly { name: string; digest: string }[]): { state: ControllerState; notes: Note[] } {
  const notes: Note[] = [];
  const health: Record<string, ModelHealth> = {};
  let changed = Object.keys(s.models).length !== models.length;
  for (const m of models) {
    const before = s.models[m.name];
    const h = withDigest(before, m.digest);
    if (before && before.digest !== m.digest) notes.push({ level: 'info', msg: 'definition changed: failures reset, unparked', fields: { model: m.name, digest: m.digest } });
    if (h !== before) changed = true;
    health[m.name] = h;
  }
  const names = new Set(models.map((m) => m.name));
  const demand = Object.fromEntries(Object.entries(s.demand).filter(([m]) => names.has(m)));
  if (!changed && Object.keys(demand).length === Object.keys(s.demand).length) return { state: s, notes };
  return { state: { ...s, models: health, demand }, notes };
}

const shift = (rec: Readonly<Record<string, number>>, by: number): Record<string, number> => Object.fromEntries(Object.entries(rec).map(([k, t]) => [k, t + by]));

/**
 * The wall clock stepped by `by` ms (NTP, a VM resumed, an operator): the timers in the record move
 * with it, so a backoff, an idle timeout, a drain grace or the wait for /health still lasts the same
 * real time. What is history (when a model was parked, when it last failed) stays as it was.
 */
export function clockStepped(s: ControllerState, by: number): ControllerState {
  if (by === 0) return s;
  const models: Record<string, ModelHealth> = {};
  for (const [m, h] of Object.entries(s.models)) models[m] = h.nextAttemptAt === null ? h : { ...h, nextAttemptAt: h.nextAttemptAt + by };
  const starts: Record<string, StartRecord> = {};
  for (const [id, st] of Object.entries(s.starts)) starts[id] = { ...st, startedAt: st.startedAt + by, ...(st.readyAt !== undefined ? { readyAt: st.readyAt + by } : {}) };
  const stops: Record<string, StopRecord> = {};
  for (const [id, st] of Object.entries(s.stops)) stops[id] = { ...st, since: st.since + by };
  return {
    ...s,
    models,
    starts,
    stops,
    demand: shift(s.demand, by),
    restarts: shift(s.restarts, by),
    draining: shift(s.draining, by),
    readySince: shift(s.readySince, by),
    unresponsiveSince: shift(s.unresponsiveSince, by),
    avoid: shift(s.avoid, by),
  };
}
