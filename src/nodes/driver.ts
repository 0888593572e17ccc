/**
 * The NodeDriver: everything llmgw does on a node (observe it, install engines, fetch model files,
 * start / stop / adopt llama-server replicas), behind one interface. There is one implementation,
 * ShellNodeDriver (shell-driver.ts), written over the `Shell` interface so the ssh and local
 * transports share every script.
 *
 * Layout on the node, under `node.dataDir`:
 *   engines/<engine>/<version>/         the installed engine; `.complete` (binary path + install
 *                                       fingerprint) is written last, so a half install never looks installed
 *   models/<sha256>.gguf                verified model files (downloaded to `<sha256>.gguf.part`, renamed when verified)
 *   replicas/<id>/state.json            what was started (pid, process start time, port, argv, model, digest, log path)
 *   replicas/<id>/log                   llama-server's stdout + stderr
 *   rpc/<id>/state.json, log            an RPC worker (rpc-server) of a split model, recorded like a replica
 *   .locks/                             flock files of engine installs and model downloads; with a fence,
 *                                       `owner` (the one owner record: owner, label, epoch, renewedAt, ttl) and `owner.lock`
 *
 * Errors are LlmgwError with catalogue reasons (NODE_*, ENGINE_*, MODEL_*, REPLICA_*).
 */
import { createHash } from 'node:crypto';
import type { ReasonCode } from '../errors/catalogue.js';
import type { EngineVersionSpec, ProfileSpec } from '../fleet-spec/types.js';
import type { DeviceObservation } from './devices.js';

export type { DeviceObservation } from './devices.js';

export type ReplicaState = 'starting' | 'ready' | 'failed';

export interface ReplicaFailure {
  readonly code: ReasonCode;
  /** From the engine's own output where possible, e.g. "… unknown model architecture: 'kev'". */
  readonly message: string;
  readonly logTail: string;
  /** The log names no reason (failure.ts: llama-server can lose its last lines at exit). */
  readonly silent?: boolean;
}

export interface ReplicaObservation {
  readonly id: string;
  readonly model: string;
  /** The model's definition digest the replica was started with. */
  readonly digest: string;
  readonly port: number;
  readonly pid: number;
  /** Epoch ms when the replica was started (the node's clock). */
  readonly startedAt: number;
  /** http://host:port — where the controller reaches the replica. */
  readonly endpoint: string;
  /**
   * ready: the process is the one started and GET /health is 200; starting: the process is alive
   * but not (yet) healthy; failed: the process is gone (or its pid now belongs to another process).
   */
  readonly state: ReplicaState;
  readonly failure?: ReplicaFailure;
  /**
   * engineKeyFingerprint() of the engine API key the replica was started with (recorded in its
   * state.json on the node); absent for a replica started by an llmgw that did not record it. A
   * replica whose fingerprint is not the controller's key's refuses the router (401).
   */
  readonly keyFingerprint?: string;
  /** The node's devices the replica was started on (node-level names, e.g. Vulkan0); absent/empty: none. */
  readonly devices?: readonly string[];
  /** Layers it was started with on them (-ngl), when it uses a device. */
  readonly gpuLayers?: number | 'all';
  /** The layers llama-server says it offloaded, of the model's offloadable ones (its load log at -lv 4 and above); absent when the log does not say. */
  readonly offloaded?: { readonly layers: number; readonly of: number };
}

/** The first 16 hex digits of sha256(key): tells keys apart without revealing them. */
export function engineKeyFingerprint(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 16);
}

export interface EngineObservation {
  readonly engine: string;
  readonly version: string;
  readonly binary: string;
  /** What `llama-server --list-devices` of this engine reports on the node (empty: none, or not listable). */
  readonly devices?: readonly DeviceObservation[];
  /** Whether an rpc-server (or ggml-rpc-server) sits beside its llama-server: it can run RPC workers. Absent: not looked at. */
  readonly rpc?: boolean;
  /** The build its `--version` named at the install ("0.4.0-dev (build 1, commit 80fb11a)"); absent: not recorded (an install from before it was). */
  readonly build?: string;
}

export interface ModelFileObservation {
  readonly sha256: string;
  readonly path: string;
  readonly bytes: number;
}

