/**
 * The replica a new one may take slot files from (#38 item 3), pure: a ready replica of the same
 * model on the same node (a surge's old replica during a restart or a rollout, a sibling for a
 * scale-up), the one of the same revision first, then the newest; and whether its slot files fit
 * the new one (engine-api/slot-restore.ts). None where the node shows no such replica, or where the
 * donor's revision is not known here (its spec not read): the new replica is warmed by replay.
 */
import type { ReplicaObservation } from '../nodes/driver.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { mayRestoreSlots, slotIdentityOf, type SlotIdentity } from '../engine-api/slot-restore.js';
import type { WarmupTarget } from './warm-up.js';

/** The slot identity of a replica of `model` on `node` as `spec` defines it; null when the spec lacks a part. */
export function specSlotIdentity(spec: FleetSpec, model: string, node: string): SlotIdentity | null {
  const m = spec.models[model];
  const p = m && spec.profiles[m.profile];
  const v = p && spec.engines[p.engine]?.versions[p.engineVersion];
  return m && p && v ? slotIdentityOf(node, v, m, p) : null;
}

/**
 * The donor for replica `replica` of `model` (revision `digest`) on `node`, among `replicas` (the
 * node's last look); `identityOf(digest)`: the slot identity of a replica of that revision on the node.
 */
export function slotDonor(
  replicas: readonly ReplicaObservation[],
  t: { readonly model: string; readonly node: string; readonly replica: string; readonly digest: string },
  identityOf: (digest: string) => SlotIdentity | null,
): WarmupTarget['slots'] | undefined {
  const candidates = replicas
    .filter((r) => r.model === t.model && r.id !== t.replica && r.state === 'ready')
    .sort((a, b) => Number(b.digest === t.digest) - Number(a.digest === t.digest) || b.startedAt - a.startedAt);
  const neu = identityOf(t.digest);
  if (neu === null) return undefined;
  for (const d of candidates) {
    const old = identityOf(d.digest);
    if (old === null) continue;
    return { donor: d.id, endpoint: d.endpoint, decision: mayRestoreSlots(old, neu) };
  }
  return undefined;
}
