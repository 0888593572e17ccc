/**
 * Placement (pure): which nodes get a model's new replicas, or why it fits nowhere.
 * Need per replica = the model's memory; node room = capacity − reserve − replicas already
 * there. Replicas of one model spread over nodes (most free room first); a node selector limits
 * the candidates; unreachable nodes are unknown and never chosen.
 */
import { formatBytes } from '../fleet-spec/units.js';
import type { GpuLayers } from '../fleet-spec/types.js';
import { allLayers, deviceBytesFor, layersFitting, type DeviceNeed } from './memory.js';
import { pinnable } from '../nodes/devices.js';

/** A device of a node: its capacity (declared budget or what the engine reports) and what stays on it. */
export interface PlacementDevice {
  readonly name: string;
  readonly capacityBytes: number;
  readonly usedBytes: number;
}

/** What a request needs on devices: the per-layer need, the profile's gpu_layers and which devices may be used. */
export interface DeviceRequest {
  readonly need: DeviceNeed;
  readonly gpuLayers: GpuLayers;
  /** Backend names (Vulkan) or device names (Vulkan0); empty = any. */
  readonly allowed: readonly string[];
  /** Devices of one node per replica (tensor_split's length; 1 by default), sharing the need by `split`. */
  readonly split: readonly number[];
}

/** Where on a node a placed replica runs: its devices (empty: none) and -ngl there. */
export interface DevicePlacement {
  readonly devices: readonly string[];
  readonly gpuLayers: number | 'all';
}

export interface PlacementNode {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** Memory the node offers to replicas; null when not known (unreachable, not observed). */
  readonly capacityBytes: number | null;
  /** Memory already taken by replicas that stay. */
  readonly usedBytes: number;
  readonly reachable: boolean;
  readonly devices?: readonly PlacementDevice[];
  /** CPU cores the node offers (declared capacity.cpus, else observed); null or absent: not known. */
  readonly cores?: number | null;
}

export interface PlacementRequest {
  readonly model: string;
  /** New replicas wanted. */
  readonly count: number;
  /** Memory per replica; null when not known yet. */
  readonly memoryBytes: number | null;
  readonly nodeSelector: Readonly<Record<string, string>>;
  /** Nodes already running a replica of this model (spread away from them first). */
  readonly existingOn: readonly string[];
  /** Nodes not to use for now (they failed this model's start: a full disk, no free port). */
  readonly avoidNodes?: readonly string[];
  /** Set when the profile offloads layers to a device. */
  readonly device?: DeviceRequest;
  /**
   * The cores rule (an extra replica of a scaling model, #42): a node takes one more replica only
   * where threads × (the model's replicas there + 1) ≤ its cores; threads null (the profile sets
   * none): the engine takes every core, so one replica per node. Absent: the rule does not apply.
   */
  readonly cores?: { readonly threads: number | null };
}

export type UnplaceableCode = 'PLACEMENT_MEMORY_UNKNOWN' | 'PLACEMENT_NO_MATCHING_NODE' | 'PLACEMENT_NO_ROOM' | 'PLACEMENT_NO_DEVICE_ROOM' | 'PLACEMENT_NO_CORES' | 'PLACEMENT_GROUP_VERSIONS';

/** Why a model fits nowhere, as domain values (the reason text is derived from them). */
export interface Unplaceable {
  /** The catalogue sub-code of MODEL_UNPLACEABLE. */
  readonly code: UnplaceableCode;
  readonly reason: string;
  readonly needBytes: number | null;
  readonly largestFree: { readonly node: string; readonly bytes: number } | null;
  readonly checked: number;
  readonly excludedBySelector: number;
  readonly unknown: number;
  /** Nodes set aside for now because they failed this model's start. */
  readonly avoided: number;
  /** PLACEMENT_NO_DEVICE_ROOM: the device need and the largest free device ("node/Vulkan0"). */
  readonly device?: { readonly needBytes: number; readonly largestFree: { readonly node: string; readonly device: string; readonly bytes: number } | null };
  /** PLACEMENT_NO_CORES: threads per replica, and the nodes with the memory whose cores the model's replicas take. */
  readonly cores?: { readonly threads: number | null; readonly nodes: readonly CoresTaken[] };
}

