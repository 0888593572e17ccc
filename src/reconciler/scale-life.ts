/**
 * Each pass's scaling (pure): for every model whose count follows its load (scale/range.ts scales),
 * the decision of scale/decide.ts on the routers' load reports, kept in the model's entry of the
 * record (ModelRecord.scale), with a note for each change. An on-demand model that is not active
 * (its idle timeout passed) has no count to keep: it starts again from one replica when asked for.
 */
import { SCALE_DEFAULTS, type FleetSpec, type ModelSpec } from '../fleet-spec/types.js';
import { decideScale, loadOf, sameScale, withLook, type LoadReport, type ScaleRecord, type SummedLoad } from '../scale/decide.js';
import { rangeNow, scales } from '../scale/range.js';
import type { Note } from './note.js';
import { withModel, type ControllerState, type ModelRecord } from './state.js';

/** Whether an on-demand model is active at `now` (a request within its idle timeout); always-on models are. */
export function activeAt(m: ModelSpec, demand: number | undefined, now: number): boolean {
  return m.scaling.mode !== 'on_demand' || (demand !== undefined && now - demand < m.scaling.idleTimeoutMs);
}

const without = (m: ModelRecord): ModelRecord => {
  const { scale: _gone, ...rest } = m;
  return rest;
};

/** The record after this pass's scaling decisions, a note per change, and the load each decision read. */
export function scaled(s: ControllerState, spec: FleetSpec, reports: readonly LoadReport[], now: number): { state: ControllerState; notes: Note[]; load: Record<string, SummedLoad> } {
  let out = s;
  const notes: Note[] = [];
  const loads: Record<string, SummedLoad> = {};
  for (const name in s.models) {
    const rec = s.models[name]!;
    const m = spec.models[name];
    if (!m || !scales(m) || !activeAt(m, rec.demand, now)) {
      if (rec.scale !== undefined) out = withModel(out, name, without(rec));
      continue;
    }
    const load = loadOf(reports, name, now);
    loads[name] = load;
    const d = decideScale({ range: rangeNow(m, now), slots: spec.profiles[m.profile]?.parallel ?? Infinity, scale: m.scale ?? spec.settings.scale ?? SCALE_DEFAULTS, load, record: rec.scale, now });
    const next: ScaleRecord = withLook(d);
    if (!sameScale(rec.scale, next)) out = withModel(out, name, { ...rec, scale: next });
    if (d.change) {
      const c = d.change;
      notes.push({ level: 'info', msg: `scaled ${name} ${c.from} → ${c.to}: ${c.why}`, fields: { model: name, from: c.from, to: c.to, direction: c.direction, busy: load.busy, queued: load.queued, waitMs: load.waitMs, ...(load.silent ? { silentRouters: load.silent } : {}) } });
    }
  }
  return { state: out, notes, load: loads };
}

/** Each scaling model's count as the record keeps it (the planner's desired count within the range). */
export function scaledCounts(s: Pick<ControllerState, 'models'>): Readonly<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const name in s.models) {
    const c = s.models[name]!.scale?.count;
    if (c !== undefined) out[name] = c;
  }
  return out;
}

/** The earliest time a model's scaling wants to be looked at again after `now`, or null. */
export function scaleDue(s: Pick<ControllerState, 'models'>, now: number): number | null {
  let at: number | null = null;
  for (const name in s.models) {
    const t = s.models[name]!.scale?.lookAt;
    if (t !== undefined && t > now && (at === null || t < at)) at = t;
  }
  return at;
}

/** Each scaling model's record (the snapshot's scale views read their last change from it). */
export function scaleRecords(s: Pick<ControllerState, 'models'>): Readonly<Record<string, ScaleRecord>> {
  const out: Record<string, ScaleRecord> = {};
  for (const name in s.models) {
    const r = s.models[name]!.scale;
    if (r !== undefined) out[name] = r;
  }
  return out;
}
