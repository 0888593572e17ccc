/**
 * What the controller reports about the fleet: written to the status branch (one file per model
 * plus a fleet summary) and read back by `llmgw plan --status FILE` (the combined JSON form).
 */
export interface ReasonRef {
  readonly code: string;
  readonly message: string;
}

export interface ModelStatus {
  readonly name: string;
  readonly digest: string;
  /** Replicas the model should have now (on-demand models count only when asked for). */
  readonly desired: number;
  readonly ready: number;
  readonly consecutiveFailures: number;
  readonly parked: { readonly since: string; readonly lastError: ReasonRef } | null;
  readonly unplaceable: string | null;
  /** Memory per replica as estimated from the GGUF header and profile (or the override). */
  readonly memoryBytes: number | null;
  readonly lastError: ReasonRef | null;
  readonly lastHandledRetry: string | null;
}

export interface NodeStatus {
  readonly name: string;
  readonly reachable: boolean;
  readonly memory: { readonly totalBytes: number; readonly availableBytes: number } | null;
  /** "engine@version" installed on the node. */
  readonly engines: readonly string[];
}

export interface FleetStatus {
  readonly version: 1;
  readonly generatedAt: string;
  readonly appliedRevision: string | null;
  readonly rejected: { readonly revision: string; readonly problems: readonly { file: string; line: number | null; message: string; code: string }[] } | null;
  readonly nodes: Readonly<Record<string, NodeStatus>>;
  readonly models: Readonly<Record<string, ModelStatus>>;
}
