/**
 * The reconciler's shell: the loop and its I/O. Everything it must remember lives in one state
 * record (state.ts), changed only by pure transitions (state.ts, outcomes.ts, liveness.ts, pass.ts);
 * what is here is observing nodes, applying actions, writing the record, the status branch and the
 * snapshot, and logging what the transitions decided.
 *
 * A pass: sync → load → observe → estimate memory → decide → apply → summarize. The summary (state
 * file, status branch, then the snapshot) is written in a `finally`, success or not. Replica starts
 * run in the background (they can take minutes); each one concludes with one transition and asks
 * for a pass.
 *
 * The Reconciler owns the record and runs the passes; its parts get the record and the effects
 * through ShellPorts (shell-ports.ts): the background starts (start-runner.ts) and stops with their
 * drains (stop-runner.ts), a rollout's checks (rollout-runner.ts), what a pass looks at besides the nodes (pass-look.ts), and what it does
 * for the router and operators (reconciler-acts.ts, the acts of its ControllerShell).
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { LlmgwError, reasonOf, type ReasonRef } from '../errors/catalogue.js';
import { retryId } from '../git/trailers.js';
import { engineKeyFingerprint, type DownloadToken } from '../nodes/driver.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { Acting } from './acting.js';
import { ControllerShell, type ControllerActs } from './controller-shell.js';
import { DEMAND_START, GROUP_WATCH, PassLoop } from './loop.js';
import { MemoryEstimator, type DeviceNeed } from './memory.js';
import { NodeFleet } from './node-fleet.js';
import { decide, freshPlacement, groupsOf } from './pass.js';
import { busyOf, downloadTokenOf, estimateMemory, replicasInFlight, stoppingSince } from './pass-look.js';
import { StateSaver, type StatusSink } from './persist.js';
import type { Unplaceable } from './placement.js';
import type { Action } from './planner.js';
import { ReconcilerActs } from './reconciler-acts.js';
import type { ShellPorts } from './shell-ports.js';
import { StartRunner } from './start-runner.js';
import { slotsProbe } from './slots-probe.js';
import { StopRunner } from './stop-runner.js';
import { idleSlotSaver, SlotFilesBook } from './slot-donor.js';
import { StableSpecs } from './stable-specs.js';
import { CanarySteps } from './canary-steps.js';
import { RolloutRunner } from './rollout-runner.js';
import { stopIds, type InFlight } from './stops.js';
import { clockStepped, healthByModel, retryHandled, rolloutsByModel, revisionApplied, specModelsApplied, type ControllerState } from './state.js';
import { logNotes } from './note.js';
import { scaleRecords } from './scale-life.js';
import { buildSnapshot } from './summarize.js';
import { STANDALONE, type ControlView, type FleetSnapshot, type FleetView, type PassSummary } from './view.js';
import { wakeAfterPass } from './wake.js';
import { warnUnplaceable, type LastWarning } from './warn-throttle.js';
import { oncePerTurn } from '../util/once-per-turn.js';
import type { ReconcilerOptions } from './reconciler-options.js';
export type { FleetSource, ReconcilerOptions } from './reconciler-options.js';

/** How long stop() waits for starts in flight to give up (an engine build may take minutes). */
const STOP_WAIT_MS = 10_000;
const CLOCK_STEP_MS = 1000; // a change of the wall clock against the monotonic one beyond this is a step, not drift

export class Reconciler extends ControllerShell implements FleetView {
  readonly engineApiKey: string;
  /** Tells replicas started with another engine key (they refuse the router) from ours. */
  private readonly keyFingerprint: string;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly monotonic: () => number;
  /** Wall clock minus monotonic clock at the last look: a change is a step of the wall clock. */
  private clockOffset: number | null = null;
  private readonly leader: () => boolean;
  private readonly memory: MemoryEstimator;
  private readonly loop: PassLoop;

  /** The one record that outlives a pass. */
  private state: ControllerState;
  private readonly saver: StateSaver;
  private readonly status: StatusSink | null;

