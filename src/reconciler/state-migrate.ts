/**
 * The state record from parsed JSON, whatever version of llmgw wrote it (pure):
 * - version 3 (this one): models and replicas as entities;
 * - version 2: health, demand and avoidances in maps by model, and a replica's life as membership in
 *   seven maps by replica id (starts, stops, draining, restarts, readySince, unresponsiveSince,
 *   accounted). Each replica becomes one entry with one phase. Facts v2 kept by id alone (draining,
 *   restarts, readySince, unresponsiveSince, accounted) carry no model or node: the entry has them
 *   empty until the first look that shows the replica fills them in (liveness.ts); one no look shows
 *   is pruned as gone;
 * - version 1: health, handled retries and the applied revision.
 * A version newer than this llmgw's is refused with STATE_VERSION_NEWER (an instance that meets one
 * stands by and says so, never writes over it); anything else that is not a record throws saying why.
 */
import { LlmgwError } from '../errors/catalogue.js';
import type { ModelHealth } from './health.js';
import type { GroupMember, ReplicaPhase, ReplicaRecord } from './replica-life.js';
import type { RolloutRecord } from './rollout-life.js';
import type { ScaleChange, ScaleRecord } from '../scale/decide.js';
import { STATE_VERSION, type ControllerState, type ModelRecord } from './state.js';

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function numbers(v: unknown): Record<string, number> {
  if (!isRecord(v)) return {};
  return Object.fromEntries(Object.entries(v).filter((e): e is [string, number] => finite(e[1])));
}

function phaseFromJson(p: unknown): ReplicaPhase | null {
  if (!isRecord(p)) return null;
  switch (p.kind) {
    case 'launching':
      return { kind: 'launching' };
    case 'ready':
      return finite(p.since) ? { kind: 'ready', since: p.since, seen: p.seen === true, ...(typeof p.endpoint === 'string' && p.endpoint !== '' ? { endpoint: p.endpoint } : {}) } : null;
    case 'unready':
      return { kind: 'unready', ...(finite(p.since) ? { since: p.since } : {}) };
    case 'leaving':
      if (!finite(p.since)) return null;
      if (p.why === 'surge') return { kind: 'leaving', why: 'surge', since: p.since };
      if (p.why === 'stop' && typeof p.reason === 'string' && typeof p.drain === 'boolean') return { kind: 'leaving', why: 'stop', since: p.since, reason: p.reason, drain: p.drain };
      return null;
    default:
      return null;
  }
}

/** One replica entry from JSON, or null when it is not one. */
export function replicaFromJson(v: unknown): ReplicaRecord | null {
  if (!isRecord(v) || typeof v.model !== 'string' || typeof v.node !== 'string' || typeof v.digest !== 'string' || !finite(v.startedAt)) return null;
  const phase = phaseFromJson(v.phase);
  if (phase === null) return null;
  const group = groupFromJson(v.group);
  return { model: v.model, node: v.node, digest: v.digest, startedAt: v.startedAt, phase, ...(finite(v.restartAsked) ? { restartAsked: v.restartAsked } : {}), ...(finite(v.counted) ? { counted: v.counted } : {}), ...(group ? { group } : {}) };
}

/** An RPC group's hosts from JSON (#40): the head first, each worker with its id; null when absent or not one. */
function groupFromJson(v: unknown): GroupMember[] | null {
  if (!Array.isArray(v) || v.length < 2) return null;
  const out: GroupMember[] = [];
  for (const [i, h] of v.entries()) {
    if (!isRecord(h) || typeof h.node !== 'string' || !finite(h.bytes)) return null;
    if (i === 0 && h.role === 'head') out.push({ node: h.node, role: 'head', bytes: h.bytes });
    else if (i > 0 && h.role === 'worker' && typeof h.worker === 'string') out.push({ node: h.node, role: 'worker', bytes: h.bytes, worker: h.worker });
    else return null;
  }
  return out;
}

