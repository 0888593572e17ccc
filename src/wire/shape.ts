/**
 * The wire shapes, derived at the edge from the reconciler's FleetSnapshot (domain values: epoch ms,
 * structured reasons): what the admin API answers, what `llmgw ctl` reads, and — the same shapes
 * minus what changes on every pass — the status branch's files, which `llmgw plan` reads back.
 * Every reason an operator sees carries its stable code and a hint.
 */
import { hintFor, Reasons, type ReasonRef } from '../errors/catalogue.js';
import { redactUrls } from '../util/redact-url.js';
import type { UnplaceableCode } from '../reconciler/placement.js';
import type { RetryOutcome } from '../reconciler/state.js';
import type { RolloutOverridden } from '../reconciler/controller-api.js';
import { MODEL_PHASES, type FleetSnapshot, type ModelPhase, type ModelView, type NodeView, type ReplicaDeviceView, type ReplicaView } from '../reconciler/view.js';
import type { FleetSpec, ModelScaling, Problem } from '../fleet-spec/types.js';
import { scheduleJson, type ScheduleJson } from '../schedule/schedule.js';
import type { CanarySpec, RolloutView } from '../rollout/types.js';
import { pickModels, type ModelsQuery } from './models-query.js';

export { MODEL_PHASES } from '../reconciler/view.js';

export interface ReasonJson {
  readonly code: string;
  readonly message: string;
  readonly hint: string;
}

/** A replica as the admin API, the status branch and ctl read it: the view's fields, its start as ISO time. */
export interface ReplicaJson extends Pick<ReplicaView, 'id' | 'model' | 'node' | 'endpoint' | 'phase' | 'digest' | 'group'> {
  /** The replica runs an older definition of its model than the one in force. */
  readonly outdated: boolean;
  readonly startedAt: string;
  /** Requests in flight on a draining/stopping replica as it last reported them (null: unknown; absent otherwise). */
  readonly inFlight?: number | null;
  /** A replica on devices: which, its layers there (K of M) and the device bytes reserved for it; absent: host only. */
  readonly device?: ReplicaDeviceJson;
}

/** A replica on devices, K/M = layers/layersOf; layersFrom: llama-server's own count (its load log at -lv 4 and above) or the -ngl asked. */
export interface ReplicaDeviceJson {
  readonly devices: readonly string[];
  readonly layers: number | null; // null: all, of a count not known yet
  /** The model's repeating layers and the output layer (null: not known yet). */
  readonly layersOf: number | null;
  readonly layersFrom: 'reported' | 'asked';
  /** Placement's estimate (null: the model's device need is not known yet). */
  readonly reservedBytes: number | null;
}

export interface ModelJson {
  readonly name: string;
  readonly phase: ModelPhase;
  /** Replicas the model should have now (an on-demand model: only while asked for). */
  readonly desired: number;
  readonly ready: number;
  readonly scaling: ModelScaling;
  /** A scheduled model: the count in force at the snapshot, the entry that set it, the next change. */
  readonly schedule?: ScheduleJson | null;
  readonly profile: string;
  readonly source: string;
  readonly aliases: readonly string[];
  /** Definition digest. */
  readonly digest: string;
  /** The fleet revision in force. */
  readonly revision: string | null;
  readonly consecutiveFailures: number;
  readonly lastError: ReasonJson | null;
  readonly parked: { readonly since: string; readonly lastError: ReasonJson; readonly hint: string } | null;
  readonly unplaceable: UnplaceableJson | null;
  readonly nextAttemptAt: string | null;
  /** Memory per replica as estimated from the GGUF header and profile (or the override). */
  readonly memoryBytes: number | null;
  readonly lastHandledRetry: string | null;
  readonly replicas: readonly ReplicaJson[];
  /** The model's rollout while a new revision proves itself or is held back; absent otherwise (and from older controllers). */
  readonly rollout?: RolloutJson;
  /** A model whose count follows its load (#42): its range, the count decided, its last change and what did not fit; absent otherwise. */
  readonly scale?: ScaleJson;
}

/** A scaling model as the wire carries it. */
export interface ScaleJson {
  readonly min: number;
  readonly max: number;
  readonly count: number;
  readonly last: { readonly at: string; readonly from: number; readonly to: number; readonly direction: 'up' | 'down'; readonly why: string } | null;
  /** More wanted than fit: how many, how many it has, placement's code and reason. */
  readonly short: { readonly wants: number; readonly fit: number; readonly code: string; readonly reason: string } | null;
  /** The routers' load its last decision read (busy slots, queued requests, the oldest one's wait in ms). */
  readonly load?: { readonly busy: number; readonly queued: number; readonly waitMs: number };
}

