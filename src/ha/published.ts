/**
 * The fleet snapshot as the leader publishes it in etcd for the standbys (pure): what routing and
 * `ctl status` need — models with their phases, reasons and replicas (endpoints included), and nodes
 * — without what moves on every pass (times of the pass, sync and status write, nodes' free memory
 * and disk), so an unchanged fleet publishes nothing. A model's spec is not published: a standby
 * reads the same fleet repo and attaches its own.
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import type { ControlView, FleetSnapshot, ModelView, NodeView } from '../reconciler/view.js';

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

export function publishedOf(s: FleetSnapshot): PublishedSnapshot {
  return {
    v: 1,
    appliedRevision: s.appliedRevision,
    specValid: s.specValid,
    rejected: s.rejected,
    lastSyncError: s.lastSyncError,
    stateError: s.stateError,
    models: s.models.map(({ spec: _spec, ...m }) => m),
    nodes: s.nodes.map(({ memory: _m, diskFreeBytes: _d, ...n }) => (n.devices ? { ...n, devices: n.devices.map((d) => ({ ...d, freeBytes: null })) } : n)),
  };
}

/** The published value as stored: one JSON string (equal strings = nothing to write). */
export function publishedJson(s: FleetSnapshot): string {
  return JSON.stringify(publishedOf(s));
}

export function parsePublished(json: string): PublishedSnapshot | null {
  try {
    const v = JSON.parse(json) as Partial<PublishedSnapshot> | null;
    return v && v.v === 1 && Array.isArray(v.models) && Array.isArray(v.nodes) ? (v as PublishedSnapshot) : null;
  } catch {
    return null;
  }
}

/**
 * A standby's snapshot: the leader's published one with this instance's spec attached (a model the
 * standby's spec does not hold yet is left out until its fleet repo catches up).
 */
export function standbySnapshot(p: PublishedSnapshot | null, spec: FleetSpec | null, control: ControlView, now: number): FleetSnapshot {
  const models: ModelView[] = [];
  for (const m of p?.models ?? []) {
    const ms = spec?.models[m.name];
    if (ms) models.push({ ...m, spec: ms });
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
