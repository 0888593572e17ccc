/**
 * The model health state machine (pure): consecutive start failures with exponential backoff,
 * parking after N in a row, unparking on a definition change or a handled retry, and a reset
 * once a replica has stayed ready long enough.
 */
import type { FleetSettings } from '../fleet-spec/types.js';
import { countsTowardParking, type ReasonRef } from '../errors/catalogue.js';

export interface ModelHealth {
  readonly digest: string;
  readonly consecutiveFailures: number;
  readonly lastError: ReasonRef | null;
  readonly lastFailureAt: number | null;
  /** While backing off: no start before this time (epoch ms). */
  readonly nextAttemptAt: number | null;
  readonly parked: { readonly since: number; readonly lastError: ReasonRef } | null;
  /** Id of the last retry (commit:model or admin:…) handled for this model. */
  readonly lastHandledRetry: string | null;
}

type Backoff = Pick<FleetSettings, 'backoff' | 'parkAfterFailures' | 'readyResetMs'>;

export function initialHealth(digest: string): ModelHealth {
  return { digest, consecutiveFailures: 0, lastError: null, lastFailureAt: null, nextAttemptAt: null, parked: null, lastHandledRetry: null };
}

/** A definition change (new digest) starts the model's health afresh: failures reset, unparked. */
export function withDigest(h: ModelHealth | undefined, digest: string): ModelHealth {
  if (!h) return initialHealth(digest);
  if (h.digest === digest) return h;
  return { ...initialHealth(digest), lastHandledRetry: h.lastHandledRetry };
}

export function backoffMs(failures: number, s: Backoff): number {
  if (failures <= 0) return 0;
  const exp = s.backoff.initialMs * 2 ** Math.min(failures - 1, 30);
  return Math.min(exp, s.backoff.maxMs);
}

/**
 * A start failed (the process exited before healthy, timed out, or could not be set up). A `silent`
 * failure — the engine's log named no reason (llama-server can lose its last lines at exit,
 * nodes/failure.ts) — is counted like any other, but the last error stays the reason a failure of
 * this definition gave before, when there is one that counts (a node's setback is no reason for the
 * model's failures): the model is parked with what the engine said, not "exited with an empty log".
 */
export function startFailed(h: ModelHealth, error: ReasonRef, now: number, s: Backoff, silent = false): ModelHealth {
  const n = h.consecutiveFailures + 1;
  const reason = silent && h.lastError !== null && countsTowardParking(h.lastError.code) ? h.lastError : error;
  const parked = n >= s.parkAfterFailures ? { since: now, lastError: reason } : null;
  return { ...h, consecutiveFailures: n, lastError: reason, lastFailureAt: now, parked, nextAttemptAt: parked ? null : now + backoffMs(n, s) };
}

/**
 * A problem that is not the model's fault (the node was unreachable, no free port): remembered as
 * the last error and delays the next attempt by the initial backoff, without counting a failure.
 */
export function setbackNotCounted(h: ModelHealth, error: ReasonRef, now: number, s: Backoff): ModelHealth {
  if (h.parked) return h;
  return { ...h, lastError: error, nextAttemptAt: now + s.backoff.initialMs };
}

/** A replica has been ready since `readySince`: after readyResetMs the failure count resets. */
export function stayedReady(h: ModelHealth, readySince: number, now: number, s: Backoff): ModelHealth {
  if (h.parked || (h.consecutiveFailures === 0 && h.nextAttemptAt === null && h.lastError === null)) return h;
  if (now - readySince < s.readyResetMs) return h;
  return { ...h, consecutiveFailures: 0, lastError: null, nextAttemptAt: null };
}

/**
 * A retry (admin call or `Llmgw-Retry:` trailer): a parked model is unparked with a clean count;
 * a model that is not parked has its backoff cleared. Each retry id is handled once.
 */
export function retried(h: ModelHealth, retryId: string): { health: ModelHealth; outcome: 'unparked' | 'backoff-cleared' | 'already-handled' } {
  if (h.lastHandledRetry === retryId) return { health: h, outcome: 'already-handled' };
  if (h.parked) return { health: { ...h, parked: null, consecutiveFailures: 0, nextAttemptAt: null, lastHandledRetry: retryId }, outcome: 'unparked' };
  return { health: { ...h, nextAttemptAt: null, lastHandledRetry: retryId }, outcome: 'backoff-cleared' };
}

export function mayStart(h: ModelHealth, now: number): boolean {
  return h.parked === null && (h.nextAttemptAt === null || now >= h.nextAttemptAt);
}
