/**
 * Room for an on-demand model by evicting idle on-demand replicas of others (pure; the planner's):
 * least recently used first, only those used less recently than the model asking, and only on the
 * nodes the newcomer lands on. With `busyLater`, whether room would come once busy replicas are done.
 */
import type { ModelSpec } from '../fleet-spec/types.js';
import { place, type DevicePlacement, type PlacementNode } from './placement.js';
import type { Located, PlanInput } from './planner.js';
// devices (#24)
import { addDeviceUse, deviceRequestOf, replicaDeviceBytes, type DeviceDelta } from './device-use.js';

/** devices (#24) */
export function optionalDevice<T>(d: T | undefined): { device?: T } {
  return d === undefined ? {} : { device: d };
}

export function evictFor(
  w: { model: ModelSpec; count: number; existingOn: string[]; avoidNodes: string[] },
  input: PlanInput,
  byModel: ReadonlyMap<string, readonly Located[]>,
  stoppedIds: ReadonlySet<string>,
  placementNodes: (extraFree: ReadonlyMap<string, number>, devicesFreed?: DeviceDelta) => PlacementNode[],
  /** Whether room would come once the busy replicas are done (they count as victims, whatever their last request). */
  busyLater = false,
): { stop: { model: string; located: Located }[]; nodes: readonly string[]; devices?: readonly DevicePlacement[] } | null {
  const victims: { model: string; located: Located; lastRequestAt: number }[] = [];
  // Only replicas used less recently than the model asking for room: two busy on-demand models
  // never evict each other in turn.
  const mine = input.demand[w.model.name]?.lastRequestAt ?? 0;
  for (const [model, list] of byModel) {
    const m = input.spec.models[model];
    if (!m || m.scaling.mode !== 'on_demand' || model === w.model.name) continue;
    const recent = (input.demand[model]?.lastRequestAt ?? 0) >= mine;
    for (const l of list) {
      const busy = input.busy?.has(l.r.id) ?? false;
      if (busy ? !busyLater : recent) continue;
      if (!l.reachable || l.r.state === 'failed' || stoppedIds.has(l.r.id)) continue;
      victims.push({ model, located: l, lastRequestAt: input.demand[model]?.lastRequestAt ?? 0 });
    }
  }
  victims.sort((a, b) => a.lastRequestAt - b.lastRequestAt || a.located.r.id.localeCompare(b.located.r.id));
  const freed = new Map<string, number>();
  const devicesFreed: DeviceDelta = new Map(); // devices (#24)
  const chosen: { model: string; located: Located }[] = [];
  for (const v of victims) {
    freed.set(v.located.node, (freed.get(v.located.node) ?? 0) + (input.memory[v.model] ?? 0));
    addDeviceUse(devicesFreed, v.located.node, replicaDeviceBytes(v.located.r, input.deviceNeeds?.[v.model], []), -1);
    chosen.push(v);
    const [r] = place({
      nodes: placementNodes(freed, devicesFreed),
      requests: [{ model: w.model.name, count: w.count, memoryBytes: input.memory[w.model.name] ?? null, nodeSelector: w.model.nodeSelector, existingOn: w.existingOn, avoidNodes: w.avoidNodes, ...optionalDevice(deviceRequestOf(input.spec, w.model.name, input.deviceNeeds)) }],
      reserveBytes: input.spec.settings.placementReserveBytes,
    });
    if (r && !r.unplaceable) {
      // Only evict on the nodes the new replica lands on.
      const landing = new Set(r.nodes);
      return { stop: chosen.filter((c) => landing.has(c.located.node)), nodes: r.nodes, ...(r.devices ? { devices: r.devices } : {}) };
    }
  }
  return null;
}
