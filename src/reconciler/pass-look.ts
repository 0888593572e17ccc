/**
 * What a pass looks at besides the nodes' observation (I/O, read-only): each model's memory need
 * (memory.ts: from the model file's header, read on a node or at its source) and which on-demand
 * replicas have requests in flight (their GET /slots).
 */
import type { ModelSpec, FleetSpec } from '../fleet-spec/types.js';
import type { DownloadToken } from '../nodes/driver.js';
import type { DeviceNeed, MemoryEstimate, MemoryEstimator } from './memory.js';
import type { NodeFleet } from './node-fleet.js';
import type { ObservedNode } from './planner.js';
import type { ControllerState } from './state.js';
import type { InFlight } from './stops.js';

/** Each model's memory need (null: not known), why it is not known, and its device need (#24). */
export interface MemoryLook {
  readonly needs: Record<string, number | null>;
  readonly errors: Record<string, string>;
  /** devices (#24): device need of models whose profile offloads layers. */
  readonly devices: Record<string, DeviceNeed>;
}

export async function estimateMemory(spec: FleetSpec, memory: MemoryEstimator, nodes: NodeFleet, downloadToken: (m: ModelSpec) => Promise<DownloadToken | undefined>): Promise<MemoryLook> {
  const needs: Record<string, number | null> = {};
  const errors: Record<string, string> = {};
  const devices: Record<string, DeviceNeed> = {};
  const take = (m: ModelSpec, e: MemoryEstimate): void => {
    needs[m.name] = 'bytes' in e ? e.bytes : null;
    if ('bytes' in e && e.device) devices[m.name] = e.device; // devices (#24)
    if ('error' in e) errors[m.name] = e.error;
  };
  const reads: Promise<void>[] = [];
  for (const m of Object.values(spec.models)) {
    // known without a read (most, once their headers were read): no promise per model
    const known = memory.known(m, spec.profiles[m.profile]!);
    if (known !== undefined) take(m, known);
    else reads.push(memory.estimate(m, spec.profiles[m.profile]!, () => nodes.rangeReaders(spec, m), async () => (await downloadToken(m))?.value ?? null).then((e) => take(m, e)));
  }
  await Promise.all(reads);
  return { needs, errors, devices };
}

/**
 * On-demand replicas with requests in flight (their /slots): never stopped as idle or evicted. Only
 * on-demand models are asked (only they are stopped for idleness or room), and only their ready
 * replicas not being stopped.
 */
export async function busyOnDemand(spec: FleetSpec, observed: readonly ObservedNode[], stops: ControllerState['stops'], inFlight: (endpoint: string) => Promise<InFlight>): Promise<ReadonlySet<string>> {
  const stopping = new Set(Object.keys(stops));
  const asks = observed
    .flatMap((n) => (n.reachable ? n.replicas : []))
    .filter((r) => r.state === 'ready' && !stopping.has(r.id) && spec.models[r.model]?.scaling.mode === 'on_demand');
  const busy = new Set<string>();
  await Promise.all(
    asks.map(async (r) => {
      const n = await inFlight(r.endpoint);
      if (typeof n === 'number' && n > 0) busy.add(r.id);
    }),
  );
  return busy;
}
