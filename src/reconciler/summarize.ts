/** The end of a pass (pure): the fleet snapshot everyone reads. */
import type { ReasonRef } from '../errors/catalogue.js';
import type { NodeObservation } from '../nodes/driver.js';
import type { FleetSpec, ModelSpec, Problem } from '../fleet-spec/types.js';
import { equalData } from '../util/equal-data.js';
import { phaseOf } from './availability.js';
import type { ModelHealth } from './health.js';
import type { Unplaceable } from './placement.js';
import type { DeviceNeed } from './memory.js';
import { replicaDeviceBytes, replicaDeviceView } from './device-use.js';
import { modelsInOrder, nodesInOrder } from './spec-order.js';
import type { ReplicaRecord } from './replica-life.js';
import { keptFromUsers, stableLeft, type RolloutRecord } from './rollout-life.js';
import type { CanarySpec, RolloutView } from '../rollout/types.js';
import type { StopRecord } from './stops.js';
import type { ScaleRecord, SummedLoad } from '../scale/decide.js';
import { rangeNow, scales } from '../scale/range.js';
import type { ShortOfRoom } from './planner.js';
import type { ControlView, FleetSnapshot, ScaleView, ModelView, NodeDeviceView, NodeView, PassSummary, ReplicaView, WarmupView } from './view.js';

export interface NodeState {
  readonly reachable: boolean;
  readonly error: ReasonRef | null;
  /** The last good observation (kept while the node is unreachable: unknown, never empty). */
  readonly obs: NodeObservation | null;
  /** When the look `obs` comes from began (controller clock); null before the first good one. */
  readonly lookedAt: number | null;
  readonly installFailures: Readonly<Record<string, number>>;
}

/** Where a stop is: waiting for its in-flight requests, or signalled (SIGTERM, stop_grace, SIGKILL). */
export interface StopProgress {
  readonly phase: 'draining' | 'stopping';
  readonly inFlight: number | null;
}

/** A replica being stopped: 'draining' until it is signalled, then 'stopping'; never routable. */
export function stopPhase(rec: Pick<StopRecord, 'drain'>, p: StopProgress | undefined): { phase: 'draining' | 'stopping'; inFlight: number | null } {
  if (!rec.drain) return { phase: 'stopping', inFlight: null };
  return { phase: p?.phase ?? 'draining', inFlight: p?.inFlight ?? null };
}

export interface SummaryInput {
  readonly spec: FleetSpec | null;
  readonly now: number;
  readonly leader: boolean;
  readonly control: ControlView;
  readonly appliedRevision: string | null;
  readonly rejected: { readonly revision: string; readonly problems: readonly Problem[] } | null;
  readonly lastSyncOk: number | null;
  readonly lastSyncError: ReasonRef | null;
  readonly lastStatusWriteOk: number | null;
  readonly stateError: ReasonRef | null;
  readonly nodes: ReadonlyMap<string, NodeState>;
  readonly health: Readonly<Record<string, ModelHealth>>;
  readonly desired: Readonly<Record<string, number>>;
  readonly unplaceable: Readonly<Record<string, Unplaceable>>;
  /** The record's replicas: a stop is out of routing from its start; a start is shown before a look shows it. */
  readonly replicas: Readonly<Record<string, ReplicaRecord>>;
  /** Rollouts by model (rollout-life.ts): a replica of a revision under test or held takes no request. */
  readonly rollouts?: Readonly<Record<string, RolloutRecord>>;
  /** A canary step's live figures by model, as the controller last judged them (canary-steps.ts). */
  readonly rolloutFigures?: (model: string) => RolloutView['figures'];
  /** Where each running stop is (its drain's last in-flight reading). */
  readonly stopProgress: ReadonlyMap<string, StopProgress>;
  readonly memory: Readonly<Record<string, number | null>>;
  /** The device need of models whose profile offloads layers (#24). */
  readonly deviceNeeds?: Readonly<Record<string, DeviceNeed>>;
  readonly lastPass: PassSummary | null;
  /** Scaling (#42): each scaling model's record, and those short of room for their extra replicas. */
  /** Warm-ups this process ran, by replica (#38). */
  readonly warmups?: ReadonlyMap<string, WarmupView>;
  readonly scale?: { readonly records: Readonly<Record<string, ScaleRecord>>; readonly short: Readonly<Record<string, ShortOfRoom>>; readonly load?: Readonly<Record<string, SummedLoad>> };
}

const desiredOf = (i: SummaryInput, model: string): number => i.desired[model] ?? 0;

/** The last view built of each model, by its spec object (a spec's objects are per revision). */
const lastViews = new WeakMap<ModelSpec, ModelView>();

