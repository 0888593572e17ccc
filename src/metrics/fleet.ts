/**
 * Fleet and control-plane metrics, applied from the `FleetSnapshot` the reconciler publishes after
 * every pass. Every model in the snapshot gets every per-model series (0 is a real value), and the
 * series of models, nodes, digests and revisions that left the snapshot are deleted.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { FleetSnapshot, ModelPhase, ModelView } from '../reconciler/view.js';
import { MODEL_STATES, MetricNames as N } from './names.js';
import { GaugeSeries } from './series.js';
import { ModelSeries } from './model-series.js';
import { RolloutMetrics } from './rollout.js';

// MODEL_STATES and ModelPhase must list the same phases.
type Missing<A, B> = Exclude<A, B> extends never ? true : never;
const _statesCoverPhases: Missing<ModelPhase, (typeof MODEL_STATES)[number]> = true;
const _phasesCoverStates: Missing<(typeof MODEL_STATES)[number], ModelPhase> = true;
void _statesCoverPhases;
void _phasesCoverStates;

/** Reconcile pass durations: a pass is usually well under a second, a slow node can stretch it. */
export const RECONCILE_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

const seconds = (ms: number | null): number => (ms === null ? 0 : ms / 1000);
/** The reasons llmgw_forged_epochs counts, one series each. */
const FORGED_CODES = ['STATUS_EPOCH_FORGED', 'NODE_EPOCH_FORGED'] as const;

function splitEngine(key: string): { engine: string; version: string } {
  const at = key.indexOf('@');
  return at < 0 ? { engine: key, version: '' } : { engine: key.slice(0, at), version: key.slice(at + 1) };
}

type EngineLabels = { node: string; engine: string; version: string };
const engineKey = (l: EngineLabels): string => JSON.stringify([l.node, l.engine, l.version]);

export class FleetMetrics {
  /** The per-model gauges, rendered from the latest snapshot's models (model-series.ts). */
  private readonly models: ModelSeries;

  private readonly nodeReachable: GaugeSeries<'node'>;
  private readonly nodeCapacity: GaugeSeries<'node'>;
  private readonly nodeAvailable: GaugeSeries<'node'>;
  private readonly nodeDiskFree: GaugeSeries<'node'>;
  private readonly nodeDeviceMemory: GaugeSeries<'node' | 'device' | 'kind'>;
  private readonly groupHostBytes: GaugeSeries<'model' | 'replica' | 'node' | 'role'>;
  private readonly engineInstalls: GaugeSeries<'node' | 'engine' | 'version'>;
  private readonly engineFailures: Counter<'node' | 'engine' | 'version'>;
  /** Failure counts per node/engine/version as the counter shows them. */
  private readonly engineFailureCounts = new Map<string, { labels: EngineLabels; count: number }>();

  private readonly leader: Gauge;
  private readonly leaderChanges: Counter;
  private readonly leaderEpoch: Gauge;
  private readonly etcdUp: GaugeSeries<'prefix'>;
  private readonly notActing: GaugeSeries<'code'>;
  private readonly forgedEpochs: GaugeSeries<'code'>;
  /** The rollouts' phase, step and arms (rollout.ts). */
  private readonly rollouts: RolloutMetrics;
  /** Scaling (#42): changes of a model's count, and the replicas it wants that fit nowhere. */
  private readonly scaleTotal: Counter<'model' | 'direction'>;
  private readonly shortReplicas: GaugeSeries<'model'>;
  private readonly maxReplicas: GaugeSeries<'model'>;
  private readonly load: GaugeSeries<'model' | 'kind'>;
  private readonly queueWait: GaugeSeries<'model'>;
  /** The last change counted per model (its time): a change is counted once, and none from before this process. */
  private readonly scaleCounted = new Map<string, number>();
  private readonly startedAt: number;
  private readonly etcdWriteRefused: GaugeSeries<'record'>;
  private readonly reconcileDuration: Histogram;
  private readonly reconcileTotal: Counter<'result'>;
  private readonly reconcileLastSuccess: Gauge;
  private readonly revisionInfo: GaugeSeries<'revision'>;
  private readonly specValid: Gauge;
  private readonly rejectedInfo: GaugeSeries<'revision'>;
  private readonly gitSyncLastSuccess: Gauge;
  private readonly statusWriteLastSuccess: Gauge;

  private isLeader = false;
  /** Once passFinished is called, passes are counted from it only (not from snapshot.lastPass). */
  private explicitPasses = false;
  private lastRecordedPass: number | null = null;

