/**
 * What the reconciler publishes after every pass: a read-only snapshot of the fleet for the admin
 * API, `llmgw ctl`, the status branch and metrics, and the `FleetView` the router asks about models.
 * It holds domain values (epoch ms, structured reasons); each reader derives its own shape at the edge.
 */
import type { ScaleChange } from '../scale/decide.js';
import type { ShortOfRoom } from './planner.js';
import type { ReasonRef } from '../errors/catalogue.js';
import type { FleetSpec, ModelSpec, Problem } from '../fleet-spec/types.js';
import type { RolloutView } from '../rollout/types.js';
import type { Unplaceable } from './placement.js';
import type { GroupMember } from './replica-life.js';

/**
 * draining: being stopped, out of routing, waiting for its in-flight requests (`inFlight`, as
 * llama-server reports them); stopping: signalled (SIGTERM, stop_grace, SIGKILL). Neither is routable.
 */
export type ReplicaPhase = 'starting' | 'ready' | 'failed' | 'draining' | 'stopping';

export interface ReplicaView {
  readonly id: string;
  readonly model: string;
  readonly node: string;
  /** http://host:port of the replica's llama-server. */
  readonly endpoint: string;
  readonly phase: ReplicaPhase;
  readonly digest: string;
  /** Epoch ms. */
  readonly startedAt: number;
  /** Requests in flight as the replica last reported them (draining/stopping replicas; null = unknown). */
  readonly inFlight?: number | null;
  /** Where it runs on devices (a replica placed with gpu_layers, once its node shows it); absent: host only. */
  readonly device?: ReplicaDeviceView;
  /** Its warm-up before it took traffic (#38; reconciler/warm-up.ts); absent: none ran in this process. */
  readonly warmup?: WarmupView;
  /** Its hosts when it runs as an RPC group (#40): the head (its node) first, each with its share of the memory. */
  readonly group?: readonly GroupMember[];
}

/** What a replica's warm-up replayed and cost, and why it ended early (WARMUP_TIMED_OUT, WARMUP_REPLAY_FAILED; null: it did not). */
export interface WarmupView {
  readonly prefixes: number;
  /** Prompt tokens the replica evaluated for them. */
  readonly tokens: number;
  readonly seconds: number;
  readonly code: string | null;
  readonly message: string | null;
  /** How it was warmed (#38 item 3): restore (the old replica's slot files, a gain seen) or replay; absent: replay (before slot files). */
  readonly via?: 'restore' | 'replay';
  /** Prompt tokens restored from slot files (0 or absent: none). */
  readonly restored?: number;
}

/** A replica on devices (#37 item 8): which, its layers there, and the device bytes llmgw reserves for it. */
export interface ReplicaDeviceView {
  /** The node's devices it was started on (Vulkan0; more than one with tensor_split). */
  readonly devices: readonly string[];
  /** Layers on them: what llama-server's load log reported, else what llmgw asked (-ngl, at most the model's count); null: -ngl all of a count not known yet. */
  readonly layers: number | null;
  /** The model's offloadable layers (its repeating layers and the output layer); null: not known yet (its GGUF not read). */
  readonly of: number | null;
  /** reported: llama-server's "offloaded K/M layers to GPU" (logged at -lv 4 and above); asked: the -ngl it was started with. */
  readonly from: 'reported' | 'asked';
  /** Device bytes placement counts for it on its devices, by llmgw's estimate (0 for a failed one); null: its model's device need is not known. */
  readonly reservedBytes: number | null;
}

/**
 * A model's phases, the one list (the wire format, `ctl`, the status page and the admin API's filter
 * use it), in the order an operator attends to them: parked, unplaceable, not ready, then ready and
 * idle. See availability.ts for what each phase means.
 */
export const MODEL_PHASES = ['parked', 'unplaceable', 'failing', 'starting', 'pending', 'degraded', 'ready', 'idle'] as const;
export type ModelPhase = (typeof MODEL_PHASES)[number];