/**
 * The view built before for the same spec object when it is equal to this one, else this one: an
 * unchanged model keeps its view object from snapshot to snapshot, so what is derived from a view
 * (the published entry's text, the events between two snapshots) is derived once, by its identity.
 */
export function keptView(v: ModelView): ModelView {
  const last = lastViews.get(v.spec);
  if (last !== undefined && sameView(last, v)) return last;
  lastViews.set(v.spec, v);
  return v;
}

function sameView(a: ModelView, b: ModelView): boolean {
  for (const k in b) {
    if (k === 'spec') continue; // the key: the same object
    if (!equalData(a[k as keyof ModelView], b[k as keyof ModelView])) return false;
  }
  return Object.keys(a).length === Object.keys(b).length;
}

/** A replica of a revision whose checks run (or that is held back) takes no user request: shown starting. */
function underTest(i: SummaryInput, model: string, digest: string): boolean {
  return keptFromUsers(i.rollouts?.[model], digest);
}

/** The rollout as the model's view shows it: in a canary step, its share, its end and the live figures. */
export function rolloutView(r: RolloutRecord, canary: CanarySpec | null = null, figures?: RolloutView['figures'], stableGone = false): RolloutView {
  const step = r.step ?? 0;
  const inCanary = r.phase === 'canary' && canary !== null;
  return {
    phase: r.phase,
    stableDigest: r.stable,
    canaryDigest: r.digest,
    step,
    share: inCanary ? (canary.steps[step] ?? 1) : 0,
    since: r.since,
    until: inCanary ? r.since + canary.intervalMs : null,
    verdict: r.verdict ?? null,
    ...(inCanary && figures ? { figures } : {}),
    ...(stableGone && r.phase !== 'promoted' ? { stableGone: true as const } : {}),
  };
}

/** A replica's warm-up for its view, if one ran. */
function warmupOf(i: SummaryInput, id: string): { warmup?: WarmupView } {
  const w = i.warmups?.get(id);
  return w === undefined ? {} : { warmup: w };
}

/** An RPC group's hosts (#40), from the record. */
function groupOf(i: SummaryInput, id: string): { group?: ReplicaView['group'] } {
  const g = i.replicas[id]?.group;
  return g === undefined ? {} : { group: g };
}