  // --- I/O in progress and the last look at the world (rebuilt by every pass) ---
  private readonly nodes: NodeFleet;
  /** Starts this process runs (the background operations), awaited by stop(). */
  private readonly running: StartRunner;
  /** Stops this process runs (stops.ts: drain, then SIGTERM…), in the background. */
  private readonly stopOps: StopRunner;
  private readonly rollouts: RolloutRunner;
  private readonly canary: CanarySteps;
  private readonly stableSpecs: StableSpecs; // unpromoted rollouts' stable revisions: their replicas start again from them
  private readonly inFlight: (endpoint: string) => Promise<InFlight>;
  /** What it does for the router and operators (the ControllerShell's acts). */
  private readonly own: ReconcilerActs;
  private stopSignal = new AbortController();
  private memoryNeeds: Record<string, number | null> = {};
  private memoryErrors: Record<string, string> = {};
  /** devices (#24): device need of models whose profile offloads layers. */
  private deviceNeeds: Record<string, DeviceNeed> = {};
  private desired: Readonly<Record<string, number>> = {};
  private unplaceable: Readonly<Record<string, Unplaceable>> = {};
  private waitingForRoom: readonly string[] = [];
  private scaleSeen: Pick<ReturnType<typeof decide>, 'short' | 'load'> = { short: {}, load: {} }; // scaling (#42): extra replicas that fit nowhere, last pass
  private readonly unplaceableWarned = new Map<string, LastWarning>();
  private lastPass: PassSummary | null = null;
  /** The time the last decision was taken at: due times after it still need a pass, even if passed by now. */
  private decidedAt: number | null = null;
  /** Whether this controller acts on the fleet (the nodes' owner records), and why not. */
  private readonly acting: Acting;
  /** Snapshots published so far: a pass publishes a newer one than it built if any came meanwhile. */
  private publications = 0;

  constructor(private readonly o: ReconcilerOptions) {
    super();
    this.engineApiKey = o.engineApiKey;
    this.keyFingerprint = engineKeyFingerprint(o.engineApiKey);
    this.log = o.logger.child({ component: 'reconciler' });
    this.clock = o.clock ?? Date.now;
    this.monotonic = o.monotonic ?? (() => performance.now());
    this.leader = o.leader ?? (() => true);
    this.memory = o.memory ?? new MemoryEstimator();
    this.state = o.initialState;
    this.inFlight = o.inFlight ?? slotsProbe(o.engineApiKey);
    this.saver = new StateSaver(o.stateStore, this.log, o.initialStateProblem ?? null);
    this.status = o.status;
    this.nodes = new NodeFleet(o.driverFor, { concurrency: o.concurrency ?? 8, observeTimeoutMs: o.observeTimeoutMs ?? 30_000, clock: this.clock });
    this.loop = new PassLoop((trigger) => this.pass(trigger), this.clock, o.timers);
    this.acting = new Acting(this.nodes, o, this.clock, (trigger) => void this.requestPass(trigger));
    const publishNextTurn = oncePerTurn(() => this.publish(this.summarize()));
    const ports: ShellPorts = {
      record: () => this.state,
      setRecord: (s) => void (this.state = s),
      nodes: this.nodes,
      log: this.log,
      spec: () => this.o.tracker.applied?.spec ?? null,
      leader: () => this.leader(),
      now: (log) => this.now(log),
      logNotes,
      saveState: () => this.saveState(),
      // at 10,000 models a snapshot and its listeners take tens of ms: 400 starts concluding together,
      // each publishing, held the loop for 18 s and the leader lost its lease. Counted at once: a
      // pass whose snapshot was built before publishes a fresh one (summarizeAndPersist)
      publish: () => void (this.publications++, publishNextTurn()),
      requestPass: (trigger) => this.loop.request(trigger),
      stopSignal: () => this.stopSignal.signal,
    };
    // localOut: this instance's router routes from this snapshot, so it has a replica out once the snapshot does
    const slotFiles = o.warmup ? new SlotFilesBook() : undefined; // an idle replica's slot files, for its next start (#38)
    this.stopOps = new StopRunner(ports, this.inFlight, o.timers, { localOut: (m, id) => !this.model(m)?.replicas.some((r) => r.id === id && r.phase === 'ready'), acks: o.routing ?? null }, slotFiles && idleSlotSaver(slotFiles, o.engineApiKey, ports, (m, d) => this.stableSpecs.forDigest(m, d)));
    this.canary = new CanarySteps(o.rolloutFigures ?? null);
    this.stableSpecs = new StableSpecs(o.tracker.specAt?.bind(o.tracker), () => void this.requestPass('stable-spec-read'));
    this.rollouts = new RolloutRunner(ports, { engineApiKey: o.engineApiKey, canary: this.canary, ...(o.runChecks ? { run: o.runChecks } : {}) });
    this.running = new StartRunner(ports, { engineApiKey: o.engineApiKey, downloadToken: (m) => this.downloadToken(m), onEngineInstall: o.onEngineInstall, specOf: (model, digest) => this.stableSpecs.forDigest(model, digest), ...(o.warmup ? { warmup: o.warmup } : {}), ...(slotFiles ? { slotFiles } : {}) });
    this.own = new ReconcilerActs({
      ...ports,
      snapshot: () => this.snapshot(),
      model: (name) => this.model(name),
      stopping: (id) => this.stopOps.has(id),
      placeNow: (model) => this.placeNow(model),
      unplaceable: (model) => this.unplaceable[model],
      showUnplaceable: (model, u) => {
        this.unplaceable = { ...this.unplaceable, [model]: u };
        this.publish(this.summarize());
      },
    });
    this.setSnapshot(this.summarize());
  }