/** A node whose cores a model's replicas already take (the cores rule). */
export interface CoresTaken {
  readonly node: string;
  readonly cores: number;
  readonly replicas: number;
}

export interface PlacementResult {
  readonly model: string;
  /** One node per placed replica (may repeat a node when the spread ran out of nodes). */
  readonly nodes: readonly string[];
  /** With a device request: where on each node of `nodes` (same order). */
  readonly devices?: readonly DevicePlacement[];
  /** Set when fewer than `count` replicas could be placed. */
  readonly unplaceable: Unplaceable | null;
}

export interface PlacementInput {
  readonly nodes: readonly PlacementNode[];
  readonly requests: readonly PlacementRequest[];
  readonly reserveBytes: number;
}

/** True when a node's labels carry every key = value of a model's node_selector. */
export function selectorMatches(selector: Readonly<Record<string, string>>, labels: Readonly<Record<string, string>>): boolean {
  for (const [k, v] of Object.entries(selector)) if (labels[k] !== v) return false;
  return true;
}

/**
 * Places requests in order: larger needs first (they are the hardest to fit), then by name, so the
 * result does not depend on the order requests were given in.
 */
export function place(input: PlacementInput): PlacementResult[] {
  const free = new Map<string, number>();
  for (const n of input.nodes) {
    if (n.reachable && n.capacityBytes !== null) free.set(n.name, n.capacityBytes - input.reserveBytes - n.usedBytes);
  }
  const devFree = new Map<string, Map<string, number>>();
  for (const n of input.nodes) {
    if (!n.reachable || !n.devices) continue;
    // only devices llmgw can pin a replica to (a backend with a visibility variable)
    devFree.set(n.name, new Map(n.devices.filter((d) => pinnable(d.name)).map((d) => [d.name, d.capacityBytes - d.usedBytes])));
  }
  const order = [...input.requests].sort(
    (a, b) => (b.memoryBytes ?? -1) - (a.memoryBytes ?? -1) || a.model.localeCompare(b.model),
  );
  const results = new Map<string, PlacementResult>();
  for (const req of order) results.set(req.model, placeOne(req, input.nodes, free, devFree));
  return input.requests.map((r) => results.get(r.model)!);
}

/** A device is allowed by a profile's devices: list (a backend or a device name; empty = any). */
export function deviceAllowed(allowed: readonly string[], device: string): boolean {
  return allowed.length === 0 || allowed.some((a) => a === device || a === device.replace(/\d+$/, ''));
}

/**
 * The devices of a node a replica gets (most free first), and its -ngl, or null when it does not
 * fit. auto takes as many layers as fit on the chosen device (0: none, the replica runs on the host).
 */
export function fitDevices(dev: DeviceRequest, devices: ReadonlyMap<string, number> | undefined): { devices: string[]; gpuLayers: number | 'all'; take: Map<string, number> } | null {
  const cands = [...(devices ?? new Map<string, number>())].filter(([name]) => deviceAllowed(dev.allowed, name)).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const k = Math.max(1, dev.split.length);
  const shares = dev.split.length > 0 ? dev.split.map((x) => x / (dev.split.reduce((a, b) => a + b, 0) || 1)) : [1];
  if (dev.gpuLayers === 'auto') {
    if (k !== 1 || cands.length === 0) return k === 1 ? { devices: [], gpuLayers: 0, take: new Map() } : null;
    const [name, f] = cands[0]!;
    const n = layersFitting(dev.need, f);
    if (n === 0) return { devices: [], gpuLayers: 0, take: new Map() };
    return { devices: [name], gpuLayers: n >= allLayers(dev.need) ? 'all' : n, take: new Map([[name, deviceBytesFor(dev.need, n)]]) };
  }
  const ngl = dev.gpuLayers === 'all' ? allLayers(dev.need) : dev.gpuLayers;
  if (ngl === 0) return { devices: [], gpuLayers: 0, take: new Map() };
  const total = deviceBytesFor(dev.need, ngl);
  if (cands.length < k) return null;
  const chosen = cands.slice(0, k);
  const take = new Map<string, number>();
  for (const [i, [name, f]] of chosen.entries()) {
    const part = Math.ceil(total * shares[i]!);
    if (f < part) return null;
    take.set(name, part);
  }
  return { devices: chosen.map(([n]) => n), gpuLayers: dev.gpuLayers === 'all' ? 'all' : ngl, take };
}

