/**
 * What the admin API asks of a controller: exactly the calls its routes make. Declared beside
 * `FleetView` (what the router asks, view.ts), in the controller's own folder, so the shell that
 * implements both (controller-shell.ts) imports nothing from the admin API; `admin/backend.ts`
 * re-exports it for the routes. The Reconciler and the HA controller satisfy it; tests pass a fake.
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import type { RolloutView } from '../rollout/types.js';
import type { RetryOutcome } from './state.js';
import type { FleetSnapshot } from './view.js';

export type { RetryOutcome } from './state.js';

/** An operator's override of a rollout's verdict: `llmgw ctl rollout promote|abort MODEL`. */
export type RolloutOverride = 'promote' | 'abort';

/** What an override did ('already': the rollout was promoted, or rolled back, before) and the rollout after it (plain data: it crosses etcd from a leader). */
export interface RolloutOverridden {
  readonly model: string;
  readonly outcome: 'promoted' | 'aborted' | 'already';
  readonly rollout: RolloutView;
}

export interface RestartRequest {
  readonly replicas?: readonly string[];
  readonly model?: string;
  readonly all?: boolean;
}

export interface AdminBackend {
  /** The fleet as of the last pass. */
  snapshot(): FleetSnapshot;
  /** The spec in force (null before the first valid revision): resolves aliases. */
  spec(): FleetSpec | null;
  /** Unparks a parked model or clears its backoff; resolves after the pass that handled it. Throws NOT_FOUND for an unknown model. */
  retry(model: string): Promise<{ model: string; outcome: RetryOutcome }>;
  /**
   * Promotes the model's revision under test, or rolls it back (`by`: who, as the verdict and the log
   * say it); resolves after the pass that acts on it. Throws NOT_FOUND for an unknown model,
   * ROLLOUT_NONE when the model has no rollout.
   */
  overrideRollout(model: string, how: RolloutOverride, by: string): Promise<RolloutOverridden>;
  /** Marks replicas for a surge-first replacement; resolves with their ids after a pass. Throws REPLICA_NOT_FOUND / NOT_FOUND. */
  restart(req: RestartRequest): Promise<readonly string[]>;
  /** Whether every replica of a restart request has been replaced. */
  restartDone(ids: readonly string[]): boolean;
  /** A replica's log tail. Throws REPLICA_NOT_FOUND. */
  logs(replicaId: string, lines: number): Promise<string>;
  /** Asks for a pass; resolves when a pass begun after the call has finished. */
  requestPass(trigger: string): Promise<void>;
  /** Hears every new snapshot (the status page's streams and events); without it they look every 500 ms. */
  onSnapshot?(listener: (s: FleetSnapshot) => void): () => void;
}
