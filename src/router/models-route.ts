/**
 * GET /v1/models and GET /v1/models/:model — the models the caller's key may use, in OpenAI's list
 * shape, each with an `llmgw` extra field: its phase, replica counts, aliases and, when it is refused,
 * why (parked: the last error; unplaceable: the reason; failing: the last error).
 */
import type { FleetView, ModelPhase } from '../reconciler/view.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { grantAllows, type KeyGrant } from './auth.js';
import { describeError } from './resolve.js';

export interface ModelEntry {
  readonly id: string;
  readonly object: 'model';
  readonly created: number;
  readonly owned_by: string;
  readonly llmgw: {
    readonly phase: ModelPhase;
    readonly ready: number;
    readonly desired: number;
    readonly scaling: 'replicas' | 'on_demand';
    readonly aliases: readonly string[];
    /** Why the model is refused or not serving (parked, unplaceable, failing), else absent. */
    readonly reason?: string;
  };
}

export function modelEntry(fleet: FleetView, spec: ModelSpec): ModelEntry {
  const mv = fleet.model(spec.name);
  const ready = fleet.readyReplicas(spec.name).length;
  let reason: string | undefined;
  if (mv?.parked) reason = describeError(mv.parked.lastError);
  else if (mv?.phase === 'unplaceable' && mv.unplaceable) reason = mv.unplaceable.reason;
  else if (mv?.phase === 'failing' && mv.lastError) reason = describeError(mv.lastError);
  const firstStart = mv?.replicas.reduce((min, r) => Math.min(min, r.startedAt), Infinity);
  return {
    id: spec.name,
    object: 'model',
    created: firstStart !== undefined && Number.isFinite(firstStart) ? Math.floor(firstStart / 1000) : 0,
    owned_by: 'llmgw',
    llmgw: {
      phase: mv?.phase ?? 'pending',
      ready,
      desired: mv?.desired ?? 0,
      scaling: spec.scaling.mode,
      aliases: spec.aliases,
      ...(reason !== undefined ? { reason } : {}),
    },
  };
}

/** The models a key may use, by name. */
export function listModels(fleet: FleetView, spec: FleetSpec, grant: KeyGrant): { object: 'list'; data: ModelEntry[] } {
  const data: ModelEntry[] = [];
  for (const name of Object.keys(spec.models).sort()) {
    if (!grantAllows(grant, name)) continue;
    data.push(modelEntry(fleet, spec.models[name]!));
  }
  return { object: 'list', data };
}
