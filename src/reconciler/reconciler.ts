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
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { LlmgwError, reasonOf, type ReasonRef } from '../errors/catalogue.js';
import { retryId } from '../git/trailers.js';
import type { SpecTracker } from '../git/tracker.js';
import { engineKeyFingerprint, type DownloadToken, type NodeDriver } from '../nodes/driver.js';
import type { FleetSpec, ModelSpec, NodeSpec } from '../fleet-spec/types.js';
import { demandResultOf } from './availability.js';
import { SnapshotHub, type ControllerActs } from './controller-shell.js';
import { PassLoop, type LoopTimers } from './loop.js';
import { MemoryEstimator, type DeviceNeed } from './memory.js';
import { mapLimit, NodeFleet, type SupersedeOf } from './node-fleet.js';
import { startConcluded } from './outcomes.js';
import { decide, freshPlacement } from './pass.js';
import { StateSaver, type StatusSink } from './persist.js';
import type { Unplaceable } from './placement.js';
import type { Action } from './planner.js';
import { runStart } from './start-op.js';
import { slotsProbe } from './slots-probe.js';
import { drainStep, stopFinished, type InFlight } from './stops.js';
import { nodeTimers } from './loop.js';
import type { StopProgress } from './summarize.js';
import { clockStepped, demanded, restartRequested, retryHandled, revisionApplied, specApplied, startLaunched, type ControllerState, type Note } from './state.js';
import type { StateStore } from './state-store.js';
import { buildSnapshot } from './summarize.js';
import { STANDALONE, type ControlView, type DemandResult, type FleetSnapshot, type FleetView, type PassSummary } from './view.js';
import { nextScheduleChange } from '../schedule/schedule.js';
import { nextWake } from './wake.js';
import { forgeriesShown, needsBound, ownershipOf, takenOver, type ShownForgery } from './ownership.js';
import { shouldWarn, type LastWarning } from './warn-throttle.js';

/** What the loop needs of the fleet repo's tracker (a fake serves a fixed spec in tests). */
export type FleetSource = Pick<SpecTracker, 'refresh' | 'applied' | 'rejected' | 'lastSyncOk' | 'lastSyncError'>;

export interface ReconcilerOptions {
  readonly tracker: FleetSource;
  /** Where each pass's status goes (the status branch, injected by the composition root); null for none. */
  readonly status: StatusSink | null;
  /** `supersede`: what the driver's fence names to take over (Fence.supersede), asked for each action. */
  readonly driverFor: (node: NodeSpec, supersede: SupersedeOf) => NodeDriver;
  readonly stateStore: Pick<StateStore, 'save' | 'path'>;
  readonly initialState: ControllerState;
  /** Why the state file could not be used at start (it was moved aside), shown in status. */
  readonly initialStateProblem?: ReasonRef | null;
  readonly engineApiKey: string;
  /**
   * A secret's value by name (a file in the controller's secrets dir): models' download tokens.
   * Throws LlmgwError SECRET_NOT_FOUND / SECRET_INVALID. Without it, a model with token: cannot be
   * fetched (SECRET_NOT_FOUND).
   */
  readonly readSecret?: (name: string) => Promise<string>;
  readonly logger: Logger;
  /** Wall clock (epoch ms): the times in the state record. */
  readonly clock?: () => number;
  /** A monotonic clock (ms): tells a step of the wall clock from time passing. */
  readonly monotonic?: () => number;
  readonly timers?: LoopTimers;
  /** "Am I the leader?" — the one question the loop asks before it acts. */
  readonly leader?: () => boolean;
  /** Who this instance is and who leads (snapshot's control); default: a lone controller. */
  readonly control?: () => ControlView;
  /** The fencing epoch of this leader's term (etcd) for nodes' owner records and status commits; 0 alone. */
  readonly epoch?: () => number;
  /** A node has seen a newer epoch of this cluster: a newer leader acts (the HA shell steps down). */
  readonly onDeposed?: (reason: ReasonRef) => void;
  /**
   * The highest epoch that can be real (HA: etcd's current revision; a lone controller: 0), read
   * after a look that found a newer epoch on a node: one above it was not made by this etcd and is
   * taken over (ownership.ts). Absent: every newer epoch is real.
   */
  readonly epochBound?: () => Promise<number>;
  readonly memory?: MemoryEstimator;
  /** Stops and observations run at most this many at once. */
  readonly concurrency?: number;
  readonly observeTimeoutMs?: number;
  /** Makes a new replica id (deterministic in tests). */
  readonly newReplicaId?: (model: string) => string;
  /** Called after every pass with its result (metrics). */
  readonly onPass?: (result: 'ok' | 'error', durationSeconds: number) => void;
  readonly onEngineInstall?: (node: string, engine: string, version: string, result: 'ok' | 'error') => void;
  /** What a replica has in flight (default: its GET /slots with the engine key). */
  readonly inFlight?: (endpoint: string) => Promise<InFlight>;
}