export interface NodeObservation {
  readonly node: string;
  /** Epoch ms (controller clock) when the observation was taken. */
  readonly at: number;
  readonly memory: { readonly totalBytes: number; readonly availableBytes: number };
  readonly cpus: number;
  readonly cpuFlags: readonly string[];
  /** `uname -m`, e.g. x86_64, aarch64. */
  readonly arch: string;
  /** Free bytes on the file system of dataDir. */
  readonly diskFreeBytes: number;
  readonly engines: readonly EngineObservation[];
  readonly models: readonly ModelFileObservation[];
  readonly replicas: readonly ReplicaObservation[];
  /** The devices the node's engines see, each name once (mergeDevices). */
  readonly devices?: readonly DeviceObservation[];
  /** The node's owner record as this look found (and, when 'mine', renewed) it; absent when the driver has no fence. */
  readonly fence?: NodeFenceView;
  /** The RPC workers (rpc-server) on the node, live or dead (rpc/<id>/); absent when there are none. */
  readonly rpcWorkers?: readonly RpcWorkerObservation[];
}

/** An RPC worker as a look found it. */
export interface RpcWorkerObservation {
  readonly id: string;
  /** What it serves (the group's model), as recorded at its start. */
  readonly group: string;
  /** The address it binds (the node's listen_address or 127.0.0.1) and its port: the head's --rpc entry is `${host}:${port}`. */
  readonly host: string;
  readonly port: number;
  readonly pid: number;
  readonly startedAt: number;
  /** ready: alive and listening on its port; starting: alive, not (yet) listening; failed: the process is gone. */
  readonly state: ReplicaState;
  readonly failure?: ReplicaFailure;
}

export interface RpcWorkerStartSpec {
  /** Chosen by the caller, like a replica id ([A-Za-z0-9][A-Za-z0-9._-]{0,127}), unique among the node's workers. */
  readonly id: string;
  /** What it serves (the group's model): recorded, not interpreted. */
  readonly group: string;
  /** The engine's llama-server on the node (from ensureEngine); rpc-server is taken from beside it. */
  readonly binary: string;
  /** rpc-server's CPU threads (its default is 1). */
  readonly threads?: number;
  /** A fixed port (must be free); default: allocated from node.ports like a replica's. */
  readonly port?: number;
}

export interface RpcWorkerHandle {
  readonly id: string;
  readonly host: string;
  readonly port: number;
  readonly pid: number;
  /** `${host}:${port}`: the entry for the head's `llama-server --rpc`. */
  readonly endpoint: string;
  readonly startedAt: number;
}

/**
 * Who acts on a node, carried with every action of a driver that has one (see fence.ts). The node
 * keeps one owner record under <data dir>/.locks and refuses an action that a newer owner or epoch
 * has superseded: NODE_OWNED (another owner's record has not expired) or NODE_FENCED (the same
 * owner's record has a higher epoch).
 */
export interface Fence {
  /** Who acts: a standalone controller's id, or the etcd cluster's id (all HA instances share it). */
  readonly owner: string;
  /** For messages: e.g. "llmgw on host-a (state dir /var/lib/llmgw)" or "etcd cluster /llmgw/prod". */
  readonly label: string;
  /** 0 standalone; the leader's election revision with etcd. */
  readonly epoch: number;
  /** How long the record holds without a renewal before another owner may take the node over. */
  readonly ttlSeconds: number;
  /**
   * A record of this owner with a higher epoch that the leader judged not made by this etcd (above
   * its revision: a restore or a forgery), by its epoch and seq: taken over while it is unchanged.
   */
  readonly supersede?: { readonly epoch: number; readonly seq: number };
}

export interface NodeFenceView {
  /**
   * mine: the record is this driver's fence (also when the node had no record, now claimed, or an
   * expired one, taken over); other: another owner's record that has not expired; newer-epoch: this
   * owner's record with a higher epoch than the driver's. owner/label/epoch are the record's after
   * the look (for 'mine': the driver's own).
   */
  readonly state: 'mine' | 'other' | 'newer-epoch';
  readonly owner: string;
  readonly label: string;
  readonly epoch: number;
  /** Seconds (node clock) since the record was last renewed; 0 for 'mine' (renewed by this look). */
  readonly renewedAgoSeconds: number;
  /** The record's ttl. */
  readonly ttlSeconds: number;
  /** How many times the record was written (changes with every write: what a supersede names). */
  readonly seq?: number;
  /** Set when this look took the node over from another owner whose record had expired. */
  readonly tookOverFrom?: { readonly owner: string; readonly label: string; readonly epoch: number; readonly renewedAgoSeconds: number };
}

