/** The validated, frozen desired state of a fleet at one revision. Sizes are bytes, durations ms. */
import type { RolloutSpec } from '../rollout/types.js';

export interface FleetSettings {
  readonly pollIntervalMs: number;
  readonly parkAfterFailures: number;
  readonly backoff: { readonly initialMs: number; readonly maxMs: number };
  readonly readyResetMs: number;
  readonly activationWindowMs: number;
  readonly drainGraceMs: number;
  readonly statusBranch: string;
  readonly placementReserveBytes: number;
  readonly unplaceableLogIntervalMs: number;
  readonly stopGraceMs: number;
  /** Every model's queue unless its model file sets its own. */
  readonly queue: QueueSpec;
  /**
   * fleet.yaml's `rollout:` (normalized), every model's unless its file has its own block; null or
   * absent: none. Models carry their own in force (ModelSpec.rollout): read that.
   */
  readonly rollout?: RolloutSpec | null;
  /** llmgw_key_* series per key name on /metrics (fleet.yaml metrics_per_key; absent: off). */
  readonly metricsPerKey?: boolean;
  /** fleet.yaml's `scale:` (every model's unless its file sets fields of its own); absent: SCALE_DEFAULTS. */
  readonly scale?: ScaleSpec;
}

/**
 * How a model with a replica range (on_demand max_replicas > 1, replicas {min, max}) follows its load
 * (src/scale/decide.ts): it aims for `target` of its slots busy; the load must stay above (below) for
 * upAfterMs (downAfterMs) before a change.
 */
export interface ScaleSpec {
  /** Share of the model's slots busy it aims for, in (0, 1]. */
  readonly target: number;
  readonly upAfterMs: number;
  readonly downAfterMs: number;
}

/** fleet.yaml's scale: when it sets nothing. */
export const SCALE_DEFAULTS: ScaleSpec = Object.freeze({ target: 0.8, upAfterMs: 10_000, downAfterMs: 300_000 });

/** A model's wait queue at the router, used when every slot of its ready replicas is busy. */
export interface QueueSpec {
  /** Requests that may wait (0: refused at once). */
  readonly max: number;
  readonly timeoutMs: number;
}

/** How the router picks among a model's ready replicas. */
export type Routing = 'affinity' | 'least_busy';

export type Transport = 'ssh' | 'local';

export interface NodeSpec {
  readonly name: string;
  readonly file: string;
  readonly transport: Transport;
  /** ssh only */
  readonly host: string;
  /** Address replicas bind (listen_address), when the node file names one. */
  readonly listenAddress?: string;
  readonly port: number;
  readonly user: string;
  /** Pinned host key, "<type> <base64>" as in known_hosts (ssh only). */
  readonly hostKey: string | null;
  /** Name of the private key file held in the controller's secrets dir (ssh only). */
  readonly identity: string | null;
  readonly labels: Readonly<Record<string, string>>;
  /** Declared capacity; overrides what observation reports. */
  readonly capacity: { readonly memoryBytes: number | null; readonly cpus: number | null };
  /** Directory on the node holding engines, models and replica state. */
  readonly dataDir: string;
  readonly ports: { readonly from: number; readonly to: number };
  /**
   * Environment for the engine on this node: its device listing and every replica (e.g.
   * GGML_VK_VISIBLE_DEVICES=0, which makes ggml list a CPU-type Vulkan device such as lavapipe).
   * llmgw sets the visibility variables of a replica itself, from the devices placement chose.
   */
  readonly env?: Readonly<Record<string, string>>;
  /** Declared device memory per device name (e.g. Vulkan0), overriding what the engine reports. */
  readonly deviceMemory?: Readonly<Record<string, number>>;
}

export type EngineInstall =
  | { readonly method: 'artifact'; readonly url: string; readonly sha256: string; readonly binary: string; readonly fetch: 'node' | 'controller' }
  | { readonly method: 'build'; readonly git: string; readonly ref: string; readonly cmakeFlags: readonly string[]; readonly target: string }
  | { readonly method: 'path'; readonly path: string };

export interface EngineVersionSpec {
  readonly engine: string;
  readonly version: string;
  readonly install: EngineInstall;
  /**
   * The install carries rpc-server (llama.cpp with GGML_RPC): the version's `rpc:`, else true for a
   * build whose cmake_flags set -DGGML_RPC=ON. (Optional for hand-built specs; the loader always sets it.)
   */
  readonly rpc?: boolean;
}

