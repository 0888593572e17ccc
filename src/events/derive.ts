/**
 * Fleet events (pure): what changed between two snapshots, as the lines of the status page's
 * timeline and `llmgw ctl events`. No hooks in the reconciler: a start, a failed start, a park, an
 * unpark, a retry, a rejected commit, a new leader or a rollout's move each shows as a difference of
 * two snapshots.
 */
import { Reasons } from '../errors/catalogue.js';
import type { FleetSnapshot, ModelView, ReplicaView } from '../reconciler/view.js';

export type FleetEventKind =
  | 'replica-starting'
  | 'replica-ready'
  | 'replica-warmed'
  | 'replica-stopped'
  | 'start-failed'
  | 'parked'
  | 'unparked'
  | 'retry'
  | 'unplaceable'
  | 'placeable'
  | 'revision-applied'
  | 'revision-rejected'
  | 'leader-changed'
  | 'node-unreachable'
  | 'node-reachable'
  | 'rollout'
  | 'scaled'
  | 'short-of-room';

/** An event before the ring numbers it. */
export interface FleetEventDraft {
  /** Epoch ms (the snapshot's time). */
  readonly at: number;
  readonly kind: FleetEventKind;
  readonly model: string | null;
  readonly node: string | null;
  readonly replica: string | null;
  /** The catalogue code of a failure, a park or a rejection; null otherwise. */
  readonly code: string | null;
  readonly message: string;
  /** What to do about it (a failure's or a rejection's hint), or null. */
  readonly hint: string | null;
}

const hintOf = (code: string): string | null => (Reasons as Record<string, { hint: string } | undefined>)[code]?.hint ?? null;

function draft(at: number, kind: FleetEventKind, message: string, o: Partial<Omit<FleetEventDraft, 'at' | 'kind' | 'message'>> = {}): FleetEventDraft {
  return { at, kind, message, model: o.model ?? null, node: o.node ?? null, replica: o.replica ?? null, code: o.code ?? null, hint: o.hint ?? (o.code ? hintOf(o.code) : null) };
}

function replicaEvents(at: number, before: ModelView, after: ModelView): FleetEventDraft[] {
  const out: FleetEventDraft[] = [];
  const old = new Map<string, ReplicaView>(before.replicas.map((r) => [r.id, r]));
  const now = new Set(after.replicas.map((r) => r.id));
  for (const r of after.replicas) {
    const o = old.get(r.id);
    const where = { model: after.name, node: r.node, replica: r.id };
    if (!o && r.phase === 'starting') out.push(draft(at, 'replica-starting', `${after.name}: starting replica ${r.id} on ${r.node}`, where));
    else if (r.phase === 'ready' && o?.phase !== 'ready') out.push(draft(at, 'replica-ready', `${after.name}: replica ${r.id} on ${r.node} is ready${r.endpoint ? ` at ${r.endpoint}` : ''}`, where));
    if (r.warmup !== undefined && o?.warmup === undefined) out.push(warmedEvent(at, after.name, r, where));
  }
  for (const o of before.replicas) {
    if (!now.has(o.id)) out.push(draft(at, 'replica-stopped', `${after.name}: replica ${o.id} on ${o.node} is gone`, { model: after.name, node: o.node, replica: o.id }));
  }
  return out;
}

/** A replica's warm-up before it took traffic (#38): what it replayed and cost, and why it ended early. */
function warmedEvent(at: number, model: string, r: ReplicaView, where: { model: string; node: string; replica: string }): FleetEventDraft {
  const w = r.warmup!;
  const cost = `${w.prefixes} prefixes, ${w.tokens} prompt tokens, ${w.seconds.toFixed(2)} s`;
  const slots = w.code?.startsWith('SLOT_RESTORE_') === true;
  const msg =
    w.via === 'restore' ? `${model}: replica ${r.id} warmed up before taking traffic (${cost}), from the old replica's slot files (${w.restored ?? 0} tokens restored)${w.code === null ? '' : `: ${w.message ?? w.code}`}`
    : slots ? `${model}: replica ${r.id} warmed up by replay before taking traffic (${cost}): ${w.message ?? w.code}`
    : w.code === null ? `${model}: replica ${r.id} warmed up before taking traffic (${cost})` : `${model}: replica ${r.id} took traffic before its warm-up finished (${cost}): ${w.message ?? w.code}`;
  return draft(at, 'replica-warmed', msg, w.code === null ? where : { ...where, code: w.code });
}

/** A rollout's move (#34): its checks began, a canary step began, it was held, rolled back or promoted. */
function rolloutEvent(at: number, before: ModelView, after: ModelView): FleetEventDraft | null {
  const r = after.rollout;
  const b = before.rollout;
  if (r === undefined || (b !== undefined && b.phase === r.phase && b.step === r.step && b.canaryDigest === r.canaryDigest)) return null;
  const m = after.name;
  const rev = r.canaryDigest.replace(/^sha256:/, '').slice(0, 12);
  const steps = after.spec.rollout?.canary?.steps.length ?? null;
  switch (r.phase) {
    case 'checking':
      return draft(at, 'rollout', `${m}: revision ${rev} runs its checks before it takes traffic`, { model: m });
    case 'canary':
      return draft(at, 'rollout', `${m}: canary of revision ${rev} at ${Math.round(r.share * 100)}% (step ${r.step + 1}${steps !== null ? ` of ${steps}` : ''})`, { model: m });
    case 'promoted':
      return draft(at, 'rollout', `${m}: revision ${rev} promoted; it replaces the stable one`, { model: m });
    case 'held':
    case 'rolled_back':
      return draft(at, 'rollout', `${m}: revision ${rev} ${r.phase === 'held' ? 'held' : 'rolled back'}: ${r.verdict?.message ?? 'no verdict'}`, { model: m, code: r.verdict?.code ?? null });
  }
}