export function buildSnapshot(i: SummaryInput): FleetSnapshot {
  const replicas: ReplicaView[] = [];
  const seen = new Set<string>();
  for (const [node, ns] of [...i.nodes.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    for (const r of ns.obs?.replicas ?? []) {
      seen.add(r.id);
      const device = deviceOf(i, r);
      const p = i.replicas[r.id]?.phase;
      if (p?.kind === 'leaving' && p.why === 'stop') {
        const sp = stopPhase(p, i.stopProgress.get(r.id));
        replicas.push({ id: r.id, model: r.model, node, endpoint: r.endpoint, phase: sp.phase, digest: r.digest, startedAt: r.startedAt, inFlight: sp.inFlight, ...device, ...groupOf(i, r.id) });
        continue;
      }
      const phase = r.state === 'ready' && (!ns.reachable || underTest(i, r.model, r.digest)) ? 'starting' : r.state;
      replicas.push({ id: r.id, model: r.model, node, endpoint: r.endpoint, phase, digest: r.digest, startedAt: r.startedAt, ...device, ...warmupOf(i, r.id), ...groupOf(i, r.id) });
    }
  }
  for (const id in i.replicas) {
    const s = i.replicas[id]!;
    if (seen.has(id) || !(s.phase.kind === 'launching' || (s.phase.kind === 'ready' && !s.phase.seen))) continue;
    // a start that concluded ready is served at once, before a look shows its replica (not while its
    // node is out of reach: an observed ready replica there is shown starting too)
    const endpoint = s.phase.kind === 'ready' ? s.phase.endpoint : undefined;
    const ready = endpoint !== undefined && i.nodes.get(s.node)?.reachable !== false && !underTest(i, s.model, s.digest);
    replicas.push({ id, model: s.model, node: s.node, endpoint: ready ? endpoint : '', phase: ready ? 'ready' : 'starting', digest: s.digest, startedAt: s.startedAt, ...warmupOf(i, id), ...groupOf(i, id) });
  }
  const byModel = new Map<string, ReplicaView[]>();
  for (const r of replicas) {
    const list = byModel.get(r.model);
    if (list) list.push(r);
    else byModel.set(r.model, [r]);
  }
  const models: ModelView[] = (i.spec ? modelsInOrder(i.spec) : [])
    .map((m) => {
      const mine = byModel.get(m.name) ?? [];
      const ready = mine.filter((r) => r.phase === 'ready').length;
      const starting = mine.filter((r) => r.phase === 'starting').length;
      // A replica of it is being stopped while it has fewer ready than desired: its replacement
      // comes once the stop is done (no room to surge) — a router waits for it, never refuses.
      const replacing = ready < desiredOf(i, m.name) && mine.some((r) => r.phase === 'draining' || r.phase === 'stopping');
      const h = i.health[m.name];
      const desired = i.desired[m.name] ?? 0;
      const unplaceable = i.unplaceable[m.name] ?? null;
      return keptView({
        name: m.name,
        spec: m,
        // a scaling model short of room (#42) is ready once every replica that fits is: it wants more, it lacks none it can have
        phase: phaseOf(Math.min(desired, i.scale?.short[m.name]?.fit ?? desired), ready, starting + (replacing ? 1 : 0), h, unplaceable !== null),
        replacing,
        desired,
        ready,
        replicas: mine,
        consecutiveFailures: h?.consecutiveFailures ?? 0,
        lastError: h?.lastError ?? null,
        parked: h?.parked ?? null,
        unplaceable,
        nextAttemptAt: h?.nextAttemptAt ?? null,
        memoryBytes: i.memory[m.name] ?? null,
        lastHandledRetry: h?.lastHandledRetry ?? null,
        ...(i.rollouts?.[m.name] ? { rollout: rolloutView(i.rollouts[m.name]!, m.rollout?.canary ?? null, i.rolloutFigures?.(m.name), !stableLeft(i.replicas, m.name, i.rollouts[m.name]!.stable)) } : {}),
        ...(scales(m) ? { scale: scaleView(m, desired, i) } : {}),
      });
    });
  const nodes: NodeView[] = (i.spec ? nodesInOrder(i.spec) : [])
    .map((n) => {
      const ns = i.nodes.get(n.name);
      return {
        name: n.name,
        reachable: ns?.reachable ?? false,
        error: ns?.error ?? null,
        memory: ns?.obs ? ns.obs.memory : null,
        diskFreeBytes: ns?.obs?.diskFreeBytes ?? null,
        engines: (ns?.obs?.engines ?? []).map((e) => `${e.engine}@${e.version}`).sort(),
        engineInstallFailures: ns?.installFailures ?? {},
        replicas: ns?.obs?.replicas.length ?? 0,
        ...(ns?.obs ? { devices: deviceViews(i, n.name, ns.obs) } : {}),
      };
    });
  return {
    at: i.now,
    leader: i.leader,
    control: i.control,
    appliedRevision: i.appliedRevision,
    specValid: i.rejected === null,
    rejected: i.rejected,
    lastSyncOk: i.lastSyncOk,
    lastSyncError: i.lastSyncError,
    lastStatusWriteOk: i.lastStatusWriteOk,
    stateError: i.stateError,
    models,
    nodes,
    lastPass: i.lastPass,
  };
}

/** An observed replica's place on devices, as a spread into its view (nothing for one on the host only). */
function deviceOf(i: SummaryInput, r: NodeObservation['replicas'][number]): { device?: ReplicaView['device'] } {
  if ((r.devices?.length ?? 0) === 0) return {};
  const m = i.spec?.models[r.model];
  const device = replicaDeviceView(r, i.deviceNeeds?.[r.model], (m && i.spec?.profiles[m.profile]?.tensorSplit) || []);
  return device ? { device } : {};
}

/** A node's devices with what llmgw's replicas reserve on them. */
function deviceViews(i: SummaryInput, node: string, obs: NodeObservation): NodeDeviceView[] {
  const reserved = new Map<string, number>();
  for (const r of obs.replicas) {
    if (r.state === 'failed') continue;
    const m = i.spec?.models[r.model];
    const split = (m && i.spec?.profiles[m.profile]?.tensorSplit) || [];
    for (const [d, b] of replicaDeviceBytes(r, i.deviceNeeds?.[r.model], split)) reserved.set(d, (reserved.get(d) ?? 0) + b);
  }
  const declared = i.spec?.nodes[node]?.deviceMemory ?? {};
  return (obs.devices ?? []).map((d) => ({
    name: d.name, description: d.description, totalBytes: d.totalBytes, freeBytes: d.freeBytes,
    capacityBytes: declared[d.name] ?? d.totalBytes, reservedBytes: reserved.get(d.name) ?? 0,
  }));
}

/** A scaling model's view (#42): its range now, the count decided, its last change, what did not fit. */
function scaleView(m: ModelSpec, desired: number, i: SummaryInput): ScaleView {
  const r = rangeNow(m, i.now);
  const rec = i.scale?.records[m.name];
  const load = i.scale?.load?.[m.name];
  return { min: r.min, max: r.max, count: desired, last: rec?.last ?? null, short: i.scale?.short[m.name] ?? null, ...(load ? { load: { busy: load.busy, queued: load.queued, waitMs: load.waitMs } } : {}) };
}
