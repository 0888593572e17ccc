/**
 * How an HA standby acts (ControllerActs): it reads the published view and forwards what acts on the
 * fleet — demand, request activity, retries, rollout overrides, restarts, log reads, passes — to
 * the leader through etcd (channel.ts Requests), each within its timeout. What the leader answers is held to the spec
 * (allowedDemand: only replicas whose endpoints the spec allows).
 *
 * Shell: the activity flush waits on the injected timers (StandbyOptions.timers); this file reads no
 * clock and sets no timer of its own.
 */
import type { Logger } from 'pino';
import { reasonOf } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { RestartRequest, RetryOutcome, RolloutOverride, RolloutOverridden } from '../reconciler/controller-api.js';
import type { ControllerActs } from '../reconciler/controller-shell.js';
import type { DemandResult, FleetSnapshot } from '../reconciler/view.js';
import type { ForwardedRequest, RequestBody, Requests } from './channel.js';
import { allowedDemand } from './published.js';
import type { LoopTimers } from './shell-time.js';

/** Request activity a standby forwards, at most this often. */
const TOUCH_FLUSH_MS = 1000;

export interface StandbyOptions {
  readonly requests: Requests;
  /** The spec this standby routes by (its own look at the fleet repo). */
  readonly spec: () => FleetSpec | null;
  /** The published view as this standby shows it. */
  readonly snapshot: () => FleetSnapshot;
  /** The longest a forwarded request waits for the leader. */
  readonly forwardTimeoutMs: number;
  readonly timers: LoopTimers;
  readonly log: Logger;
}

export class StandbyActs implements ControllerActs {
  private touched = new Set<string>();
  private touchTimer: unknown = null;

  constructor(private readonly o: StandbyOptions) {}

  /** Drops activity not yet forwarded (the instance stops). */
  stop(): void {
    if (this.touchTimer !== null) this.o.timers.clearTimeout(this.touchTimer);
    this.touchTimer = null;
  }

  /** A request to the leader: its answer within `timeoutMs` (at most the forward timeout), or LEADER_UNAVAILABLE / ETCD_*. */
  private forward<T, K extends ForwardedRequest['kind']>(kind: K, body: RequestBody<K>, timeoutMs?: number): Promise<T> {
    const most = this.o.forwardTimeoutMs;
    return this.o.requests.send<K>(kind, body, Math.min(most, timeoutMs ?? most)) as Promise<T>;
  }

  spec(): FleetSpec | null {
    return this.o.spec();
  }

  demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult> {
    return this.forward<DemandResult, 'demand'>('demand', { model }, opts?.timeoutMs).then((r) => allowedDemand(r, this.spec()));
  }

  /** Activity of on-demand models, forwarded in one request at most every TOUCH_FLUSH_MS. */
  touch(model: string): void {
    if (this.spec()?.models[model]?.scaling.mode !== 'on_demand') return;
    this.touched.add(model);
    if (this.touchTimer !== null) return;
    this.touchTimer = this.o.timers.setTimeout(() => {
      this.touchTimer = null;
      const models = [...this.touched];
      this.touched = new Set();
      this.forward<null, 'touch'>('touch', { models }).catch((err: unknown) => this.o.log.warn({ models, code: reasonOf(err).code }, 'standby: forwarding request activity to the leader failed'));
    }, TOUCH_FLUSH_MS);
  }

  /** The leader hears of the request at both ends (and every ACTIVITY_TOUCH_MS while it is proxied). */
  hold(model: string): () => void {
    this.touch(model);
    return () => this.touch(model);
  }

  retry(model: string): Promise<{ model: string; outcome: RetryOutcome }> {
    return this.forward<{ model: string; outcome: RetryOutcome }, 'retry'>('retry', { model });
  }

  overrideRollout(model: string, how: RolloutOverride, by: string): Promise<RolloutOverridden> {
    return this.forward<RolloutOverridden, 'rollout'>('rollout', { model, how, by });
  }

  restart(req: RestartRequest): Promise<readonly string[]> {
    return this.forward<readonly string[], 'restart'>('restart', req);
  }

  /** None of the replicas is running any more (each was replaced and stopped), as published. */
  restartDone(ids: readonly string[]): boolean {
    const live = new Set(
      this.o
        .snapshot()
        .models.flatMap((m) => m.replicas)
        .filter((r) => r.phase === 'ready' || r.phase === 'starting')
        .map((r) => r.id),
    );
    return ids.every((id) => !live.has(id));
  }

  logs(replicaId: string, lines: number): Promise<string> {
    return this.forward<string, 'logs'>('logs', { replica: replicaId, lines });
  }

  requestPass(trigger: string): Promise<void> {
    return this.forward<void, 'pass'>('pass', { trigger });
  }
}
