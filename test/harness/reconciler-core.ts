/**
 * Fixtures for table tests of the reconciler's pure core: a loaded spec, observations, and a state
 * record built from a few fields.
 */
import { strict as assert } from 'node:assert';
import type { ReplicaObservation } from '../../src/nodes/driver.js';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { initialHealth } from '../../src/reconciler/health.js';
import type { ObservedNode } from '../../src/reconciler/planner.js';
import type { ControllerState } from '../../src/reconciler/state.js';
import { fromV2, type V2 } from './record-v2.js';
import { minimalFleet, tempFleet, type FleetFilesMap } from './fleet.js';

export const GiB = 2 ** 30;

export async function specOf(edit: (f: FleetFilesMap) => void = () => undefined): Promise<FleetSpec> {
  const files = minimalFleet();
  edit(files);
  const f = tempFleet(files);
  try {
    const r = await loadFleetSpec(dirFiles(f.dir), 'rev1');
    assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
    return r.spec;
  } finally {
    f.cleanup();
  }
}

export function observed(spec: FleetSpec, id: string, model: string, state: ReplicaObservation['state'], extra: Partial<ReplicaObservation> = {}): ReplicaObservation {
  return { id, model, digest: spec.models[model]!.digest, port: 20000, pid: 100, startedAt: 1000, endpoint: 'http://x:20000', state, ...extra };
}

export function node(name: string, replicas: ReplicaObservation[] = [], reachable = true): ObservedNode {
  return { name, reachable, memoryTotalBytes: 64 * GiB, replicas };
}

/** A record with fresh health for every model of the spec, then the given facts (as the version-2 maps name them). */
export function stateFor(spec: FleetSpec, over: Partial<V2> = {}): ControllerState {
  const models = Object.fromEntries(Object.values(spec.models).map((m) => [m.name, initialHealth(m.digest)]));
  return fromV2({ ...over, models: { ...models, ...over.models } });
}

export const memoryOf = (spec: FleetSpec): Record<string, number | null> => Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes]));

/** The fleet with one always-on model, alpha (beta and gamma removed): a model whose starts the test fails. */
export const alphaOnlySpec = (): Promise<FleetSpec> => specOf((f) => {
  delete f['models/beta.yaml'];
  delete f['models/gamma.yaml'];
});

/** The engine's reason an unknown-architecture start fails with (the kev demo model's). */
export const KEV_FAILURE = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" } as const;
