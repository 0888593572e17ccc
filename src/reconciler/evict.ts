/**
 * Room for an on-demand model by evicting idle on-demand replicas of others (pure; the planner's):
 * least recently used first, only those used less recently than the model asking, and only on the
 * nodes the newcomer lands on — extra replicas of scaling models before all of them, busy or not
 * (extraReplicas). With `busyLater`, whether room would come once busy replicas are done.
 */
import type { ModelSpec } from '../fleet-spec/types.js';
import { place, type DevicePlacement, type PlacementNode } from './placement.js';
import type { Located, PlanInput } from './planner.js';
import { rangeNow, scales } from '../scale/range.js';
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
  // scaling (#42): replicas above a model's floor give their room up first, however recent its requests
  const extras = extraReplicas(w.model.name, input, byModel, stoppedIds);
  const extraIds = new Set(extras.map((e) => e.located.r.id));
  victims.splice(0, victims.length, ...extras, ...victims.filter((v) => !extraIds.has(v.located.r.id)));
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

/**
 * The replicas of scaling models above their floor (the range's min, 1 on demand) that an activation
 * may take the room of (#42), never the asking model's own. A model's surplus is its newest replicas,
 * the ones scaling added (the oldest has the warmest cache, and the choice does not turn on which
 * replica was between two requests at the pass); a stop drains them (their requests finish, new ones
 * go to the model's other replicas). Across models the idle surplus goes first, then the busy; busy
 * extras go before anyone's last replica: under load every extra is busy, and the room is the activation's.
 */
export function extraReplicas(asking: string, input: Pick<PlanInput, 'spec' | 'now' | 'busy' | 'inFlight'>, byModel: ReadonlyMap<string, readonly Located[]>, stoppedIds: ReadonlySet<string>): { model: string; located: Located; lastRequestAt: number }[] {
  const out: { model: string; located: Located; lastRequestAt: number }[] = [];
  const inFlight = (l: Located): number => input.inFlight?.get(l.r.id) ?? (input.busy?.has(l.r.id) ? 1 : 0);
  for (const [model, list] of byModel) {
    const m = input.spec.models[model];
    if (!m || model === asking || !scales(m)) continue;
    const alive = list.filter((l) => l.r.state !== 'failed' && !stoppedIds.has(l.r.id));
    const spare = alive.length - (m.scaling.mode === 'on_demand' ? 1 : rangeNow(m, input.now).min);
    if (spare <= 0) continue;
    const cands = alive.filter((l) => l.reachable).sort((a, b) => b.r.startedAt - a.r.startedAt || a.r.id.localeCompare(b.r.id));
    for (const l of cands.slice(0, spare)) out.push({ model, located: l, lastRequestAt: -Infinity });
  }
  // idle extras of every model before any busy one
  return out.sort((a, b) => Number(inFlight(a.located) > 0) - Number(inFlight(b.located) > 0));
}