export interface ReplicaStartSpec {
  /** Chosen by the reconciler; [A-Za-z0-9][A-Za-z0-9._-]{0,127}, unique on the node. */
  readonly id: string;
  /** Canonical model name (recorded, not interpreted). */
  readonly model: string;
  /** The model's definition digest (recorded, so adoption can compare it with the spec). */
  readonly digest: string;
  /** The GGUF on the node (from ensureModel). */
  readonly modelPath: string;
  /** The engine binary on the node (from ensureEngine). */
  readonly binary: string;
  readonly profile: ProfileSpec;
  /** Passed to llama-server as LLAMA_API_KEY over the script's stdin, never in argv. Empty = no key. */
  readonly apiKey: string;
  /** A fixed port (must be free); default: allocated from node.ports. */
  readonly port?: number;
  /**
   * The node's devices placement chose (e.g. ["Vulkan0"]) and the layers to offload to them (auto
   * resolved to a number by placement). Absent or empty: the replica sees no device.
   */
  readonly devices?: readonly string[];
  readonly gpuLayers?: number | 'all';
  /**
   * The head of an RPC group (#40): its workers' rpc-servers (host:port, from startRpcWorker), given
   * to llama-server as --rpc; the layers offloaded to them (-ngl: the model's last layers and its
   * output layer) and their split among the workers (-ts, with more than one); the head runs at -lv 4
   * so its log shows each worker's buffers (the group's readiness).
   */
  readonly rpc?: { readonly endpoints: readonly string[]; readonly gpuLayers: number | 'all'; readonly split: readonly number[] | null };
}

export interface ReplicaHandle {
  readonly id: string;
  readonly port: number;
  readonly pid: number;
  readonly endpoint: string;
  readonly startedAt: number;
}

/** A bearer token for downloading a model: the secret's name (for messages) and its value. */
export interface DownloadToken {
  readonly secret: string;
  readonly value: string;
}

export interface NodeDriver {
  readonly node: string;
  /** One look at the node. Throws LlmgwError (NODE_UNREACHABLE, NODE_TIMEOUT, …): an unreachable node is unknown, never empty. */
  observe(): Promise<NodeObservation>;
  /**
   * Install engine@version once (idempotent; concurrent calls coalesce). Returns the binary's path on
   * the node. What this driver found installed before (and its last look still lists) may be answered
   * without a check: startReplica checks it first and fails with REPLICA_INPUT_GONE, having done
   * nothing, when it is gone; ensureEngine then checks it again (so do ensureModel and model files).
   */
  ensureEngine(v: EngineVersionSpec): Promise<{ binary: string }>;
  /**
   * Fetch and verify a model file into models/<sha256>.gguf (idempotent; concurrent calls coalesce).
   * `token` is sent as a bearer token with a URL source's download (on the script's stdin, never in
   * an argv).
   */
  ensureModel(source: string, sha256: string, token?: DownloadToken): Promise<{ path: string; bytes: number }>;
  /** Launch llama-server detached (own session, survives the controller); returns at once. */
  startReplica(spec: ReplicaStartSpec): Promise<ReplicaHandle>;
  /**
   * Resolves when GET /health is 200. Rejects with LlmgwError REPLICA_* (detail { logTail }) when the
   * process exits first (reason classified from its log) or with REPLICA_START_TIMEOUT. Does not stop
   * the replica: the caller decides (stopReplica also removes its state).
   */
  waitReady(id: string, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<void>;
  /** SIGTERM, SIGKILL after graceMs, then remove replicas/<id>. Idempotent (unknown id is fine). */
  stopReplica(id: string, graceMs: number): Promise<void>;
  /**
   * Up to `length` bytes of a file on the node from `offset`, and the file's size (to read the GGUF
   * header of a file:// model source where it is). May return fewer bytes than asked (at the end of
   * the file, or above the driver's limit per call). MODEL_FILE_NOT_FOUND when it is not there.
   */
  readFileRange(path: string, offset: number, length: number): Promise<{ data: Buffer; size: number }>;
  /** The last `lines` lines of the replica's log. REPLICA_NOT_FOUND for an unknown id. */
  logTail(id: string, lines: number): Promise<string>;
  /**
   * Start an RPC worker (rpc-server beside the engine's llama-server) detached, bound to the node's
   * listen_address or 127.0.0.1 (never a wildcard: RPC_BIND_REFUSED) on a port of node.ports;
   * resolves once it listens there. RPC_WORKER_EXITED / RPC_WORKER_START_TIMEOUT (with its log tail;
   * its dir removed), ENGINE_NO_RPC, RPC_BIND_REFUSED.
   * Absent on drivers that cannot run workers (test fakes).
   */
  startRpcWorker?(spec: RpcWorkerStartSpec): Promise<RpcWorkerHandle>;
  /** Stop an RPC worker and its children (TERM, KILL after graceMs), then remove rpc/<id>. Idempotent. */
  stopRpcWorker?(id: string, graceMs: number): Promise<void>;
  /** Close the transport. */
  close(): Promise<void>;
}
