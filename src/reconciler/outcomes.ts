/**
 * Replica outcomes → model health (pure). A start concludes (ready, failed, abandoned) in one
 * transition that records its outcome: a failed or abandoned one leaves the in-flight set in it, so
 * no pass can see the start gone and its failure not yet counted; a ready one stays in the record,
 * marked ready, until a look at its node shows the replica (liveness.ts), so no pass whose look
 * began before the replica was on its node sees the model without it and starts another (#23).
 * A replica failure — a start's, or one seen on a node (a crash after ready, a death while the
 * controller was away, an unresponsive replica) — is counted once per replica, against the
 * definition the replica ran, and only when the catalogue says the reason is the model's fault;
 * otherwise it delays the model without counting.
 */
import { avoidsNode, countsTowardParking, type ReasonRef } from '../errors/catalogue.js';
import type { FleetSettings } from '../fleet-spec/types.js';
import { setbackNotCounted, startFailed } from './health.js';
import { moved } from './replica-life.js';
import { withModel, withReplica, type ControllerState, type Note } from './state.js';

type Backoff = Pick<FleetSettings, 'backoff' | 'parkAfterFailures' | 'readyResetMs'>;

export type StartOutcome =
  /**
   * `endpoint`: where the replica answers (the router may use it before a look shows it);
   * `startedAt`: when the node launched it, as a look at the node will show it.
   */
  | { readonly kind: 'ready'; readonly endpoint?: string; readonly startedAt?: number }
  /** `silent`: the engine's log named no reason (nodes/failure.ts). */
  | { readonly kind: 'failed'; readonly error: ReasonRef; readonly silent?: boolean }
  /** The controller is stopping: nothing is counted; a launched replica is adopted by the next one. */
  | { readonly kind: 'abandoned' };

export interface ReplicaFailure {
  readonly model: string;
  /** The definition the replica ran: a failure of an older definition does not count. */
  readonly digest: string;
  readonly replicaId: string;
  readonly node: string;
  readonly error: ReasonRef;
  /** The engine's log named no reason: counted, without replacing a reason it gave before. */
  readonly silent?: boolean;
}

/** The record with the replica's failure counted (its entry made, unready, when the record had none). */
function counted(s: ControllerState, f: ReplicaFailure, now: number): ControllerState {
  const r = s.replicas[f.replicaId];
  return withReplica(s, f.replicaId, r ? { ...r, counted: now } : { model: f.model, node: f.node, digest: f.digest, startedAt: now, phase: { kind: 'unready' }, counted: now });
}

/** A replica failed. Counted at most once per replica id. */
export function replicaFailed(s: ControllerState, f: ReplicaFailure, now: number, settings: Backoff): { state: ControllerState; notes: Note[] } {
  if (s.replicas[f.replicaId]?.counted !== undefined) return { state: s, notes: [] };
  const marked = counted(s, f, now);
  const m = s.models[f.model];
  const h = m?.health;
  const fields = { model: f.model, node: f.node, replica: f.replicaId, code: f.error.code, reason: f.error.message, ...(f.silent ? { silent: true } : {}) };
  if (!m || !h || h.digest !== f.digest) return { state: marked, notes: [{ level: 'info', msg: 'replica of an older definition failed: not counted', fields }] };
  if (h.parked) return { state: marked, notes: [] };
  if (!countsTowardParking(f.error.code)) {
    const next = setbackNotCounted(h, f.error, now, settings);
    // The node's fault (its disk, its ports): the next attempt goes to another node for a while.
    const avoid = avoidsNode(f.error.code) ? { ...m.avoid, [f.node]: now + settings.backoff.maxMs } : m.avoid;
    const note: Note = { level: 'warn', msg: avoidsNode(f.error.code) ? 'replica start set back by its node (not counted): placed elsewhere for a while' : 'replica start set back (not counted)', fields };
    return { state: withModel(marked, f.model, { ...m, health: next, ...(avoid !== undefined ? { avoid } : {}) }), notes: [note] };
  }
  const next = startFailed(h, f.error, now, settings, f.silent === true);
  const note: Note = next.parked
    ? // parked with the reason it keeps (a silent last failure keeps the engine's reason from before: startFailed)
      { level: 'error', msg: 'model parked: not started again until its definition changes or a retry', fields: { ...fields, code: next.parked.lastError.code, reason: next.parked.lastError.message, failures: next.consecutiveFailures, parkAfter: settings.parkAfterFailures } }
    : { level: 'warn', msg: 'replica start failed', fields: { ...fields, failures: next.consecutiveFailures, nextAttemptAt: new Date(next.nextAttemptAt ?? 0).toISOString() } };
  return { state: withModel(marked, f.model, { ...m, health: next }), notes: [note] };
}

/**
 * A start this controller launched has concluded. An unknown id, or one concluded already, changes
 * nothing; one whose replica was taken into the stop sequence meanwhile keeps that phase (a failure
 * of it is still counted).
 */
export function startConcluded(s: ControllerState, replicaId: string, outcome: StartOutcome, now: number, settings: Backoff): { state: ControllerState; notes: Note[] } {
  const rec = s.replicas[replicaId];
  if (!rec) return { state: s, notes: [] };
  const failure = (o: Extract<StartOutcome, { kind: 'failed' }>): ReplicaFailure => ({ model: rec.model, digest: rec.digest, replicaId, node: rec.node, error: o.error, ...(o.silent ? { silent: true } : {}) });
  if (rec.phase.kind !== 'launching') {
    return rec.phase.kind === 'leaving' && outcome.kind === 'failed' ? replicaFailed(s, failure(outcome), now, settings) : { state: s, notes: [] };
  }
  const fields = { model: rec.model, node: rec.node, replica: replicaId };
  switch (outcome.kind) {
    case 'ready': {
      const r = moved({ ...rec, ...(outcome.startedAt ? { startedAt: outcome.startedAt } : {}) }, replicaId, { kind: 'ready', since: now, seen: false, ...(outcome.endpoint ? { endpoint: outcome.endpoint } : {}) });
      return { state: withReplica(s, replicaId, r.rec), notes: [{ level: 'info', msg: 'replica ready', fields }] };
    }
    case 'abandoned':
      return { state: withReplica(s, replicaId, undefined), notes: [{ level: 'debug', msg: 'start abandoned: not counted', fields }] };
    case 'failed':
      return replicaFailed(withReplica(s, replicaId, { ...rec, phase: { kind: 'unready' } }), failure(outcome), now, settings);
  }
}