/** One model entry from JSON, or null when it is not one. */
export function modelFromJson(v: unknown): ModelRecord | null {
  if (!isRecord(v) || !isRecord(v.health)) return null;
  const avoid = numbers(v.avoid);
  const rollout = rolloutFromJson(v.rollout);
  const scale = scaleFromJson(v.scale);
  return { health: v.health as unknown as ModelHealth, ...(finite(v.demand) ? { demand: v.demand } : {}), ...(Object.keys(avoid).length ? { avoid } : {}), ...(rollout ? { rollout } : {}), ...(scale ? { scale } : {}) };
}

const count = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** A model's scale entry (scale/decide.ts ScaleRecord), or null when it is not one (the model then starts from its range's min). */
export function scaleFromJson(v: unknown): ScaleRecord | null {
  if (!isRecord(v) || !count(v.count)) return null;
  const l = v.last;
  const last: ScaleChange | null =
    isRecord(l) && finite(l.at) && count(l.from) && count(l.to) && (l.direction === 'up' || l.direction === 'down') && typeof l.why === 'string'
      ? { at: l.at, from: l.from, to: l.to, direction: l.direction, why: l.why }
      : null;
  return {
    count: v.count,
    ...(finite(v.upSince) ? { upSince: v.upSince } : {}),
    ...(finite(v.downSince) ? { downSince: v.downSince } : {}),
    ...(finite(v.lookAt) ? { lookAt: v.lookAt } : {}),
    ...(last ? { last } : {}),
  };
}

const ROLLOUT_PHASES: ReadonlySet<unknown> = new Set(['checking', 'canary', 'held', 'rolled_back', 'promoted']);

function rolloutFromJson(v: unknown): RolloutRecord | null {
  if (!isRecord(v) || typeof v.digest !== 'string' || typeof v.stable !== 'string' || !ROLLOUT_PHASES.has(v.phase) || !finite(v.since)) return null;
  const verdict = isRecord(v.verdict) && typeof v.verdict.code === 'string' && typeof v.verdict.message === 'string' ? { code: v.verdict.code, message: v.verdict.message } : null;
  const step = typeof v.step === 'number' && Number.isSafeInteger(v.step) && v.step >= 0 ? v.step : undefined;
  const stableRevision = typeof v.stableRevision === 'string' ? v.stableRevision : undefined;
  return { digest: v.digest, stable: v.stable, ...(stableRevision !== undefined ? { stableRevision } : {}), phase: v.phase as RolloutRecord['phase'], since: v.since, ...(step !== undefined ? { step } : {}), ...(verdict ? { verdict } : {}) };
}

function retriesOf(v: Record<string, unknown>): Pick<ControllerState, 'handledRetries' | 'retriesTrimmed'> {
  const ids = Array.isArray(v.handledRetries) ? v.handledRetries.filter((x): x is string => typeof x === 'string') : [];
  const trimmed = typeof v.retriesTrimmed === 'number' && Number.isSafeInteger(v.retriesTrimmed) && v.retriesTrimmed >= 0 ? v.retriesTrimmed : 0;
  return { handledRetries: ids, retriesTrimmed: trimmed };
}