  /** `modelRegistry`: where the per-model series go (a registry of their own lets a scrape reuse their text while no model changed). */
  constructor(
    registry: Registry,
    private readonly clock: () => number,
    modelRegistry: Registry = registry,
  ) {
    const registers = [registry];
    const gauge = <T extends string>(name: string, help: string, labelNames: readonly T[]): GaugeSeries<T> =>
      new GaugeSeries(new Gauge<T>({ name, help, labelNames, registers }));

    this.models = modelSeries(modelRegistry);

    this.nodeReachable = gauge(N.nodeReachable, '1 when the controller reaches the node, 0 when not.', ['node']);
    this.nodeCapacity = gauge(N.nodeMemoryCapacityBytes, 'Memory capacity of the node (absent while unknown).', ['node']);
    this.nodeAvailable = gauge(N.nodeMemoryAvailableBytes, 'Memory available on the node (absent while unknown).', ['node']);
    this.nodeDeviceMemory = gauge(N.nodeDeviceMemoryBytes, 'Device (GPU) memory of the node as its engine lists it: total and free as reported, reserved_by_llmgw by its estimates of the replicas there (absent while unknown).', ['node', 'device', 'kind']);
    this.groupHostBytes = gauge(N.rpcGroupHostBytes, 'Each host\'s share of the memory of a replica that runs as an RPC group (#40): its head and each worker, by node (present while the group is).', ['model', 'replica', 'node', 'role']);
    this.nodeDiskFree = gauge(N.nodeDiskFreeBytes, "Free bytes on the file system of the node's data dir (absent while unknown).", ['node']);
    this.engineInstalls = gauge(N.nodeEngineInstalls, '1 when the engine version is installed on the node, 0 when it is needed but not installed.', ['node', 'engine', 'version']);
    this.engineFailures = new Counter({
      name: N.nodeEngineInstallFailuresTotal,
      help: 'Failed installs of the engine version on the node.',
      labelNames: ['node', 'engine', 'version'],
      registers,
    });

    this.leader = new Gauge({ name: N.leader, help: '1 on the instance that reconciles the fleet (the leader), 0 on standbys.', registers });
    this.leaderChanges = new Counter({ name: N.leaderChangesTotal, help: 'Times this instance gained or lost leadership.', registers });
    this.leaderEpoch = new Gauge({ name: N.leaderEpoch, help: 'Fencing epoch of the leader as this instance sees it (etcd: the election key\'s revision; 0 alone or with no leader).', registers });
    this.etcdUp = gauge(N.etcdUp, '1 while this instance reaches etcd, 0 when it does not (present only with --etcd; prefix: its --etcd-prefix).', ['prefix']);
    this.notActing = gauge(N.notActingInfo, 'Why this instance does not act on the fleet (always 1; present while it does not): CONTROLLER_STANDBY, LEADER_UNAVAILABLE, NODE_OWNED, NODE_FENCED, NODE_EPOCH_FORGED.', ['code']);
    this.etcdWriteRefused = gauge(N.etcdWriteRefused, '1 while the leader\'s writes of record (state: the state record; published: the snapshot for the standbys) are refused because a value would pass etcd\'s size limit (ETCD_VALUE_TOO_LARGE), else 0 (present only with --etcd).', ['record']);
    this.rollouts = new RolloutMetrics(gauge);
    this.scaleTotal = new Counter({ name: N.modelScaleTotal, help: 'Changes of the replica count of a model that follows its load (#42), by direction (up, down), as this instance saw them.', labelNames: ['model', 'direction'], registers });
    this.shortReplicas = gauge(N.modelShortReplicas, 'Replicas a scaling model\'s load wants that fit on no node (present while some do not: the model serves with the others).', ['model']);
    this.load = gauge(N.modelLoad, 'The routers\' load of a model that follows its load (#42), summed over their fresh reports as its last scaling decision read it: kind busy (its slots busy), queued (requests waiting for a slot or its activation).', ['model', 'kind']);
    this.queueWait = gauge(N.modelQueueWaitSeconds, 'How long the oldest request waiting for a slot of a model that follows its load had waited, the longest over the routers\' fresh reports, at its last scaling decision (0: none waits).', ['model']);
    this.maxReplicas = gauge(N.modelMaxReplicas, 'The top of the replica range in force of a model that follows its load (#42; present only for those). Alert LlmgwModelAtMaxReplicas.', ['model']);
    this.startedAt = clock();
    this.forgedEpochs = gauge(N.forgedEpochs, 'Epochs this etcd did not make that the leader passed over: STATUS_EPOCH_FORGED 1 while a status-branch commit above etcd\'s revision is on the branch; NODE_EPOCH_FORGED the nodes whose owner record above it the leader took over in the last hour (both series present, 0 when none).', ['code']);
    this.reconcileDuration = new Histogram({ name: N.reconcileDurationSeconds, help: 'Duration of reconcile passes.', buckets: RECONCILE_BUCKETS, registers });
    this.reconcileTotal = new Counter({ name: N.reconcileTotal, help: 'Reconcile passes by result (ok, error).', labelNames: ['result'], registers });
    this.reconcileLastSuccess = new Gauge({ name: N.reconcileLastSuccessTimestampSeconds, help: 'End of the last reconcile pass that succeeded (0: none yet).', registers });
    this.revisionInfo = gauge(N.fleetRevisionInfo, 'The fleet repo revision in force (always 1; absent before the first valid revision).', ['revision']);
    this.specValid = new Gauge({ name: N.specValid, help: '1 when the newest fleet revision is valid and applied, 0 when it was rejected.', registers });
    this.rejectedInfo = gauge(N.specRejectedRevisionInfo, 'The fleet revision rejected by validation (always 1; present while one is rejected).', ['revision']);
    this.gitSyncLastSuccess = new Gauge({ name: N.gitSyncLastSuccessTimestampSeconds, help: 'Time of the last successful fetch of the fleet repo (0: none yet).', registers });
    this.statusWriteLastSuccess = new Gauge({ name: N.statusWriteLastSuccessTimestampSeconds, help: 'Time the status branch was last known up to date (written, or nothing to write) (0: never).', registers });

    // Series that exist from the start, so that `increase()` and absence checks work.
    this.leader.set(0);
    this.leaderChanges.inc(0);
    this.leaderEpoch.set(0);
    for (const result of ['ok', 'error']) this.reconcileTotal.inc({ result }, 0);
    this.reconcileLastSuccess.set(0);
    this.specValid.set(0);
    this.gitSyncLastSuccess.set(0);
    this.statusWriteLastSuccess.set(0);
    this.forgedEpochs.replace(FORGED_CODES.map((code) => [{ code }, 0]));
  }