export interface ModelView {
  readonly name: string;
  readonly spec: ModelSpec;
  readonly phase: ModelPhase;
  /** Replicas the model should have now (on-demand: only while asked for). */
  readonly desired: number;
  readonly ready: number;
  /**
   * A replica is being stopped while the model has fewer ready than desired (a replacement without
   * room to surge, a restart): its new replica comes once the stop is done. Phase says 'starting'
   * then; a router holds requests in the queue rather than refusing them.
   */
  readonly replacing?: boolean;
  readonly replicas: readonly ReplicaView[];
  readonly consecutiveFailures: number;
  readonly lastError: ReasonRef | null;
  /** Parked since (epoch ms) with the error that parked it. */
  readonly parked: { readonly since: number; readonly lastError: ReasonRef } | null;
  readonly unplaceable: Unplaceable | null;
  /** Epoch ms of the next start attempt while backing off. */
  readonly nextAttemptAt: number | null;
  readonly memoryBytes: number | null;
  /** Id of the last retry handled for the model. */
  readonly lastHandledRetry: string | null;
  /** The model's rollout while one runs or holds a revision back (#34); absent otherwise. */
  readonly rollout?: RolloutView;
  /** A model whose count follows its load (#42): its range now, the count decided, why, and what did not fit. */
  readonly scale?: ScaleView;
}

/** Where a scaling model stands (scale-life.ts, planner.ts ShortOfRoom). */
export interface ScaleView {
  readonly min: number;
  readonly max: number;
  /** The count its load decided (the range's min before any decision; 0 for an idle on-demand model). */
  readonly count: number;
  /** Its last change, with its numbers; null: none since it was last idle or the record began. */
  readonly last: ScaleChange | null;
  /** It wants more than fit: how many, how many it has, placement's reason; null: all fit. */
  readonly short: ShortOfRoom | null;
  /**
   * The routers' load its last decision read: busy slots, queued requests and the oldest one's wait
   * (ms), summed over the fresh reports; absent: not decided since this process began (idle on demand).
   */
  readonly load?: ScaleLoad;
}

export interface ScaleLoad {
  readonly busy: number;
  readonly queued: number;
  readonly waitMs: number;
}

export interface NodeView {
  readonly name: string;
  readonly reachable: boolean;
  readonly error: ReasonRef | null;
  readonly memory: { readonly totalBytes: number; readonly availableBytes: number } | null;
  /** Free bytes on the file system of the node's data dir, as last observed. */
  readonly diskFreeBytes: number | null;
  /** "engine@version" installed. */
  readonly engines: readonly string[];
  /** Install attempts that failed, per "engine@version". */
  readonly engineInstallFailures: Readonly<Record<string, number>>;
  readonly replicas: number;
  /** The devices the node's engines list (absent while never observed). */
  readonly devices?: readonly NodeDeviceView[];
}

export interface NodeDeviceView {
  /** e.g. Vulkan0 */
  readonly name: string;
  readonly description: string;
  /** What the engine reports. */
  readonly totalBytes: number;
  /** What the engine reports free; null on a standby (the published snapshot leaves out what moves). */
  readonly freeBytes: number | null;
  /** What placement offers: the declared budget (nodes/<node>.yaml capacity.devices) or totalBytes. */
  readonly capacityBytes: number;
  /** What llmgw's replicas on it take by its estimate. */
  readonly reservedBytes: number;
}

export interface PassSummary {
  /** Epoch ms. */
  readonly startedAt: number;
  readonly durationMs: number;
  readonly result: 'ok' | 'error';
  readonly error: ReasonRef | null;
  readonly actions: number;
}

