/**
 * What `llmgw plan` says of a `placement: {spread: rpc}` model that fits on no single node (#40,
 * pure): the RPC group(s) its replicas would run as — the hosts, each host's layers, weights, KV
 * cache and bytes, and why this many hosts — placed by group-placement.ts on the room the
 * simulated pass leaves (each node's room less what runs there after the merge). A model that
 * fits one node is placed as any replica and never shows here. The group's memory is added to its
 * hosts' usage, so the node table shows each host's share. The reconciler places the same groups
 * (group-start.ts), by bytes where it does not know the layers.
 */
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { hostLine, placeGroup, type GroupHost } from '../reconciler/group-placement.js';
import type { PlacementNode } from '../reconciler/placement.js';
import type { Need } from './needs.js';
import type { ModelOutcome, NodeUsage } from './simulate.js';

/** One group of a model's replica: its hosts, in order (the head first). */
export interface PlannedGroup {
  readonly hosts: readonly GroupHost[];
  /** The model's repeating layers; null when not known (its header not read: a memory: override, a need from the status): the split in bytes. */
  readonly totalLayers: number | null;
  /** "solo needs 64 GiB; largest free 40 GiB; group node-a (head, 40 GiB) + node-b (28 GiB)" */
  readonly why: string;
}

export interface GroupOutcome {
  readonly groups: readonly PlannedGroup[];
  /** The replicas wanted (one group each) that no group held: the reason; null when all were placed. No groups: none fits. */
  readonly unplaceable: string | null;
  /** The placement text and its detail lines (each host of each group). */
  readonly text: string;
  readonly details: readonly string[];
}

/**
 * The groups of a spread: rpc model the simulated pass found no node for, placed one replica
 * after another on what `nodes` leave free; `nodes` is updated with their memory. Null when the
 * model does not spread, has replicas placed or running, or its need is unknown.
 */
export function planGroups(head: FleetSpec, m: ModelSpec, o: ModelOutcome | undefined, need: Need | undefined, nodes: NodeUsage[]): GroupOutcome | null {
  if (m.placement?.spread !== 'rpc' || !o || o.parked || o.desired === 0 || o.starts.length > 0 || o.before.length > 0 || o.unplaceable === null) return null;
  const bytes = need && 'bytes' in need ? need.bytes : m.memoryBytes;
  if (bytes === null || bytes === undefined) return null;
  const profile = head.profiles[m.profile]!;
  const groups: PlannedGroup[] = [];
  let unplaceable: string | null = null;
  for (let i = 0; i < o.desired; i++) {
    const placementNodes: PlacementNode[] = nodes.map((n) => ({
      name: n.name,
      labels: head.nodes[n.name]?.labels ?? {},
      capacityBytes: n.capacityBytes,
      usedBytes: n.usedAfter,
      reachable: n.reachable,
    }));
    const r = placeGroup({
      nodes: placementNodes,
      reserveBytes: head.settings.placementReserveBytes,
      request: { model: m.name, memoryBytes: bytes, nodeSelector: m.nodeSelector, maxHosts: m.placement.maxHosts, layers: need && 'bytes' in need ? (need.layers ?? null) : null, engine: { name: profile.engine, version: profile.engineVersion } },
    });
    if (r.kind !== 'group') {
      // solo cannot be: the pass found no node; a later group finding none is the rest's reason
      unplaceable = r.kind === 'unplaceable' ? r.unplaceable.reason : null;
      break;
    }
    groups.push({ hosts: r.hosts, totalLayers: r.totalLayers, why: r.why });
    for (const h of r.hosts) {
      const at = nodes.findIndex((n) => n.name === h.node);
      const n = nodes[at]!;
      nodes[at] = { ...n, usedAfter: n.usedAfter + h.bytes, starts: [...n.starts, `${m.name} (rpc ${h.role})`] };
    }
  }
  const onDemand = m.scaling.mode === 'on_demand' ? ' when activated' : '';
  // not even a group: the group's numbers ("group of 3 at most 58 GiB")
  if (groups.length === 0) return unplaceable === null ? null : { groups, unplaceable, text: `fits nowhere${onDemand}, not even as an RPC group: ${unplaceable}`, details: [] };
  const size = (g: PlannedGroup): string => `${g.hosts.length} hosts`;
  const head0 = groups[0]!;
  const text = groups.length === 1 && unplaceable === null
    ? `fits as an RPC group of ${size(head0)}${onDemand} (no node holds it alone): ${head0.why}`
    : `${groups.length} of ${o.desired} fit as RPC groups${onDemand} (no node holds one alone): ${groups.map((g) => g.why).join(' | ')}${unplaceable ? `; the rest fit nowhere: ${unplaceable}` : ''}`;
  const details = groups.flatMap((g, gi) => g.hosts.map((h) => `${groups.length > 1 ? `group ${gi + 1}: ` : ''}${hostLine(h, g.totalLayers)}`));
  return { groups, unplaceable, text, details };
}