export interface EngineSpec {
  readonly name: string;
  readonly file: string;
  readonly versions: Readonly<Record<string, EngineVersionSpec>>;
}

/** How a new replica's prompt cache is primed with its model's hottest prefixes (router/warmer.ts). */
export interface WarmupSpec {
  /** Most prefixes replayed; 0: no warm-up. */
  readonly prefixes: number;
  /** Most prompt tokens replayed (estimated before, counted after each replay). */
  readonly maxTokens: number;
  /** Longest a warm-up holds the replica back; it takes traffic then whatever is left. */
  readonly timeoutMs: number;
}

export interface ProfileSpec {
  readonly name: string;
  readonly file: string;
  readonly engine: string;
  readonly engineVersion: string;
  readonly ctxSize: number;
  readonly threads: number | null;
  readonly parallel: number;
  readonly batchSize: number | null;
  readonly embeddings: boolean;
  /** Serve /v1/rerank (llama-server --reranking); absent: false. */
  readonly reranking?: boolean;
  readonly extraArgs: readonly string[];
  readonly memoryOverheadBytes: number;
  /** llama-server's host-RAM prompt cache (--cache-ram), part of the replica's memory need; 0 disables it. */
  readonly cacheRamBytes: number;
  readonly startTimeoutMs: number;
  /** A new replica's warm-up before it takes traffic (#38; the loader always sets it; not in the definition digest). */
  readonly warmup?: WarmupSpec;
  /** (Device fields are optional for hand-built specs; the loader always sets them.) Layers offloaded to a device (-ngl): all, a number, auto (as many as fit); null: none (CPU only). */
  readonly gpuLayers?: GpuLayers | null;
  /** Which devices may be used: backend names (Vulkan, CUDA) or device names (Vulkan0); empty = any. */
  readonly devices?: readonly string[];
  /** -sm; null = llama-server's default. */
  readonly splitMode?: 'none' | 'layer' | 'row' | null;
  /** -ts proportions for several devices on one node; empty = llama-server's default. */
  readonly tensorSplit?: readonly number[];
  /** -mg; null = llama-server's default. */
  readonly mainGpu?: number | null;
  /** How many devices of one node a replica uses (1 unless tensor_split names more). */
  readonly deviceCount?: number;
  /** The fields of the profile's `placement:` (its models', under the fields a model sets); null or absent: none set. */
  readonly placement?: Partial<PlacementSpec> | null;
}

/**
 * How a replica may be spread over nodes (#40). none: one node per replica (today's behaviour);
 * rpc: a replica that fits on no single node runs as a llama.cpp RPC group of 2..maxHosts hosts.
 */
export interface PlacementSpec {
  readonly spread: 'none' | 'rpc';
  /** Hosts of a group at most, the head included (2..8; default 2). */
  readonly maxHosts: number;
}

/** A model's placement when neither it nor its profile sets one. */
export const PLACEMENT_DEFAULT: PlacementSpec = Object.freeze({ spread: 'none', maxHosts: 2 });

export type GpuLayers = 'all' | 'auto' | number;

/**
 * One entry of a model's replica schedule: from each firing of `cron` on, `replicas` replicas — or,
 * with `max`, between `replicas` (the entry's min) and `max`, following the load.
 */
export interface ScheduleEntry {
  /** A node-cron expression (5 fields, or 6 with seconds first). */
  readonly cron: string;
  /** The count, or the range's min when `max` is set. */
  readonly replicas: number;
  /** The range's max (absent: a fixed count). */
  readonly max?: number;
}

/** Replica counts over time; read in `timezone` (IANA). */
export interface ReplicaSchedule {
  readonly timezone: string;
  readonly entries: readonly ScheduleEntry[];
}

export type ModelScaling =
  /**
   * `replicas` always, or — with a schedule — until the first entry fires (the default). With `max`
   * (`replicas: {min, max}`), `replicas` is the min and the count follows the load up to `max`.
   */
  | { readonly mode: 'replicas'; readonly replicas: number; readonly max?: number; readonly schedule?: ReplicaSchedule }
  | { readonly mode: 'on_demand'; readonly idleTimeoutMs: number; readonly maxReplicas: number };

