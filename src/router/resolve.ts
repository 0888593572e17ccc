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
 *
 * Concurrent requests for the same model share one in-flight demand() (one fresh attempt answers all).
 */
import type { ReasonRef } from '../errors/catalogue.js';
import type { DemandResult, FleetView, ModelView, ReplicaView } from '../reconciler/view.js';
import { RouterError } from './errors.js';

/** Retry-After for model_loading. */
export const LOADING_RETRY_AFTER_SECONDS = 5;
/** Retry-After for model_failing when the next attempt time is unknown. */
export const FAILING_RETRY_AFTER_SECONDS = 10;

export function unparkHint(model: string): string {
  return `To unpark it, fix the cause and run \`llmgw ctl retry ${model}\` or push a commit with the trailer \`Llmgw-Retry: ${model}\` (changing the model's definition also unparks it).`;
}

/** A reason as `CODE: message` (the router's messages and the models list use it). */
export function describeError(e: ReasonRef | null): string {
  return e ? `${e.code}: ${e.message}` : 'unknown';
}

export function parkedError(model: string, parked: { readonly since: number; readonly lastError: ReasonRef }): RouterError {
  const since = new Date(parked.since).toISOString();
  return new RouterError(
    'MODEL_PARKED',
    `Model '${model}' is parked (since ${since}) after repeated start failures and will not be started again on its own. Last error: ${describeError(parked.lastError)}. ${unparkHint(model)}`,
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

  constructor(
    private readonly fleet: FleetView,
    private readonly now: () => number = Date.now,
  ) {}

  /** One fresh placement attempt per model at a time; concurrent callers share it. */
  demand(model: string): Promise<DemandResult> {
    let p = this.pending.get(model);
    if (!p) {
      p = this.fleet.demand(model).finally(() => this.pending.delete(model));
      this.pending.set(model, p);
    }
    return p;
  }

  /**
   * Ready replicas of a model that has none right now, or a RouterError saying why not. Rejects with
   * the signal's reason when it is aborted.
   */
  async activate(model: string, opts: ActivateOptions): Promise<readonly ReplicaView[]> {
    const mv = this.fleet.model(model);
    // parked and failing: answered at once, with no placement attempt
    if (mv && (mv.phase === 'parked' || mv.phase === 'failing')) {
      const r = refusal(model, mv, this.now());
      if (r) throw r;
    }
    let result: DemandResult;
    try {
      result = await this.demand(model);
    } catch (e) {
      throw new RouterError('INTERNAL', `The placement attempt for model '${model}' failed.`, { model }, { cause: e });
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
