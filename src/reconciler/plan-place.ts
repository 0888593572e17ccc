/**
 * A pass's last step (pure, planner.ts): where the models' missing replicas go — floors first,
 * extras last (place-order.ts), against the memory and devices in use — and, where one fits nowhere,
 * a surge's drain, an on-demand model's evictions, a wait for room, or its unplaceable reason.
 */
import type { PlacementNode, PlacementRequest, PlacementResult } from './placement.js';
import { placeInOrder } from './place-order.js';
import { avoidKey } from './state.js';
import { evictFor, optionalDevice } from './evict.js';
import type { PlanDraft, PlanInput, Seen, StopReason, Located } from './planner.js';
import { stopIn } from './planner.js';
import type { Want } from './plan-wants.js';
import { placeGroups } from './group-start.js';
// --- devices (#24): the planner's only device hooks are marked "devices (#24)" ---
import { addDeviceUse, applyDeviceDelta, deviceRequestOf, placedDeviceBytes, placementDevices, type DeviceDelta } from './device-use.js';

/** The starts of the models' missing replicas (into `out`), or their evictions, drains, waits and reasons. */
export function placeWants(input: PlanInput, seen: Seen, wants: readonly Want[], out: PlanDraft): void {
  const { spec } = input;
  const { byModel, stoppingByModel, inflightByModel } = seen;
  const stop = (model: string, l: Located, reason: StopReason): void => stopIn(out, model, l, reason);
  // Memory in use per node: every replica whose process lives (including in-flight starts, and
  // replicas being stopped: their memory is free only once their process is gone).
  // An RPC group's replica (#40) uses each host's share instead.
  const used = new Map<string, number>();
  const mem = (model: string): number => input.memory[model] ?? 0;
  const use = (id: string, node: string, model: string): void => {
    const group = input.groups?.get(id);
    if (group === undefined) used.set(node, (used.get(node) ?? 0) + mem(model));
    else for (const h of group) used.set(h.node, (used.get(h.node) ?? 0) + h.bytes);
  };
  for (const [model, list] of byModel) for (const l of list) if (l.r.state !== 'failed') use(l.r.id, l.node, model);
  for (const [model, list] of stoppingByModel) for (const l of list) use(l.r.id, l.node, model);
  for (const [model, list] of inflightByModel) for (const s of list) use(s.replicaId, s.node, model);

  // This pass's stops free no room for its placement: a replica's memory is in use until its
  // process is gone (the stop finishes in the background, and the pass after it places).
  const stoppedIds = new Set(out.actions.filter((a) => a.kind === 'stop').map((a) => a.replicaId));
  const evictionsRunning = [...stoppingByModel.values()].flat().length > 0;

  // devices (#24): device room of the replicas on the node — a stopping one's until its process is gone, like its RAM
  const devices = placementDevices({
    spec, needs: input.deviceNeeds, pending: [...inflightByModel.values()].flat(),
    nodes: input.nodes.map((n) => ({ name: n.name, devices: n.devices ?? [], replicas: n.replicas.filter((r) => r.state !== 'failed').map((r) => ({ model: r.model, r })) })),
  });
  const devicesPlaced: DeviceDelta = new Map(); // devices (#24): what this pass's placements take
  const placementNodes = (extraFree: ReadonlyMap<string, number> = new Map(), devicesFreed: DeviceDelta = new Map()): PlacementNode[] =>
    input.nodes.map((n) => {
      const ns = spec.nodes[n.name];
      return {
        name: n.name,
        labels: ns?.labels ?? {},
        capacityBytes: ns?.capacity.memoryBytes ?? n.memoryTotalBytes,
        usedBytes: (used.get(n.name) ?? 0) - (extraFree.get(n.name) ?? 0),
        reachable: n.reachable && ns !== undefined,
        cores: ns?.capacity.cpus ?? n.cpus ?? null,
        devices: applyDeviceDelta(devices.get(n.name) ?? [], devicesPlaced.get(n.name), devicesFreed.get(n.name)),
      };
    });
  const avoided = (model: string): string[] => input.nodes.map((n) => n.name).filter((n) => input.avoid?.has(avoidKey(model, n)));
  const requests: PlacementRequest[] = wants.map((w) => ({
    model: w.model.name,
    count: w.floorCount,
    memoryBytes: input.memory[w.model.name] ?? null,
    nodeSelector: w.model.nodeSelector,
    existingOn: w.existingOn,
    avoidNodes: avoided(w.model.name),
    ...optionalDevice(deviceRequestOf(spec, w.model.name, input.deviceNeeds)),
  }));
  // What this pass's placements take, so an eviction below places against it, not against the room before them.
  const placedUse = new Map<string, number>();
  const take = (model: string, nodes: readonly string[]): void => {
    for (const n of nodes) placedUse.set(n, (placedUse.get(n) ?? 0) + mem(model));
  };
  // devices (#24): what each placement takes on its devices
  const placeDevices = (r: PlacementResult): void =>
    r.nodes.forEach((n, k) => addDeviceUse(devicesPlaced, n, placedDeviceBytes(spec, r.model, input.deviceNeeds, r.devices?.[k]), 1));
  // floors first (always-on together, then on-demand by recency), extras last (place-order.ts)
  const ordered = placeInOrder(
    wants.map((w, i) => ({
      onDemand: w.model.scaling.mode === 'on_demand',
      recency: input.demand[w.model.name]?.lastRequestAt ?? 0,
      floor: requests[i]!,
      extra: w.count > w.floorCount ? { ...requests[i]!, count: w.count - w.floorCount, cores: { threads: spec.profiles[w.model.profile]?.threads ?? null } } : null,
    })),
    () => placementNodes(new Map([...placedUse].map(([n, b]) => [n, -b]))),
    spec.settings.placementReserveBytes,
    (r) => {
      take(r.model, r.nodes);
      placeDevices(r); // devices (#24)
    },
  );
  const results = ordered.map((o) => o.result);
  const roomAfterPlacements = (freed: ReadonlyMap<string, number>, devicesFreed?: DeviceDelta): PlacementNode[] =>
    placementNodes(new Map(input.nodes.map((n) => [n.name, (freed.get(n.name) ?? 0) - (placedUse.get(n.name) ?? 0)])), devicesFreed);

  for (const [i, r] of results.entries()) {
    const w = wants[i]!;
    const nodes = r.nodes;
    // extra replicas (scaling) that fit nowhere: the model serves at its floor, evicts nobody and is not unplaceable
    const extraShort = ordered[i]!.extraUnplaceable;
    if (extraShort) out.short[w.model.name] = { wants: out.desired[w.model.name] ?? 0, fit: w.existingOn.length + nodes.length, code: extraShort.code, reason: extraShort.reason };
    // A model that may spread (#40) and fits on no node alone: its missing replicas as RPC groups;
    // where not even a group fits, what follows (a surge's drain, a wait) as for any replica, with the group's reason
    let unplaceable = r.unplaceable;
    if (r.unplaceable && nodes.length === 0 && w.model.placement?.spread === 'rpc') {
      const g = placeGroups(input, w, requests[i]!.count, roomAfterPlacements(new Map()), avoided(w.model.name));
      for (const s of g.starts) {
        out.actions.push(s);
        for (const h of s.group) placedUse.set(h.node, (placedUse.get(h.node) ?? 0) + h.bytes);
      }
      if (g.starts.length > 0) continue;
      unplaceable = g.unplaceable ?? unplaceable;
    }
    if (r.unplaceable && nodes.length === 0) {
      // Surge restart without room: drain the oldest outdated replica, then take its place.
      if (w.surge) {
        const oldest = [...w.outdated].sort((a, b) => a.r.startedAt - b.r.startedAt)[0];
        if (oldest && input.draining[oldest.r.id] === undefined && !stoppedIds.has(oldest.r.id)) out.drainStarted.push(oldest.r.id);
        continue;
      }
      if (w.roomComing) continue;
      // An on-demand model may take the room of idle on-demand replicas (nothing in flight), least
      // recently used first. The victims drain and stop; the newcomer starts in the pass after
      // (their memory is in use until then), and waits meanwhile — so does any model while some
      // replica's stop is still running (its room may be the one it needs).
      if (w.model.scaling.mode === 'on_demand') {
        if (evictionsRunning) continue;
        const evicted = evictFor({ ...w, count: w.floorCount, avoidNodes: avoided(w.model.name) }, input, byModel, stoppedIds, roomAfterPlacements);
        if (evicted) {
          for (const l of evicted.stop) {
            stop(l.model, l.located, 'evicted');
            stoppedIds.add(l.located.r.id);
          }
          continue;
        }
        // room held by replicas with work in flight: the newcomer waits for it to end
        if (evictFor({ ...w, count: w.floorCount, avoidNodes: avoided(w.model.name) }, input, byModel, stoppedIds, roomAfterPlacements, true)) {
          out.waitingForRoom.push(w.model.name);
          continue;
        }
      }
      if (nodes.length === 0) {
        out.unplaceable[w.model.name] = unplaceable!;
        continue;
      }
    }
    for (const [k, node] of nodes.entries()) {
      const dev = r.devices?.[k]; // devices (#24)
      const onDevice = dev && dev.devices.length > 0 ? { devices: dev.devices, gpuLayers: dev.gpuLayers } : {};
      out.actions.push({ kind: 'start', model: w.model.name, node, replicaId: input.newReplicaId(w.model.name, w.model.digest), digest: w.model.digest, ...onDevice });
    }
  }
}