export interface ModelSpec {
  readonly name: string;
  readonly file: string;
  /** Normalized source URL: https://…, hf://org/repo/path.gguf[@revision], file:///abs/path. */
  readonly source: string;
  readonly sha256: string;
  readonly profile: string;
  readonly scaling: ModelScaling;
  readonly aliases: readonly string[];
  readonly nodeSelector: Readonly<Record<string, string>>;
  readonly memoryBytes: number | null;
  readonly maxConcurrency: number | null;
  /** affinity: by prompt prefix (requests without one least-busy); least_busy: fewest in flight. */
  readonly routing: Routing;
  /** The model's queue, fleet.yaml's default filled in. */
  readonly queue: QueueSpec;
  /**
   * Name of a secret (a file in the controller's secrets dir) holding a bearer token for downloading
   * the source and reading its header; null for none. Not part of the definition: a token changes
   * who may fetch the file, not which file runs.
   */
  readonly token: string | null;
  /**
   * How a new revision rolls out: the model file's `rollout:` block, else fleet.yaml's (a model's
   * block replaces the default whole; `rollout: {}` turns it off). null: today's surge rollout.
   * Not part of the definition: changing it rolls nothing out.
   */
  readonly rollout: RolloutSpec | null;
  /**
   * How its count follows its load (the model file's `scale:` fields over fleet.yaml's); read only
   * where the model has a range. Absent on hand-built specs: SCALE_DEFAULTS. Not part of the definition.
   */
  readonly scale?: ScaleSpec;
  /**
   * The placement in force: the model file's `placement:` fields over its profile's over PLACEMENT_DEFAULT.
   * (Optional for hand-built specs; the loader always sets it.) spread is part of the definition
   * (a group runs other processes than a solo replica); max_hosts is not (a bound, like node_selector).
   */
  readonly placement?: PlacementSpec;
  /** sha256 (hex) over the model's definition: source, sha256, resolved profile and engine version. */
  readonly digest: string;
}

export interface AccessKeySpec {
  readonly name: string;
  /** sha256 hex of the key the client sends. */
  readonly sha256: string;
  /** Model names (canonical) the key may use, or ['*'] for all. */
  readonly models: readonly string[];
  /** The key's limits over all its models (null: none). */
  readonly limits: KeyLimits | null;
  /** The key's limits per model (canonical name → limits). */
  readonly modelLimits: Readonly<Record<string, KeyLimits>>;
  /** `trusted: true`: the key sees llama-server's prompt-cache figures (router/redact.ts). */
  readonly trusted: boolean;
  /** `isolate_cache: true`: the key's affinity keys are namespaced by the key (affinity.ts `isolatedKey`). */
  readonly isolateCache: boolean;
}

/** Limits of access/keys.yaml (`limits: {requests_per_minute, tokens_per_minute, concurrency}`); null: no limit. */
export interface KeyLimits {
  readonly requestsPerMinute: number | null;
  readonly tokensPerMinute: number | null;
  readonly concurrency: number | null;
}

export interface FleetSpec {
  /** The git revision (commit oid) the spec was read at, or null for a plain directory. */
  readonly revision: string | null;
  readonly settings: FleetSettings;
  readonly nodes: Readonly<Record<string, NodeSpec>>;
  readonly engines: Readonly<Record<string, EngineSpec>>;
  readonly profiles: Readonly<Record<string, ProfileSpec>>;
  readonly models: Readonly<Record<string, ModelSpec>>;
  readonly access: {
    readonly keys: readonly AccessKeySpec[];
    readonly file: string | null;
    /** access/keys.yaml's `models: {MODEL: {limits}}`: caps every key on that model (canonical name → limits). */
    readonly modelLimits: Readonly<Record<string, KeyLimits>>;
  };
  /** alias or canonical name -> canonical model name */
  readonly modelNames: Readonly<Record<string, string>>;
}

/** One problem found in a fleet repo. `file` is repo-relative; line/col are 1-based. */
export interface Problem {
  readonly file: string;
  readonly line: number | null;
  readonly col: number | null;
  /** JSON-pointer-like field path inside the file, e.g. "/profile" or "" for the file itself. */
  readonly path: string;
  readonly code: string;
  readonly message: string;
  readonly hint: string;
}

export type LoadResult =
  | { readonly ok: true; readonly spec: FleetSpec; readonly warnings: readonly Problem[] }
  | { readonly ok: false; readonly problems: readonly Problem[]; readonly warnings: readonly Problem[] };
