/**
 * Group placement (pure, #40): where a replica of a `placement: {spread: rpc}` model runs as a
 * llama.cpp RPC group when — and only when — no single node has room for it. It reads what place()
 * reads (nodes' capacity, what stays on them, the reserve, the selector, the nodes set aside) and
 * answers: solo (a node fits it: place() places it, never split), a group (the fewest hosts, 2 up
 * to max_hosts; the head the node with the most free memory, the workers the next ones; each
 * host's share of the layers in proportion to its free memory, as llama.cpp splits by each
 * device's free memory), or unplaceable with the numbers, worded like a replica's.
 *
 * The split: the head keeps the first layers and what is not a repeating layer (embeddings and
 * output weights, the prompt cache, the profile's overhead: llama-server's own process); the
 * workers take the later layers in order (llama.cpp offloads layers from the end). Device (GPU)
 * memory is not accounted for groups: a group is placed by host memory.
 */
import { formatBytes } from '../fleet-spec/units.js';
import type { GgufShape } from './memory.js';
import { kvCacheBytes } from './memory.js';
import { selectorMatches, unplaceableReason, type PlacementNode, type Unplaceable } from './placement.js';

/** What a replica's repeating layers hold, layer by layer (the split's unit). */
export interface GroupLayers {
  readonly weightBytes: readonly number[];
  readonly kvBytes: readonly number[];
}

export interface GroupRequest {
  readonly model: string;
  /** The replica's whole need (as place() uses it); null when not known yet. */
  readonly memoryBytes: number | null;
  readonly nodeSelector: Readonly<Record<string, string>>;
  /** Hosts at most, the head included (2..8). */
  readonly maxHosts: number;
  readonly avoidNodes?: readonly string[];
  /** Its layers, when the GGUF header was read; absent or null: the split is in bytes only. */
  readonly layers?: GroupLayers | null;
  /** The engine and version the model's profile runs. */
  readonly engine?: { readonly name: string; readonly version: string };
  /**
   * The version of that engine each node would run the group with (what it has installed); a node
   * not named gets the profile's version installed. Hosts on different versions form no group.
   */
  readonly installed?: Readonly<Record<string, string>>;
  /**
   * The build of the profile's engine version (what its `--version` named) on each node where it is
   * installed; null: installed, build not recorded. When given, only these nodes host a group (its
   * hosts' builds are known before it forms), and hosts of different builds form no group.
   */
  readonly builds?: Readonly<Record<string, string | null>>;
}

export interface GroupHost {
  readonly node: string;
  readonly role: 'head' | 'worker';
  /** Its free memory before the group (capacity − reserve − what stays there). */
  readonly freeBytes: number;
  /** Repeating layers on it (first index, how many); null when the layers are not known. */
  readonly layers: { readonly first: number; readonly count: number } | null;
  /** Weights and KV cache of its layers; null when not known. */
  readonly weightBytes: number | null;
  readonly kvBytes: number | null;
  /** The head's alone (with layers known): weights of no layer (embeddings, output), the prompt cache, the overhead; 0 elsewhere. */
  readonly ownBytes: number;
  /** What it holds of the replica, in all. */
  readonly bytes: number;
}

export type GroupPlacement =
  /** A node fits it alone: placed as any replica (place()), never split. */
  | { readonly kind: 'solo'; readonly node: string }
  | { readonly kind: 'group'; readonly hosts: readonly GroupHost[]; readonly totalLayers: number | null; readonly why: string }
  | { readonly kind: 'unplaceable'; readonly unplaceable: Unplaceable };

export interface GroupPlacementInput {
  readonly nodes: readonly PlacementNode[];
  readonly reserveBytes: number;
  readonly request: GroupRequest;
}

/** A replica's layers from its GGUF shape: the tensor table's weights per layer, else the file over the block count. */
export function groupLayersOf(shape: GgufShape, ctxSize: number): GroupLayers | null {
  if (shape.layers <= 0) return null;
  const kv = kvCacheBytes(shape, ctxSize) / shape.layers;
  const t = shape.tensors?.layerBytes;
  const weightBytes = t && t.length === shape.layers ? t : new Array<number>(shape.layers).fill(shape.fileBytes / shape.layers);
  return { weightBytes, kvBytes: new Array<number>(shape.layers).fill(kv) };
}

interface Candidate {
  readonly node: string;
  readonly free: number;
}