/** A rollout as the wire carries it (rollout-life.ts): the phase, both revisions, and why it is held. */
export interface RolloutJson {
  readonly phase: RolloutView['phase'];
  /** The revision (definition digest) under test, and the one serving meanwhile. */
  readonly digest: string;
  readonly stableDigest: string;
  readonly since: string;
  /** Canary: the step (0-based index into the rollout's steps), its share of the model's requests (0..1) and when it ends. */
  readonly step: number | null;
  /** Every step's share (0..1) as the rollout's canary says it (null: checks only); `step` indexes it. */
  readonly steps: readonly number[] | null;
  readonly share: number | null;
  readonly until: string | null;
  /** Held back or rolled back: the verdict (a failed check's expected and got; both arms' figures) and what to do. */
  readonly verdict: ReasonJson | null;
  /** Canary: both arms over the step's window so far, as the controller last judged them (null before). */
  readonly arms: { readonly stable: ArmFiguresJson; readonly canary: ArmFiguresJson; readonly verdict: 'pass' | 'fail' | 'inconclusive' } | null;
  /** Before promotion: no replica of the stable revision is left, and this controller cannot start it again (RolloutView.stableGone). */
  readonly stableGone: boolean;
}

/** One arm of a canary step: requests counted, errors, error rate (0..1), TTFT p95 of the compared bucket and time per output token p95 (ms). */
export interface ArmFiguresJson {
  readonly requests: number;
  readonly errors: number;
  readonly errorRate: number;
  readonly ttftP95Ms: number | null;
  readonly tpotP95Ms: number | null;
}

/** Why a model fits nowhere: the sub-code of MODEL_UNPLACEABLE, the reason and its figures. */
export interface UnplaceableJson {
  readonly code: UnplaceableCode;
  readonly reason: string;
  readonly hint: string;
  readonly needBytes: number | null;
  readonly largestFree: { readonly node: string; readonly bytes: number } | null;
  readonly nodesChecked: number;
  readonly excludedBySelector: number;
  readonly unknownNodes: number;
  /** Nodes set aside for now because they failed this model's start (a full disk, no free port). */
  readonly avoidedNodes: number;
}

export interface NodeJson {
  readonly name: string;
  readonly transport: string | null;
  readonly labels: Readonly<Record<string, string>>;
  readonly reachable: boolean;
  readonly error: ReasonJson | null;
  /** Memory as last observed (kept while unreachable), or the capacity override. */
  readonly memory: { readonly totalBytes: number; readonly availableBytes: number } | null;
  /** Free bytes on the file system of the node's data dir, as last observed. */
  readonly diskFreeBytes: number | null;
  readonly capacity: { readonly memoryBytes: number | null; readonly cpus: number | null } | null;
  readonly engines: readonly string[];
  readonly engineInstallFailures: Readonly<Record<string, number>>;
  readonly replicas: number;
  /** Devices the node's engines list: reported total/free, what placement offers (capacity) and what llmgw reserves. */
  readonly devices?: readonly { readonly name: string; readonly description: string; readonly totalBytes: number; readonly freeBytes: number | null; readonly capacityBytes: number; readonly reservedBytes: number }[];
}

export interface ControlJson {
  readonly mode: 'standalone' | 'etcd';
  readonly instance: { readonly id: string; readonly label: string };
  readonly leader: { readonly id: string; readonly label: string; readonly since: string | null; readonly epoch: number | null; readonly self: boolean } | null;
  /** Why this instance does not act on the fleet, or null when it does. */
  readonly notActing: ReasonJson | null;
  /** `keyProblem`: a forged leader key or an etcd restored, as the election last saw it (null: none). */
  readonly etcd: { readonly reachable: boolean; readonly error: ReasonJson | null; readonly keyProblem: (ReasonJson & { readonly at: string }) | null } | null;
  /** Epochs this etcd did not make, passed over by the leader (STATUS_EPOCH_FORGED, NODE_EPOCH_FORGED); [] when none. */
  readonly forgedEpochs: readonly ReasonJson[];
}

