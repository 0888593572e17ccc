/**
 * A model's replica range in force (pure): on_demand scales between 1 and max_replicas while active
 * (the idle timeout takes it to 0); replicas {min, max} between them; a schedule entry's min/max (or
 * its count, min = max) from its firing on. A fixed count is a range of one (min = max): nothing to scale.
 */
import type { ModelSpec } from '../fleet-spec/types.js';
import { scheduleInForce } from '../schedule/schedule.js';
import type { ReplicaRange } from './decide.js';

export function rangeNow(m: ModelSpec, now: number): ReplicaRange {
  const s = m.scaling;
  if (s.mode === 'on_demand') return { min: 1, max: Math.max(1, s.maxReplicas) };
  const inForce = s.schedule ? scheduleInForce(s, now) : null;
  const entry = inForce?.entry !== null && inForce?.entry !== undefined ? s.schedule!.entries[inForce.entry] : undefined;
  if (entry) return { min: entry.replicas, max: Math.max(entry.replicas, entry.max ?? entry.replicas) };
  return { min: s.replicas, max: Math.max(s.replicas, s.max ?? s.replicas) };
}

/**
 * What the model should have now: its range's min, or the count its load decided within the range
 * (`scaled`, the record's); an on-demand model 0 when not active (its idle timeout passed).
 */
export function countNow(m: ModelSpec, active: boolean, now: number, scaled?: number): number {
  if (!active) return 0;
  const r = rangeNow(m, now);
  return r.min === r.max || scaled === undefined ? r.min : Math.min(r.max, Math.max(r.min, scaled));
}

/** Whether the model's count follows its load (a range of more than one count, some time). */
export function scales(m: ModelSpec): boolean {
  const s = m.scaling;
  if (s.mode === 'on_demand') return s.maxReplicas > 1;
  return (s.max !== undefined && s.max > s.replicas) || (s.schedule?.entries.some((e) => e.max !== undefined && e.max > e.replicas) ?? false);
}

/** The range as text: "1..3", or "2" for a fixed count. */
export function rangeText(r: ReplicaRange): string {
  return r.min === r.max ? String(r.min) : `${r.min}..${r.max}`;
}