export function placeGroup(input: GroupPlacementInput): GroupPlacement {
  const { request: req, nodes } = input;
  const matching = nodes.filter((n) => selectorMatches(req.nodeSelector, n.labels));
  const selected = matching.filter((n) => !req.avoidNodes?.includes(n.name));
  const known = selected.filter((n) => n.reachable && n.capacityBytes !== null && (req.builds === undefined || n.name in req.builds));
  const counts = { checked: nodes.length, excludedBySelector: nodes.length - matching.length, unknown: selected.length - known.length, avoided: matching.length - selected.length };
  const cands: Candidate[] = known
    .map((n) => ({ node: n.name, free: Math.max(0, n.capacityBytes! - input.reserveBytes - n.usedBytes) }))
    .sort((a, b) => b.free - a.free || a.node.localeCompare(b.node));
  const unplaceable = (u: Omit<Unplaceable, 'checked' | 'excludedBySelector' | 'unknown' | 'avoided'>): GroupPlacement => ({ kind: 'unplaceable', unplaceable: { ...counts, ...u } });

  if (req.memoryBytes === null) {
    return unplaceable({ code: 'PLACEMENT_MEMORY_UNKNOWN', needBytes: null, largestFree: null, reason: `memory need unknown: the model file has not been read yet and models/${req.model}.yaml sets no memory` });
  }
  const need = req.memoryBytes;
  const largest = cands[0] ? { node: cands[0].node, bytes: cands[0].free } : null;
  if (largest && largest.bytes >= need) return { kind: 'solo', node: largest.node };

  const most = Math.min(Math.max(2, req.maxHosts), cands.length);
  for (let k = 2; k <= most; k++) {
    const hosts = splitOver(cands.slice(0, k), need, req.layers ?? null);
    if (!hosts) continue;
    const mismatch = versionMismatch(hosts, req) ?? buildMismatch(hosts, req);
    if (mismatch) return unplaceable({ code: 'PLACEMENT_GROUP_VERSIONS', needBytes: need, largestFree: largest, reason: mismatch });
    return { kind: 'group', hosts, totalLayers: req.layers ? req.layers.weightBytes.length : null, why: groupWhy(need, hosts) };
  }
  const base = unplaceableReason(need, largest, 0, 1, counts).split('; ');
  const mostFree = cands.slice(0, most).reduce((s, c) => s + c.free, 0);
  // (no candidate at all: the replica's reason says so already)
  const groupPart = cands.length === 0 ? [] : cands.length === 1
    ? ['a group needs 2 nodes, only 1 has known free memory']
    : [`group of ${most} at most ${formatBytes(mostFree)}${mostFree >= need ? ', and its layers do not divide to fit' : ''}`];
  // "needs 64 GiB; largest free 40 GiB on node-a; group of 3 at most 58 GiB; 3 nodes checked"
  const reason = [...base.slice(0, 2), ...groupPart, ...base.slice(2)].join('; ');
  return unplaceable({ code: matching.length === 0 ? 'PLACEMENT_NO_MATCHING_NODE' : 'PLACEMENT_NO_ROOM', needBytes: need, largestFree: largest, reason });
}

/**
 * The need split over these hosts (the first the head), or null when a host's share does not fit
 * its free memory. With layers: each host's share of the layers' bytes in proportion to its room
 * (the head's room less what it alone holds), layer by layer in order, as llama.cpp splits by
 * cumulative fractions; without: the bytes in proportion to free memory.
 */
export function splitOver(hosts: readonly Candidate[], need: number, layers: GroupLayers | null): GroupHost[] | null {
  const role = (i: number): GroupHost['role'] => (i === 0 ? 'head' : 'worker');
  if (!layers || layers.weightBytes.length === 0) {
    const total = hosts.reduce((s, h) => s + h.free, 0);
    if (total <= 0) return null;
    const workers = hosts.slice(1).map((h) => Math.floor((need * h.free) / total));
    const shares = [need - workers.reduce((s, b) => s + b, 0), ...workers];
    if (shares.some((b, i) => b > hosts[i]!.free)) return null;
    return hosts.map((h, i) => ({ node: h.node, role: role(i), freeBytes: h.free, layers: null, weightBytes: null, kvBytes: null, ownBytes: 0, bytes: shares[i]! }));
  }
  const n = layers.weightBytes.length;
  const per = layers.weightBytes.map((w, j) => w + layers.kvBytes[j]!);
  const layerTotal = per.reduce((s, b) => s + b, 0);
  const headOnly = Math.max(0, need - layerTotal);
  const rooms = hosts.map((h, i) => Math.max(0, i === 0 ? h.free - headOnly : h.free));
  const roomTotal = rooms.reduce((s, r) => s + r, 0);
  if (roomTotal <= 0) return null;
  // host i takes the layers whose middle falls below its cumulative share of the layers' bytes
  const bounds: number[] = [];
  let acc = 0;
  for (const r of rooms) bounds.push(((acc += r) / roomTotal) * layerTotal);
  const owner: number[] = [];
  let before = 0;
  for (let j = 0, i = 0; j < n; j++) {
    const mid = before + per[j]! / 2;
    while (i < hosts.length - 1 && mid > bounds[i]!) i++;
    owner.push(i);
    before += per[j]!;
  }
  const out: GroupHost[] = [];
  for (const [i, h] of hosts.entries()) {
    const mine = owner.flatMap((o, j) => (o === i ? [j] : []));
    const weights = mine.reduce((s, j) => s + layers.weightBytes[j]!, 0);
    const kv = mine.reduce((s, j) => s + layers.kvBytes[j]!, 0);
    const extra = i === 0 ? headOnly : 0;
    const bytes = Math.ceil(weights + kv + extra);
    // a host over its free memory, or a worker holding no layer (an idle member; a head without
    // layers still holds the rest, as llama-server with every layer offloaded does)
    if (bytes > h.free || (i > 0 && mine.length === 0)) return null;
    out.push({ node: h.node, role: role(i), freeBytes: h.free, layers: { first: mine[0] ?? 0, count: mine.length }, weightBytes: Math.round(weights), kvBytes: Math.round(kv), ownBytes: Math.round(extra), bytes });
  }
  return out;
}