export interface StatusJson {
  readonly at: string;
  readonly leader: boolean;
  readonly control: ControlJson;
  readonly revision: string | null;
  readonly spec: {
    readonly valid: boolean;
    readonly rejected: { readonly revision: string; readonly code: 'SPEC_REJECTED'; readonly hint: string; readonly problems: readonly Problem[] } | null;
  };
  readonly sync: { readonly lastOk: string | null; readonly error: ReasonJson | null };
  readonly statusWrite: { readonly lastOk: string | null };
  /** The state file: null while it is written fine; else why parking is not persisted (or was lost). */
  readonly stateError: ReasonJson | null;
  readonly lastPass: { readonly startedAt: string; readonly durationMs: number; readonly result: 'ok' | 'error'; readonly actions: number; readonly error: ReasonJson | null } | null;
  readonly models: { readonly total: number; readonly desired: number; readonly ready: number; readonly byPhase: Readonly<Record<ModelPhase, number>> };
  readonly nodes: { readonly total: number; readonly reachable: number; readonly unreachable: readonly { readonly name: string; readonly error: ReasonJson | null }[] };
}

export interface ModelsJson {
  readonly at: string;
  readonly revision: string | null;
  readonly models: readonly ModelJson[];
  /** Models matching the query's phase and name over all pages. */
  readonly total: number;
  /** The `after` of the next page; null on the last. */
  readonly next: string | null;
}
export interface ModelOneJson {
  readonly at: string;
  readonly model: ModelJson;
}
export interface ReplicasJson {
  readonly at: string;
  readonly replicas: readonly ReplicaJson[];
}
export interface NodesJson {
  readonly at: string;
  readonly nodes: readonly NodeJson[];
}
export interface RetryJson {
  readonly model: string;
  readonly outcome: RetryOutcome;
  /** What the model looks like after the pass that handled the retry (null if it left the spec). */
  readonly phase: ModelPhase | null;
  readonly message: string;
}
/** GET /models/:name/rollout: the model's rollout, or null when none runs or holds a revision back. */
export interface RolloutOneJson {
  readonly at: string;
  readonly model: string;
  /** The definition in force. */
  readonly digest: string;
  readonly rollout: RolloutJson | null;
}
/** POST /models/:name/rollout/promote|abort: what the override did and the rollout after it. */
export interface RolloutOverrideJson {
  readonly model: string;
  readonly outcome: RolloutOverridden['outcome'];
  readonly rollout: RolloutJson;
  readonly message: string;
}
export interface RestartJson {
  readonly ids: readonly string[];
  readonly done: boolean;
}
export interface LogsJson {
  readonly replica: string;
  readonly lines: number;
  readonly log: string;
}
export interface ErrorJson {
  readonly error: { readonly code: string; readonly message: string; readonly hint: string; readonly retryable: boolean };
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());
const isoNow = (ms: number): string => new Date(ms).toISOString();

const FALLBACK_HINT = 'See the message; the controller log has the detail.';
export function reasonJson(r: ReasonRef): ReasonJson {
  return { code: r.code, message: r.message, hint: (Reasons as Record<string, { hint: string } | undefined>)[r.code]?.hint ?? FALLBACK_HINT };
}

const reasonOrNull = (r: ReasonRef | null): ReasonJson | null => (r ? reasonJson(r) : null);

export function replicaJson(r: ReplicaView, modelDigest: string | null): ReplicaJson {
  return {
    id: r.id,
    model: r.model,
    node: r.node,
    endpoint: r.endpoint,
    phase: r.phase,
    digest: r.digest,
    outdated: modelDigest !== null && r.digest !== modelDigest,
    startedAt: isoNow(r.startedAt),
    ...(r.phase === 'draining' || r.phase === 'stopping' ? { inFlight: r.inFlight ?? null } : {}),
    ...(r.device ? { device: replicaDeviceJson(r.device) } : {}), ...(r.group ? { group: r.group } : {}), // an RPC group's hosts (#40)
  };
}

export const replicaDeviceJson = (d: ReplicaDeviceView): ReplicaDeviceJson => ({ devices: [...d.devices], layers: d.layers, layersOf: d.of, layersFrom: d.from, reservedBytes: d.reservedBytes });

