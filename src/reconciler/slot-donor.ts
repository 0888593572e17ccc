/**
 * The replica a new one may take slot files from (#38 item 3), pure: a ready replica of the same
 * model on the same node (a surge's old replica during a restart or a rollout, a sibling for a
 * scale-up), the one of the same revision first, then the newest; and whether its slot files fit
 * the new one (engine-api/slot-restore.ts). None where the node shows no such replica, or where the
 * donor's revision is not known here (its spec not read): the new replica is warmed by replay.
 * With no live donor, the files a replica stopped as idle left there (SlotFilesBook, saveBeforeStop):
 * an on-demand model activated again on the same node.
 */
import type { Logger } from 'pino';
import { reasonOf } from '../errors/catalogue.js';
import type { ReplicaObservation } from '../nodes/driver.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { mayRestoreSlots, slotIdentityOf, type SlotIdentity } from '../engine-api/slot-restore.js';
import type { ShellPorts } from './shell-ports.js';
import { saveSlots, type SavedSlot } from './slot-calls.js';
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

/** Slot files a stopped replica left on its node (#38 item 3): whose, their identity, what they hold. */
export interface SlotFilesLeft {
  readonly replica: string;
  readonly identity: SlotIdentity;
  readonly saved: readonly SavedSlot[];
}

/**
 * The slot files replicas left when they were stopped as idle (an on-demand model's replica), by
 * node and model, in this controller's memory: the next start of the model on that node restores
 * them where they fit (a controller that restarted or a new leader knows none: replay). One entry a
 * model and node, as on the node (one file a slot index); forgotten when a live replica's slots are
 * saved over them.
 */
export class SlotFilesBook {
  private readonly m = new Map<string, SlotFilesLeft>();
  put(node: string, model: string, left: SlotFilesLeft): void {
    this.m.set(`${node}|${model}`, left);
  }
  get(node: string, model: string): SlotFilesLeft | undefined {
    return this.m.get(`${node}|${model}`);
  }
  forget(node: string, model: string): void {
    this.m.delete(`${node}|${model}`);
  }
}

/** The target's slots from what a stopped replica left (no live donor): the decision against the files' identity. */
export function leftSlots(left: SlotFilesLeft | undefined, neu: SlotIdentity | null): WarmupTarget['slots'] | undefined {
  if (left === undefined || neu === null || !left.saved.some((s) => s.tokens > 0)) return undefined;
  return { donor: left.replica, endpoint: '', decision: mayRestoreSlots(left.identity, neu), saved: left.saved };
}

/**
 * Before a replica stopped as idle leaves (stop-runner.ts, after its drain): its slots saved to the
 * model's slot dir on the node and put in `book`, within `timeoutMs`. Never throws; a refusal is logged.
 */
export async function saveBeforeStop(
  book: SlotFilesBook,
  r: { readonly model: string; readonly node: string; readonly replica: string; readonly endpoint: string; readonly identity: SlotIdentity | null; readonly slots: number },
  headers: Record<string, string>,
  timeoutMs: number,
  log: Logger,
): Promise<void> {
  if (r.identity === null || r.endpoint === '' || r.slots <= 0 || timeoutMs <= 0) return;
  const t0 = performance.now();
  try {
    const saved = await saveSlots(r.endpoint, headers, r.slots, AbortSignal.timeout(timeoutMs));
    book.put(r.node, r.model, { replica: r.replica, identity: r.identity, saved });
    log.info({ model: r.model, node: r.node, replica: r.replica, tokens: saved.reduce((n, s) => n + s.tokens, 0), seconds: Math.round(performance.now() - t0) / 1000 }, 'slots saved before the replica leaves: its next start on the node restores them');
  } catch (e) {
    book.forget(r.node, r.model);
    const why = reasonOf(e);
    log.warn({ model: r.model, node: r.node, replica: r.replica, code: why.code, reason: why.message }, 'slots not saved before the replica leaves: its next start is warmed by replay');
  }
}

/** A stop's step before its replica leaves (stop-runner.ts), after the drain. */
export type BeforeStop = (r: { readonly model: string; readonly node: string; readonly replica: string; readonly reason: string }, log: Logger) => Promise<void>;

/**
 * The step that saves an idle replica's slots before it leaves (saveBeforeStop), where its profile
 * warms replicas up (warmup.prefixes > 0), within warmup.timeout; other stops (replaced, surplus, …)
 * save nothing: a surge's new replica took the old one's slots while it still served.
 */
export function idleSlotSaver(book: SlotFilesBook, engineApiKey: string, p: Pick<ShellPorts, 'spec' | 'nodes'>, specOf: (model: string, digest: string) => FleetSpec | undefined): BeforeStop {
  const headers: Record<string, string> = engineApiKey ? { 'content-type': 'application/json', authorization: `Bearer ${engineApiKey}` } : { 'content-type': 'application/json' };
  return async (r, log) => {
    if (r.reason !== 'idle') return;
    const inForce = p.spec();
    const obs = p.nodes.states.get(r.node)?.obs?.replicas.find((x) => x.id === r.replica);
    if (!inForce || !obs) return;
    const spec = inForce.models[r.model]?.digest === obs.digest ? inForce : specOf(r.model, obs.digest);
    const m = spec?.models[r.model];
    const profile = m && spec.profiles[m.profile];
    if (!spec || !profile || (profile.warmup !== undefined && profile.warmup.prefixes <= 0)) return;
    const timeoutMs = profile.warmup?.timeoutMs ?? 10_000;
    await saveBeforeStop(book, { model: r.model, node: r.node, replica: r.replica, endpoint: obs.endpoint, identity: specSlotIdentity(spec, r.model, r.node), slots: profile.parallel }, headers, timeoutMs, log);
  };
}