/** How often a draining replica is asked what it has in flight. */
export const DRAIN_PROBE_MS = 250;
/** How soon a model waiting for a busy replica's room is looked at again (its work may have ended). */
export const ROOM_RECHECK_MS = 1000;

/** How long stop() waits for starts in flight to give up (an engine build may take minutes). */
const STOP_WAIT_MS = 10_000;
/** Requests' demand reaches the state file at most this often (a write carries the latest). */
const DEMAND_SAVE_MS = 1000;
/** A change of the wall clock against the monotonic one beyond this is a step, not drift. */
const CLOCK_STEP_MS = 1000;

export class Reconciler extends SnapshotHub implements FleetView, ControllerActs {
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
  private readonly running = new Map<string, Promise<void>>();
  /** Stops this process runs (stops.ts: drain, then SIGTERM…), in the background. */
  private readonly stopOps = new Map<string, Promise<void>>();
  private readonly stopProgress = new Map<string, StopProgress>();
  private readonly inFlight: (endpoint: string) => Promise<InFlight>;
  private stopSignal = new AbortController();
  private memoryNeeds: Record<string, number | null> = {};
  private memoryErrors: Record<string, string> = {};
  /** devices (#24): device need of models whose profile offloads layers. */
  private deviceNeeds: Record<string, DeviceNeed> = {};
  private desired: Readonly<Record<string, number>> = {};
  private unplaceable: Readonly<Record<string, Unplaceable>> = {};
  private waitingForRoom: readonly string[] = [];
  private readonly unplaceableWarned = new Map<string, LastWarning>();
  private lastPass: PassSummary | null = null;
  /** A write of the record that a request's demand asked for, pending. */
  private demandSave: NodeJS.Timeout | null = null;
  /** The time the last decision was taken at: due times after it still need a pass, even if passed by now. */
  private decidedAt: number | null = null;
  /** Why this controller does not act on the fleet (a node owned by another controller, or a newer epoch), or null. */
  private notActing: ReasonRef | null = null;
  /** Owner records above etcd's revision this leader took over, shown for a while (ownership.ts). */
  private takeovers: ShownForgery[] = [];
  /** Snapshots published so far: a pass publishes a newer one than it built if any came meanwhile. */
  private publications = 0;
  /** Requests in this process's router per model (FleetView.hold): activity until they end. */
  private readonly held = new Map<string, number>();

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
    this.setSnapshot(this.summarize());
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
    if (this.demandSave) clearTimeout(this.demandSave);
    this.demandSave = null;
    await this.loop.stop();
    if (this.running.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const waited = await Promise.race([
        Promise.allSettled([...this.running.values(), ...this.stopOps.values()]).then(() => true),
        new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), STOP_WAIT_MS))),
      ]);
      clearTimeout(timer);
      if (!waited) this.log.warn({ starts: [...this.running.keys()], waitMs: STOP_WAIT_MS }, 'stopping with replica starts still running; closing node connections under them');
    }
    await this.saveState();
    await this.nodes.close();
  }

  /** Asks for a pass. Resolves when a pass that began after this call has finished. */
  requestPass(trigger: string): Promise<void> {
    return this.loop.request(trigger);
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
      const spec = await this.sync(log);
      if (!spec || !this.leader()) return;
      this.loop.pollEvery(spec.settings.pollIntervalMs);
      await this.nodes.observe(spec, log);
      if (!(await this.mayAct(spec, log))) return;
      this.nodes.prepareDeviceEngines(spec, log, () => void this.requestPass('device-engine-installed')); // devices (#24)
      await this.estimateMemory(spec);
      const busy = await this.busyOnDemand(spec);
      // No await from here to apply(): start outcomes that arrive meanwhile land before or after, never inside.
      this.decidedAt = this.now(log);
      const d = decide({
        state: this.state,
        spec,
        nodes: this.nodes.observed(spec),
        memory: this.memoryNeeds,
        deviceNeeds: this.deviceNeeds, // devices (#24)
        memoryErrors: this.memoryErrors,
        running: new Set(this.running.keys()),
        stopping: new Set(this.stopOps.keys()),
        busy,
        active: new Set(this.held.keys()),
        keyFingerprint: this.keyFingerprint,
        now: this.decidedAt,
        newReplicaId: (model) => this.o.newReplicaId?.(model) ?? `${model}-${randomBytes(4).toString('hex')}`,
      });
      this.state = d.state;
      this.desired = d.desired;
      this.unplaceable = d.unplaceable;
      this.waitingForRoom = d.waitingForRoom;
      this.logNotes(log, d.notes);
      this.warnUnplaceable(spec, log);
      actions = d.actions.length;
      await this.apply(spec, d.actions, log);
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
   * On-demand replicas with requests in flight (their /slots): never stopped as idle or evicted. Only
   * on-demand models are asked (only they are stopped for idleness or room), and only their ready
   * replicas not being stopped.
   */
  private async busyOnDemand(spec: FleetSpec): Promise<ReadonlySet<string>> {
    const stopping = new Set(Object.keys(this.state.stops));
    const asks = this.nodes
      .observed(spec)
      .flatMap((n) => (n.reachable ? n.replicas : []))
      .filter((r) => r.state === 'ready' && !stopping.has(r.id) && spec.models[r.model]?.scaling.mode === 'on_demand');
    const busy = new Set<string>();
    await Promise.all(
      asks.map(async (r) => {
        const n = await this.inFlight(r.endpoint);
        if (typeof n === 'number' && n > 0) busy.add(r.id);
      }),
    );
    return busy;
  }

  /**
   * The nodes' owner records decide whether this controller acts at all this pass (ownership.ts).
   * etcd's revision is read only when a node shows a newer epoch, after the look that saw it.
   */
  private async mayAct(spec: FleetSpec, log: Logger): Promise<boolean> {
    const fences = this.nodes.fences(spec);
    const ownEpoch = this.o.epoch?.() ?? 0;
    let bound: number | null = null;
    if (needsBound(fences) && this.o.epochBound) {
      try {
        bound = await this.o.epochBound();
      } catch (e) {
        log.warn({ code: reasonOf(e).code, reason: reasonOf(e).message }, 'could not read etcd\'s revision: a newer epoch on a node counts as a newer leader');
      }
    }
    const o = ownershipOf(fences, ownEpoch, bound);
    const took = takenOver(fences, ownEpoch);
    for (const r of took) log.error({ code: r.code, reason: r.message }, 'took over a node whose owner record carried an epoch this etcd did not make');
    this.takeovers = forgeriesShown(this.takeovers, took, this.clock());
    this.nodes.supersede('supersede' in o ? o.supersede : []);
    const was = this.notActing;
    this.notActing = o.acting ? null : o.reason;
    if (o.acting) {
      if (was) log.info({ was: was.code }, 'acting on the fleet again: every node reached is ours');
      return true;
    }
    if (was?.message !== o.reason.message) {
      const msg = o.deposed ? 'a newer leader acts on the fleet: stepping down' : 'supersede' in o ? 'a node\'s owner record carries an epoch this etcd did not make: taking the node over' : 'not acting on the fleet: another controller owns it';
      log.error({ code: o.reason.code, reason: o.reason.message }, msg);
    }
    if (o.deposed) this.o.onDeposed?.(o.reason);
    // the next look takes the records over (they are named in this controller's fence from now): at
    // once the first time; when the last pass had named records too (rewritten since), at the next poll
    if ('supersede' in o && was?.code !== 'NODE_EPOCH_FORGED') void this.requestPass('epoch-forged');
    return false;
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

  private logNotes(log: Logger, notes: readonly Note[]): void {
    for (const n of notes) log[n.level](n.fields, n.msg);
  }

  /** sync + load: the tracker keeps the last valid spec in force when a revision is rejected. */
  private async sync(log: Logger): Promise<FleetSpec | null> {
    const r = await this.o.tracker.refresh();
    if (r.outcome === 'rejected') log.error({ revision: r.head, problems: this.o.tracker.rejected?.problems.length }, 'fleet revision rejected; the last valid one stays in force');
    else if (r.outcome === 'failed') log.warn({ code: r.error?.code, err: r.error?.message }, 'fleet repo sync failed');
    else if (r.outcome === 'applied') log.info({ revision: r.head }, 'fleet revision applied');
    const applied = this.o.tracker.applied;
    const spec = applied?.spec ?? null;
    this.state = revisionApplied(this.state, applied?.revision ?? null);
    if (spec) {
      const s = specApplied(this.state, Object.values(spec.models));
      this.state = s.state;
      this.logNotes(log, s.notes);
    }
    for (const req of r.retries) {
      const name = spec?.modelNames[req.model];
      const m = name ? spec!.models[name]! : null;
      const h = retryHandled(this.state, m, retryId(req));
      this.state = h.state;
      this.logNotes(log, [{ ...h.note, fields: { ...h.note.fields, commit: req.commit, model: req.model } }]);
    }
    return spec;
  }

  private async estimateMemory(spec: FleetSpec): Promise<void> {
    const needs: Record<string, number | null> = {};
    const errors: Record<string, string> = {};
    const devices: Record<string, DeviceNeed> = {};
    await Promise.all(
      Object.values(spec.models).map(async (m) => {
        const e = await this.memory.estimate(m, spec.profiles[m.profile]!, () => this.nodes.rangeReaders(spec, m), async () => (await this.downloadToken(m))?.value ?? null);
        needs[m.name] = 'bytes' in e ? e.bytes : null;
        if ('bytes' in e && e.device) devices[m.name] = e.device; // devices (#24)
        if ('error' in e) errors[m.name] = e.error;
      }),
    );
    this.memoryNeeds = needs;
    this.memoryErrors = errors;
    this.deviceNeeds = devices;
  }

  /** The model's download token (token: names a secret), read when it is needed; undefined for none. */
  private async downloadToken(m: ModelSpec): Promise<DownloadToken | undefined> {
    if (m.token === null) return undefined;
    if (!this.o.readSecret) throw new LlmgwError('SECRET_NOT_FOUND', `${m.file}: token: names secret '${m.token}', but this controller has no secrets dir`, { model: m.name, secret: m.token });
    return { secret: m.token, value: await this.o.readSecret(m.token) };
  }

  private warnUnplaceable(spec: FleetSpec, log: Logger): void {
    const now = this.clock();
    for (const [model, u] of Object.entries(this.unplaceable)) {
      if (!shouldWarn(this.unplaceableWarned.get(model), u.code, now, spec.settings.unplaceableLogIntervalMs)) continue;
      log.warn({ model, code: u.code, reason: u.reason }, 'model unplaceable');
      this.unplaceableWarned.set(model, { code: u.code, at: now });
    }
    for (const model of [...this.unplaceableWarned.keys()]) if (!this.unplaceable[model]) this.unplaceableWarned.delete(model);
  }

  private async apply(spec: FleetSpec, actions: readonly Action[], log: Logger): Promise<void> {
    for (const [i, a] of actions.entries()) {
      // Fencing, first layer: a leader whose lease renewal is overdue stops acting, mid-pass included.
      if (!this.leader()) {
        log.warn({ notApplied: actions.length - i }, 'leadership lost during the pass: the rest of its actions are not applied');
        return;
      }
      if (a.kind === 'start') this.launchStart(spec, a, log);
    }
    // Every stop in the record runs in the background (this pass's, and those a previous leader or
    // run left unfinished): stopping replicas leave the router's view at once, and no stop holds up
    // the pass or the publication of what it started.
    const toLaunch = Object.keys(this.state.stops).filter((id) => !this.stopOps.has(id));
    if (toLaunch.length === 0 || !this.leader()) return;
    // The record first (the state file, or etcd): a failover right after continues these drains from
    // their start instead of planning them anew.
    await this.saveState();
    let launched = false;
    for (const id of toLaunch) {
      const rec = this.state.stops[id];
      if (!rec || this.stopOps.has(id) || !this.leader()) continue;
      // One 'stopping replica' line a stop: here for one that drains first (out of routing now), from
      // the stop's own first step for one that does not (stops.ts drainStep).
      if (rec.drain) log.info({ model: rec.model, node: rec.node, replica: id, reason: rec.reason, drain: true }, 'stopping replica');
      this.launchStop(id, log);
      launched = true;
    }
    if (launched) this.publish(this.summarize());
  }

  /** Sleeps on the loop's timers (fake ones in tests); resolves early when the controller stops. */
  private sleep(ms: number): Promise<void> {
    const timers = this.o.timers ?? nodeTimers;
    const signal = this.stopSignal.signal;
    return new Promise((resolve) => {
      const done = (): void => {
        timers.clearTimeout(t);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const t = timers.setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private endpointOf(node: string, id: string): string {
    return this.nodes.states.get(node)?.obs?.replicas.find((r) => r.id === id)?.endpoint ?? '';
  }

  private setStopProgress(id: string, p: StopProgress): void {
    const was = this.stopProgress.get(id);
    this.stopProgress.set(id, p);
    if (was?.phase !== p.phase || was?.inFlight !== p.inFlight) this.publish(this.summarize());
  }

  /**
   * One stop (stops.ts): out of routing already (the record), then wait for the replica's in-flight
   * requests (bounded by drain_grace from the record's start), then SIGTERM, stop_grace, SIGKILL. It
   * gives up, leaving the record, when this controller stops or stops leading: the next leader
   * continues it.
   */
  private launchStop(id: string, log: Logger): void {
    const signal = this.stopSignal.signal;
    const op = (async () => {
      for (;;) {
        const rec = this.state.stops[id];
        const spec = this.spec();
        if (!rec || !spec || signal.aborted || !this.leader()) return;
        const inFlight: InFlight = rec.drain ? await this.inFlight(this.endpointOf(rec.node, id)) : 'gone';
        const count = typeof inFlight === 'number' ? inFlight : null;
        const step = drainStep(id, rec, inFlight, this.now(log), spec.settings.drainGraceMs);
        if (step.kind === 'wait') {
          this.setStopProgress(id, { phase: 'draining', inFlight: count });
          await this.sleep(DRAIN_PROBE_MS);
          continue;
        }
        if (signal.aborted || !this.leader()) return;
        this.logNotes(log, [step.note]);
        this.setStopProgress(id, { phase: 'stopping', inFlight: count });
        const n = spec.nodes[rec.node];
        try {
          if (n) await this.nodes.driver(n).stopReplica(id, rec.reason === 'failed' ? 0 : spec.settings.stopGraceMs);
          this.nodes.forgetReplica(rec.node, id);
          this.state = stopFinished(this.state, id);
          await this.saveState();
          // gone from the snapshot now, not when the next pass ends (it may wait behind a long one):
          // what lists replicas (ctl, the admin API, the page) stops offering one that is gone
          this.publish(this.summarize());
        } catch (e) {
          log.warn({ replica: id, node: rec.node, code: reasonOf(e).code, err: reasonOf(e).message }, 'stopping replica failed; retried next pass');
        }
        return;
      }
    })().finally(() => {
      this.stopOps.delete(id);
      this.stopProgress.delete(id);
      // The world changed under the stop: look again (restarts go on, freed room gets used).
      if (!signal.aborted) void this.requestPass('stop-finished');
    });
    this.stopOps.set(id, op);
  }

  private scheduleWake(): void {
    const spec = this.spec();
    if (!spec) return;
    const modelOf = this.nodes.modelOf();
    const now = this.decidedAt ?? this.clock();
    const scheduled = nextScheduleChange(spec, now);
    const extra = [...(scheduled === null ? [] : [scheduled]), ...(this.waitingForRoom.length > 0 ? [now + ROOM_RECHECK_MS] : [])];
    this.loop.wakeAt(
      nextWake({
        state: this.state,
        spec,
        desired: this.desired,
        readyReplicas: (model) => this.readyReplicas(model).map((r) => r.id),
        modelOf: (id) => modelOf.get(id),
        extra,
        now,
      }),
    );
  }

  /** A replica start runs in the background (start-op.ts); it is in flight in the record from here. */
  private launchStart(spec: FleetSpec, a: Extract<Action, { kind: 'start' }>, log: Logger): void {
    const m = spec.models[a.model]!;
    const profile = spec.profiles[m.profile]!;
    const engine = spec.engines[profile.engine]!.versions[profile.engineVersion]!;
    const rlog = log.child({ model: a.model, node: a.node, replica: a.replicaId });
    this.state = startLaunched(this.state, a.replicaId, { model: a.model, node: a.node, digest: a.digest, startedAt: this.now(log) });
    rlog.info('starting replica');
    const op = runStart({
      action: a,
      model: m,
      profile,
      engine,
      driver: this.nodes.driver(spec.nodes[a.node]!),
      engineApiKey: this.engineApiKey,
      downloadToken: () => this.downloadToken(m),
      stopSignal: this.stopSignal.signal,
      log: rlog,
      onEngineInstall: (result) => {
        if (result === 'error') this.nodes.engineInstallFailed(a.node, `${engine.engine}@${engine.version}`);
        this.o.onEngineInstall?.(a.node, engine.engine, engine.version, result);
      },
      conclude: (outcome) => {
        const r = startConcluded(this.state, a.replicaId, outcome, this.now(log), (this.spec() ?? spec).settings);
        this.state = r.state;
        this.logNotes(log, r.notes);
        // a ready replica is routed to now, not after the next pass's look and status write
        if (outcome.kind === 'ready') this.publish(this.summarize());
      },
      persist: () => this.saveState(),
    }).finally(() => {
      this.running.delete(a.replicaId);
      void this.requestPass('start-finished');
    });
    this.running.set(a.replicaId, op);
  }

  // ------------------------------------------------------------------ summary

  private summarize(): FleetSnapshot {
    const t = this.o.tracker;
    return buildSnapshot({
      spec: t.applied?.spec ?? null,
      now: this.clock(),
      leader: this.leader() && this.notActing === null,
      control: this.controlView(),
      appliedRevision: t.applied?.revision ?? this.state.appliedRevision,
      rejected: t.rejected ? { revision: t.rejected.revision, problems: t.rejected.problems } : null,
      lastSyncOk: t.lastSyncOk ? t.lastSyncOk.getTime() : null,
      lastSyncError: t.lastSyncError ? reasonOf(t.lastSyncError) : null,
      lastStatusWriteOk: this.status?.lastOk ?? null,
      stateError: this.saver.error,
      nodes: this.nodes.states,
      health: this.state.models,
      desired: this.desired,
      unplaceable: this.unplaceable,
      starts: this.state.starts,
      stops: this.state.stops,
      stopProgress: this.stopProgress,
      memory: this.memoryNeeds,
      deviceNeeds: this.deviceNeeds, // devices (#24)
      lastPass: this.lastPass,
    });
  }

  private controlView(): ControlView {
    const base = this.o.control?.() ?? STANDALONE;
    const forged = [...(this.status?.forged ? [this.status.forged] : []), ...this.takeovers.map((t) => t.reason)];
    return { ...base, ...(this.notActing ? { notActing: this.notActing } : {}), ...(forged.length ? { forgedEpochs: forged } : {}) };
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
    if (this.status && spec && this.leader() && this.notActing === null) {
      const stale = await this.status.write(snap, spec, this.clock, log, this.o.epoch?.());
      if (stale) {
        log.error({ code: stale.code, reason: stale.message }, 'a newer leader writes the status branch: stepping down');
        this.notActing = stale;
        this.o.onDeposed?.(stale);
      }
    }
    const fresh = this.publications === built ? snap : this.summarize();
    this.publish({ ...fresh, lastStatusWriteOk: this.status?.lastOk ?? null });
  }

  // ------------------------------------------------------------------ operator and router API

  private specModel(name: string): ModelSpec {
    const spec = this.spec();
    const model = spec?.modelNames[name];
    if (!spec || !model) throw new LlmgwError('NOT_FOUND', `No model named "${name}" in the fleet in force.`, { model: name });
    return spec.models[model]!;
  }

  /** `llmgw ctl retry MODEL`: unparks a parked model, or clears the backoff of one that is not. */
  async retry(name: string): Promise<{ model: string; outcome: 'unparked' | 'backoff-cleared' }> {
    const m = this.specModel(name);
    const h = retryHandled(this.state, m, `admin:${this.now()}:${randomBytes(3).toString('hex')}`);
    this.state = h.state;
    this.logNotes(this.log, [h.note]);
    await this.requestPass('admin-retry');
    return { model: m.name, outcome: h.outcome === 'already-handled' ? 'backoff-cleared' : h.outcome };
  }

  /** `llmgw ctl restart`: replace replicas surge-first (by id, all of a model, or all). */
  async restart(req: { readonly replicas?: readonly string[]; readonly model?: string; readonly all?: boolean }): Promise<readonly string[]> {
    const model = req.model ? this.specModel(req.model).name : undefined;
    const ids: string[] = [];
    for (const r of this.snapshot().models.flatMap((mv) => mv.replicas)) {
      if (r.phase !== 'ready' && r.phase !== 'starting') continue;
      if (req.all || (model && r.model === model) || req.replicas?.includes(r.id)) ids.push(r.id);
    }
    for (const id of req.replicas ?? []) if (!ids.includes(id)) throw new LlmgwError('REPLICA_NOT_FOUND', `no running replica "${id}"`, { replica: id });
    this.state = restartRequested(this.state, ids, this.now());
    await this.saveState();
    await this.requestPass('admin-restart');
    return ids;
  }

  /**
   * Whether every replica of a restart request has been replaced: out of the record and out of the
   * published snapshot (so what `ctl status` shows next agrees: the record changes mid-pass, the
   * snapshot at its end).
   */
  restartDone(ids: readonly string[]): boolean {
    const shown = new Set(this.snapshot().models.flatMap((m) => m.replicas.map((r) => r.id)));
    return ids.every((id) => this.state.restarts[id] === undefined && !shown.has(id));
  }

  async logs(replicaId: string, lines: number): Promise<string> {
    const r = this.snapshot().models.flatMap((m) => m.replicas).find((x) => x.id === replicaId);
    const node = r && this.spec()?.nodes[r.node];
    if (!r || !node) throw new LlmgwError('REPLICA_NOT_FOUND', `no replica "${replicaId}"`, { replica: replicaId });
    try {
      return await this.nodes.driver(node).logTail(replicaId, lines);
    } catch (e) {
      // A stop removes the replica's directory, its log with it, before the next snapshot stops
      // listing it: say that rather than only that the node has no such replica.
      const stopping = r.phase === 'draining' || r.phase === 'stopping' || this.state.stops[replicaId] !== undefined || this.stopOps.has(replicaId);
      if (!(e instanceof LlmgwError) || e.code !== 'REPLICA_NOT_FOUND' || !stopping) throw e;
      throw new LlmgwError('REPLICA_NOT_FOUND', `replica ${replicaId} of ${r.model} was being stopped and is gone from node ${r.node}: a stopped replica's log goes with it`, { ...e.detail, replica: replicaId, model: r.model, node: r.node });
    }
  }

  spec(): FleetSpec | null {
    return this.o.tracker.applied?.spec ?? null;
  }

  touch(model: string): void {
    // Only an on-demand model's idle timeout and eviction order read demand.
    if (this.spec()?.models[model]?.scaling.mode !== 'on_demand') return;
    this.state = demanded(this.state, model, this.now());
    // Demand survives a restart: the record is written at most once a second while requests come
    // (the write after the last one carries the last request's time).
    if (this.demandSave) return;
    this.demandSave = setTimeout(() => {
      this.demandSave = null;
      void this.saveState();
    }, DEMAND_SAVE_MS);
    this.demandSave.unref();
  }

  hold(model: string): () => void {
    this.touch(model);
    this.held.set(model, (this.held.get(model) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.held.get(model) ?? 1) - 1;
      if (n > 0) this.held.set(model, n);
      else this.held.delete(model);
      this.touch(model);
    };
  }

  async demand(model: string): Promise<DemandResult> {
    this.touch(model);
    const fresh = this.placeNow(model);
    if (fresh === 'pass') {
      await this.requestPass('demand');
      return demandResultOf(this.model(model));
    }
    if (fresh) {
      // Unplaceable on the current view: answered now, no pass (nothing would start).
      if (this.unplaceable[model]?.reason !== fresh.reason) {
        this.unplaceable = { ...this.unplaceable, [model]: fresh };
        this.publish(this.summarize());
      }
      return { kind: 'unplaceable', code: fresh.code, reason: fresh.reason };
    }
    return demandResultOf(this.model(model));
  }

  /** A fresh placement against the current view (pass.ts freshPlacement); 'pass' before the first look. */
  private placeNow(model: string): 'pass' | Unplaceable | null {
    const spec = this.spec();
    if (!spec?.models[model] || this.nodes.states.size === 0) return 'pass';
    return freshPlacement({ state: this.state, spec, nodes: this.nodes.observed(spec), memory: this.memoryNeeds, deviceNeeds: this.deviceNeeds, memoryErrors: this.memoryErrors, stopping: new Set(this.stopOps.keys()), keyFingerprint: this.keyFingerprint, now: this.now() }, model);
  }
}