/** Bytes a device request needs on one device (all of it, or the first share); auto: one layer. */
export function deviceNeedBytes(dev: DeviceRequest): number {
  const ngl = dev.gpuLayers === 'all' ? allLayers(dev.need) : dev.gpuLayers === 'auto' ? 1 : dev.gpuLayers;
  const k = dev.split.length;
  const share = k > 0 ? Math.max(...dev.split) / (dev.split.reduce((a, b) => a + b, 0) || 1) : 1;
  return Math.ceil(deviceBytesFor(dev.need, ngl) * share);
}

function placeOne(req: PlacementRequest, nodes: readonly PlacementNode[], free: Map<string, number>, devFree: Map<string, Map<string, number>>): PlacementResult {
  if (req.count <= 0) return { model: req.model, nodes: [], unplaceable: null };
  const matching = nodes.filter((n) => selectorMatches(req.nodeSelector, n.labels));
  const excludedBySelector = nodes.length - matching.length;
  const selected = matching.filter((n) => !req.avoidNodes?.includes(n.name));
  const avoided = matching.length - selected.length;
  const known = selected.filter((n) => free.has(n.name));
  const unknown = selected.length - known.length;
  const base = { checked: nodes.length, excludedBySelector, unknown, avoided };

  if (req.memoryBytes === null) {
    return {
      model: req.model,
      nodes: [],
      unplaceable: { ...base, code: 'PLACEMENT_MEMORY_UNKNOWN', needBytes: null, largestFree: null, reason: `memory need unknown: the model file has not been read yet and models/${req.model}.yaml sets no memory` },
    };
  }
  const need = req.memoryBytes;
  const placed: string[] = [];
  const placedDevices: DevicePlacement[] = [];
  const hosting = new Map<string, number>();
  for (const n of req.existingOn) hosting.set(n, (hosting.get(n) ?? 0) + 1);
  let hostFits = false;
  const coresTaken = new Map<string, CoresTaken>();
  for (let i = 0; i < req.count; i++) {
    // fewest replicas of this model first (spread), then most free room, then name
    let pick: PlacementNode | undefined;
    let pickDev: ReturnType<typeof fitDevices> = null;
    for (const n of known) {
      const f = free.get(n.name)!;
      if (f < need) continue;
      hostFits = true;
      const onNode = hosting.get(n.name) ?? 0;
      if (req.cores && !coresAllow(req.cores.threads, n.cores, onNode)) {
        coresTaken.set(n.name, { node: n.name, cores: n.cores!, replicas: onNode });
        continue;
      }
      const fit = req.device ? fitDevices(req.device, devFree.get(n.name)) : null;
      if (req.device && fit === null) continue;
      if (!pick) {
        pick = n;
        pickDev = fit;
        continue;
      }
      const dh = (hosting.get(n.name) ?? 0) - (hosting.get(pick.name) ?? 0);
      const df = f - free.get(pick.name)!;
      if (dh < 0 || (dh === 0 && (df > 0 || (df === 0 && n.name < pick.name)))) {
        pick = n;
        pickDev = fit;
      }
    }
    if (!pick) break;
    placed.push(pick.name);
    free.set(pick.name, free.get(pick.name)! - need);
    if (req.device && pickDev) {
      placedDevices.push({ devices: pickDev.devices, gpuLayers: pickDev.gpuLayers });
      const df = devFree.get(pick.name);
      for (const [d, b] of pickDev.take) df?.set(d, (df.get(d) ?? 0) - b);
    }
    hosting.set(pick.name, (hosting.get(pick.name) ?? 0) + 1);
  }
  const withDevices = req.device ? { devices: placedDevices } : {};
  if (placed.length === req.count) return { model: req.model, nodes: placed, ...withDevices, unplaceable: null };
  if (req.cores && coresTaken.size > 0) {
    // nodes with the memory, whose cores this model's replicas take: another replica there adds nothing
    const taken = [...coresTaken.values()].sort((a, b) => b.cores - b.replicas * (req.cores!.threads ?? b.cores) - (a.cores - a.replicas * (req.cores!.threads ?? a.cores)) || a.node.localeCompare(b.node));
    const reason = coresReason(req.cores.threads, taken, placed.length, req.count, base);
    return { model: req.model, nodes: placed, ...withDevices, unplaceable: { ...base, code: 'PLACEMENT_NO_CORES', needBytes: need, largestFree: null, cores: { threads: req.cores.threads, nodes: taken }, reason } };
  }
  if (req.device && hostFits) {
    // the host had room somewhere; the devices did not
    const devNeed = deviceNeedBytes(req.device);
    let largestDev: { node: string; device: string; bytes: number } | null = null;
    for (const n of known) {
      for (const [d, f] of devFree.get(n.name) ?? []) {
        if (!deviceAllowed(req.device.allowed, d)) continue;
        const b = Math.max(0, f);
        if (!largestDev || b > largestDev.bytes) largestDev = { node: n.name, device: d, bytes: b };
      }
    }
    const reason = deviceUnplaceableReason(devNeed, largestDev, placed.length, req.count, base);
    return { model: req.model, nodes: placed, ...withDevices, unplaceable: { ...base, code: 'PLACEMENT_NO_DEVICE_ROOM', needBytes: need, largestFree: null, device: { needBytes: devNeed, largestFree: largestDev }, reason } };
  }

  let largest: { node: string; bytes: number } | null = null;
  for (const n of known) {
    const f = Math.max(0, free.get(n.name)!);
    if (!largest || f > largest.bytes) largest = { node: n.name, bytes: f };
  }
  return { model: req.model, nodes: placed, ...withDevices, unplaceable: { ...base, code: matching.length === 0 ? 'PLACEMENT_NO_MATCHING_NODE' : 'PLACEMENT_NO_ROOM', needBytes: need, largestFree: largest, reason: unplaceableReason(need, largest, placed.length, req.count, base) } };
}