  /** Returns whether a per-model series may have changed. */
  applySnapshot(s: FleetSnapshot): boolean {
    this.setLeader(s.leader);
    this.leaderEpoch.set(s.control.leader?.epoch ?? 0);
    this.etcdUp.replace(s.control.etcd ? [[{ prefix: s.control.etcd.prefix }, s.control.etcd.reachable ? 1 : 0]] : []);
    this.notActing.replace(s.control.notActing ? [[{ code: s.control.notActing.code }, 1]] : []);
    const tooLarge = (r: { readonly code: string } | null | undefined): number => (r?.code === 'ETCD_VALUE_TOO_LARGE' ? 1 : 0);
    this.etcdWriteRefused.replace(s.control.etcd ? [[{ record: 'state' }, tooLarge(s.stateError)], [{ record: 'published' }, tooLarge(s.control.etcd.error)]] : []);
    this.rollouts.apply(s.models);
    this.applyScale(s);
    const forged = s.control.forgedEpochs ?? [];
    this.forgedEpochs.replace(FORGED_CODES.map((code) => [{ code }, forged.filter((r) => r.code === code).length]));

    const one = <L>(labels: L, value: number | boolean): [L, number] => [labels, typeof value === 'boolean' ? (value ? 1 : 0) : value];
    const modelsChanged = this.models.update(s.models);

    this.nodeReachable.replace(s.nodes.map((n) => one({ node: n.name }, n.reachable)));
    this.nodeCapacity.replace(s.nodes.flatMap((n) => (n.memory ? [one({ node: n.name }, n.memory.totalBytes)] : [])));
    this.nodeAvailable.replace(s.nodes.flatMap((n) => (n.memory ? [one({ node: n.name }, n.memory.availableBytes)] : [])));
    this.nodeDiskFree.replace(s.nodes.flatMap((n) => (n.diskFreeBytes !== null ? [one({ node: n.name }, n.diskFreeBytes)] : [])));
    this.groupHostBytes.replace(s.models.flatMap((m) => m.replicas.flatMap((r) => (r.group ?? []).map((h) => one({ model: m.name, replica: r.id, node: h.node, role: h.role }, h.bytes)))));
    this.nodeDeviceMemory.replace(s.nodes.flatMap((n) => (n.devices ?? []).flatMap((d) => [
      one({ node: n.name, device: d.name, kind: 'total' }, d.totalBytes),
      ...(d.freeBytes !== null ? [one({ node: n.name, device: d.name, kind: 'free' }, d.freeBytes)] : []),
      one({ node: n.name, device: d.name, kind: 'reserved_by_llmgw' }, d.reservedBytes),
    ])));
    this.applyEngines(s);

    this.revisionInfo.replace(s.appliedRevision !== null ? [one({ revision: s.appliedRevision }, 1)] : []);
    this.specValid.set(s.specValid ? 1 : 0);
    this.rejectedInfo.replace(s.rejected ? [one({ revision: s.rejected.revision }, 1)] : []);
    this.gitSyncLastSuccess.set(seconds(s.lastSyncOk));
    this.statusWriteLastSuccess.set(seconds(s.lastStatusWriteOk));

    const pass = s.lastPass;
    if (!this.explicitPasses && pass && pass.startedAt !== this.lastRecordedPass) {
      this.lastRecordedPass = pass.startedAt;
      this.recordPass(pass.result, pass.durationMs / 1000, (pass.startedAt + pass.durationMs) / 1000);
    }
    return modelsChanged;
  }

