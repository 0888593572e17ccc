/**
 * What the router (FleetView) and the admin API (AdminBackend) ask of a controller, implemented
 * once for every kind of controller:
 *
 * - SnapshotHub: the view — the snapshot last published, who hears of new ones, a model by name,
 *   its ready replicas, a wait until one is ready. A lone Reconciler and an HA instance (leader or
 *   standby) both publish into one.
 * - ControllerActs: what acts on the fleet — demand, activity, retries, rollout overrides,
 *   restarts, log reads and passes. A Reconciler acts itself (reconciler-acts.ts); an HA standby
 *   forwards them to the leader (src/ha/standby.ts).
 * - ControllerShell: the whole API over a hub and whichever ControllerActs acts now (the HA
 *   instance: its term's reconciler while it leads, else its standby over the published view).
 */
import { EventEmitter } from 'node:events';
import type { AdminBackend, RestartRequest, RetryOutcome, RolloutOverride, RolloutOverridden } from './controller-api.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { readyReplicasOf } from './availability.js';
import { ModelIndex } from './model-index.js';
import type { DemandResult, FleetSnapshot, FleetView, ModelView, ReplicaView } from './view.js';
import { waitSettled } from './wait-ready.js';

/** The view part of FleetView / AdminBackend over the snapshots published into it. */
export abstract class SnapshotHub {
  // #-private: a subclass's own fields (a Reconciler's, an HA controller's) cannot collide with these
  #current: FleetSnapshot | null = null;
  readonly #events = new EventEmitter();
  readonly #models = new ModelIndex();

  constructor() {
    this.#events.setMaxListeners(0);
  }

  /** Makes `s` the snapshot everyone reads, and tells those listening. */
  protected setSnapshot(s: FleetSnapshot): void {
    this.#current = s;
    this.#events.emit('snapshot', s);
  }

  snapshot(): FleetSnapshot {
    if (this.#current === null) throw new Error('no snapshot published yet (a controller publishes one when it is made)');
    return this.#current;
  }

  onSnapshot(listener: (s: FleetSnapshot) => void): () => void {
    this.#events.on('snapshot', listener);
    return () => this.#events.off('snapshot', listener);
  }

  model(name: string): ModelView | null {
    return this.#models.get(this.snapshot(), name);
  }

  readyReplicas(model: string): readonly ReplicaView[] {
    return readyReplicasOf(this.model(model));
  }

  waitReady(model: string, opts: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<readonly ReplicaView[]> {
    return waitSettled(() => this.model(model), (l) => this.onSnapshot(l), opts);
  }
}

/** What acts on the fleet behind the API. */
export interface ControllerActs {
  spec(): FleetSpec | null;
  demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult>;
  touch(model: string): void;
  hold(model: string): () => void;
  retry(model: string): Promise<{ model: string; outcome: RetryOutcome }>;
  overrideRollout(model: string, how: RolloutOverride, by: string): Promise<RolloutOverridden>;
  restart(req: RestartRequest): Promise<readonly string[]>;
  restartDone(ids: readonly string[]): boolean;
  logs(replicaId: string, lines: number): Promise<string>;
  requestPass(trigger: string): Promise<void>;
}

/** The router and admin API over a hub and the ControllerActs acting now. */
export abstract class ControllerShell extends SnapshotHub implements FleetView, AdminBackend {
  abstract readonly engineApiKey: string;
  /** Whoever acts on the fleet now. */
  protected abstract acts(): ControllerActs;

  spec(): FleetSpec | null {
    return this.acts().spec();
  }

  demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult> {
    return this.acts().demand(model, opts);
  }

  touch(model: string): void {
    this.acts().touch(model);
  }

  hold(model: string): () => void {
    return this.acts().hold(model);
  }

  retry(model: string): Promise<{ model: string; outcome: RetryOutcome }> {
    return this.acts().retry(model);
  }

  overrideRollout(model: string, how: RolloutOverride, by: string): Promise<RolloutOverridden> {
    return this.acts().overrideRollout(model, how, by);
  }

  restart(req: RestartRequest): Promise<readonly string[]> {
    return this.acts().restart(req);
  }

  restartDone(ids: readonly string[]): boolean {
    return this.acts().restartDone(ids);
  }

  logs(replicaId: string, lines: number): Promise<string> {
    return this.acts().logs(replicaId, lines);
  }

  requestPass(trigger: string): Promise<void> {
    return this.acts().requestPass(trigger);
  }
}
