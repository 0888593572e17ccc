/**
 * A replica's life in the state record (pure): one `phase` from one table of allowed edges, the way
 * llama-swap names a process's life and `ha/leadership.ts` names a term's. Every writer of a
 * replica's phase goes through `moved`, which refuses an edge the table does not list (and says so
 * in a note) — so a replica is never, say, ready again after its stop began.
 *
 *   (new) ─▶ launching ─▶ ready ◀─▶ unready
 *               │           │          │
 *               └───────────┴──────────┴─▶ leaving (surge: draining for room) ─▶ leaving (stop) ─▶ (gone)
 *
 * - launching: a start was launched and has not concluded; it counts as in flight until its outcome
 *   is applied, whatever the node shows meanwhile (a replica that died before its start reported is
 *   still one start, never a reason to launch another);
 * - ready: answering /health since `since`; `seen` once a look at its node showed it (a ready start
 *   counts from the record until then, #23). `endpoint`: where it answers (before a look shows it);
 * - unready: on its node and not ready, with no start in flight: adopted while starting, hung after
 *   ready, or failed. `since`: when it was first seen so (the /health timer; absent while unknown);
 * - leaving: out of routing. why 'surge': an outdated replica draining because its replacement had
 *   no room beside it (stopped once drain_grace has run); why 'stop': in the one stop sequence
 *   (stops.ts) — final: nothing brings it back.
 * Beside the phase, facts that hold whatever it is: `restartAsked` (an operator asked to replace it),
 * `counted` (its failure was counted, never twice).
 */
import type { Note } from './note.js';

export type LeavingWhy = 'surge' | 'stop';

export type ReplicaPhase =
  | { readonly kind: 'launching' }
  | { readonly kind: 'ready'; readonly since: number; readonly seen: boolean; readonly endpoint?: string }
  | { readonly kind: 'unready'; readonly since?: number }
  | { readonly kind: 'leaving'; readonly why: 'surge'; readonly since: number }
  | { readonly kind: 'leaving'; readonly why: 'stop'; readonly since: number; readonly reason: string; readonly drain: boolean };

export type PhaseKind = ReplicaPhase['kind'];
/** A phase's name in the edge table: leaving splits by why. */
export type PhaseName = 'new' | 'launching' | 'ready' | 'unready' | 'leaving:surge' | 'leaving:stop';

/**
 * One host of an RPC group (#40): a replica of a `placement: {spread: rpc}` model that fits on no
 * single node runs as its head's llama-server (on the replica's node) with an rpc-server on each
 * worker's node. The group has the replica's one phase: it starts, serves and leaves as one.
 */
export interface GroupMember {
  readonly node: string;
  readonly role: 'head' | 'worker';
  /** What it holds of the replica (its share of the model's memory need), in bytes. */
  readonly bytes: number;
  /** A worker's id on its node (rpc/<id>/): the replica's id and `.w1`, `.w2`, … */
  readonly worker?: string;
}

/** A group worker's id on its node: the replica's id, then `.w` and its place among the workers (1…). */
export const groupWorkerId = (replicaId: string, i: number): string => `${replicaId}.w${i}`;

export interface ReplicaRecord {
  readonly model: string;
  readonly node: string;
  /** The definition it runs. */
  readonly digest: string;
  /** Epoch ms (controller clock) when it was launched; once ready, when the node launched it. */
  readonly startedAt: number;
  readonly phase: ReplicaPhase;
  /** Epoch ms an operator asked to replace it (surge-first, like an outdated digest). */
  readonly restartAsked?: number;
  /** Epoch ms its failure was counted toward its model's health (never counted twice). */
  readonly counted?: number;
  /** Its hosts when it runs as an RPC group (#40), the head (its own node) first. */
  readonly group?: readonly GroupMember[];
}

export const phaseName = (p: ReplicaPhase | undefined): PhaseName => (p === undefined ? 'new' : p.kind === 'leaving' ? `leaving:${p.why}` : p.kind);

/**
 * The allowed edges, from → to. Staying in a phase (new facts, `seen`) is always allowed; leaving the
 * record ("gone") is pruning's, from any phase.
 */
export const REPLICA_EDGES: Readonly<Record<PhaseName, readonly PhaseName[]>> = {
  new: ['launching', 'ready', 'unready', 'leaving:surge', 'leaving:stop'],
  launching: ['ready', 'unready', 'leaving:stop'],
  ready: ['unready', 'leaving:surge', 'leaving:stop'],
  unready: ['ready', 'leaving:surge', 'leaving:stop'],
  'leaving:surge': ['leaving:stop'],
  'leaving:stop': [],
};

export function edgeAllowed(from: PhaseName, to: PhaseName): boolean {
  return from === to || REPLICA_EDGES[from].includes(to);
}

/**
 * The replica `id` moved to `next` (a record for a new one needs `base`): the new record, or the old
 * one and a note when the edge is not in the table.
 */
export function moved(
  rec: ReplicaRecord | undefined,
  id: string,
  next: ReplicaPhase,
  base?: Omit<ReplicaRecord, 'phase'>,
): { rec: ReplicaRecord | undefined; refused: Note | null } {
  const from = phaseName(rec?.phase);
  const to = phaseName(next);
  if (!edgeAllowed(from, to) || (rec === undefined && base === undefined)) {
    return { rec, refused: { level: 'warn', msg: 'replica phase change refused: not an edge of its life', fields: { replica: id, from, to } } };
  }
  return { rec: rec === undefined ? { ...base!, phase: next } : { ...rec, phase: next }, refused: null };
}

/** Whether a replica is in the stop sequence (out of routing, being stopped). */
export const isStopping = (r: ReplicaRecord | undefined): boolean => r?.phase.kind === 'leaving' && r.phase.why === 'stop';

/** A start the record holds in flight: launching, or concluded ready and not seen on its node yet. */
export const isInflightStart = (r: ReplicaRecord): boolean => r.phase.kind === 'launching' || (r.phase.kind === 'ready' && !r.phase.seen);