/** Who this instance is and who acts on the fleet (one instance, or several on etcd). */
export interface ControlView {
  readonly mode: 'standalone' | 'etcd';
  readonly instance: { readonly id: string; readonly label: string };
  /** The instance that leads as this one last saw it (standalone: this one, while it acts). */
  readonly leader: { readonly id: string; readonly label: string; readonly since: number | null; readonly epoch: number | null } | null;
  /** Why this instance does not act on the fleet (a standby; another controller owns a node; a deposed leader), or null. */
  readonly notActing: ReasonRef | null;
  /**
   * etcd as this instance reaches it (etcd mode only); `keyProblem`: the last thing about the leader
   * key an operator must act on, as the election saw it (LEADER_KEY_FORGED, ETCD_REVISION_WENT_BACK),
   * with its epoch-ms time, or null.
   */
  readonly etcd: { readonly prefix: string; readonly reachable: boolean; readonly error: ReasonRef | null; readonly keyProblem: (ReasonRef & { readonly at: number }) | null } | null;
  /**
   * Epochs this etcd did not make that the leader passed over (STATUS_EPOCH_FORGED: a status-branch
   * commit, while it is on the branch; NODE_EPOCH_FORGED: a node's owner record it took over, for an
   * hour); absent when none.
   */
  readonly forgedEpochs?: readonly ReasonRef[];
}

/** A lone controller that acts: what a snapshot says without etcd (and in tests). */
export const STANDALONE: ControlView = { mode: 'standalone', instance: { id: 'local', label: 'this llmgw' }, leader: null, notActing: null, etcd: null };

export interface FleetSnapshot {
  /** Epoch ms. */
  readonly at: number;
  /** Whether this instance acts on the fleet (places, starts, stops, writes status). */
  readonly leader: boolean;
  readonly control: ControlView;
  readonly appliedRevision: string | null;
  readonly specValid: boolean;
  readonly rejected: { readonly revision: string; readonly problems: readonly Problem[] } | null;
  /** Epoch ms of the last successful fleet repo sync. */
  readonly lastSyncOk: number | null;
  readonly lastSyncError: ReasonRef | null;
  /** Epoch ms of the last status branch write (or confirmation that it was up to date). */
  readonly lastStatusWriteOk: number | null;
  /** The state record could not be written (or read at start): parking is not persisted. */
  readonly stateError: ReasonRef | null;
  readonly models: readonly ModelView[];
  readonly nodes: readonly NodeView[];
  readonly lastPass: PassSummary | null;
}

export type DemandResult =
  | { readonly kind: 'ready'; readonly replicas: readonly ReplicaView[] }
  | { readonly kind: 'starting' }
  | { readonly kind: 'parked'; readonly since: number; readonly lastError: ReasonRef }
  | { readonly kind: 'unplaceable'; readonly code: string; readonly reason: string }
  | { readonly kind: 'failing'; readonly lastError: ReasonRef | null; readonly nextAttemptAt: number | null };

/** The router's view of the fleet. */
export interface FleetView {
  /** The spec in force (null before the first valid revision). */
  spec(): FleetSpec | null;
  /** A model by canonical name. */
  model(name: string): ModelView | null;
  /** Ready replicas of a model right now (cheap; called per request). */
  readyReplicas(model: string): readonly ReplicaView[];
  /**
   * A request wants the model and none of its replicas is ready: a fresh placement against the
   * controller's current view (no previous result reused). Unplaceable is answered from it at once;
   * when something should start, a pass is requested and this resolves with what it found. Counts
   * as activity for the idle timeout. `timeoutMs`: the answer is wanted within it (a standby
   * forwarding to the leader rejects with LEADER_UNAVAILABLE / ETCD_UNAVAILABLE when it passes).
   */
  demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult>;
  /** Resolves with the ready replicas once ≥1 is ready, or [] when timeoutMs passes or the model becomes parked/unplaceable. */
  waitReady(model: string, opts: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<readonly ReplicaView[]>;
  /** Request activity, for on-demand idle timeouts and eviction order (least recently used first). */
  touch(model: string): void;
  /**
   * A request for the model is in this router from now (waiting for activation, queued or proxied)
   * until the returned function is called at its end: activity lasts until a request ends, so an
   * on-demand model is never stopped as idle while a request for it waits or runs. Touches at both ends.
   */
  hold(model: string): () => void;
  /** The key llmgw passes to every replica (LLAMA_API_KEY); the router adds it upstream. */
  readonly engineApiKey: string;
}
