/**
 * What the reconciler publishes after every pass: a read-only snapshot of the fleet for the admin
 * API, `llmgw ctl`, status and metrics, and the `FleetView` the router asks about models.
 */
import type { ReasonRef } from './status-types.js';
import type { FleetSpec, ModelSpec, Problem } from '../fleet-spec/types.js';

export type ReplicaPhase = 'starting' | 'ready' | 'failed' | 'stopping';

export interface ReplicaView {
  readonly id: string;
  readonly model: string;
  readonly node: string;
  /** http://host:port of the replica's llama-server. */
  readonly endpoint: string;
  readonly phase: ReplicaPhase;
  readonly digest: string;
  /** ISO time. */
  readonly startedAt: string;
}

/**
 * ready: ≥1 replica ready and as many as desired; degraded: some but fewer than desired;
 * starting: none ready, a start in progress; failing: none ready, in backoff after failures;
 * parked / unplaceable: refused with a reason; idle: an on-demand model nobody asked for (desired 0).
 */
export type ModelPhase = 'ready' | 'degraded' | 'starting' | 'failing' | 'parked' | 'unplaceable' | 'idle' | 'pending';

export interface ModelView {
  readonly name: string;
  readonly spec: ModelSpec;
  readonly phase: ModelPhase;
  /** Replicas the model should have now (on-demand: only while asked for). */
  readonly desired: number;
  readonly ready: number;
  readonly replicas: readonly ReplicaView[];
  readonly consecutiveFailures: number;
  readonly lastError: ReasonRef | null;
  readonly parked: { readonly since: string; readonly lastError: ReasonRef } | null;
  readonly unplaceable: string | null;
  /** ISO time of the next start attempt while backing off. */
  readonly nextAttemptAt: string | null;
  readonly memoryBytes: number | null;
  readonly digest: string;
}

export interface NodeView {
  readonly name: string;
  readonly reachable: boolean;
  readonly error: ReasonRef | null;
  readonly memory: { readonly totalBytes: number; readonly availableBytes: number } | null;
  /** "engine@version" installed. */
  readonly engines: readonly string[];
  /** Install attempts that failed, per "engine@version". */
  readonly engineInstallFailures: Readonly<Record<string, number>>;
  readonly replicas: number;
}

export interface PassSummary {
  readonly startedAt: string;
  readonly durationMs: number;
  readonly result: 'ok' | 'error';
  readonly error: ReasonRef | null;
  readonly actions: number;
}

export interface FleetSnapshot {
  readonly at: string;
  readonly leader: boolean;
  readonly appliedRevision: string | null;
  readonly specValid: boolean;
  readonly rejected: { readonly revision: string; readonly problems: readonly Problem[] } | null;
  readonly lastSyncOk: string | null;
  readonly lastSyncError: ReasonRef | null;
  readonly lastStatusWriteOk: string | null;
  readonly models: readonly ModelView[];
  readonly nodes: readonly NodeView[];
  readonly lastPass: PassSummary | null;
}

export type DemandResult =
  | { readonly kind: 'ready'; readonly replicas: readonly ReplicaView[] }
  | { readonly kind: 'starting' }
  | { readonly kind: 'parked'; readonly since: string; readonly lastError: ReasonRef }
  | { readonly kind: 'unplaceable'; readonly reason: string }
  | { readonly kind: 'failing'; readonly lastError: ReasonRef | null; readonly nextAttemptAt: string | null };

/** The router's view of the fleet. */
export interface FleetView {
  /** The spec in force (null before the first valid revision). */
  spec(): FleetSpec | null;
  /** A model by canonical name. */
  model(name: string): ModelView | null;
  /** Ready replicas of a model right now (cheap; called per request). */
  readyReplicas(model: string): readonly ReplicaView[];
  /**
   * A request wants the model: clears its previous placement result, asks for a pass at once
   * and resolves with what that pass found. Counts as activity for the idle timeout.
   */
  demand(model: string): Promise<DemandResult>;
  /** Resolves with the ready replicas once ≥1 is ready, or [] when timeoutMs passes or the model becomes parked/unplaceable. */
  waitReady(model: string, opts: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<readonly ReplicaView[]>;
  /** Request activity, for on-demand idle timeouts and eviction order (least recently used first). */
  touch(model: string): void;
  /** The key llmgw passes to every replica (LLAMA_API_KEY); the router adds it upstream. */
  readonly engineApiKey: string;
}