  protected acts(): ControllerActs {
    return this.own;
  }

  /** The state record as it stands (tests, and the future etcd store). */
  record(): ControllerState {
    return this.state;
  }

  // ------------------------------------------------------------------ triggers

  /** Starts the poll timer and runs a first pass. */
  start(): Promise<void> {
    if (this.stopSignal.signal.aborted) this.stopSignal = new AbortController();
    return this.loop.request('start');
  }

  /**
   * Stops the loop. Starts in flight launch nothing more: one still fetching its engine or model file
   * gives up before launching (up to STOP_WAIT_MS, then the node connections are closed under it); a
   * replica already launched keeps running and is adopted by the next controller. Neither counts as
   * a failure of the model.
   */
  async stop(): Promise<void> {
    this.stopSignal.abort();
    this.own.stop();
    await this.loop.stop();
    if (this.running.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const waited = await Promise.race([
        Promise.allSettled([...this.running.running(), ...this.stopOps.running(), ...this.rollouts.running()]).then(() => true),
        new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), STOP_WAIT_MS))),
      ]);
      clearTimeout(timer);
      if (!waited) this.log.warn({ starts: [...this.running.ids()], waitMs: STOP_WAIT_MS }, 'stopping with replica starts still running; closing node connections under them');
    }
    await this.saveState();
    await this.nodes.close();
  }

  // ------------------------------------------------------------------ the pass

  private async pass(trigger: string): Promise<void> {
    const started = this.clock();
    let error: ReasonRef | null = null;
    let actions = 0;
    const log = this.log.child({ pass: started, trigger });
    this.followClockSteps(log);
    this.decidedAt = started;
    try {
      const early = trigger === DEMAND_START ? await this.startNow(log) : null;
      if (early !== null) {
        actions = early;
        return;
      }
      // the groups' watch looks at the nodes without a sync of the fleet repo (#40)
      const spec = trigger === GROUP_WATCH ? this.spec() : await this.sync(log);
      if (!spec || !this.leader()) return;
      this.loop.pollEvery(spec.settings.pollIntervalMs);
      this.loop.watchGroups(groupsOf(this.state).size > 0);
      const stoppingAtLook = this.stopOps.ids(); // a replica whose stop ends during the look: stopping, not failed (stoppingSince)
      await this.nodes.observe(spec, log, groupsOf(this.state));
      if (!(await this.acting.check(spec, log))) return;
      this.nodes.reapOrphanWorkers(spec, this.state.replicas, log); // RPC groups (#40)
      this.nodes.prepareDeviceEngines(spec, log, () => void this.requestPass('device-engine-installed')); // devices (#24)
      await this.estimateMemory(spec);
      const inFlight = await replicasInFlight(spec, this.nodes.observed(spec), stopIds(this.state), this.inFlight);
      actions = (await this.decideAndApply(spec, log, { stopping: stoppingSince(stoppingAtLook, this.stopOps.ids()), inFlight }))!;
    } catch (e) {
      error = reasonOf(e);
      log.error({ err: e, code: error.code }, 'reconcile pass failed');
    } finally {
      const durationMs = this.clock() - started;
      this.lastPass = { startedAt: started, durationMs, result: error ? 'error' : 'ok', error, actions };
      await this.summarizeAndPersist(log);
      this.o.onPass?.(error ? 'error' : 'ok', durationMs / 1000);
      this.scheduleWake();
    }
  }

  /**
   * Decides on the look and applies what was decided. No await from the decision to apply(): start
   * outcomes that arrive meanwhile land before or after, never inside. With `startsOnly` (startNow)
   * nothing is committed, and null returned, unless every action decided is a start.
   */
  private async decideAndApply(spec: FleetSpec, log: Logger, look: { stopping: ReadonlySet<string>; inFlight: ReadonlyMap<string, number> }, startsOnly = false): Promise<number | null> {
    const now = this.now(log);
    const state = startsOnly ? this.state : this.canary.judge(this.state, spec, now, log);
    const d = decide({
      state,
      spec,
      nodes: this.nodes.observed(spec),
      memory: this.memoryNeeds,
      deviceNeeds: this.deviceNeeds, // devices (#24)
      memoryErrors: this.memoryErrors,
      running: this.running.ids(),
      stopping: look.stopping,
      busy: busyOf(look.inFlight), inFlight: look.inFlight, // /slots of the replicas that may be stopped (idle, room, scale-in)
      active: this.own.active(),
      keyFingerprint: this.keyFingerprint,
      load: this.o.modelLoad?.(), // scaling (#42): the routers' load, read as the pass decides
      stableSpecs: this.stableSpecs.wanted(state, now, log),
      now,
      newReplicaId: (model) => this.o.newReplicaId?.(model) ?? `${model}-${randomBytes(4).toString('hex')}`,
    });
    if (startsOnly && (d.actions.length === 0 || d.actions.some((a) => a.kind !== 'start'))) return null;
    this.decidedAt = now;
    this.state = d.state;
    this.desired = d.desired;
    this.unplaceable = d.unplaceable;
    this.waitingForRoom = d.waitingForRoom;
    this.scaleSeen = { short: d.short, load: d.load }; // scaling (#42)
    logNotes(log, d.notes);
    warnUnplaceable(this.unplaceable, this.unplaceableWarned, spec.settings.unplaceableLogIntervalMs, this.clock(), log);
    await this.apply(spec, d.actions, log);
    return d.actions.length;
  }

  /**
   * A demand's start (DEMAND_START, #38): decided on the last look, without the fleet repo's sync
   * and the look at every node that a whole pass begins with (86 ms of a quiet pass, a second under
   * load). Only where nothing else needs the look — this controller acts, no rollout is in flight —
   * and only if starts are all the decision holds; otherwise null, and the pass is a whole one. The
   * pass that the start's outcome asks for looks again.
   */
  private async startNow(log: Logger): Promise<number | null> {
    const spec = this.o.tracker.applied?.spec;
    if (!spec || !this.leader() || this.acting.notActing !== null || this.nodes.states.size === 0) return null;
    if (Object.keys(rolloutsByModel(this.state)).length > 0) return null;
    return this.decideAndApply(spec, log, { stopping: this.stopOps.ids(), inFlight: new Map() }, true);
  }

  /**
   * The wall clock for a time the record keeps or compares with: a step since the last reading is
   * applied to the record first, so a time taken after a step is never shifted by it again (a stop
   * recorded in the pass the step happened in had its drain start moved 12 h ahead by the next pass).
   */
  private now(log: Logger = this.log): number {
    this.followClockSteps(log);
    return this.clock();
  }

  /** A wall-clock step larger than a second moves the record's timers with it (state.ts clockStepped). */
  private followClockSteps(log: Logger): void {
    const offset = this.clock() - this.monotonic();
    const step = this.clockOffset === null ? 0 : offset - this.clockOffset;
    this.clockOffset = offset;
    if (Math.abs(step) < CLOCK_STEP_MS) return;
    this.state = clockStepped(this.state, Math.round(step));
    log.warn({ stepMs: Math.round(step) }, 'the wall clock stepped: backoffs, idle timeouts, drains and health waits keep their real durations');
  }

  /** sync + load: the tracker keeps the last valid spec in force when a revision is rejected. */
  private async sync(log: Logger): Promise<FleetSpec | null> {
    const r = await this.o.tracker.refresh();
    if (r.outcome === 'rejected') log.error({ revision: r.head, problems: this.o.tracker.rejected?.problems.length }, 'fleet revision rejected; the last valid one stays in force');
    else if (r.outcome === 'failed') log.warn({ code: r.error?.code, err: r.error?.message }, 'fleet repo sync failed');
    else if (r.outcome === 'applied') log.info({ revision: r.head }, 'fleet revision applied');
    const applied = this.o.tracker.applied;
    const spec = applied?.spec ?? null;
    const before = this.state.appliedRevision ?? null; // a rollout's stable revision is defined there
    this.state = revisionApplied(this.state, applied?.revision ?? null);
    if (spec) {
      const s = specModelsApplied(this.state, spec.models, this.clock(), before);
      this.state = s.state;
      logNotes(log, s.notes);
    }
    for (const req of r.retries) {
      const name = spec?.modelNames[req.model];
      const m = name ? spec!.models[name]! : null;
      const h = retryHandled(this.state, m, retryId(req), this.clock());
      this.state = h.state;
      logNotes(log, [{ ...h.note, fields: { ...h.note.fields, commit: req.commit, model: req.model } }]);
    }
    return spec;
  }

  private async estimateMemory(spec: FleetSpec): Promise<void> {
    const e = await estimateMemory(spec, this.memory, this.nodes, (m) => this.downloadToken(m));
    this.memoryNeeds = e.needs;
    this.memoryErrors = e.errors;
    this.deviceNeeds = e.devices;
  }

  private readonly downloadToken = (m: ModelSpec): Promise<DownloadToken | undefined> => downloadTokenOf(m, this.o.readSecret);

  private async apply(spec: FleetSpec, actions: readonly Action[], log: Logger): Promise<void> {
    for (const [i, a] of actions.entries()) {
      // Fencing, first layer: a leader whose lease renewal is overdue stops acting, mid-pass included.
      if (!this.leader()) {
        log.warn({ notApplied: actions.length - i }, 'leadership lost during the pass: the rest of its actions are not applied');
        return;
      }
      if (a.kind === 'start') this.running.launch(spec, a, log);
    }
    await this.stopOps.launchAll(log);
    this.rollouts.launchAll(spec, log);
  }

  private scheduleWake(): void {
    const spec = this.spec();
    if (!spec) return;
    const modelOf = this.nodes.modelOf();
    const now = this.decidedAt ?? this.clock();
    const readyReplicas = (model: string): string[] => this.readyReplicas(model).map((r) => r.id);
    this.loop.wakeAt(wakeAfterPass({ state: this.state, spec, desired: this.desired, readyReplicas, modelOf: (id) => modelOf.get(id), waitingForRoom: this.waitingForRoom.length > 0, now }));
  }

  // ------------------------------------------------------------------ summary

  private summarize(): FleetSnapshot {
    const t = this.o.tracker;
    return buildSnapshot({
      spec: t.applied?.spec ?? null,
      now: this.clock(),
      leader: this.leader() && this.acting.notActing === null,
      control: this.controlView(),
      appliedRevision: t.applied?.revision ?? this.state.appliedRevision,
      rejected: t.rejected ? { revision: t.rejected.revision, problems: t.rejected.problems } : null,
      lastSyncOk: t.lastSyncOk ? t.lastSyncOk.getTime() : null,
      lastSyncError: t.lastSyncError ? reasonOf(t.lastSyncError) : null,
      lastStatusWriteOk: this.status?.lastOk ?? null,
      stateError: this.saver.error,
      nodes: this.nodes.states,
      health: healthByModel(this.state),
      desired: this.desired,
      unplaceable: this.unplaceable,
      replicas: this.state.replicas,
      rollouts: rolloutsByModel(this.state),
      rolloutFigures: (m) => this.canary.figuresOf(m),
      stopProgress: this.stopOps.progress(),
      memory: this.memoryNeeds,
      deviceNeeds: this.deviceNeeds, // devices (#24)
      lastPass: this.lastPass, warmups: this.running.warmups, // warm-ups (#38)
      scale: { records: scaleRecords(this.state), ...this.scaleSeen }, // scaling (#42)
    });
  }

  private controlView(): ControlView {
    const base = this.o.control?.() ?? STANDALONE;
    const forged = [...(this.status?.forged ? [this.status.forged] : []), ...this.acting.takeovers.map((t) => t.reason)];
    return { ...base, ...(this.acting.notActing ? { notActing: this.acting.notActing } : {}), ...(forged.length ? { forgedEpochs: forged } : {}) };
  }

  private publish(s: FleetSnapshot): void {
    this.publications++;
    this.setSnapshot(s);
  }

  private saveState(): Promise<void> {
    return this.saver.save(() => this.state);
  }

  /**
   * State file, then status branch, then the snapshot everyone reads (so it never lags the branch).
   * What was published while the branch was written (a stop's progress or end) is newer than what
   * was written: then a snapshot built now is published, never the older one (it would list a
   * replica whose stop ended as still stopping, until the next pass).
   */
  private async summarizeAndPersist(log: Logger): Promise<void> {
    await this.saveState();
    const built = this.publications;
    const snap = this.summarize();
    const spec = this.o.tracker.applied?.spec;
    if (this.status && spec && this.leader() && this.acting.notActing === null) {
      const stale = await this.status.write(snap, spec, this.clock, log, this.o.epoch?.());
      if (stale) {
        log.error({ code: stale.code, reason: stale.message }, 'a newer leader writes the status branch: stepping down');
        this.acting.notActing = stale;
        this.o.onDeposed?.(stale);
      }
    }
    const fresh = this.publications === built ? snap : this.summarize();
    this.publish({ ...fresh, lastStatusWriteOk: this.status?.lastOk ?? null });
  }

  // ------------------------------------------------------------------ for the router (reconciler-acts.ts)

  /** A fresh placement against the current view (pass.ts freshPlacement); 'pass' before the first look. */
  private placeNow(model: string): 'pass' | 'start' | Unplaceable | null {
    const spec = this.spec();
    if (!spec?.models[model] || this.nodes.states.size === 0) return 'pass';
    return freshPlacement({ state: this.state, spec, nodes: this.nodes.observed(spec), memory: this.memoryNeeds, deviceNeeds: this.deviceNeeds, memoryErrors: this.memoryErrors, stopping: this.stopOps.ids(), keyFingerprint: this.keyFingerprint, now: this.now() }, model);
  }
}