/** `at`: the snapshot's time (epoch ms), for a schedule's count in force. */
export function modelJson(m: ModelView, revision: string | null, at?: number): ModelJson {
  return {
    name: m.name,
    phase: m.phase,
    desired: m.desired,
    ready: m.ready,
    scaling: m.spec.scaling,
    schedule: at === undefined ? null : scheduleJson(m.spec.scaling, at),
    profile: m.spec.profile,
    source: redactUrls(m.spec.source),
    aliases: m.spec.aliases,
    digest: m.spec.digest,
    revision,
    consecutiveFailures: m.consecutiveFailures,
    lastError: reasonOrNull(m.lastError),
    parked: m.parked ? { since: isoNow(m.parked.since), lastError: reasonJson(m.parked.lastError), hint: hintFor('MODEL_PARKED', m.name) } : null,
    unplaceable: m.unplaceable
      ? {
          code: m.unplaceable.code,
          reason: m.unplaceable.reason,
          hint: Reasons[m.unplaceable.code].hint,
          needBytes: m.unplaceable.needBytes,
          largestFree: m.unplaceable.largestFree,
          nodesChecked: m.unplaceable.checked,
          excludedBySelector: m.unplaceable.excludedBySelector,
          unknownNodes: m.unplaceable.unknown,
          avoidedNodes: m.unplaceable.avoided,
        }
      : null,
    nextAttemptAt: iso(m.nextAttemptAt),
    memoryBytes: m.memoryBytes,
    lastHandledRetry: m.lastHandledRetry,
    replicas: m.replicas.map((r) => replicaJson(r, m.spec.digest)),
    ...(m.rollout ? { rollout: rolloutJson(m.rollout, m.name, m.spec.rollout?.canary ?? null) } : {}),
    ...(m.scale ? { scale: { ...m.scale, last: m.scale.last ? { ...m.scale.last, at: isoNow(m.scale.last.at) } : null } } : {}),
  };
}

/** A rollout as the wire carries it; `canary`: the model's spec's (its steps). */
export function rolloutJson(r: RolloutView, model: string, canary: CanarySpec | null): RolloutJson {
  const verdict = r.verdict ? { ...reasonJson(r.verdict), ...(Object.hasOwn(Reasons, r.verdict.code) ? { hint: hintFor(r.verdict.code as keyof typeof Reasons, model) } : {}) } : null;
  const inCanary = r.phase === 'canary';
  return {
    phase: r.phase,
    digest: r.canaryDigest,
    stableDigest: r.stableDigest,
    since: isoNow(r.since),
    step: inCanary ? r.step : null,
    steps: canary ? [...canary.steps] : null,
    share: inCanary ? r.share : null,
    until: inCanary && r.until !== null ? isoNow(r.until) : null,
    verdict,
    arms: inCanary && r.figures ? { stable: { ...r.figures.stable }, canary: { ...r.figures.canary }, verdict: r.figures.verdict } : null,
    stableGone: r.stableGone === true,
  };
}

export function nodeJson(n: NodeView, spec: FleetSpec | null): NodeJson {
  const ns = spec?.nodes[n.name];
  return {
    name: n.name,
    transport: ns?.transport ?? null,
    labels: ns?.labels ?? {},
    reachable: n.reachable,
    error: reasonOrNull(n.error),
    memory: n.memory,
    diskFreeBytes: n.diskFreeBytes,
    capacity: ns ? ns.capacity : null,
    engines: n.engines,
    engineInstallFailures: n.engineInstallFailures,
    replicas: n.replicas,
    devices: n.devices ?? [],
  };
}

export function statusJson(s: FleetSnapshot): StatusJson {
  const byPhase = Object.fromEntries(MODEL_PHASES.map((p) => [p, 0])) as Record<ModelPhase, number>;
  let desired = 0;
  let ready = 0;
  for (const m of s.models) {
    byPhase[m.phase]++;
    desired += m.desired;
    ready += m.ready;
  }
  const c = s.control;
  return {
    at: isoNow(s.at),
    leader: s.leader,
    control: {
      mode: c.mode,
      instance: c.instance,
      leader: c.leader ? { id: c.leader.id, label: c.leader.label, since: iso(c.leader.since), epoch: c.leader.epoch, self: c.leader.id === c.instance.id } : null,
      notActing: reasonOrNull(c.notActing),
      etcd: c.etcd ? { reachable: c.etcd.reachable, error: reasonOrNull(c.etcd.error), keyProblem: c.etcd.keyProblem ? { ...reasonJson(c.etcd.keyProblem), at: isoNow(c.etcd.keyProblem.at) } : null } : null,
      forgedEpochs: (c.forgedEpochs ?? []).map(reasonJson),
    },
    revision: s.appliedRevision,
    spec: {
      valid: s.specValid,
      rejected: s.rejected ? { revision: s.rejected.revision, code: 'SPEC_REJECTED', hint: Reasons.SPEC_REJECTED.hint, problems: s.rejected.problems } : null,
    },
    sync: { lastOk: iso(s.lastSyncOk), error: reasonOrNull(s.lastSyncError) },
    statusWrite: { lastOk: iso(s.lastStatusWriteOk) },
    stateError: reasonOrNull(s.stateError),
    lastPass: s.lastPass
      ? { startedAt: isoNow(s.lastPass.startedAt), durationMs: s.lastPass.durationMs, result: s.lastPass.result, actions: s.lastPass.actions, error: reasonOrNull(s.lastPass.error) }
      : null,
    models: { total: s.models.length, desired, ready, byPhase },
    nodes: {
      total: s.nodes.length,
      reachable: s.nodes.filter((n) => n.reachable).length,
      unreachable: s.nodes.filter((n) => !n.reachable).map((n) => ({ name: n.name, error: reasonOrNull(n.error) })),
    },
  };
}