function modelEvents(at: number, before: ModelView, after: ModelView): FleetEventDraft[] {
  const out = replicaEvents(at, before, after);
  const rollout = rolloutEvent(at, before, after);
  if (rollout) out.push(rollout);
  const m = after.name;
  if (after.consecutiveFailures > before.consecutiveFailures && after.lastError) {
    const e = after.lastError;
    out.push(draft(at, 'start-failed', `${m}: start failed (${after.consecutiveFailures} in a row): ${e.message}`, { model: m, code: e.code }));
  }
  if (after.parked && !before.parked) {
    out.push(draft(at, 'parked', `${m}: parked after ${after.consecutiveFailures} failures in a row: ${after.parked.lastError.message}`, { model: m, code: after.parked.lastError.code, hint: Reasons.MODEL_PARKED.hint.replaceAll('MODEL', m) }));
  }
  if (!after.parked && before.parked) out.push(draft(at, 'unparked', `${m}: unparked; it will be started again`, { model: m }));
  if (after.lastHandledRetry !== null && after.lastHandledRetry !== before.lastHandledRetry) {
    out.push(draft(at, 'retry', `${m}: retry ${after.lastHandledRetry} handled`, { model: m }));
  }
  if (after.unplaceable && (!before.unplaceable || before.unplaceable.code !== after.unplaceable.code)) {
    out.push(draft(at, 'unplaceable', `${m}: fits on no node: ${after.unplaceable.reason}`, { model: m, code: after.unplaceable.code }));
  }
  if (!after.unplaceable && before.unplaceable) out.push(draft(at, 'placeable', `${m}: fits again`, { model: m }));
  // scaling (#42): a change of its count with its numbers, and extra replicas that fit nowhere
  const last = after.scale?.last;
  if (last && last.at !== before.scale?.last?.at) out.push(draft(at, 'scaled', `${m}: scaled ${last.from} → ${last.to}: ${last.why}`, { model: m }));
  const short = after.scale?.short;
  if (short && (short.wants !== before.scale?.short?.wants || short.fit !== before.scale?.short?.fit)) {
    out.push(draft(at, 'short-of-room', `${m}: wants ${short.wants}, ${short.fit} fit: ${short.reason}`, { model: m, code: short.code }));
  }
  return out;
}

/**
 * The events between `prev` and `next`. The first snapshot (prev null) says nothing happened: what
 * it shows was already so when this instance started looking. A model new in `next` is compared
 * with an empty one, so its first starts show.
 */
export function deriveEvents(prev: FleetSnapshot | null, next: FleetSnapshot): FleetEventDraft[] {
  if (!prev) return [];
  const at = next.at;
  const out: FleetEventDraft[] = [];

  if (next.rejected && next.rejected.revision !== prev.rejected?.revision) {
    const r = next.rejected;
    const where = r.problems.map((p) => `${p.file}${p.line !== null ? `:${p.line}` : ''}: ${p.message}`).join('; ');
    out.push(draft(at, 'revision-rejected', `revision ${r.revision.slice(0, 12)} rejected: ${where}`, { code: 'SPEC_REJECTED' }));
  }
  if (next.appliedRevision !== null && next.appliedRevision !== prev.appliedRevision) {
    out.push(draft(at, 'revision-applied', `revision ${next.appliedRevision.slice(0, 12)} in force`));
  }
  const pl = prev.control.leader;
  const nl = next.control.leader;
  if ((pl?.id ?? null) !== (nl?.id ?? null) || (pl?.epoch ?? null) !== (nl?.epoch ?? null)) {
    const self = nl !== null && nl.id === next.control.instance.id;
    out.push(draft(at, 'leader-changed', nl ? `${nl.label} leads${nl.epoch !== null ? ` (epoch ${nl.epoch})` : ''}${self ? ': this instance' : ''}` : 'no instance leads', { code: nl ? null : 'LEADER_UNAVAILABLE' }));
  }

  const prevNodes = new Map(prev.nodes.map((n) => [n.name, n]));
  for (const n of next.nodes) {
    const p = prevNodes.get(n.name);
    if (!p) continue;
    if (p.reachable && !n.reachable) out.push(draft(at, 'node-unreachable', `${n.name}: unreachable${n.error ? `: ${n.error.message}` : ''}`, { node: n.name, code: n.error?.code ?? null }));
    if (!p.reachable && n.reachable) out.push(draft(at, 'node-reachable', `${n.name}: reachable again`, { node: n.name }));
  }

  const prevModels = new Map(prev.models.map((m) => [m.name, m]));
  for (const m of next.models) {
    const was = prevModels.get(m.name);
    if (was === m) continue; // the same view (summarize.ts keptView): nothing happened to it
    const before = was ?? { ...m, replicas: [], consecutiveFailures: 0, lastError: null, parked: null, unplaceable: null, lastHandledRetry: m.lastHandledRetry };
    out.push(...modelEvents(at, before, m));
  }
  return out;
}
