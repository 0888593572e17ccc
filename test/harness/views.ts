/**
 * The reconciler's published values, built for tests of their readers (admin API, `ctl`, metrics,
 * events, status branch, trust doors): a snapshot, a model, a replica and a node view, and a node's
 * spec. Each starts from quiet defaults (ready, nothing failed, parked or unplaceable; a standalone
 * controller that acts) and a test overrides only the fields its case is about.
 */
import type { ModelSpec, NodeSpec } from '../../src/fleet-spec/types.js';
import { STANDALONE, type FleetSnapshot, type ModelView, type NodeView, type ReplicaView } from '../../src/reconciler/view.js';

const GiB = 2 ** 30;

/** A snapshot at `at` (epoch ms) of a valid spec, no models and no nodes, no sync or pass seen yet. */
export function snapshot(over: Partial<FleetSnapshot> = {}): FleetSnapshot {
  return {
    at: 0,
    leader: true,
    control: STANDALONE,
    appliedRevision: 'rev1',
    specValid: true,
    rejected: null,
    lastSyncOk: null,
    lastSyncError: null,
    lastStatusWriteOk: null,
    stateError: null,
    models: [],
    nodes: [],
    lastPass: null,
    ...over,
  };
}

/** A model of `spec`, ready, one replica desired, none counted ready, its memory not estimated. */
export function modelView(spec: ModelSpec, over: Partial<ModelView> = {}): ModelView {
  return {
    name: spec.name,
    spec,
    phase: 'ready',
    desired: 1,
    ready: 0,
    replicas: [],
    consecutiveFailures: 0,
    lastError: null,
    parked: null,
    unplaceable: null,
    nextAttemptAt: null,
    memoryBytes: null,
    lastHandledRetry: null,
    ...over,
  };
}

/** A ready replica on node-1 at http://10.0.0.1:8001, started at 1000 (epoch ms). */
export function replicaView(id: string, model: string, over: Partial<ReplicaView> = {}): ReplicaView {
  return { id, model, node: 'node-1', endpoint: 'http://10.0.0.1:8001', phase: 'ready', digest: 'd', startedAt: 1000, ...over };
}

/** A reachable node with 8 GiB of memory (6 GiB available), no engines and no replicas. */
export function nodeView(name: string, over: Partial<NodeView> = {}): NodeView {
  return {
    name,
    reachable: true,
    error: null,
    memory: { totalBytes: 8 * GiB, availableBytes: 6 * GiB },
    diskFreeBytes: null,
    engines: [],
    engineInstallFailures: {},
    replicas: 0,
    ...over,
  };
}

/** nodes/<name>.yaml as parsed: an ssh node at 10.0.0.1 with replica ports 8000–8100. */
export function nodeSpec(name: string, over: Partial<NodeSpec> = {}): NodeSpec {
  return {
    name,
    file: `nodes/${name}.yaml`,
    transport: 'ssh',
    host: '10.0.0.1',
    port: 22,
    user: 'llmgw',
    hostKey: null,
    identity: null,
    labels: {},
    capacity: { memoryBytes: null, cpus: null },
    dataDir: '/var/lib/llmgw',
    ports: { from: 8000, to: 8100 },
    ...over,
  };
}
