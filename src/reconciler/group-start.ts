/**
 * The starts of RPC groups (pure, #40): a pass's missing replicas of a `placement: {spread: rpc}`
 * model that fits on no node alone, each placed as a group by group-placement.ts on the room the
 * pass's other placements leave, one after another (each group's hosts take their shares before
 * the next is placed). A start of a group is a replica start on the head's node that carries its
 * hosts: the start runs the workers first, then the head (start-op.ts).
 */
import type { Action, PlanInput } from './planner.js';
import { placeGroup } from './group-placement.js';
import type { PlacementNode, Unplaceable } from './placement.js';
import type { Want } from './plan-wants.js';
import { groupWorkerId, type GroupMember } from './replica-life.js';

export type GroupStart = Extract<Action, { kind: 'start' }> & { readonly group: readonly GroupMember[] };

export interface GroupsPlaced {
  readonly starts: readonly GroupStart[];
  /** Why (the first of) the rest fit nowhere, not even as a group; null when every one was placed. */
  readonly unplaceable: Unplaceable | null;
}

export function placeGroups(input: Pick<PlanInput, 'spec' | 'memory' | 'newReplicaId'> & { readonly nodes?: PlanInput['nodes'] }, w: Pick<Want, 'model'>, count: number, room: readonly PlacementNode[], avoidNodes: readonly string[]): GroupsPlaced {
  const m = w.model;
  const profile = input.spec.profiles[m.profile];
  // its hosts: the nodes with the profile's engine installed (installed ahead, NodeFleet.prepareEngines), of one build
  const key = profile ? `${profile.engine}@${profile.engineVersion}` : '';
  const builds = input.nodes ? Object.fromEntries(input.nodes.flatMap((n) => (n.engines && key in n.engines ? [[n.name, n.engines[key] ?? null]] : []))) : undefined;
  let nodes = room;
  const starts: GroupStart[] = [];
  for (let k = 0; k < count; k++) {
    const r = placeGroup({
      nodes,
      reserveBytes: input.spec.settings.placementReserveBytes,
      request: {
        model: m.name,
        memoryBytes: input.memory[m.name] ?? null,
        nodeSelector: m.nodeSelector,
        maxHosts: m.placement?.maxHosts ?? 2,
        avoidNodes,
        ...(profile ? { engine: { name: profile.engine, version: profile.engineVersion } } : {}),
        ...(builds ? { builds } : {}),
      },
    });
    // solo: placement found no node for it (a device, an avoided node), so no group is made for it either
    if (r.kind !== 'group') return { starts, unplaceable: r.kind === 'unplaceable' ? r.unplaceable : null };
    const replicaId = input.newReplicaId(m.name, m.digest);
    let w = 0;
    const group: GroupMember[] = r.hosts.map((h) => (h.role === 'head' ? { node: h.node, role: 'head', bytes: h.bytes } : { node: h.node, role: 'worker', bytes: h.bytes, worker: groupWorkerId(replicaId, ++w) }));
    starts.push({ kind: 'start', model: m.name, node: group[0]!.node, replicaId, digest: m.digest, group });
    nodes = nodes.map((n) => {
      const taken = group.filter((h) => h.node === n.name).reduce((s, h) => s + h.bytes, 0);
      return taken === 0 ? n : { ...n, usedBytes: n.usedBytes + taken };
    });
  }
  return { starts, unplaceable: null };
}
