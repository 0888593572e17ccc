/**
 * The one stop sequence (pure): every stop of a replica that may be serving — replaced, surplus,
 * schedule, drained, idle, evicted, restart, key mismatch, removed — goes
 *
 *   out of routing (the record's `since`; the snapshot shows it 'draining', so no router instance
 *   offers it) → wait until llama-server reports nothing in flight (GET /slots), bounded by
 *   drain_grace from `since` → SIGTERM, stop_grace, SIGKILL (the node driver's stopReplica).
 *
 * A replica that failed or is unhealthy skips the wait (it serves nothing). The stop is the replica's
 * phase in the record (leaving, why 'stop'), so a controller restart or a failover continues a stop
 * where it was. The shell
 * (stop-runner.ts) runs each stop in the background: a stop never holds up a pass or its publication.
 */
import type { Action, StopReason } from './planner.js';
import { moved } from './replica-life.js';
import { withReplica, type ControllerState, type Note } from './state.js';

/** A replica's stop as the record holds it (its phase, leaving why 'stop', with its model and node). */
export interface StopRecord {
  readonly model: string;
  readonly node: string;
  /** Why (planner StopReason); 'failed' replicas skip the drain. */
  readonly reason: string;
  /** Epoch ms when the replica left routing (the drain's start). */
  readonly since: number;
  /** Whether the replica drains (waits for its in-flight requests) before SIGTERM. */
  readonly drain: boolean;
}

/** The replica's stop, when it is in the stop sequence. */
export function stopOf(s: ControllerState, id: string): StopRecord | undefined {
  const r = s.replicas[id];
  if (r === undefined || r.phase.kind !== 'leaving' || r.phase.why !== 'stop') return undefined;
  return { model: r.model, node: r.node, reason: r.phase.reason, since: r.phase.since, drain: r.phase.drain };
}

/** The ids of every replica in the stop sequence. */
export function stopIds(s: ControllerState): string[] {
  const out: string[] = [];
  for (const id in s.replicas) {
    const p = s.replicas[id]!.phase;
    if (p.kind === 'leaving' && p.why === 'stop') out.push(id);
  }
  return out;
}

/** Reasons whose replica serves nothing: no drain. */
const NO_DRAIN: ReadonlySet<StopReason> = new Set(['failed', 'orphan']);

export const mayBeServing = (reason: string): boolean => !NO_DRAIN.has(reason as StopReason);

/** The planner's stops enter the record (a stop already recorded keeps its start of drain). */
export function stopsRequested(s: ControllerState, actions: readonly Action[], now: number): { state: ControllerState; added: string[]; notes: Note[] } {
  let out = s;
  const added: string[] = [];
  const notes: Note[] = [];
  for (const a of actions) {
    if (a.kind !== 'stop' || stopOf(out, a.replicaId)) continue;
    const r = moved(out.replicas[a.replicaId], a.replicaId, { kind: 'leaving', why: 'stop', since: now, reason: a.reason, drain: mayBeServing(a.reason) }, { model: a.model, node: a.node, digest: '', startedAt: now });
    if (r.refused) {
      notes.push(r.refused);
      continue;
    }
    out = withReplica(out, a.replicaId, r.rec);
    added.push(a.replicaId);
  }
  return { state: out, added, notes };
}

/** A stop's process is gone (or was never there): the replica leaves the record. */
export function stopFinished(s: ControllerState, id: string): ControllerState {
  return stopOf(s, id) ? withReplica(s, id, undefined) : s;
}

/**
 * In-flight requests as llama-server reports them: a count, 'gone' (nothing listens: nothing in
 * flight), or 'unknown' (slots disabled, a timeout, an odd answer).
 */
export type InFlight = number | 'gone' | 'unknown';

export type DrainStep = { readonly kind: 'wait'; readonly note: Note | null } | { readonly kind: 'terminate'; readonly note: Note };

/**
 * How long a drained replica's "nothing in flight" waits for every router to have taken it out of
 * routing: a standby hears of it through the published snapshot (an etcd put and a watch), and a
 * request it dispatched just before is on its way to the replica, not yet in its /slots.
 */
export const ROUTING_SETTLE_MS = 1000;

/**
 * One look at a draining replica: wait, or go on to SIGTERM. It goes on when the replica is gone,
 * when nothing is in flight once ROUTING_SETTLE_MS have passed since it left routing (`publishedAt`:
 * this process published it out of routing; absent: the record's `since`), or when
 * drain_grace from the stop's start has passed (whatever is still in flight is then cut, and said
 * so). Unknown in-flight waits out the grace.
 */
export function drainStep(id: string, rec: StopRecord, inFlight: InFlight, now: number, drainGraceMs: number, publishedAt = rec.since): DrainStep {
  const fields = { model: rec.model, node: rec.node, replica: id, reason: rec.reason };
  if (!rec.drain) return { kind: 'terminate', note: { level: 'info', msg: 'stopping replica', fields } };
  // the settle counts from when the routers could first hear of it: the snapshot published at the
  // stop's launch, which a slow pass (its state save) may put well after the record's `since`
  if (inFlight === 0 && now - Math.max(rec.since, publishedAt) < Math.min(ROUTING_SETTLE_MS, drainGraceMs)) return { kind: 'wait', note: null };
  if (inFlight === 0 || inFlight === 'gone') return { kind: 'terminate', note: { level: 'info', msg: 'replica drained: stopping it', fields: { ...fields, drainedMs: now - rec.since } } };
  if (now - rec.since >= drainGraceMs) {
    return { kind: 'terminate', note: { level: 'warn', msg: 'drain grace over with requests still in flight: stopping the replica', fields: { ...fields, inFlight, graceMs: drainGraceMs } } };
  }
  return { kind: 'wait', note: null };
}