/** Every replica, ordered by model, node and id. */
export function replicasJson(s: FleetSnapshot): ReplicasJson {
  const replicas = s.models
    .flatMap((m) => m.replicas.map((r) => replicaJson(r, m.spec.digest)))
    .sort((a, b) => a.model.localeCompare(b.model) || a.node.localeCompare(b.node) || a.id.localeCompare(b.id));
  return { at: isoNow(s.at), replicas };
}

export function modelsJson(s: FleetSnapshot, q: ModelsQuery = {}): ModelsJson {
  const page = pickModels(s.models, q);
  return { at: isoNow(s.at), revision: s.appliedRevision, models: page.models.map((m) => modelJson(m, s.appliedRevision, s.at)), total: page.total, next: page.next };
}

export function nodesJson(s: FleetSnapshot, spec: FleetSpec | null): NodesJson {
  return { at: isoNow(s.at), nodes: s.nodes.map((n) => nodeJson(n, spec)) };
}

/** The status branch's fleet.json: the fleet in force, its nodes (capacity, not momentary free memory). */
export interface StatusFleetJson {
  readonly version: 2;
  readonly revision: string | null;
  readonly spec: StatusJson['spec'];
  readonly stateError: ReasonJson | null;
  readonly nodes: readonly (Omit<NodeJson, 'memory' | 'diskFreeBytes' | 'devices'> & { readonly memory: { readonly totalBytes: number } | null; readonly devices: readonly { readonly name: string; readonly totalBytes: number; readonly capacityBytes: number }[] })[];
}

/** The status branch's models/<model>.json: the admin API's model JSON without the revision (fleet.json has it). */
export type StatusModelJson = Omit<ModelJson, 'revision'>;

/**
 * The status branch's files: one per model plus fleet.json, in the admin API's shapes. Nothing that
 * moves on every pass (times of the pass, free memory) is in them, so a commit happens only when
 * something changed.
 */
/**
 * A model's status file text, by its view, for a model without a schedule (its file does not move
 * with the time): an unchanged model keeps its view (summarize.ts keptView), and so its text.
 */
const statusModelTexts = new WeakMap<ModelView, string>();

function statusModelText(m: ModelView, at: number): string {
  const timeless = m.spec.scaling.mode !== 'replicas' || !m.spec.scaling.schedule;
  let t = timeless ? statusModelTexts.get(m) : undefined;
  if (t !== undefined) return t;
  const { revision: _, ...model } = modelJson(m, null, at);
  t = `${JSON.stringify(model satisfies StatusModelJson, null, 2)}\n`;
  if (timeless) statusModelTexts.set(m, t);
  return t;
}

export function statusFiles(s: FleetSnapshot, spec: FleetSpec | null): Record<string, string> {
  const files: Record<string, string> = {};
  for (const m of s.models) files[`models/${m.name}.json`] = statusModelText(m, s.at);
  const status = statusJson(s);
  const fleet: StatusFleetJson = {
    version: 2,
    revision: s.appliedRevision,
    spec: status.spec,
    stateError: status.stateError,
    nodes: s.nodes.map((n) => {
      const { diskFreeBytes: _, ...j } = nodeJson(n, spec);
      // capacity only: free and reserved device memory move, the status branch must not
      return { ...j, memory: j.memory ? { totalBytes: j.memory.totalBytes } : null, devices: (j.devices ?? []).map((d) => ({ name: d.name, totalBytes: d.totalBytes, capacityBytes: d.capacityBytes })) };
    }),
  };
  files['fleet.json'] = `${JSON.stringify(fleet, null, 2)}\n`;
  return files;
}
