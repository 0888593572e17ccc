/**
 * Availability (pure): whether a model can be served now, and why not — one answer that the router,
 * the admin API, status and metrics all read.
 *
 * ready: ≥1 replica ready and as many as desired; degraded: some but fewer than desired;
 * starting: none ready, a start in progress; failing: none ready, backing off after failures;
 * parked / unplaceable: refused with a reason; idle: an on-demand model nobody asked for (desired 0);
 * pending: desired, nothing started yet and nothing in the way (the next pass starts it).
 */
import type { ModelHealth } from './health.js';
import type { DemandResult, ModelPhase, ModelView, ReplicaView } from './view.js';

export function phaseOf(desired: number, ready: number, starting: number, h: ModelHealth | undefined, unplaceable: boolean): ModelPhase {
  if (h?.parked) return 'parked';
  if (desired === 0) return ready > 0 ? 'ready' : 'idle';
  if (ready >= desired) return 'ready';
  if (ready > 0) return 'degraded';
  if (unplaceable) return 'unplaceable';
  if (starting > 0) return 'starting';
  if (h && h.consecutiveFailures > 0) return 'failing';
  return 'pending';
}

export function readyReplicasOf(mv: ModelView | null): readonly ReplicaView[] {
  return mv?.replicas.filter((r) => r.phase === 'ready') ?? [];
}

/** What a request for the model finds: ready replicas, or the state that stands in the way. */
export function demandResultOf(mv: ModelView | null): DemandResult {
  if (!mv) return { kind: 'unplaceable', code: 'MODEL_NOT_FOUND', reason: 'the model is not in the fleet spec in force' };
  if (mv.parked) return { kind: 'parked', since: mv.parked.since, lastError: mv.parked.lastError };
  const ready = readyReplicasOf(mv);
  if (ready.length) return { kind: 'ready', replicas: ready };
  if (mv.unplaceable) return { kind: 'unplaceable', code: mv.unplaceable.code, reason: mv.unplaceable.reason };
  if (mv.replicas.some((r) => r.phase === 'starting')) return { kind: 'starting' };
  if (mv.nextAttemptAt !== null) return { kind: 'failing', lastError: mv.lastError, nextAttemptAt: mv.nextAttemptAt };
  return { kind: 'starting' };
}

/** For a wait for ready: the ready replicas, [] when the model will not become ready on its own, null to keep waiting. */
export function settledOf(mv: ModelView | null): readonly ReplicaView[] | null {
  if (!mv) return [];
  const ready = readyReplicasOf(mv);
  if (ready.length) return ready;
  if (mv.parked || mv.unplaceable) return [];
  return null;
}