  private applyEngines(s: FleetSnapshot): void {
    const installs: [EngineLabels, number][] = [];
    const failures = new Map<string, { labels: EngineLabels; count: number }>();
    for (const n of s.nodes) {
      const installed = new Set(n.engines);
      const keys = new Set([...n.engines, ...Object.keys(n.engineInstallFailures)]);
      for (const key of keys) {
        const labels = { node: n.name, ...splitEngine(key) };
        installs.push([labels, installed.has(key) ? 1 : 0]);
        failures.set(engineKey(labels), { labels, count: n.engineInstallFailures[key] ?? 0 });
      }
    }
    this.engineInstalls.replace(installs);
    for (const [key, { labels }] of this.engineFailureCounts) {
      if (!failures.has(key)) {
        this.engineFailures.remove(labels);
        this.engineFailureCounts.delete(key);
      }
    }
    // The snapshot's count raises the counter; it never lowers it (a counter only goes up), and
    // failures already reported through engineInstall() are not counted twice.
    for (const [key, { labels, count }] of failures) this.raiseEngineFailures(key, labels, count);
  }

  private raiseEngineFailures(key: string, labels: EngineLabels, count: number): void {
    const cur = this.engineFailureCounts.get(key);
    const have = cur?.count ?? 0;
    this.engineFailures.inc(labels, Math.max(0, count - have));
    this.engineFailureCounts.set(key, { labels, count: Math.max(have, count) });
  }

  /** A reconcile pass finished. Once called, passes are counted from here only, not from snapshots. */
  /** The per-model gauges' exposition text (model-series.ts), rendered in slices. */
  modelText(): Promise<Buffer[]> {
    return this.models.text();
  }

  passFinished(result: 'ok' | 'error', durationSeconds: number): void {
    this.explicitPasses = true;
    this.recordPass(result, durationSeconds, this.clock() / 1000);
  }

  private recordPass(result: 'ok' | 'error', durationSeconds: number, endSeconds: number): void {
    this.reconcileDuration.observe(Math.max(0, durationSeconds));
    this.reconcileTotal.inc({ result });
    if (result === 'ok') this.reconcileLastSuccess.set(endSeconds);
  }

  leaderChanged(isLeader: boolean): void {
    this.setLeader(isLeader);
  }

  private setLeader(isLeader: boolean): void {
    if (isLeader !== this.isLeader) {
      this.isLeader = isLeader;
      this.leaderChanges.inc();
    }
    this.leader.set(isLeader ? 1 : 0);
  }

  /** An engine install on a node finished (shows at once, before the next snapshot). */
  private applyScale(s: FleetSnapshot): void {
    applyScaleOf(s, this.scaleCounted, this.startedAt, this.scaleTotal, this.shortReplicas);
    this.maxReplicas.replace(s.models.flatMap((m) => (m.scale ? [[{ model: m.name }, m.scale.max] as [{ model: string }, number]] : [])));
    const loaded = s.models.flatMap((m) => (m.scale?.load ? [{ model: m.name, load: m.scale.load }] : []));
    this.load.replace(loaded.flatMap(({ model, load }) => [[{ model, kind: 'busy' }, load.busy], [{ model, kind: 'queued' }, load.queued]] as [{ model: string; kind: string }, number][]));
    this.queueWait.replace(loaded.map(({ model, load }) => [{ model }, load.waitMs / 1000] as [{ model: string }, number]));
  }

