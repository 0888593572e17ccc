/** The end of a pass (pure): the fleet snapshot everyone reads, and the status branch's files. */
import type { NodeObservation } from '../nodes/driver.js';
import type { FleetSpec, Problem } from '../fleet-spec/types.js';
import type { ModelHealth } from './health.js';
import type { InflightStart } from './planner.js';
import type { FleetStatus, ModelStatus, NodeStatus, ReasonRef } from './status-types.js';
import type { FleetSnapshot, ModelPhase, ModelView, NodeView, PassSummary, ReplicaView } from './view.js';

export interface NodeState {
  readonly reachable: boolean;
  readonly error: ReasonRef | null;
  /** The last good observation (kept while the node is unreachable: unknown, never empty). */
  readonly obs: NodeObservation | null;
  readonly installFailures: Readonly<Record<string, number>>;
}

export interface SummaryInput {
  readonly spec: FleetSpec | null;
  readonly now: number;
  readonly leader: boolean;
  readonly appliedRevision: string | null;
  readonly rejected: { readonly revision: string; readonly problems: readonly Problem[] } | null;
  readonly lastSyncOk: number | null;
  readonly lastSyncError: ReasonRef | null;
  readonly lastStatusWriteOk: number | null;
  readonly nodes: ReadonlyMap<string, NodeState>;
  readonly health: Readonly<Record<string, ModelHealth>>;
  readonly desired: Readonly<Record<string, number>>;
  readonly unplaceable: Readonly<Record<string, string>>;
  readonly inflight: readonly InflightStart[];
  readonly stopping: ReadonlySet<string>;
  readonly memory: Readonly<Record<string, number | null>>;
  readonly lastPass: PassSummary | null;
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

function phaseOf(desired: number, ready: number, starting: number, h: ModelHealth | undefined, unplaceable: string | null): ModelPhase {
  if (h?.parked) return 'parked';
  if (desired === 0) return ready > 0 ? 'ready' : 'idle';
  if (ready >= desired) return 'ready';
  if (ready > 0) return 'degraded';
  if (unplaceable) return 'unplaceable';
  if (starting > 0) return 'starting';
  if (h && h.consecutiveFailures > 0) return 'failing';
  return 'pending';
}

export function buildSnapshot(i: SummaryInput): FleetSnapshot {
  const replicas: ReplicaView[] = [];
  const seen = new Set<string>();
  for (const [node, ns] of [...i.nodes.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    for (const r of ns.obs?.replicas ?? []) {
      seen.add(r.id);
      const phase = i.stopping.has(r.id) ? 'stopping' : !ns.reachable && r.state === 'ready' ? 'starting' : r.state;
      replicas.push({ id: r.id, model: r.model, node, endpoint: r.endpoint, phase, digest: r.digest, startedAt: new Date(r.startedAt).toISOString() });
    }
  }
  for (const s of i.inflight) {
    if (!seen.has(s.replicaId)) replicas.push({ id: s.replicaId, model: s.model, node: s.node, endpoint: '', phase: 'starting', digest: s.digest, startedAt: new Date(i.now).toISOString() });
  }
  const models: ModelView[] = Object.values(i.spec?.models ?? {})
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((m) => {
      const mine = replicas.filter((r) => r.model === m.name);
      const ready = mine.filter((r) => r.phase === 'ready').length;
      const starting = mine.filter((r) => r.phase === 'starting').length;
      const h = i.health[m.name];
      const desired = i.desired[m.name] ?? 0;
      const unplaceable = i.unplaceable[m.name] ?? null;
      return {
        name: m.name,
        spec: m,
        phase: phaseOf(desired, ready, starting, h, unplaceable),
        desired,
        ready,
        replicas: mine,
        consecutiveFailures: h?.consecutiveFailures ?? 0,
        lastError: h?.lastError ?? null,
        parked: h?.parked ? { since: new Date(h.parked.since).toISOString(), lastError: h.parked.lastError } : null,
        unplaceable,
        nextAttemptAt: iso(h?.nextAttemptAt ?? null),
        memoryBytes: i.memory[m.name] ?? null,
        digest: m.digest,
      };
    });
  const nodes: NodeView[] = Object.values(i.spec?.nodes ?? {})
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((n) => {
      const ns = i.nodes.get(n.name);
      return {
        name: n.name,
        reachable: ns?.reachable ?? false,
        error: ns?.error ?? null,
        memory: ns?.obs ? ns.obs.memory : null,
        engines: (ns?.obs?.engines ?? []).map((e) => `${e.engine}@${e.version}`).sort(),
        engineInstallFailures: ns?.installFailures ?? {},
        replicas: ns?.obs?.replicas.length ?? 0,
      };
    });
  return {
    at: new Date(i.now).toISOString(),
    leader: i.leader,
    appliedRevision: i.appliedRevision,
    specValid: i.rejected === null,
    rejected: i.rejected,
    lastSyncOk: iso(i.lastSyncOk),
    lastSyncError: i.lastSyncError,
    lastStatusWriteOk: iso(i.lastStatusWriteOk),
    models,
    nodes,
    lastPass: i.lastPass,
  };
}

/** The combined status document (`llmgw plan --status` reads this form). */
export function fleetStatus(s: FleetSnapshot): FleetStatus {
  const models: Record<string, ModelStatus> = {};
  for (const m of s.models) {
    models[m.name] = {
      name: m.name,
      digest: m.digest,
      desired: m.desired,
      ready: m.ready,
      consecutiveFailures: m.consecutiveFailures,
      parked: m.parked,
      unplaceable: m.unplaceable,
      memoryBytes: m.memoryBytes,
      lastError: m.lastError,
      lastHandledRetry: null,
    };
  }
  const nodes: Record<string, NodeStatus> = {};
  for (const n of s.nodes) nodes[n.name] = { name: n.name, reachable: n.reachable, memory: n.memory, engines: n.engines };
  return {
    version: 1,
    generatedAt: s.at,
    appliedRevision: s.appliedRevision,
    rejected: s.rejected ? { revision: s.rejected.revision, problems: s.rejected.problems.map((p) => ({ file: p.file, line: p.line, message: p.message, code: p.code })) } : null,
    nodes,
    models,
  };
}

/**
 * The status branch's files: one per model plus fleet.json. Nothing that changes on every pass
 * (times of day, available memory) is in them, so a commit happens only when something changed.
 */
export function statusFiles(s: FleetSnapshot, health: Readonly<Record<string, ModelHealth>>): Record<string, string> {
  const files: Record<string, string> = {};
  const st = fleetStatus(s);
  for (const m of Object.values(st.models)) {
    files[`models/${m.name}.json`] = `${JSON.stringify({ ...m, lastHandledRetry: health[m.name]?.lastHandledRetry ?? null }, null, 2)}\n`;
  }
  const nodes = Object.fromEntries(
    Object.values(st.nodes).map((n) => [n.name, { name: n.name, reachable: n.reachable, memoryTotalBytes: n.memory?.totalBytes ?? null, engines: n.engines }]),
  );
  files['fleet.json'] = `${JSON.stringify({ version: 1, appliedRevision: st.appliedRevision, rejected: st.rejected, nodes }, null, 2)}\n`;
  return files;
}