/** Hosts that would run different versions of the engine: the reason naming them, else null. */
function versionMismatch(hosts: readonly GroupHost[], req: GroupRequest): string | null {
  if (!req.engine) return null;
  const engine = req.engine;
  const runs = hosts.map((h) => ({ node: h.node, role: h.role, version: req.installed?.[h.node] ?? engine.version }));
  const versions = [...new Set(runs.map((r) => r.version))];
  if (versions.length < 2) return null;
  const named = versions.map((v) => `${engine.name}@${v} on ${runs.filter((r) => r.version === v).map((r) => (r.role === 'head' ? `${r.node} (head)` : r.node)).join(', ')}`);
  return `a group's hosts run one engine version, and these would not: ${named.join('; ')}; the profile names ${engine.name}@${engine.version}: install it on every host (or remove the other)`;
}

/** Hosts whose installs of the engine version are different builds: the reason naming them, else null. */
function buildMismatch(hosts: readonly GroupHost[], req: GroupRequest): string | null {
  if (!req.builds || !req.engine) return null;
  const runs = hosts.flatMap((h) => {
    const b = req.builds![h.node];
    return b ? [{ host: h.role === 'head' ? `${h.node} (head)` : h.node, build: b }] : [];
  });
  const builds = [...new Set(runs.map((r) => r.build))];
  if (builds.length < 2) return null;
  const named = builds.map((b) => `${b} on ${runs.filter((r) => r.build === b).map((r) => r.host).join(', ')}`);
  return `a group's hosts run one build of ${req.engine.name}@${req.engine.version}, and these would not: ${named.join('; ')}: install the same build on every host`;
}

/** "solo needs 64 GiB; largest free 40 GiB; group node-a (head, 40 GiB) + node-b (28 GiB)" */
export function groupWhy(need: number, hosts: readonly GroupHost[]): string {
  const head = hosts[0]!;
  const members = hosts.map((h) => `${h.node} (${h.role === 'head' ? 'head, ' : ''}${formatBytes(h.freeBytes)})`).join(' + ');
  return `solo needs ${formatBytes(need)}; largest free ${formatBytes(head.freeBytes)}; group ${members}`;
}

/** "node-a (head): layers 0-13 (14 of 32), weights 20 GiB, KV 1 GiB, 23.4 GiB in all of 40 GiB free" */
export function hostLine(h: GroupHost, totalLayers: number | null): string {
  const layers = h.layers === null || totalLayers === null
    ? 'layers not known (the GGUF header was not read: the split in bytes)'
    : h.layers.count === 0 ? `no layers of ${totalLayers}` : `layers ${h.layers.first}-${h.layers.first + h.layers.count - 1} (${h.layers.count} of ${totalLayers})`;
  const parts = [layers];
  if (h.weightBytes !== null) parts.push(`weights ${formatBytes(h.weightBytes)}`);
  if (h.kvBytes !== null) parts.push(`KV ${formatBytes(h.kvBytes)}`);
  if (h.ownBytes > 0) parts.push(`${formatBytes(h.ownBytes)} of its own (embeddings and output, prompt cache, overhead)`);
  parts.push(`${formatBytes(h.bytes)} in all of ${formatBytes(h.freeBytes)} free`);
  return `${h.node} (${h.role}): ${parts.join(', ')}`;
}
