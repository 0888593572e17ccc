/**
 * The replica starts the reconciler runs (I/O), each in the background (start-op.ts: engine, model
 * file, launch, wait for ready, which can take minutes): in flight in the record from launch until
 * its one outcome is recorded, then a pass is asked for.
 */
import type { Logger } from 'pino';
import type { DownloadToken } from '../nodes/driver.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { startConcluded } from './outcomes.js';
import type { Action } from './planner.js';
import type { ShellPorts } from './shell-ports.js';
import { leftSlots, slotDonor, specSlotIdentity, type SlotFilesBook } from './slot-donor.js';
import { runStart } from './start-op.js';
import { startLaunched } from './state.js';
import { WARMUPS_KEPT, type ReplicaWarmup, type WarmupTarget } from './warm-up.js';
import type { WarmupView } from './view.js';

export interface StartRunnerOptions {
  readonly engineApiKey: string;
  /** The model's download token (token: names a secret); undefined for none. */
  readonly downloadToken: (m: ModelSpec) => Promise<DownloadToken | undefined>;
  readonly onEngineInstall?: (node: string, engine: string, version: string, result: 'ok' | 'error') => void;
  /** The spec that defines another revision of a model than the one in force (a rollout's stable one), if read. */
  readonly specOf?: (model: string, digest: string) => FleetSpec | undefined;
  /** Warms a new replica up before it takes traffic (warm-up.ts); absent: none. */
  readonly warmup?: ReplicaWarmup;
  /** Slot files replicas stopped as idle left (slot-donor.ts); absent: none kept. */
  readonly slotFiles?: SlotFilesBook;
}

export class StartRunner {
  /** The warm-ups this process ran, by replica (the newest WARMUPS_KEPT), for the snapshot. */
  readonly warmups = new Map<string, WarmupView>();
  /** Starts this process runs (the background operations), awaited by the controller's stop(). */
  private readonly ops = new Map<string, Promise<void>>();

  constructor(
    private readonly p: ShellPorts,
    private readonly o: StartRunnerOptions,
  ) {}

  /** The replicas whose start runs now. */
  ids(): ReadonlySet<string> {
    return new Set(this.ops.keys());
  }

  get size(): number {
    return this.ops.size;
  }

  /** The starts running now, to be awaited. */
  running(): Promise<void>[] {
    return [...this.ops.values()];
  }

  /** A replica start runs in the background (start-op.ts); it is in flight in the record from here. */
  launch(inForce: FleetSpec, a: Extract<Action, { kind: 'start' }>, log: Logger): void {
    // a rollout's stable replica starting again: its model, profile and engine from the stable revision's spec
    const spec = inForce.models[a.model]?.digest === a.digest ? inForce : (this.o.specOf?.(a.model, a.digest) ?? inForce);
    const m = spec.models[a.model]!;
    const profile = spec.profiles[m.profile]!;
    const engine = spec.engines[profile.engine]!.versions[profile.engineVersion]!;
    const rlog = log.child({ model: a.model, node: a.node, replica: a.replicaId });
    const startedAt = this.p.now(log); // before the record is read: taking the time may shift it for a clock step
    this.p.setRecord(startLaunched(this.p.record(), a.replicaId, { model: a.model, node: a.node, digest: a.digest, startedAt, ...(a.group ? { group: a.group } : {}) }));
    rlog.info('starting replica');
    const op = runStart({
      action: a,
      model: m,
      profile,
      engine,
      driver: this.p.nodes.driver(inForce.nodes[a.node] ?? spec.nodes[a.node]!),
      driverOf: (node) => {
        const n = inForce.nodes[node] ?? spec.nodes[node];
        return n ? this.p.nodes.driver(n) : undefined;
      },
      engineApiKey: this.o.engineApiKey,
      downloadToken: () => this.o.downloadToken(m),
      stopSignal: this.p.stopSignal(),
      log: rlog,
      onEngineInstall: (result) => {
        if (result === 'error') this.p.nodes.engineInstallFailed(a.node, `${engine.engine}@${engine.version}`);
        this.o.onEngineInstall?.(a.node, engine.engine, engine.version, result);
      },
      conclude: (outcome) => {
        const now = this.p.now(log); // before the record is read: taking the time may shift it for a clock step
        const r = startConcluded(this.p.record(), a.replicaId, outcome, now, (this.p.spec() ?? inForce).settings);
        this.p.setRecord(r.state);
        this.p.logNotes(log, r.notes);
        // a ready replica is routed to now, not after the next pass's look and status write
        if (outcome.kind === 'ready') this.p.publish();
      },
      persist: () => this.p.saveState(),
      ...(this.o.warmup ? { warm: (endpoint: string) => this.warm(this.o.warmup!, { model: a.model, node: a.node, replica: a.replicaId, endpoint, profile, ...this.slotsFor(inForce, a) }, rlog) } : {}),
    }).finally(() => {
      this.ops.delete(a.replicaId);
      void this.p.requestPass('start-finished');
    });
    this.ops.set(a.replicaId, op);
  }

  /** The replica on the same node whose slot files the new one may restore (#38 item 3; slot-donor.ts), if any. */
  private slotsFor(inForce: FleetSpec, a: Extract<Action, { kind: 'start' }>): { slots?: NonNullable<WarmupTarget['slots']> } {
    // an RPC group (#40) keeps its KV cache on its workers, whose hosts may differ from the donor's: replayed, never restored
    if (a.group) return {};
    const identityOf = (digest: string) => {
      const spec = inForce.models[a.model]?.digest === digest ? inForce : this.o.specOf?.(a.model, digest);
      return spec ? specSlotIdentity(spec, a.model, a.node) : null;
    };
    const slots = slotDonor(this.p.nodes.states.get(a.node)?.obs?.replicas ?? [], { model: a.model, node: a.node, replica: a.replicaId, digest: a.digest }, identityOf);
    // a live donor's save overwrites the files a stopped replica left; without one, those files
    if (slots) this.o.slotFiles?.forget(a.node, a.model);
    const left = slots ? undefined : leftSlots(this.o.slotFiles?.get(a.node, a.model), identityOf(a.digest));
    return slots ? { slots } : left ? { slots: left } : {};
  }

  /** The warm-up of a ready replica: a look shows it starting meanwhile (NodeFleet.warmingUp); never throws. */
  private async warm(w: ReplicaWarmup, r: WarmupTarget, log: Logger): Promise<void> {
    this.p.nodes.warmingUp(r.replica, true);
    try {
      const v = await w(r, this.p.stopSignal(), log);
      if (v !== null) this.warmups.set(r.replica, v);
      if (this.warmups.size > WARMUPS_KEPT) this.warmups.delete(this.warmups.keys().next().value!);
    } catch (err) {
      log.warn({ err }, 'replica warm-up failed');
    } finally {
      this.p.nodes.warmingUp(r.replica, false);
    }
  }
}
