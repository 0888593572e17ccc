/**
 * The one stop sequence (pure): every stop of a replica that may be serving — replaced, surplus,
 * schedule, drained, idle, evicted, restart, key mismatch, removed — goes
 *
 *   out of routing (the record's `since`; the snapshot shows it 'draining') → wait until every router
 *   routes from a snapshot without it (routing-acks.ts) and llama-server reports nothing in flight
 *   (GET /slots), bounded by drain_grace from `since` → SIGTERM, stop_grace, SIGKILL (the node
 *   driver's stopReplica).
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

/** One look at a draining replica, in this order: the routers, then what it has in flight. */
export interface DrainLook {
  readonly inFlight: InFlight;
  /** The routers that may still send it a request (routing-acks.ts routersBehind); empty: none. */
  readonly behind: readonly string[];
  /** How many other routers (HA standbys) the drain waits for; 0 for a lone controller. */
  readonly routers: number;
  /** When a look first saw nothing in flight with no router behind (the last step's `quietSince`); null: the last look did not. */
  readonly quietSince: number | null;
}

export type DrainStep = { readonly kind: 'wait'; readonly note: Note | null; readonly quietSince: number | null } | { readonly kind: 'terminate'; readonly note: Note };

/**
 * How long "nothing in flight, every router routing without it" must hold, over two looks, before
 * the replica is stopped: a request a router sent just before it took the snapshot without the
 * replica is on the wire, not yet in llama-server's /slots. Not a wait for the routers (that is
 * their applied revisions, however long a standby's watch lags), only for what was already sent.
 */
export const QUIET_MS = 250;

/**
 * One look at a draining replica: wait, or go on to SIGTERM.
 * - It goes on when the replica is gone (nothing listens), or when every router routes without it
 *   (routing-acks.ts) and two looks QUIET_MS apart found nothing in flight.
 * - Else it waits, bounded by drain_grace from the stop's start. Then it goes on anyway and says
 *   why: DRAIN_ROUTERS_BEHIND naming the routers that still offered it, or the requests still in
 *   flight (unknown in-flight — /slots not answering — waits out the grace).
 */
export function drainStep(id: string, rec: StopRecord, look: DrainLook, now: number, drainGraceMs: number): DrainStep {
  const fields = { model: rec.model, node: rec.node, replica: id, reason: rec.reason };
  if (!rec.drain) return { kind: 'terminate', note: { level: 'info', msg: 'stopping replica', fields } };
  const drained = { kind: 'terminate' as const, note: { level: 'info' as const, msg: 'replica drained: stopping it', fields: { ...fields, drainedMs: now - rec.since, routers: look.routers } } };
  if (look.inFlight === 'gone') return drained;
  const quiet = look.inFlight === 0 && look.behind.length === 0;
  if (quiet && look.quietSince !== null && now - look.quietSince >= QUIET_MS) return drained;
  if (now - rec.since >= drainGraceMs) {
    if (look.behind.length > 0) {
      const behind = look.behind.slice(0, 10);
      return { kind: 'terminate', note: { level: 'warn', msg: 'drain grace over with routers still routing from a snapshot that offers the replica: stopping it', fields: { ...fields, code: 'DRAIN_ROUTERS_BEHIND', behind, inFlight: look.inFlight, graceMs: drainGraceMs } } };
    }
    if (look.inFlight !== 0) return { kind: 'terminate', note: { level: 'warn', msg: 'drain grace over with requests still in flight: stopping the replica', fields: { ...fields, inFlight: look.inFlight, graceMs: drainGraceMs } } };
    return drained;
  }
  return { kind: 'wait', note: null, quietSince: quiet ? (look.quietSince ?? now) : null };
}
