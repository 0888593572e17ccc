/**
 * Device memory in the planner's terms (pure): what each node's devices offer (a declared budget
 * from nodes/<node>.yaml capacity.devices, else what the engine reports) and what the replicas that
 * stay take on them, from the devices and -ngl each replica was started with (recorded on the node)
 * and its model's device need.
 *
 * A start in flight whose replica the node does not show yet has no recorded device: it is counted
 * on the allowed device with the most free room (where placement put it, for one device per node).
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import type { ReplicaObservation } from '../nodes/driver.js';
import { pinnable } from '../nodes/devices.js';
import { allLayers, deviceBytesFor, type DeviceNeed } from './memory.js';
import { deviceAllowed, type DeviceRequest, type PlacementDevice } from './placement.js';
import type { ReplicaDeviceView } from './view.js';

export interface ObservedDevice {
  readonly name: string;
  readonly totalBytes: number;
}

/** The device request of a model whose profile offloads layers and whose device need is known. */
export function deviceRequestOf(spec: FleetSpec, model: string, needs: Readonly<Record<string, DeviceNeed>> | undefined): DeviceRequest | undefined {
  const m = spec.models[model];
  const p = m ? spec.profiles[m.profile] : undefined;
  const need = needs?.[model];
  if (!p || !need || p.gpuLayers == null || p.gpuLayers === 0) return undefined;
  return { need, gpuLayers: p.gpuLayers, allowed: p.devices ?? [], split: p.tensorSplit ?? [] };
}

/** Bytes a running replica takes on each of its devices. */
export function replicaDeviceBytes(r: Pick<ReplicaObservation, 'devices' | 'gpuLayers'>, need: DeviceNeed | undefined, split: readonly number[]): Map<string, number> {
  const out = new Map<string, number>();
  const devices = r.devices ?? [];
  if (!need || devices.length === 0) return out;
  const ngl = r.gpuLayers === undefined || r.gpuLayers === 'all' ? allLayers(need) : r.gpuLayers;
  const total = deviceBytesFor(need, ngl);
  const sum = split.reduce((a, b) => a + b, 0);
  devices.forEach((d, i) => out.set(d, Math.ceil(split.length === devices.length && sum > 0 ? (total * split[i]!) / sum : total / devices.length)));
  return out;
}

/**
 * A running replica's place on devices as the snapshot shows it, or undefined for one on the host
 * only: its devices, its layers there (llama-server's own count where its log says it, else the -ngl
 * asked, at most the model's count), and what placement reserves for it (a failed one: nothing).
 */
export function replicaDeviceView(r: Pick<ReplicaObservation, 'devices' | 'gpuLayers' | 'offloaded' | 'state'>, need: DeviceNeed | undefined, split: readonly number[]): ReplicaDeviceView | undefined {
  const devices = r.devices ?? [];
  if (devices.length === 0) return undefined;
  const of = r.offloaded?.of ?? (need ? allLayers(need) : null);
  const asked = r.gpuLayers === undefined || r.gpuLayers === 'all' ? of : of === null ? r.gpuLayers : Math.min(r.gpuLayers, of);
  let reservedBytes: number | null = null;
  if (r.state === 'failed') reservedBytes = 0;
  else if (need) reservedBytes = [...replicaDeviceBytes(r, need, split).values()].reduce((a, b) => a + b, 0);
  return { devices: [...devices], layers: r.offloaded?.layers ?? asked, of, from: r.offloaded ? 'reported' : 'asked', reservedBytes };
}

export interface DeviceUseInput {
  readonly spec: FleetSpec;
  readonly needs: Readonly<Record<string, DeviceNeed>> | undefined;
  /** Per node: its devices and the replicas that stay (with their model). */
  readonly nodes: readonly { readonly name: string; readonly devices: readonly ObservedDevice[]; readonly replicas: readonly { readonly model: string; readonly r: Pick<ReplicaObservation, 'devices' | 'gpuLayers'> }[] }[];
  /** Starts in flight not visible on their node yet. */
  readonly pending: readonly { readonly model: string; readonly node: string }[];
}

/** Each node's devices as placement sees them: capacity and what stays on them. */
export function placementDevices(i: DeviceUseInput): Map<string, PlacementDevice[]> {
  const out = new Map<string, PlacementDevice[]>();
  for (const n of i.nodes) {
    const declared = i.spec.nodes[n.name]?.deviceMemory ?? {};
    const used = new Map<string, number>();
    for (const { model, r } of n.replicas) {
      const m = i.spec.models[model];
      const split = (m && i.spec.profiles[m.profile]?.tensorSplit) || [];
      for (const [d, b] of replicaDeviceBytes(r, i.needs?.[model], split)) used.set(d, (used.get(d) ?? 0) + b);
    }
    // only devices llmgw can pin a replica to (a backend with a visibility variable)
    const devices = n.devices.filter((d) => pinnable(d.name)).map((d) => ({ name: d.name, capacityBytes: declared[d.name] ?? d.totalBytes }));
    for (const p of i.pending.filter((s) => s.node === n.name)) {
      const req = deviceRequestOf(i.spec, p.model, i.needs);
      if (!req) continue;
      const cands = devices.filter((d) => deviceAllowed(req.allowed, d.name)).sort((a, b) => (b.capacityBytes - (used.get(b.name) ?? 0)) - (a.capacityBytes - (used.get(a.name) ?? 0)));
      const d = cands[0];
      if (d) used.set(d.name, (used.get(d.name) ?? 0) + deviceBytesFor(req.need, req.gpuLayers === 'all' || req.gpuLayers === 'auto' ? allLayers(req.need) : req.gpuLayers));
    }
    out.set(n.name, devices.map((d) => ({ ...d, usedBytes: used.get(d.name) ?? 0 })));
  }
  return out;
}

/** Per node, per device: bytes to add to what is used (placements of this pass) or take off it (evictions). */
export type DeviceDelta = Map<string, Map<string, number>>;

export function addDeviceUse(delta: DeviceDelta, node: string, use: ReadonlyMap<string, number>, sign: 1 | -1): void {
  const m = delta.get(node) ?? new Map<string, number>();
  for (const [d, b] of use) m.set(d, (m.get(d) ?? 0) + sign * b);
  delta.set(node, m);
}

/** A node's devices with deltas applied. */
export function applyDeviceDelta(devices: readonly PlacementDevice[], ...deltas: (ReadonlyMap<string, number> | undefined)[]): PlacementDevice[] {
  return devices.map((d) => ({ ...d, usedBytes: d.usedBytes + deltas.reduce((s, m) => s + (m?.get(d.name) ?? 0), 0) }));
}

/** What a replica placed by this pass takes on its devices. */
export function placedDeviceBytes(spec: FleetSpec, model: string, needs: Readonly<Record<string, DeviceNeed>> | undefined, p: { readonly devices: readonly string[]; readonly gpuLayers: number | 'all' } | undefined): Map<string, number> {
  if (!p || p.devices.length === 0) return new Map();
  const m = spec.models[model];
  return replicaDeviceBytes({ devices: p.devices, gpuLayers: p.gpuLayers }, needs?.[model], (m && spec.profiles[m.profile]?.tensorSplit) || []);
}
