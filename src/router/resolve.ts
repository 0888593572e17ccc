/**
 * A model with no ready replica: what the router answers, exactly as the design's table says.
 *
 *   parked        → at once 503 model_parked (last error + how to unpark), x-should-retry: false
 *   failing       → at once 503 model_failing (last error), Retry-After = seconds to the next attempt
 *   anything else → a fresh placement attempt (FleetView.demand), then by its result:
 *     ready       → the replicas
 *     parked      → 503 model_parked
 *     unplaceable → 503 model_unplaceable with the reason (answered after the attempt, not the window)
 *     failing     → 503 model_failing
 *     starting    → wait for ready up to the activation window (from the request's arrival); then the
 *                   replicas, or the state the model ended up in, or 503 model_loading with Retry-After
 *     no answer   → (a standby: no leader or no etcd within the window) 503 leader_unavailable /
 *                   etcd_unavailable with Retry-After
 *
 * Concurrent requests for the same model share one in-flight demand() (one fresh attempt answers all).
 */
import { hintFor, LlmgwError, type ReasonRef } from '../errors/catalogue.js';
import type { DemandResult, FleetView, ModelView, ReplicaView } from '../reconciler/view.js';
import { RouterError } from './errors.js';

/** Retry-After for model_loading. */
export const LOADING_RETRY_AFTER_SECONDS = 5;
/** Retry-After for model_failing when the next attempt time is unknown. */
export const FAILING_RETRY_AFTER_SECONDS = 10;
/** Retry-After for leader_unavailable / etcd_unavailable (an election or etcd's return takes seconds). */
export const CONTROLLER_RETRY_AFTER_SECONDS = 5;
/**
 * The part of the activation window a placement attempt may take: the rest is kept to answer within
 * the window (a standby's forwarded demand ends by then).
 */
export const DEMAND_ANSWER_MARGIN_MS = 500;

/** A reason as `CODE: message` (the router's messages and the models list use it). */
export function describeError(e: ReasonRef | null): string {
  return e ? `${e.code}: ${e.message}` : 'unknown';
}

export function parkedError(model: string, parked: { readonly since: number; readonly lastError: ReasonRef }): RouterError {
  const since = new Date(parked.since).toISOString();
  return new RouterError(
    'MODEL_PARKED',
    `Model '${model}' is parked (since ${since}) after repeated start failures and will not be started again on its own. Last error: ${describeError(parked.lastError)}. ${hintFor('MODEL_PARKED', model)}`,
    { model, lastError: parked.lastError, since },
  );
}

export function unplaceableError(model: string, u: { readonly code: string; readonly reason: string }): RouterError {
  return new RouterError('MODEL_UNPLACEABLE', `Model '${model}' fits on no node: ${u.reason}`, { model, reason: u.reason, placement: u.code });
}

export function failingError(model: string, lastError: ReasonRef | null, nextAttemptAt: number | null, nowMs: number): RouterError {
  const retryAfterSeconds = nextAttemptAt !== null ? Math.max(1, Math.ceil((nextAttemptAt - nowMs) / 1000)) : FAILING_RETRY_AFTER_SECONDS;
  return new RouterError(
    'MODEL_FAILING',
    `Model '${model}' has no ready replica: its last start failed (${describeError(lastError)}); llmgw tries again in ${retryAfterSeconds} s.`,
    { model, lastError, retryAfterSeconds },
  );
}

export function loadingError(model: string, windowMs: number): RouterError {
  return new RouterError(
    'MODEL_LOADING',
    `Model '${model}' is starting and was not ready within the activation window (${Math.round(windowMs / 1000)} s); retry shortly.`,
    { model, retryAfterSeconds: LOADING_RETRY_AFTER_SECONDS },
  );
}

const LEADER_CODES: ReadonlySet<string> = new Set(['LEADER_UNAVAILABLE', 'LEADER_DEPOSED']);
const ETCD_CODES: ReadonlySet<string> = new Set(['ETCD_UNAVAILABLE', 'ETCD_FAILED', 'ETCD_AUTH_FAILED', 'ETCD_TLS_FAILED']);

/**
 * A placement attempt that could not reach the controller (a standby's forward: no leader answered,
 * or etcd did not): the router's 503 with that code and Retry-After; null for any other failure.
 */
export function controllerUnavailableError(model: string, e: unknown): RouterError | null {
  if (!(e instanceof LlmgwError)) return null;
  const code = LEADER_CODES.has(e.code) ? 'LEADER_UNAVAILABLE' : ETCD_CODES.has(e.code) ? 'ETCD_UNAVAILABLE' : null;
  if (code === null) return null;
  const why = code === 'LEADER_UNAVAILABLE' ? 'no controller leader answered' : 'etcd, through which this router reaches the controller leader, did not answer';
  return new RouterError(code, `Model '${model}' has no ready replica and could not be activated: ${why} (${e.code}: ${e.message}); retry shortly.`, { model, retryAfterSeconds: CONTROLLER_RETRY_AFTER_SECONDS }, { cause: e });
}