/**
 * The cores rule (pure): whether a node running `onNode` replicas of a model takes one more, each
 * running `threads` threads (null: every core of the node). A node whose cores are not known is not held back.
 */
export function coresAllow(threads: number | null, cores: number | null | undefined, onNode: number): boolean {
  if (cores === null || cores === undefined || !(cores > 0)) return true;
  const t = threads !== null && threads > 0 ? threads : cores;
  return t * (onNode + 1) <= cores;
}

/** "each replica runs 1 thread; cpu-01: 2 of its 2 cores taken by 2 replicas of it (another would compete for them); 1 node checked". */
export function coresReason(
  threads: number | null,
  taken: readonly CoresTaken[],
  placedCount: number,
  wanted: number,
  counts: { checked: number; excludedBySelector: number; unknown: number; avoided?: number },
): string {
  const each = threads === null ? 'each replica runs a thread on every core (the profile sets no threads)' : `each replica runs ${threads} thread${threads === 1 ? '' : 's'}`;
  const pl = (n: number, w: string): string => `${n} ${w}${n === 1 ? '' : 's'}`;
  const shown = taken.slice(0, 3).map((t) => {
    if (t.replicas === 0) return `${t.node} has ${pl(t.cores, 'core')}, fewer than a replica's threads`;
    const used = Math.min(t.cores, (threads ?? t.cores) * t.replicas);
    return `${t.node}: ${used} of its ${pl(t.cores, 'core')} taken by ${pl(t.replicas, 'replica')} of it`;
  });
  const more = taken.length > 3 ? [`${taken.length - 3} more node${taken.length - 3 === 1 ? '' : 's'} alike`] : [];
  return [each, `${shown.join(', ')} (another would compete for them)`, ...more, ...checkedParts(counts, placedCount, wanted)].join('; ');
}

