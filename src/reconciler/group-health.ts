/**
 * An RPC group's health as one (pure, #40): the head's /health stays 200 after a worker dies (its
 * next request that needs the worker aborts it), so a look shows a group's head failed as soon as a
 * look at a worker's node shows that worker gone or failed — with the worker's own reason and log.
 * The head is then out of routing at once (a failed replica is never routed to), and the pass
 * replaces the group like any failed replica: the failure counts once, the head and its workers are
 * stopped, a new group is placed. A worker on a node that cannot be reached is unknown, never gone.
 */
import type { NodeObservation, ReplicaObservation } from '../nodes/driver.js';
import type { GroupMember } from './replica-life.js';

/** What group-health reads of a node's last look. */
export interface GroupNodeLook {
  readonly reachable: boolean;
  readonly obs: NodeObservation | null;
}

/** The head failed by its worker, or null while every worker is alive (or unknown). */
export function groupFailure(group: readonly GroupMember[], looks: ReadonlyMap<string, GroupNodeLook>): ReplicaObservation['failure'] | null {
  for (const w of group) {
    if (w.role !== 'worker' || w.worker === undefined) continue;
    const look = looks.get(w.node);
    if (!look?.reachable || !look.obs) continue;
    const seen = look.obs.rpcWorkers?.find((x) => x.id === w.worker);
    if (seen && seen.state !== 'failed') continue;
    const why = seen?.failure ? seen.failure.message : seen ? 'its process is gone' : 'it is gone from its node';
    return { code: 'RPC_WORKER_EXITED', message: `the group's worker on ${w.node} (rpc-server ${w.worker}) exited: ${why}`, logTail: seen?.failure?.logTail ?? '' };
  }
  return null;
}

/**
 * The looks with each group's head shown failed where its group failed (the looks unchanged, the
 * same objects, where none did). Only a head that is alive is marked: a head that died has its own
 * reason (its log names the worker, nodes/failure.ts).
 */
export function withGroupHealth<L extends GroupNodeLook>(looks: ReadonlyMap<string, L>, groups: ReadonlyMap<string, readonly GroupMember[]>): Map<string, L> | null {
  let out: Map<string, L> | null = null;
  for (const [id, group] of groups) {
    const headNode = group[0]?.node;
    const look = headNode === undefined ? undefined : (out ?? looks).get(headNode);
    const head = look?.obs?.replicas.find((r) => r.id === id);
    if (!look?.obs || !head || head.state === 'failed') continue;
    const failure = groupFailure(group, looks);
    if (failure === null) continue;
    out ??= new Map(looks);
    out.set(headNode!, { ...look, obs: { ...look.obs, replicas: look.obs.replicas.map((r) => (r.id === id ? { ...r, state: 'failed' as const, failure } : r)) } });
  }
  return out;
}

/** A worker's group: the replica whose id its id starts with (groupWorkerId), or null for an id of another shape. */
export const groupOfWorker = (workerId: string): string | null => /^(.+)\.w\d{1,3}$/.exec(workerId)?.[1] ?? null;

/**
 * The RPC workers the looks show that no replica of the record has (their group left the record: its
 * stop ran while the worker's node was away, or a controller died mid-start): node and worker id,
 * to be stopped. A worker of an id not made by llmgw is left alone.
 */
export function orphanWorkers(looks: ReadonlyMap<string, GroupNodeLook>, replicas: Readonly<Record<string, { readonly group?: readonly GroupMember[] }>>): { node: string; worker: string }[] {
  const out: { node: string; worker: string }[] = [];
  for (const [node, look] of looks) {
    if (!look.reachable) continue;
    for (const w of look.obs?.rpcWorkers ?? []) {
      const head = groupOfWorker(w.id);
      if (head === null) continue;
      const group = replicas[head]?.group;
      if (!group?.some((h) => h.worker === w.id && h.node === node)) out.push({ node, worker: w.id });
    }
  }
  return out;
}