/** The error for a model's state when it is refused without waiting, or null when it may become ready. */
function refusal(model: string, mv: ModelView | null, nowMs: number): RouterError | null {
  if (!mv) return null;
  if (mv.phase === 'parked' && mv.parked) return parkedError(model, mv.parked);
  if (mv.phase === 'unplaceable' && mv.unplaceable) return unplaceableError(model, mv.unplaceable);
  if (mv.phase === 'failing') return failingError(model, mv.lastError, mv.nextAttemptAt, nowMs);
  return null;
}

export interface ActivateOptions {
  /** The activation window (settings.activationWindowMs), counted from `startedAt`. */
  readonly windowMs: number;
  /** When the request arrived (ms, same clock as `now`). */
  readonly startedAt: number;
  /** Aborted when the client goes away or the router shuts down. */
  readonly signal: AbortSignal;
}

export class Activator {
  private readonly pending = new Map<string, Promise<DemandResult>>();
  /** Requests waiting for each model's activation: their arrival times (epoch ms), oldest first. */
  private readonly waiting = new Map<string, number[]>();

  constructor(
    private readonly fleet: FleetView,
    private readonly now: () => number = Date.now,
  ) {}

  /** One fresh placement attempt per model at a time; concurrent callers share it. */
  demand(model: string, timeoutMs?: number): Promise<DemandResult> {
    let p = this.pending.get(model);
    if (!p) {
      p = this.fleet.demand(model, timeoutMs === undefined ? undefined : { timeoutMs }).finally(() => this.pending.delete(model));
      this.pending.set(model, p);
    }
    return p;
  }

  /**
   * Ready replicas of a model that has none right now, or a RouterError saying why not. Rejects with
   * the signal's reason when it is aborted.
   */
  async activate(model: string, opts: ActivateOptions): Promise<readonly ReplicaView[]> {
    const list = this.waiting.get(model) ?? [];
    list.push(opts.startedAt);
    this.waiting.set(model, list);
    try {
      return await this.activateNow(model, opts);
    } finally {
      list.splice(list.indexOf(opts.startedAt), 1);
      if (list.length === 0) this.waiting.delete(model);
    }
  }

  /** When the oldest request waiting for the model's activation arrived (epoch ms), or null: none waits (#42 queue wait). */
  waitingSince(model: string): number | null {
    const list = this.waiting.get(model);
    return list === undefined || list.length === 0 ? null : Math.min(...list);
  }

  private async activateNow(model: string, opts: ActivateOptions): Promise<readonly ReplicaView[]> {
    const mv = this.fleet.model(model);
    // parked and failing: answered at once, with no placement attempt
    if (mv && (mv.phase === 'parked' || mv.phase === 'failing')) {
      const r = refusal(model, mv, this.now());
      if (r) throw r;
    }
    let result: DemandResult;
    try {
      // answered within the window: the attempt gets what is left of it, less a margin to answer in
      const left = opts.windowMs - (this.now() - opts.startedAt);
      result = await this.demand(model, Math.max(0, left - Math.min(DEMAND_ANSWER_MARGIN_MS, left / 10)));
    } catch (e) {
      const unavailable = controllerUnavailableError(model, e);
      if (!unavailable) throw new RouterError('INTERNAL', `The placement attempt for model '${model}' failed.`, { model }, { cause: e });
      opts.signal.throwIfAborted();
      // a replica may have become ready meanwhile (the published snapshot moved)
      const ready = this.fleet.readyReplicas(model);
      if (ready.length > 0) return ready;
      throw unavailable;
    }
    opts.signal.throwIfAborted();
    switch (result.kind) {
      case 'ready':
        if (result.replicas.length > 0) return result.replicas;
        break;
      case 'parked':
        throw parkedError(model, result);
      case 'unplaceable':
        throw unplaceableError(model, result);
      case 'failing':
        throw failingError(model, result.lastError, result.nextAttemptAt, this.now());
      case 'starting':
        break;
    }
    const ready = this.fleet.readyReplicas(model);
    if (ready.length > 0) return ready;
    const remaining = opts.windowMs - (this.now() - opts.startedAt);
    if (remaining > 0) {
      const replicas = await this.fleet.waitReady(model, { timeoutMs: remaining, signal: opts.signal });
      if (replicas.length > 0) return replicas;
    }
    opts.signal.throwIfAborted();
    // the window passed (or the model stopped being startable): say what it is now
    const after = refusal(model, this.fleet.model(model), this.now());
    if (after) throw after;
    throw loadingError(model, opts.windowMs);
  }
}
