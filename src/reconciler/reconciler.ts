/**
 * The reconcile loop: level-triggered and single-flight. Triggers (poll timer, webhook, admin,
 * router demand) only request a pass; requests made during a pass coalesce into one next pass.
 * A pass is a named pipeline — sync → load → observe → place/plan → apply → summarize — and the
 * summary (snapshot, state file, status branch) is written in a `finally`, success or not.
 * Replica starts run in the background (they can take minutes); each one ends by requesting a pass.
 */
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { countsTowardParking, isLlmgwError, LlmgwError, reasonOf } from '../errors/catalogue.js';
import { retryId } from '../git/trailers.js';
import type { SpecTracker } from '../git/tracker.js';
import type { FleetRepo } from '../git/repo.js';
import { writeStatusBranch } from '../git/status-branch.js';
import type { DownloadToken, NodeDriver, ReplicaObservation } from '../nodes/driver.js';
import type { FleetSpec, ModelSpec, NodeSpec } from '../fleet-spec/types.js';
import { retried, setbackNotCounted, startFailed, stayedReady, withDigest, type ModelHealth } from './health.js';
import { MemoryEstimator, type RangeReader } from './memory.js';
import { selectorMatches } from './placement.js';
import { planPass, type Action, type InflightStart, type ObservedNode } from './planner.js';
import { MAX_HANDLED_RETRIES, type ControllerState, type StateStore } from './state-store.js';
import { buildSnapshot, statusFiles, type NodeState } from './summarize.js';
import type { ReasonRef } from './status-types.js';
import type { DemandResult, FleetSnapshot, FleetView, ModelView, PassSummary, ReplicaView } from './view.js';
import { shouldWarn, type LastWarning } from './warn-throttle.js';

export interface ReconcilerOptions {
  readonly tracker: SpecTracker;
  /** Where the status branch goes (the fleet repo); null to not write one. */
  readonly statusRepo: FleetRepo | null;
  readonly driverFor: (node: NodeSpec) => NodeDriver;
  readonly stateStore: StateStore;
  readonly initialState: ControllerState;
  readonly engineApiKey: string;
  /**
   * A secret's value by name (a file in the controller's secrets dir): models' download tokens.
   * Throws LlmgwError SECRET_NOT_FOUND / SECRET_INVALID. Without it, a model with token: cannot be
   * fetched (SECRET_NOT_FOUND).
   */
  readonly readSecret?: (name: string) => Promise<string>;
  readonly logger: Logger;
  readonly clock?: () => number;
  /** "Am I the leader?" — the one question the loop asks before it acts. */
  readonly leader?: () => boolean;
  readonly memory?: MemoryEstimator;
  /** Stops and observations run at most this many at once. */
  readonly concurrency?: number;
  readonly observeTimeoutMs?: number;
  /** Called after every pass with its result (metrics). */
  readonly onPass?: (result: 'ok' | 'error', durationSeconds: number) => void;
  readonly onEngineInstall?: (node: string, engine: string, version: string, result: 'ok' | 'error') => void;
}

type OpEvent =
  | { readonly kind: 'ready'; readonly model: string; readonly replicaId: string }
  | { readonly kind: 'failed'; readonly model: string; readonly digest: string; readonly replicaId: string; readonly error: ReasonRef; readonly counted: boolean; readonly at: number };

/** How long stop() waits for starts in flight to give up (an engine build may take minutes). */
const STOP_WAIT_MS = 10_000;

async function mapLimit<T>(items: readonly T[], limit: number, fn: (t: T) => Promise<void>): Promise<void> {
  let i = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (i < items.length) {
      const item = items[i++]!;
      await fn(item);
    }
  });
  await Promise.all(workers);
}

function withTimeout<T>(p: Promise<T>, ms: number, node: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new LlmgwError('NODE_TIMEOUT', `observing node ${node} took longer than ${ms} ms`, { node })), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

export class Reconciler implements FleetView {
  readonly engineApiKey: string;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly leader: () => boolean;
  private readonly memory: MemoryEstimator;
  private readonly events = new EventEmitter();