/** A version-2 (or 1) record as this version's. */
function fromV2(v: Record<string, unknown>): ControllerState {
  const models: Record<string, ModelRecord> = {};
  const demand = numbers(v.demand);
  for (const [name, h] of Object.entries(v.models as Record<string, unknown>)) {
    if (isRecord(h)) models[name] = { health: h as unknown as ModelHealth, ...(demand[name] !== undefined ? { demand: demand[name] } : {}) };
  }
  for (const [key, until] of Object.entries(numbers(v.avoid))) {
    const at = key.lastIndexOf('@');
    const name = key.slice(0, at);
    const m = models[name];
    if (at > 0 && m) models[name] = { ...m, avoid: { ...m.avoid, [key.slice(at + 1)]: until } };
  }
  const replicas: Record<string, ReplicaRecord> = {};
  const known = (id: string): ReplicaRecord => replicas[id] ?? { model: '', node: '', digest: '', startedAt: 0, phase: { kind: 'unready' } };
  // the facts by id alone first; the starts and stops (which know model and node) then set the phase
  for (const [id, since] of Object.entries(numbers(v.readySince))) replicas[id] = { ...known(id), phase: { kind: 'ready', since, seen: true } };
  for (const [id, since] of Object.entries(numbers(v.unresponsiveSince))) replicas[id] = { ...known(id), phase: { kind: 'unready', since } };
  for (const [id, since] of Object.entries(numbers(v.draining))) replicas[id] = { ...known(id), phase: { kind: 'leaving', why: 'surge', since } };
  for (const [id, at] of Object.entries(numbers(v.restarts))) replicas[id] = { ...known(id), restartAsked: at };
  for (const [id, at] of Object.entries(numbers(v.accounted))) replicas[id] = { ...known(id), counted: at };
  if (isRecord(v.starts)) {
    for (const [id, s] of Object.entries(v.starts)) {
      if (!isRecord(s) || typeof s.model !== 'string' || typeof s.node !== 'string' || typeof s.digest !== 'string' || !finite(s.startedAt)) continue;
      const phase: ReplicaPhase = finite(s.readyAt) ? { kind: 'ready', since: s.readyAt, seen: false, ...(typeof s.endpoint === 'string' && s.endpoint !== '' ? { endpoint: s.endpoint } : {}) } : { kind: 'launching' };
      replicas[id] = { ...known(id), model: s.model, node: s.node, digest: s.digest, startedAt: s.startedAt, phase };
    }
  }
  if (isRecord(v.stops)) {
    for (const [id, s] of Object.entries(v.stops)) {
      if (!isRecord(s) || typeof s.model !== 'string' || typeof s.node !== 'string' || typeof s.reason !== 'string' || !finite(s.since) || typeof s.drain !== 'boolean') continue;
      const r = known(id);
      replicas[id] = { ...r, model: s.model, node: s.node, phase: { kind: 'leaving', why: 'stop', since: s.since, reason: s.reason, drain: s.drain } };
    }
  }
  return { version: STATE_VERSION, appliedRevision: typeof v.appliedRevision === 'string' ? v.appliedRevision : null, models, replicas, ...retriesOf(v) };
}

/** A state record from parsed JSON, migrating older versions. Throws saying why for anything that is not one. */
export function stateFromJson(v: unknown): ControllerState {
  if (isRecord(v) && typeof v.version === 'number' && Number.isInteger(v.version) && v.version > STATE_VERSION) {
    throw new LlmgwError('STATE_VERSION_NEWER', `state version ${v.version} is newer than this llmgw (${STATE_VERSION}): upgrade this instance`, { found: v.version, known: STATE_VERSION });
  }
  if (!isRecord(v) || (v.version !== 1 && v.version !== 2 && v.version !== STATE_VERSION) || !isRecord(v.models) || !Array.isArray(v.handledRetries)) {
    throw new Error(`not an llmgw state record (version ${STATE_VERSION})`);
  }
  if (v.version !== STATE_VERSION) return fromV2(v);
  const models: Record<string, ModelRecord> = {};
  for (const [name, m] of Object.entries(v.models)) {
    const rec = modelFromJson(m);
    if (rec) models[name] = rec;
  }
  const replicas: Record<string, ReplicaRecord> = {};
  if (isRecord(v.replicas)) {
    for (const [id, r] of Object.entries(v.replicas)) {
      const rec = replicaFromJson(r);
      if (rec) replicas[id] = rec;
    }
  }
  return { version: STATE_VERSION, appliedRevision: typeof v.appliedRevision === 'string' ? v.appliedRevision : null, models, replicas, ...retriesOf(v) };
}