  engineInstall(node: string, engine: string, version: string, result: 'ok' | 'error'): void {
    const labels = { node, engine, version };
    const key = engineKey(labels);
    const have = this.engineFailureCounts.get(key)?.count ?? 0;
    this.raiseEngineFailures(key, labels, result === 'error' ? have + 1 : have);
    const present = this.engineInstalls.labels().some((l) => engineKey(l) === key);
    if (result === 'ok') this.engineInstalls.set(labels, 1);
    else if (!present) this.engineInstalls.set(labels, 0);
  }
}

/** Scaling (#42): each change of a model's count once (by its time), and the replicas that fit nowhere. */
function applyScaleOf(s: FleetSnapshot, counted: Map<string, number>, startedAt: number, total: Counter<'model' | 'direction'>, short: GaugeSeries<'model'>): void {
  for (const m of s.models) {
    const last = m.scale?.last;
    if (!last || last.at < startedAt || counted.get(m.name) === last.at) continue;
    counted.set(m.name, last.at);
    total.inc({ model: m.name, direction: last.direction });
  }
  short.replace(s.models.flatMap((m) => (m.scale?.short ? [[{ model: m.name }, Math.max(0, m.scale.short.wants - m.scale.short.fit)] as [{ model: string }, number]] : [])));
}

/** Replicas of a model on their way out (out of routing): draining, or signalled to stop. */
const leaving = (m: ModelView) => m.replicas.filter((r) => r.phase === 'draining' || r.phase === 'stopping');
const lastErrorOf = (m: ModelView) => m.parked?.lastError ?? m.lastError;

/** The per-model gauges: each model has every one (0 is a real value), but the info ones. */
function modelSeries(registry: Registry): ModelSeries {
  const series = new ModelSeries(registry, (m) => {
    const l = leaving(m);
    return `${m.name}\u0000${m.desired}\u0000${m.ready}\u0000${l.length}\u0000${l.reduce((n, r) => n + (r.inFlight ?? 0), 0)}\u0000${m.consecutiveFailures}\u0000${m.parked !== null}\u0000${m.unplaceable?.code ?? '-'}\u0000${m.spec.digest}\u0000${m.spec.profile}\u0000${m.phase}\u0000${lastErrorOf(m)?.code ?? '-'}`;
  });
  const g = (name: string, help: string, value: (m: ModelView) => number | boolean): void =>
    series.gauge(name, help, ['model'], (m) => [[{ model: m.name }, value(m)]]);
  g(N.modelDesiredReplicas, 'Replicas the model should have now (on-demand models: only while asked for).', (m) => m.desired);
  g(N.modelReadyReplicas, 'Replicas of the model that are ready and serving.', (m) => m.ready);
  g(N.modelDrainingReplicas, 'Replicas of the model being stopped: out of routing, draining their in-flight requests or signalled (SIGTERM, stop_grace, SIGKILL).', (m) => leaving(m).length);
  g(N.modelDrainingInFlight, 'Requests in flight on replicas of the model that are draining, as llama-server reports them (GET /slots).', (m) => leaving(m).reduce((n, r) => n + (r.inFlight ?? 0), 0));
  g(N.modelConsecutiveStartFailures, 'Failed starts of the model in a row since its last ready replica (or definition change / retry).', (m) => m.consecutiveFailures);
  g(N.modelParked, '1 while the model is parked after repeated start failures (not placed until its definition changes or a retry).', (m) => m.parked !== null);
  g(N.modelUnplaceable, '1 while the model fits on no node.', (m) => m.unplaceable !== null);
  series.gauge(N.modelInfo, 'The model definition in force: definition digest and profile (always 1).', ['model', 'digest', 'profile'], (m) => [[{ model: m.name, digest: m.spec.digest, profile: m.spec.profile }, 1]]);
  // The current phase only: the seven series at 0 a model were half of a scrape's bytes at 1,000 models (#28).
  series.gauge(N.modelState, 'The model phase: one series a model, at 1, for its current state (the other states are absent).', ['model', 'state'], (m) => [[{ model: m.name, state: m.phase }, 1]]);
  series.gauge(N.modelLastErrorInfo, "The failure reason code of the model's last error (always 1; present while there is one).", ['model', 'code'], (m) => {
    const err = lastErrorOf(m);
    return err ? [[{ model: m.name, code: err.code }, 1]] : [];
  });
  series.gauge(N.modelUnplaceableReasonInfo, 'Why the model fits on no node, as the catalogue sub-code (always 1; present while unplaceable; the figures are in `llmgw ctl models`).', ['model', 'code'], (m) =>
    m.unplaceable !== null ? [[{ model: m.name, code: m.unplaceable.code }, 1]] : [],
  );
  return series;
}