  // --- state that outlives a pass ---
  private health: Record<string, ModelHealth>;
  private handledRetries: string[];
  private appliedRevision: string | null;
  private readonly drivers = new Map<string, { fingerprint: string; driver: NodeDriver }>();
  private readonly nodes = new Map<string, NodeState>();
  private readonly inflight = new Map<string, InflightStart>();
  /** The background starts (launchStart), awaited by stop(). */
  private readonly starts = new Set<Promise<void>>();
  /** Aborted by stop(): cuts the wait for a launched replica to become ready. */
  private stopSignal = new AbortController();
  private readonly stopping = new Set<string>();
  private readonly opEvents: OpEvent[] = [];
  private readonly accountedFailures = new Set<string>();
  private readonly readySince = new Map<string, number>();
  /** Live replicas (no start in flight) seen not answering /health: since when, and until when that is tolerated. */
  private readonly unhealthy = new Map<string, { readonly since: number; readonly until: number }>();
  private readonly demandAt: Record<string, { lastRequestAt: number }> = {};
  private readonly restarts = new Set<string>();
  private readonly draining: Record<string, number> = {};
  private readonly unplaceableWarned = new Map<string, LastWarning>();
  private memoryNeeds: Record<string, number | null> = {};
  /** Why a model's memory need is unknown (shown as its unplaceable reason). */
  private memoryErrors: Record<string, string> = {};
  private unplaceable: Record<string, string> = {};
  private desired: Record<string, number> = {};
  private lastStatusFiles: string | null = null;
  private lastStatusWriteOk: number | null = null;
  private lastPass: PassSummary | null = null;
  private current: FleetSnapshot;
  private indexed: readonly ModelView[] | null = null;
  private modelIndex = new Map<string, ModelView>();

  // --- single flight ---
  private running: Promise<void> | null = null;
  private next: { promise: Promise<void>; resolve: () => void } | null = null;
  private timer: NodeJS.Timeout | null = null;
  private wake: { at: number; timer: NodeJS.Timeout } | null = null;
  private pollMs = 0;
  private stopped = false;

  constructor(private readonly o: ReconcilerOptions) {
    this.engineApiKey = o.engineApiKey;
    this.log = o.logger.child({ component: 'reconciler' });
    this.clock = o.clock ?? Date.now;
    this.leader = o.leader ?? (() => true);
    this.memory = o.memory ?? new MemoryEstimator();
    this.health = { ...o.initialState.models };
    this.handledRetries = [...o.initialState.handledRetries];
    this.appliedRevision = o.initialState.appliedRevision;
    this.events.setMaxListeners(0);
    this.current = this.summarize();
  }

  // ------------------------------------------------------------------ triggers

  /** Starts the poll timer and runs a first pass. */
  start(): Promise<void> {
    this.stopped = false;
    if (this.stopSignal.signal.aborted) this.stopSignal = new AbortController();
    return this.requestPass('start');
  }