export function unplaceableReason(
  need: number,
  largest: { node: string; bytes: number } | null,
  placedCount: number,
  wanted: number,
  counts: { checked: number; excludedBySelector: number; unknown: number; avoided?: number },
): string {
  const parts = [`needs ${formatBytes(need)}${wanted > 1 ? ' per replica' : ''}`];
  if (largest) parts.push(`largest free ${formatBytes(largest.bytes)} on ${largest.node}`);
  else parts.push('no node with known free memory');
  return [...parts, ...checkedParts(counts, placedCount, wanted)].join('; ');
}

/**
 * The reason extra replicas of a scaling model did not all fit (#42), worded the same however many
 * were new this pass: always "per replica", never "placed K of N" (the caller's "wants 3, 2 fit"
 * says that). Otherwise the text would change with how the replicas arrived (one pass placing none
 * of 1 against another placing 1 of 2), and a status commit would follow each change.
 */
export function extraShortReason(u: Unplaceable): string {
  const perReplica = { placed: 0, wanted: 2 }; // wanted > 1: "per replica"; placed 0: no "placed K of N"
  if (u.code === 'PLACEMENT_NO_CORES' && u.cores) return coresReason(u.cores.threads, u.cores.nodes, perReplica.placed, perReplica.wanted, u);
  if (u.code === 'PLACEMENT_NO_DEVICE_ROOM' && u.device) return deviceUnplaceableReason(u.device.needBytes, u.device.largestFree, perReplica.placed, perReplica.wanted, u);
  if (u.code === 'PLACEMENT_NO_ROOM' && u.needBytes !== null) return unplaceableReason(u.needBytes, u.largestFree, perReplica.placed, perReplica.wanted, u);
  return u.reason;
}

/** The end both unplaceable reasons share: "3 nodes checked, 1 excluded by selector; placed 1 of 2". */
function checkedParts(counts: { checked: number; excludedBySelector: number; unknown: number; avoided?: number }, placedCount: number, wanted: number): string[] {
  let checked = `${counts.checked} node${counts.checked === 1 ? '' : 's'} checked`;
  if (counts.excludedBySelector) checked += `, ${counts.excludedBySelector} excluded by selector`;
  if (counts.unknown) checked += `, ${counts.unknown} unknown (unreachable or not observed)`;
  if (counts.avoided) checked += `, ${counts.avoided} set aside for now (it failed this model's start: see the last error)`;
  return placedCount > 0 ? [checked, `placed ${placedCount} of ${wanted}`] : [checked];
}

/** "needs 9.1 GiB on a GPU; largest free 7.8 GiB on node-a/Vulkan0; 3 nodes checked". */
export function deviceUnplaceableReason(
  need: number,
  largest: { node: string; device: string; bytes: number } | null,
  placedCount: number,
  wanted: number,
  counts: { checked: number; excludedBySelector: number; unknown: number; avoided?: number },
): string {
  const parts = [`needs ${formatBytes(need)} on a GPU${wanted > 1 ? ' per replica' : ''}`];
  parts.push(largest ? `largest free ${formatBytes(largest.bytes)} on ${largest.node}/${largest.device}` : 'no node with a usable device');
  return [...parts, ...checkedParts(counts, placedCount, wanted)].join('; ');
}
