/**
 * Whether this controller may act on the fleet, from what the nodes say about who owns them (pure).
 * Each node keeps one owner record (src/nodes/fence.ts): a lone controller, or the HA cluster with
 * its leader's epoch. A node another live controller owns, or one that has seen a newer epoch of our
 * own cluster, means this controller must not place, start or stop anything: it would fight the other
 * one, whose replicas it would adopt or stop and whose failures it would count.
 *
 * A newer epoch is only a newer leader when etcd could have made it: epochs are etcd revisions, so one
 * above etcd's current revision (`bound`, read after the look that saw the record) was not made by
 * this etcd — the etcd was restored from a backup (revisions went back), or someone wrote the record.
 * That record fences nothing: the leader names it (epoch and seq) to be superseded, the next script
 * on the node takes it over while it is unchanged, and the term goes on (NODE_EPOCH_FORGED).
 */
import type { ReasonRef } from '../errors/catalogue.js';
import type { NodeFenceView } from '../nodes/driver.js';

/** A node's record to take over: the one seen, by its epoch and seq (any write since changes seq). */
export interface Supersede {
  readonly node: string;
  readonly epoch: number;
  readonly seq: number;
}

export type Ownership =
  | { readonly acting: true }
  /** deposed: a newer leader of this cluster acts (step down); otherwise another controller owns a node. */
  | { readonly acting: false; readonly reason: ReasonRef; readonly deposed: boolean }
  /** Records of our own cluster above etcd's revision: not acting this pass; the next look takes them over. */
  | { readonly acting: false; readonly reason: ReasonRef; readonly deposed: false; readonly supersede: readonly Supersede[] };

export interface NodeFence {
  readonly node: string;
  /** Absent when the node was not observed this pass or the driver does not fence. */
  readonly fence?: NodeFenceView | undefined;
}

/** Whether deciding needs etcd's revision: some node reports a newer epoch of our own cluster. */
export function needsBound(nodes: readonly NodeFence[]): boolean {
  return nodes.some((n) => n.fence?.state === 'newer-epoch');
}

/**
 * The first node (by name) that bars this controller decides; every node 'mine' (or unknown) = acting.
 * `bound`: the highest epoch etcd could have made (its current revision, read after the look; 0 for a
 * lone controller, whose epoch is always 0); null when unknown — every newer epoch then counts as real.
 */
export function ownershipOf(nodes: readonly NodeFence[], ownEpoch: number, bound: number | null = null): Ownership {
  const sorted = [...nodes].sort((a, b) => a.node.localeCompare(b.node));
  const newer = sorted.filter((n) => n.fence?.state === 'newer-epoch');
  const forged = (f: NodeFenceView): boolean => bound !== null && f.epoch > bound && f.epoch > ownEpoch && f.seq !== undefined;
  const real = newer.find((n) => !forged(n.fence!));
  if (real?.fence) {
    const f = real.fence;
    return {
      acting: false,
      deposed: true,
      reason: {
        code: 'NODE_FENCED',
        message: `node ${real.node} has seen epoch ${f.epoch} of ${f.label}, newer than this leader's epoch ${ownEpoch}${bound !== null ? ` and within etcd's revision ${bound}` : ''}: a newer leader acts, this instance steps down`,
      },
    };
  }
  if (newer.length > 0) {
    const first = newer[0]!;
    const f = first.fence!;
    const others = newer.length > 1 ? ` (and ${newer.slice(1).map((n) => n.node).join(', ')})` : '';
    return {
      acting: false,
      deposed: false,
      supersede: newer.map((n) => ({ node: n.node, epoch: n.fence!.epoch, seq: n.fence!.seq! })),
      reason: {
        code: 'NODE_EPOCH_FORGED',
        message: `node ${first.node}${others}: its owner record of ${f.label} carries epoch ${f.epoch}, above etcd's revision ${bound}: not an epoch this etcd made (an etcd restored from a backup, or a forged record); it fences nothing, this leader (epoch ${ownEpoch}) takes the node over`,
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

/**
 * The nodes whose look took over a record of our own owner (a superseded one: above etcd's
 * revision), as reasons to show: a takeover of another owner's expired record is not one.
 */
export function takenOver(nodes: readonly NodeFence[], ownEpoch: number): ReasonRef[] {
  return [...nodes]
    .sort((a, b) => a.node.localeCompare(b.node))
    .flatMap((n) => {
      const f = n.fence;
      const t = f?.tookOverFrom;
      if (!f || f.state !== 'mine' || !t || t.owner !== f.owner) return [];
      return [{
        code: 'NODE_EPOCH_FORGED',
        message: `node ${n.node}: took over its owner record of epoch ${t.epoch} (${t.label}), above etcd's revision when seen: not an epoch this etcd made (an etcd restored from a backup, or a forged record); this leader acts on the node at epoch ${ownEpoch}`,
      }];
    });
}

/** How long a node takeover stays listed with the forged epochs (status, ctl, the metric and its alert). */
export const TAKEOVER_SHOWN_MS = 60 * 60 * 1000;

export interface ShownForgery {
  readonly reason: ReasonRef;
  /** Epoch ms it was last seen. */
  readonly at: number;
}

/** The forged epochs to show: the ones seen now, and earlier ones within TAKEOVER_SHOWN_MS (one per message). */
export function forgeriesShown(kept: readonly ShownForgery[], seen: readonly ReasonRef[], now: number): ShownForgery[] {
  const byMessage = new Map<string, ShownForgery>();
  for (const k of kept) if (now - k.at < TAKEOVER_SHOWN_MS) byMessage.set(k.reason.message, k);
  for (const r of seen) byMessage.set(r.message, { reason: r, at: now });
  return [...byMessage.values()];
}