  /**
   * Stops the loop. Starts in flight launch nothing more: one still fetching its engine or model file
   * gives up before launching (up to STOP_WAIT_MS, then the node connections are closed under it); a
   * replica already launched keeps running and is adopted by the next controller. Neither counts as
   * a failure of the model.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopSignal.abort();
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.wake) clearTimeout(this.wake.timer);
    this.wake = null;
    await this.running?.catch(() => undefined);
    if (this.starts.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const waited = await Promise.race([
        Promise.allSettled([...this.starts]).then(() => true),
        new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), STOP_WAIT_MS))),
      ]);
      clearTimeout(timer);
      if (!waited) this.log.warn({ starts: [...this.inflight.values()].map((s) => s.replicaId), waitMs: STOP_WAIT_MS }, 'stopping with replica starts still running; closing node connections under them');
    }
    await Promise.all([...this.drivers.values()].map((d) => d.driver.close().catch(() => undefined)));
  }

  /** Asks for a pass. Resolves when a pass that began after this call has finished. */
  requestPass(trigger: string): Promise<void> {
    if (this.stopped && trigger !== 'start') return Promise.resolve();
    if (!this.running) {
      this.running = this.runPass(trigger);
      return this.running;
    }
    if (!this.next) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.next = { promise, resolve };
    }
    return this.next.promise;
  }

  private async runPass(trigger: string): Promise<void> {
    try {
      await this.pass(trigger);
    } finally {
      const next = this.next;
      this.next = null;
      this.running = null;
      if (next && !this.stopped) {
        this.running = this.runPass('coalesced');
        void this.running.then(next.resolve, next.resolve);
      } else next?.resolve();
    }
  }

  private armTimer(spec: FleetSpec): void {
    const ms = spec.settings.pollIntervalMs;
    if (this.stopped || ms === this.pollMs || ms <= 0) return;
    if (this.timer) clearInterval(this.timer);
    this.pollMs = ms;
    this.timer = setInterval(() => void this.requestPass('poll'), ms);
    this.timer.unref();
  }

  // ------------------------------------------------------------------ the pass

  private async pass(trigger: string): Promise<void> {
    const started = this.clock();
    let error: ReasonRef | null = null;
    let actions = 0;
    const log = this.log.child({ pass: started, trigger });
    try {
      const spec = await this.sync(log);
      if (!spec || !this.leader()) return;
      this.armTimer(spec);
      this.applyOpEvents(spec, log);
      await this.observe(spec, log);
      this.failUnresponsive(spec, log);
      this.trackHealth(spec);
      await this.estimateMemory(spec);
      actions = await this.planAndApply(spec, log);
    } catch (e) {
      error = reasonOf(e);
      log.error({ err: e, code: error.code }, 'reconcile pass failed');
    } finally {
      const durationMs = this.clock() - started;
      this.lastPass = { startedAt: new Date(started).toISOString(), durationMs, result: error ? 'error' : 'ok', error, actions };
      await this.summarizeAndPersist(log);
      this.o.onPass?.(error ? 'error' : 'ok', durationMs / 1000);
      this.scheduleWake();
    }
  }

  /** sync + load: the tracker keeps the last valid spec in force when a revision is rejected. */
  private async sync(log: Logger): Promise<FleetSpec | null> {
    const r = await this.o.tracker.refresh();
    if (r.outcome === 'rejected') {
      log.error({ revision: r.head, problems: this.o.tracker.rejected?.problems.length }, 'fleet revision rejected; the last valid one stays in force');
    } else if (r.outcome === 'failed') {
      log.warn({ code: r.error?.code, err: r.error?.message }, 'fleet repo sync failed');
    } else if (r.outcome === 'applied') {
      log.info({ revision: r.head }, 'fleet revision applied');
    }
    const applied = this.o.tracker.applied;
    if (applied) this.appliedRevision = applied.revision;
    const spec = applied?.spec ?? null;
    for (const req of r.retries) {
      const model = spec?.modelNames[req.model];
      const id = retryId(req);
      if (!model || !spec) {
        log.warn({ commit: req.commit, model: req.model }, 'retry trailer names no model; ignored');
        this.rememberRetry(id);
        continue;
      }
      this.applyRetry(spec.models[model]!, id, log);
    }
    return spec;
  }

  private rememberRetry(id: string): void {
    this.handledRetries.push(id);
    if (this.handledRetries.length > MAX_HANDLED_RETRIES) this.handledRetries.splice(0, this.handledRetries.length - MAX_HANDLED_RETRIES);
  }

  private applyRetry(m: ModelSpec, id: string, log: Logger): 'unparked' | 'backoff-cleared' | 'already-handled' {
    if (this.handledRetries.includes(id)) return 'already-handled';
    const { health, outcome } = retried(withDigest(this.health[m.name], m.digest), id);
    this.health[m.name] = health;
    this.rememberRetry(id);
    log.info({ model: m.name, retry: id, outcome }, 'retry handled');
    return outcome;
  }

  private applyOpEvents(spec: FleetSpec, log: Logger): void {
    const s = spec.settings;
    for (const ev of this.opEvents.splice(0)) {
      const m = spec.models[ev.model];
      if (!m) continue;
      if (ev.kind === 'ready') {
        log.info({ model: ev.model, replica: ev.replicaId }, 'replica ready');
        continue;
      }
      const h = this.health[ev.model];
      if (!h || h.digest !== ev.digest) continue; // a failure of an old definition does not count
      if (h.parked) continue; // already parked: a late report changes nothing
      if (!ev.counted) {
        this.health[ev.model] = setbackNotCounted(h, ev.error, ev.at, s);
        log.warn({ model: ev.model, replica: ev.replicaId, code: ev.error.code, reason: ev.error.message }, 'replica start set back (not counted)');
        continue;
      }
      const next = startFailed(h, ev.error, ev.at, s);
      this.health[ev.model] = next;
      const fields = { model: ev.model, replica: ev.replicaId, code: ev.error.code, reason: ev.error.message, failures: next.consecutiveFailures };
      if (next.parked) log.error({ ...fields, parkAfter: s.parkAfterFailures }, 'model parked: not started again until its definition changes or a retry');
      else log.warn({ ...fields, nextAttemptAt: new Date(next.nextAttemptAt ?? 0).toISOString() }, 'replica start failed');
    }
  }

  private driver(n: NodeSpec): NodeDriver {
    const fingerprint = JSON.stringify(n);
    const have = this.drivers.get(n.name);
    if (have && have.fingerprint === fingerprint) return have.driver;
    if (have) void have.driver.close().catch(() => undefined);
    const driver = this.o.driverFor(n);
    this.drivers.set(n.name, { fingerprint, driver });
    return driver;
  }

  private async observe(spec: FleetSpec, log: Logger): Promise<void> {
    for (const name of [...this.drivers.keys()]) {
      if (!spec.nodes[name]) {
        void this.drivers.get(name)?.driver.close().catch(() => undefined);
        this.drivers.delete(name);
        this.nodes.delete(name);
      }
    }
    const timeout = this.o.observeTimeoutMs ?? 30_000;
    await mapLimit(Object.values(spec.nodes), this.o.concurrency ?? 8, async (n) => {
      const prev = this.nodes.get(n.name);
      try {
        const obs = await withTimeout(this.driver(n).observe(), timeout, n.name);
        if (prev && !prev.reachable) log.info({ node: n.name }, 'node reachable again');
        this.nodes.set(n.name, { reachable: true, error: null, obs, installFailures: prev?.installFailures ?? {} });
      } catch (e) {
        const error = reasonOf(e);
        if (!prev || prev.reachable || prev.error?.message !== error.message) log.warn({ node: n.name, code: error.code, reason: error.message }, 'node unreachable: its replicas are unknown');
        this.nodes.set(n.name, { reachable: false, error, obs: prev?.obs ?? null, installFailures: prev?.installFailures ?? {} });
      }
    });
  }

  /**
   * A live replica that has not answered /health for longer than its profile's start timeout (hung
   * after being ready, or adopted and never ready) is failed with REPLICA_UNHEALTHY: counted like a
   * crash, stopped and replaced. A replica whose start is in flight is timed by the start itself; one
   * being stopped is left to the stop.
   */
  private failUnresponsive(spec: FleetSpec, log: Logger): void {
    const now = this.clock();
    const seen = new Set<string>();
    for (const [node, ns] of this.nodes) {
      if (!ns.reachable || !ns.obs) continue;
      let changed = false;
      const replicas = ns.obs.replicas.map((r): ReplicaObservation => {
        if (r.state !== 'starting' || this.inflight.has(r.id) || this.stopping.has(r.id)) return r;
        seen.add(r.id);
        const m = spec.models[r.model];
        const limit = m ? spec.profiles[m.profile]?.startTimeoutMs : undefined;
        if (limit === undefined) return r;
        const since = this.unhealthy.get(r.id)?.since ?? now;
        this.unhealthy.set(r.id, { since, until: since + limit });
        if (now - since < limit) return r;
        changed = true;
        const message = `replica ${r.id} on ${node} is running but has not answered /health for ${Math.round((now - since) / 1000)} s (the profile's start_timeout is ${Math.round(limit / 1000)} s)`;
        if (!this.accountedFailures.has(r.id)) log.warn({ model: r.model, node, replica: r.id, code: 'REPLICA_UNHEALTHY' }, 'replica unresponsive: stopping it');
        return { ...r, state: 'failed', failure: { code: 'REPLICA_UNHEALTHY', message, logTail: '' } };
      });
      if (changed) this.nodes.set(node, { ...ns, obs: { ...ns.obs, replicas } });
    }
    for (const id of [...this.unhealthy.keys()]) if (!seen.has(id)) this.unhealthy.delete(id);
  }

  /** Digest changes reset health; replicas that stay ready reset the failure count. */
  private trackHealth(spec: FleetSpec): void {
    const now = this.clock();
    const health: Record<string, ModelHealth> = {};
    for (const m of Object.values(spec.models)) {
      const before = this.health[m.name];
      const h = withDigest(before, m.digest);
      if (before && before.digest !== m.digest) this.log.info({ model: m.name, digest: m.digest }, 'definition changed: failures reset, unparked');
      health[m.name] = h;
    }
    const seen = new Set<string>();
    for (const ns of this.nodes.values()) {
      if (!ns.reachable) continue;
      for (const r of ns.obs?.replicas ?? []) {
        seen.add(r.id);
        if (r.state === 'ready' && !this.readySince.has(r.id)) this.readySince.set(r.id, now);
        if (r.state !== 'ready') this.readySince.delete(r.id);
        const h = health[r.model];
        const since = this.readySince.get(r.id);
        if (h && since !== undefined && r.digest === h.digest) health[r.model] = stayedReady(h, since, now, spec.settings);
      }
    }
    for (const id of [...this.readySince.keys()]) if (!seen.has(id) && this.isKnownReachableGone(id)) this.readySince.delete(id);
    for (const id of Object.keys(this.draining)) if (!seen.has(id)) delete this.draining[id];
    for (const id of [...this.restarts]) if (!seen.has(id) && !this.inflight.has(id)) this.restarts.delete(id);
    this.health = health;
  }

  private isKnownReachableGone(id: string): boolean {
    for (const ns of this.nodes.values()) if (!ns.reachable && ns.obs?.replicas.some((r) => r.id === id)) return false;
    return true;
  }

  private async estimateMemory(spec: FleetSpec): Promise<void> {
    const needs: Record<string, number | null> = {};
    const errors: Record<string, string> = {};
    await Promise.all(
      Object.values(spec.models).map(async (m) => {
        const e = await this.memory.estimate(m, spec.profiles[m.profile]!, () => this.rangeReaders(spec, m), async () => (await this.downloadToken(m))?.value ?? null);
        if ('bytes' in e) needs[m.name] = e.bytes;
        else {
          needs[m.name] = null;
          errors[m.name] = e.error;
        }
      }),
    );
    this.memoryNeeds = needs;
    this.memoryErrors = errors;
  }

  /** The model's download token (token: names a secret), read when it is needed; undefined for none. */
  private async downloadToken(m: ModelSpec): Promise<DownloadToken | undefined> {
    if (m.token === null) return undefined;
    if (!this.o.readSecret) throw new LlmgwError('SECRET_NOT_FOUND', `${m.file}: token: names secret '${m.token}', but this controller has no secrets dir`, { model: m.name, secret: m.token });
    return { secret: m.token, value: await this.o.readSecret(m.token) };
  }

  /** The reachable nodes a model may run on, to read its file:// source's header where it is. */
  private rangeReaders(spec: FleetSpec, m: ModelSpec): RangeReader[] {
    return Object.values(spec.nodes)
      .filter((n) => this.nodes.get(n.name)?.reachable === true && selectorMatches(m.nodeSelector, n.labels))
      .map((n) => {
        const d = this.driver(n);
        return { where: n.name, readFileRange: (path, offset, length) => d.readFileRange(path, offset, length) };
      });
  }

  private async planAndApply(spec: FleetSpec, log: Logger): Promise<number> {
    // Starts that ended while this pass was observing: their outcome counts before planning
    // (no await between here and planPass, so none can slip in between).
    this.applyOpEvents(spec, log);
    const now = this.clock();
    const observed: ObservedNode[] = Object.values(spec.nodes).map((n) => {
      const ns = this.nodes.get(n.name);
      return { name: n.name, reachable: ns?.reachable ?? false, memoryTotalBytes: ns?.obs?.memory.totalBytes ?? null, replicas: ns?.obs?.replicas ?? [] };
    });
    const out = planPass({
      spec,
      nodes: observed,
      health: this.health,
      inflightStarts: [...this.inflight.values()],
      stopping: this.stopping,
      demand: this.demandAt,
      restarts: this.restarts,
      draining: this.draining,
      memory: this.memoryNeeds,
      accountedFailures: this.accountedFailures,
      now,
      newReplicaId: (model) => `${model}-${randomBytes(4).toString('hex')}`,
    });
    this.desired = { ...out.desired };
    this.unplaceable = { ...out.unplaceable };
    for (const [model, reason] of Object.entries(this.unplaceable)) {
      const err = this.memoryErrors[model];
      const text = err && reason.startsWith('memory need unknown') ? err : reason;
      this.unplaceable[model] = text;
      if (shouldWarn(this.unplaceableWarned.get(model), text, now, spec.settings.unplaceableLogIntervalMs)) {
        log.warn({ model, reason: text }, 'model unplaceable');
        this.unplaceableWarned.set(model, { reason: text, at: now });
      }
    }
    for (const model of [...this.unplaceableWarned.keys()]) if (!this.unplaceable[model]) this.unplaceableWarned.delete(model);
    for (const id of out.drainStarted) {
      this.draining[id] = now;
      log.info({ replica: id, graceMs: spec.settings.drainGraceMs }, 'no room to surge: draining the old replica before replacing it');
    }
    for (const f of out.failures) {
      this.accountedFailures.add(f.replicaId);
      this.opEvents.push({ kind: 'failed', model: f.model, digest: this.health[f.model]?.digest ?? '', replicaId: f.replicaId, error: { code: f.failure.code, message: f.failure.message }, counted: countsTowardParking(f.failure.code), at: now });
    }
    if (out.failures.length) this.applyOpEvents(spec, log);
    await this.apply(spec, out.actions, log);
    return out.actions.length;
  }

  private async apply(spec: FleetSpec, actions: readonly Action[], log: Logger): Promise<void> {
    const starts = actions.filter((a): a is Extract<Action, { kind: 'start' }> => a.kind === 'start');
    const stops = actions.filter((a): a is Extract<Action, { kind: 'stop' }> => a.kind === 'stop');
    for (const a of starts) this.launchStart(spec, a, log);
    if (stops.length) {
      // Stopping replicas leave the router's view at once, before their grace runs.
      for (const a of stops) this.stopping.add(a.replicaId);
      this.current = this.summarize();
    }
    await mapLimit(stops, this.o.concurrency ?? 8, async (a) => {
      const n = spec.nodes[a.node];
      if (!n) return;
      this.stopping.add(a.replicaId);
      try {
        log.info({ model: a.model, node: a.node, replica: a.replicaId, reason: a.reason }, 'stopping replica');
        await this.driver(n).stopReplica(a.replicaId, a.reason === 'failed' ? 0 : spec.settings.stopGraceMs);
        this.forgetReplica(a.node, a.replicaId);
      } catch (e) {
        log.warn({ replica: a.replicaId, node: a.node, code: reasonOf(e).code, err: reasonOf(e).message }, 'stopping replica failed; retried next pass');
      } finally {
        this.stopping.delete(a.replicaId);
      }
    });
    // The world changed under the stops: look again (restarts finish, freed room gets used).
    if (stops.length) void this.requestPass('stops-finished');
  }

  /**
   * Time-based changes need a pass at the right moment, not at the next poll: a backoff that
   * expires, a drain grace that ends, an on-demand model that goes idle, a failure count that resets,
   * a replica that has not answered /health for too long.
   */
  private scheduleWake(): void {
    const spec = this.spec();
    if (!spec || this.stopped) return;
    const now = this.clock();
    const times: number[] = [];
    for (const h of Object.values(this.health)) if (h.nextAttemptAt !== null) times.push(h.nextAttemptAt);
    for (const since of Object.values(this.draining)) times.push(since + spec.settings.drainGraceMs);
    for (const u of this.unhealthy.values()) times.push(u.until);
    for (const m of Object.values(spec.models)) {
      const d = this.demandAt[m.name];
      if (m.scaling.mode === 'on_demand' && d && (this.desired[m.name] ?? 0) > 0) times.push(d.lastRequestAt + m.scaling.idleTimeoutMs);
      const h = this.health[m.name];
      if (h && h.consecutiveFailures > 0 && !h.parked) {
        const readyAt = Math.min(...this.readyReplicas(m.name).map((r) => this.readySince.get(r.id) ?? Infinity));
        if (Number.isFinite(readyAt)) times.push(readyAt + spec.settings.readyResetMs);
      }
    }
    const future = times.filter((t) => t > now);
    const at = future.length ? Math.min(...future) : null;
    if (at === null || (this.wake && this.wake.at <= at && this.wake.at > now)) return;
    if (this.wake) clearTimeout(this.wake.timer);
    const timer = setTimeout(() => {
      this.wake = null;
      void this.requestPass('wake');
    }, at - now + 5);
    timer.unref();
    this.wake = { at, timer };
  }

  /** A replica start runs in the background: engine, model file, launch, wait for ready. */
  private launchStart(spec: FleetSpec, a: Extract<Action, { kind: 'start' }>, log: Logger): void {
    const m = spec.models[a.model]!;
    const profile = spec.profiles[m.profile]!;
    const engine = spec.engines[profile.engine]!.versions[profile.engineVersion]!;
    const node = spec.nodes[a.node]!;
    const driver = this.driver(node);
    const rlog = log.child({ model: a.model, node: a.node, replica: a.replicaId });
    this.inflight.set(a.replicaId, { replicaId: a.replicaId, model: a.model, node: a.node, digest: a.digest });
    rlog.info('starting replica');
    let stage: 'engine' | 'model' | 'start' = 'engine';
    const stopSignal = this.stopSignal.signal;
    const started = (async () => {
      try {
        let binary: string;
        try {
          ({ binary } = await driver.ensureEngine(engine));
          this.o.onEngineInstall?.(a.node, engine.engine, engine.version, 'ok');
        } catch (e) {
          this.engineInstallFailed(a.node, `${engine.engine}@${engine.version}`);
          this.o.onEngineInstall?.(a.node, engine.engine, engine.version, 'error');
          throw e;
        }
        stage = 'model';
        const file = await driver.ensureModel(m.source, m.sha256, await this.downloadToken(m));
        if (stopSignal.aborted) {
          rlog.info({ stage }, 'controller stopping: replica not launched');
          return;
        }
        stage = 'start';
        await driver.startReplica({ id: a.replicaId, model: a.model, digest: a.digest, modelPath: file.path, binary, profile, apiKey: this.engineApiKey });
        await driver.waitReady(a.replicaId, { timeoutMs: profile.startTimeoutMs, signal: stopSignal });
        this.opEvents.push({ kind: 'ready', model: a.model, replicaId: a.replicaId });
      } catch (e) {
        if (stopSignal.aborted) {
          // not the model's failure; a launched replica is left running for the next controller to adopt
          rlog.info({ stage }, 'controller stopping: replica start abandoned');
          return;
        }
        const error = reasonOf(e);
        const logTail = isLlmgwError(e) ? (e.detail.logTail as string | undefined) : undefined;
        rlog.warn({ stage, code: error.code, reason: error.message, logTail: logTail?.slice(-2000) }, 'replica start failed');
        this.accountedFailures.add(a.replicaId);
        if (stage === 'start') await driver.stopReplica(a.replicaId, 0).catch(() => undefined);
        this.opEvents.push({ kind: 'failed', model: a.model, digest: a.digest, replicaId: a.replicaId, error, counted: countsTowardParking(error.code), at: this.clock() });
      } finally {
        this.inflight.delete(a.replicaId);
        void this.requestPass('start-finished');
      }
    })();
    this.starts.add(started);
    void started.finally(() => this.starts.delete(started));
  }

  /** A stopped replica leaves the last observation at once, so nothing routes to it until the next look. */
  private forgetReplica(node: string, replicaId: string): void {
    const ns = this.nodes.get(node);
    if (!ns?.obs) return;
    this.nodes.set(node, { ...ns, obs: { ...ns.obs, replicas: ns.obs.replicas.filter((r) => r.id !== replicaId) } });
  }

  private engineInstallFailed(node: string, engine: string): void {
    const ns = this.nodes.get(node);
    if (!ns) return;
    this.nodes.set(node, { ...ns, installFailures: { ...ns.installFailures, [engine]: (ns.installFailures[engine] ?? 0) + 1 } });
  }

  // ------------------------------------------------------------------ summary

  private summarize(): FleetSnapshot {
    const t = this.o.tracker;
    return buildSnapshot({
      spec: t.applied?.spec ?? null,
      now: this.clock(),
      leader: this.leader(),
      appliedRevision: t.applied?.revision ?? this.appliedRevision,
      rejected: t.rejected ? { revision: t.rejected.revision, problems: t.rejected.problems } : null,
      lastSyncOk: t.lastSyncOk ? t.lastSyncOk.getTime() : null,
      lastSyncError: t.lastSyncError ? reasonOf(t.lastSyncError) : null,
      lastStatusWriteOk: this.lastStatusWriteOk,
      nodes: this.nodes,
      health: this.health,
      desired: this.desired,
      unplaceable: this.unplaceable,
      inflight: [...this.inflight.values()],
      stopping: this.stopping,
      memory: this.memoryNeeds,
      lastPass: this.lastPass,
    });
  }

  private async summarizeAndPersist(log: Logger): Promise<void> {
    this.current = this.summarize();
    this.events.emit('snapshot', this.current);
    try {
      await this.o.stateStore.save({ version: 1, appliedRevision: this.appliedRevision, models: this.health, handledRetries: this.handledRetries });
    } catch (e) {
      log.error({ err: e, path: this.o.stateStore.path }, 'writing the state file failed');
    }
    const spec = this.o.tracker.applied?.spec;
    if (!this.o.statusRepo || !spec || !this.leader()) return;
    const files = statusFiles(this.current, this.health);
    const key = JSON.stringify(files);
    if (key === this.lastStatusFiles) {
      // Nothing new to write: the branch is confirmed up to date as of now.
      this.lastStatusWriteOk = this.clock();
      this.current = { ...this.current, lastStatusWriteOk: new Date(this.lastStatusWriteOk).toISOString() };
      return;
    }
    try {
      const r = await writeStatusBranch(this.o.statusRepo, { branch: spec.settings.statusBranch, files, message: `llmgw status at ${this.current.appliedRevision?.slice(0, 12) ?? 'no revision'}` });
      this.lastStatusFiles = key;
      this.lastStatusWriteOk = this.clock();
      if (r.changed) log.debug({ oid: r.oid }, 'status branch written');
      this.current = { ...this.current, lastStatusWriteOk: new Date(this.lastStatusWriteOk).toISOString() };
    } catch (e) {
      log.warn({ code: reasonOf(e).code, err: reasonOf(e).message }, 'writing the status branch failed; retried next pass');
    }
  }

  // ------------------------------------------------------------------ operator and router API

  snapshot(): FleetSnapshot {
    return this.current;
  }

  onSnapshot(listener: (s: FleetSnapshot) => void): () => void {
    this.events.on('snapshot', listener);
    return () => this.events.off('snapshot', listener);
  }

  /** `llmgw ctl retry MODEL`: unparks a parked model, or clears the backoff of one that is not. */
  async retry(name: string): Promise<{ model: string; outcome: 'unparked' | 'backoff-cleared' }> {
    const spec = this.spec();
    const model = spec?.modelNames[name];
    if (!spec || !model) throw new LlmgwError('SPEC_DANGLING_REF', `no model named "${name}"`, { model: name });
    const m = spec.models[model]!;
    const outcome = this.applyRetry(m, `admin:${this.clock()}:${randomBytes(3).toString('hex')}`, this.log);
    await this.requestPass('admin-retry');
    return { model, outcome: outcome === 'already-handled' ? 'backoff-cleared' : outcome };
  }

  /** `llmgw ctl restart`: replace replicas surge-first (by id, all of a model, or all). */
  async restart(req: { readonly replicas?: readonly string[]; readonly model?: string; readonly all?: boolean }): Promise<readonly string[]> {
    const spec = this.spec();
    const model = req.model ? spec?.modelNames[req.model] : undefined;
    if (req.model && !model) throw new LlmgwError('SPEC_DANGLING_REF', `no model named "${req.model}"`, { model: req.model });
    const ids: string[] = [];
    for (const r of this.current.models.flatMap((mv) => mv.replicas)) {
      if (r.phase !== 'ready' && r.phase !== 'starting') continue;
      if (req.all || (model && r.model === model) || req.replicas?.includes(r.id)) ids.push(r.id);
    }
    for (const id of req.replicas ?? []) if (!ids.includes(id)) throw new LlmgwError('REPLICA_NOT_FOUND', `no running replica "${id}"`, { replica: id });
    for (const id of ids) this.restarts.add(id);
    await this.requestPass('admin-restart');
    return ids;
  }

  /** Whether every replica of a restart request has been replaced. */
  restartDone(ids: readonly string[]): boolean {
    return ids.every((id) => !this.restarts.has(id));
  }

  async logs(replicaId: string, lines: number): Promise<string> {
    const r = this.current.models.flatMap((m) => m.replicas).find((x) => x.id === replicaId);
    const spec = this.spec();
    const node = r && spec?.nodes[r.node];
    if (!r || !node) throw new LlmgwError('REPLICA_NOT_FOUND', `no replica "${replicaId}"`, { replica: replicaId });
    return this.driver(node).logTail(replicaId, lines);
  }

  spec(): FleetSpec | null {
    return this.o.tracker.applied?.spec ?? null;
  }

  model(name: string): ModelView | null {
    // The router asks per request: index the snapshot's models once per snapshot.
    if (this.indexed !== this.current.models) {
      this.indexed = this.current.models;
      this.modelIndex = new Map(this.current.models.map((m) => [m.name, m]));
    }
    return this.modelIndex.get(name) ?? null;
  }

  readyReplicas(model: string): readonly ReplicaView[] {
    return this.model(model)?.replicas.filter((r) => r.phase === 'ready') ?? [];
  }

  touch(model: string): void {
    this.demandAt[model] = { lastRequestAt: this.clock() };
  }

  async demand(model: string): Promise<DemandResult> {
    this.touch(model);
    delete this.unplaceable[model]; // the previous placement result is not reused
    await this.requestPass('demand');
    return this.demandResult(model);
  }

  private demandResult(model: string): DemandResult {
    const mv = this.model(model);
    if (!mv) return { kind: 'unplaceable', reason: 'the model is not in the fleet spec in force' };
    if (mv.parked) return { kind: 'parked', since: mv.parked.since, lastError: mv.parked.lastError };
    const ready = mv.replicas.filter((r) => r.phase === 'ready');
    if (ready.length) return { kind: 'ready', replicas: ready };
    if (mv.unplaceable) return { kind: 'unplaceable', reason: mv.unplaceable };
    if (mv.replicas.some((r) => r.phase === 'starting')) return { kind: 'starting' };
    if (mv.nextAttemptAt) return { kind: 'failing', lastError: mv.lastError, nextAttemptAt: mv.nextAttemptAt };
    return { kind: 'starting' };
  }

  waitReady(model: string, opts: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<readonly ReplicaView[]> {
    const settled = (): readonly ReplicaView[] | null => {
      const mv = this.model(model);
      if (!mv) return [];
      const ready = mv.replicas.filter((r) => r.phase === 'ready');
      if (ready.length) return ready;
      if (mv.parked || mv.unplaceable) return [];
      return null;
    };
    const now = settled();
    if (now) return Promise.resolve(now);
    return new Promise((resolve) => {
      const done = (v: readonly ReplicaView[]): void => {
        clearTimeout(timer);
        off();
        opts.signal?.removeEventListener('abort', onAbort);
        resolve(v);
      };
      const onAbort = (): void => done([]);
      const timer = setTimeout(() => done([]), opts.timeoutMs);
      const off = this.onSnapshot(() => {
        const v = settled();
        if (v) done(v);
      });
      opts.signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}
