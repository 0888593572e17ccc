/**
 * Whether this controller may act on the fleet, from what the nodes say about who owns them (pure).
 * Each node keeps one owner record (src/nodes/scripts.ts): a lone controller, or the HA cluster with
 * its leader's epoch. A node another live controller owns, or one that has seen a newer epoch of our
 * own cluster, means this controller must not place, start or stop anything: it would fight the other
 * one, whose replicas it would adopt or stop and whose failures it would count.
 */
import type { ReasonRef } from '../errors/catalogue.js';
import type { NodeFenceView } from '../nodes/driver.js';

export type Ownership =
  | { readonly acting: true }
  /** deposed: a newer leader of this cluster acts (step down); otherwise another controller owns a node. */
  | { readonly acting: false; readonly reason: ReasonRef; readonly deposed: boolean };

export interface NodeFence {
  readonly node: string;
  /** Absent when the node was not observed this pass or the driver does not fence. */
  readonly fence?: NodeFenceView | undefined;
}

/** The first node (by name) that bars this controller decides; every node 'mine' (or unknown) = acting. */
export function ownershipOf(nodes: readonly NodeFence[], ownEpoch: number): Ownership {
  const sorted = [...nodes].sort((a, b) => a.node.localeCompare(b.node));
  const newer = sorted.find((n) => n.fence?.state === 'newer-epoch');
  if (newer?.fence) {
    const f = newer.fence;
    return {
      acting: false,
      deposed: true,
      reason: {
        code: 'NODE_FENCED',
        message: `node ${newer.node} has seen epoch ${f.epoch} of ${f.label}, newer than this leader's epoch ${ownEpoch}: a newer leader acts, this instance steps down`,
      },
    };
  }
  const other = sorted.find((n) => n.fence?.state === 'other');
  if (other?.fence) {
    const f = other.fence;
    return {
      acting: false,
      deposed: false,
      reason: {
        code: 'NODE_OWNED',
        message: `node ${other.node} is owned by ${f.label} (renewed ${Math.round(f.renewedAgoSeconds)} s ago): this controller does not place, start or stop anything while another one runs this fleet`,
      },
    };
  }
  return { acting: true };
}
