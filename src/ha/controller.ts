/**
 * One of several llmgw instances on etcd (the shell around the reconciler). Every instance serves
 * the router and the admin API; only the leader runs a Reconciler, made afresh for each term from
 * the state record in etcd, so a new leader resumes failure counts and parking where the old one
 * stopped. The leader publishes its snapshot; a standby answers from the published one and carries
 * demand, retries, restarts, log reads and webhook passes to the leader through etcd.
 *
 * Terms begin on 'elected' and end on 'deposed' (an overdue renewal, a lost key, a refused guarded
 * write, or a node that has seen a newer epoch), one transition at a time.
 */
import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import { LlmgwError, reasonOf, type ReasonRef } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { AdminBackend, RestartRequest, RetryOutcome } from '../admin/backend.js';
import { ModelIndex } from '../reconciler/model-index.js';
import type { FleetSource, Reconciler } from '../reconciler/reconciler.js';
import type { ControllerState } from '../reconciler/state.js';
import { readyReplicasOf } from '../reconciler/availability.js';
import type { ControlView, DemandResult, FleetSnapshot, FleetView, ModelView, ReplicaView } from '../reconciler/view.js';
import { waitSettled } from '../reconciler/wait-ready.js';
import type { ForwardedRequest, Published, Requests, RequestMsg } from './channel.js';
import type { Election } from './election.js';
import type { EtcdStateStore } from './etcd-state.js';
import { allowedDemand, parsePublished, publishedJson, refusedEndpoints, standbySnapshot, type PublishedSnapshot } from './published.js';

/** What a term's reconciler is made with (serve builds it: tracker, drivers with the epoch's fence, status repo). */
export interface TermOptions {
  readonly initialState: ControllerState;
  readonly initialStateProblem: ReasonRef | null;
  readonly epoch: number;
  readonly leader: () => boolean;
  readonly control: () => ControlView;
  readonly onDeposed: (reason: ReasonRef) => void;
}

export interface HaControllerOptions {
  readonly election: Election;
  readonly published: Published;
  readonly requests: Requests;
  readonly stateStore: EtcdStateStore;
  readonly instance: { readonly id: string; readonly label: string };
  /** The --etcd-prefix (this cluster's keys). */
  readonly prefix: string;
  /** The standby's own look at the fleet repo (the spec it routes by). */
  readonly tracker: FleetSource;
  readonly engineApiKey: string;
  readonly makeReconciler: (o: TermOptions) => Reconciler;
  readonly logger: Logger;
  readonly clock?: () => number;
  /** How long a standby waits for the leader to carry out a forwarded request. */
  readonly forwardTimeoutMs?: number;
  /** This instance gained (true) or lost (false) leadership. */
  readonly onLeadership?: (leading: boolean) => void;
}

interface Term {
  readonly epoch: number;
  readonly reconciler: Reconciler;
  readonly off: () => void;
  stopServing: (() => Promise<void>) | null;
}

/** Request activity a standby forwards, at most this often. */
const TOUCH_FLUSH_MS = 1000;
/** A standby looks at the fleet repo at least this often (and when the published revision moves). */
const STANDBY_SYNC_MS = 30_000;

export class HaController implements FleetView, AdminBackend {
  readonly engineApiKey: string;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly events = new EventEmitter();
  private readonly models = new ModelIndex();
  private term: Term | null = null;
  private transitions: Promise<void> = Promise.resolve();
  private publishedValue: PublishedSnapshot | null = null;
  private current: FleetSnapshot;
  private unwatch: (() => Promise<void>) | null = null;
  private touched = new Set<string>();
  private touchTimer: NodeJS.Timeout | null = null;
  private syncTimer: NodeJS.Timeout | null = null;
  private syncing: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly o: HaControllerOptions) {
    this.engineApiKey = o.engineApiKey;
    this.log = o.logger.child({ component: 'ha' });
    this.clock = o.clock ?? Date.now;
    this.events.setMaxListeners(0);
    this.current = this.standbyView();
  }

  async start(): Promise<void> {
    const e = this.o.election;
    e.on('elected', (epoch: number) => this.transition(() => this.beginTerm(epoch)));
    e.on('deposed', (reason: ReasonRef) => this.transition(() => this.endTerm(reason)));
    e.on('leader', () => this.refreshStandby());
    e.on('reachable', () => this.refreshStandby());
    await this.syncSpec();
    this.syncTimer = setInterval(() => void this.syncSpec(), STANDBY_SYNC_MS);
    this.syncTimer.unref();
    e.start();
    await this.watchPublished();
  }

  /** The leader's published snapshot, watched for as long as this instance runs (etcd may be down at first). */
  private async watchPublished(): Promise<void> {
    while (!this.stopped && !this.unwatch) {
      try {
        this.unwatch = await this.o.published.watch((json) => this.onPublished(json));
      } catch (err) {
        this.log.warn({ code: reasonOf(err).code, err: reasonOf(err).message }, 'standby: cannot watch the published snapshot yet; trying again');
        await new Promise((r) => setTimeout(r, 2000).unref());
      }
    }
    if (this.stopped) await this.unwatch?.();
  }

  private onPublished(json: string | null): void {
    this.publishedValue = json === null ? null : parsePublished(json);
    if (json !== null && !this.publishedValue) this.log.error({ key: 'snapshot' }, 'the published snapshot in etcd is not one this version reads; standby answers wait for the next one');
    for (const r of refusedEndpoints(this.publishedValue, this.o.tracker.applied?.spec ?? null)) {
      this.log.error({ code: 'ETCD_ENDPOINT_REFUSED', ...r }, 'standby: a published endpoint the spec does not allow; not routed to');
    }
    if (this.publishedValue && this.publishedValue.appliedRevision !== this.o.tracker.applied?.revision) void this.syncSpec();
    this.refreshStandby();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.syncTimer) clearInterval(this.syncTimer);
    if (this.touchTimer) clearTimeout(this.touchTimer);
    await this.transition(() => this.endTerm(null));
    await this.unwatch?.().catch(() => undefined);
    await this.o.election.stop();
  }

  /** Terms begin and end one at a time, in the order the election reported them. */
  private transition(fn: () => Promise<void>): Promise<void> {
    this.transitions = this.transitions.then(fn).catch((err: unknown) => this.log.error({ err, code: reasonOf(err).code }, 'leadership transition failed'));
    return this.transitions;
  }

  private async beginTerm(epoch: number): Promise<void> {
    if (this.stopped || this.term?.epoch === epoch) return;
    if (this.term) await this.endTerm(null);
    const log = this.log.child({ epoch });
    await this.syncing; // the standby's fleet repo look, if one runs, ends first (one git fetch at a time)
    const { state, problem } = await this.o.stateStore.load();
    // Elected while the record loaded? The lease may have gone meanwhile: start nothing on a stale term.
    if (!this.o.election.isLeader() || this.o.election.epoch !== epoch) {
      log.warn('leadership ended before the term began');
      return;
    }
    const leading = (): boolean => !this.stopped && this.o.election.isLeader() && this.o.election.epoch === epoch;
    const reconciler = this.o.makeReconciler({
      initialState: state,
      initialStateProblem: problem,
      epoch,
      leader: leading,
      control: () => this.control(true),
      // refused by a node or the status branch: resign in etcd too (the lease goes now), so another
      // instance can be elected at once and 'elected' fires again; the term ends either way
      onDeposed: (reason) => {
        if (this.o.election.epoch === epoch) this.o.election.resignTerm(reason);
        void this.transition(() => this.endTerm(reason));
      },
    });
    const off = reconciler.onSnapshot((s) => {
      this.setCurrent(s);
      if (leading()) void this.o.published.publish(publishedJson(s)).catch((err: unknown) => log.warn({ code: reasonOf(err).code, err: reasonOf(err).message }, 'publishing the fleet snapshot failed'));
    });
    const term: Term = { epoch, reconciler, off, stopServing: null };
    this.term = term;
    log.info({ instance: this.o.instance.id, failures: Object.values(state.models).reduce((n, h) => n + h.consecutiveFailures, 0) }, 'leading the fleet: resuming from the state record in etcd');
    this.o.onLeadership?.(true);
    // Until the term's first pass has looked at the nodes, the published snapshot is the better view
    // (the new reconciler knows no replica yet): routing goes on from it, saying who leads now.
    this.setCurrent({ ...this.current, control: this.control(true) });
    void reconciler.start();
    void this.serveRequests(term, log); // not awaited: a deposition must not wait behind it
  }

  /** The leader serves forwarded requests for its whole term (etcd may refuse at first: tried again). */
  private async serveRequests(term: Term, log: Logger): Promise<void> {
    while (this.term === term && !term.stopServing) {
      try {
        term.stopServing = await this.o.requests.serve(
          this.o.election,
          (m) => this.handle(term.reconciler, m),
          (r) =>
            r.live
              ? log.info({ code: 'FORWARDED_REQUEST_REFUSED', key: r.key, why: r.why }, 'a forwarded request whose sender is gone (it gave up waiting) was not run')
              : log.error({ code: 'FORWARDED_REQUEST_REFUSED', key: r.key, why: r.why }, 'a forwarded request in etcd was refused, not run'),
        );
      } catch (err) {
        log.warn({ code: reasonOf(err).code, err: reasonOf(err).message }, 'cannot serve forwarded requests yet; trying again');
        await new Promise((r) => setTimeout(r, 2000).unref());
      }
    }
    if (this.term !== term) await term.stopServing?.();
  }

  private async endTerm(reason: ReasonRef | null): Promise<void> {
    const term = this.term;
    if (!term) return;
    this.term = null;
    if (reason) this.log.warn({ epoch: term.epoch, code: reason.code, reason: reason.message }, 'no longer leading: stopping the reconciler (replicas keep running for the next leader)');
    term.off();
    await term.stopServing?.().catch(() => undefined);
    await term.reconciler.stop();
    this.o.onLeadership?.(false);
    this.refreshStandby();
    void this.syncSpec();
  }

  /** The leader carries out what a standby forwarded. */
  private async handle(r: Reconciler, m: RequestMsg): Promise<unknown> {
    const body = (m.body ?? {}) as Record<string, unknown>;
    const str = (k: string): string => {
      const v = body[k];
      if (typeof v !== 'string' || v === '') throw new LlmgwError('BAD_REQUEST', `forwarded ${m.kind} request without ${k}`);
      return v;
    };
    switch (m.kind) {
      case 'demand':
        return r.demand(str('model'));
      case 'touch':
        for (const model of Array.isArray(body.models) ? body.models : []) if (typeof model === 'string') r.touch(model);
        return null;
      case 'retry':
        return r.retry(str('model'));
      case 'restart':
        return r.restart(body as RestartRequest);
      case 'restart-done':
        return r.restartDone(Array.isArray(body.ids) ? body.ids.filter((x): x is string => typeof x === 'string') : []);
      case 'logs':
        return r.logs(str('replica'), typeof body.lines === 'number' ? body.lines : 100);
      case 'pass':
        await r.requestPass(`${str('trigger')} (via ${m.from})`);
        return null;
      default:
        throw new LlmgwError('BAD_REQUEST', `unknown forwarded request kind "${m.kind}"`);
    }
  }

  // ------------------------------------------------------------------ standby

  private control(leading: boolean): ControlView {
    const e = this.o.election;
    const l = e.current();
    const etcd = { prefix: this.o.prefix, reachable: e.reachable, error: e.lastError };
    const leader = l ? { id: l.id, label: l.label, since: l.since, epoch: l.epoch } : null;
    if (leading) return { mode: 'etcd', instance: this.o.instance, leader, notActing: null, etcd };
    const notActing: ReasonRef = l
      ? { code: 'CONTROLLER_STANDBY', message: `standby: ${l.label} leads (epoch ${l.epoch}, since ${new Date(l.since).toISOString()}); this instance routes from its published snapshot and forwards retries, restarts and demand to it` }
      : { code: 'LEADER_UNAVAILABLE', message: e.reachable ? 'no instance leads the fleet right now (an election is in progress)' : `etcd is not reachable from this instance${e.lastError ? `: ${e.lastError.message}` : ''}` };
    return { mode: 'etcd', instance: this.o.instance, leader, notActing, etcd };
  }

  private standbyView(): FleetSnapshot {
    return standbySnapshot(this.publishedValue, this.o.tracker.applied?.spec ?? null, this.control(false), this.clock());
  }

  private refreshStandby(): void {
    if (this.term) {
      // the leader's own snapshot stays; only who-leads may have changed
      this.setCurrent({ ...this.current, control: this.control(true) });
      return;
    }
    this.setCurrent(this.standbyView());
  }

  private setCurrent(s: FleetSnapshot): void {
    this.current = s;
    this.events.emit('snapshot', s);
  }

  /** A standby reads the fleet repo for the spec it routes by (keys, aliases, model settings); it handles no retries. */
  private syncSpec(): Promise<void> {
    if (this.term) return Promise.resolve();
    this.syncing ??= this.o.tracker
      .refresh()
      .then((r) => {
        if (r.outcome === 'failed') this.log.warn({ code: r.error?.code, err: r.error?.message }, 'standby: fleet repo sync failed');
      })
      .catch((err: unknown) => this.log.warn({ code: reasonOf(err).code, err: reasonOf(err).message }, 'standby: fleet repo sync failed'))
      .finally(() => {
        this.syncing = null;
        this.refreshStandby();
      });
    return this.syncing;
  }

  /** Sends a request to the leader: its answer within `timeoutMs` (at most the forward timeout), or LEADER_UNAVAILABLE / ETCD_*. */
  private forward<T>(kind: ForwardedRequest['kind'], body: unknown, timeoutMs?: number): Promise<T> {
    const most = this.o.forwardTimeoutMs ?? 60_000;
    return this.o.requests.send(kind, body, Math.min(most, timeoutMs ?? most)) as Promise<T>;
  }

  // ------------------------------------------------------------------ FleetView and AdminBackend

  snapshot(): FleetSnapshot {
    return this.current;
  }

  onSnapshot(listener: (s: FleetSnapshot) => void): () => void {
    this.events.on('snapshot', listener);
    return () => this.events.off('snapshot', listener);
  }

  spec(): FleetSpec | null {
    // A new term's reconciler has no spec before its first sync: the standby's look serves meanwhile.
    return (this.term ? this.term.reconciler.spec() : null) ?? this.o.tracker.applied?.spec ?? null;
  }

  model(name: string): ModelView | null {
    return this.models.get(this.current, name);
  }

  readyReplicas(model: string): readonly ReplicaView[] {
    return readyReplicasOf(this.model(model));
  }

  demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult> {
    if (this.term) return this.term.reconciler.demand(model);
    return this.forward<DemandResult>('demand', { model }, opts?.timeoutMs).then((r) => allowedDemand(r, this.spec()));
  }

  waitReady(model: string, opts: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<readonly ReplicaView[]> {
    return waitSettled(() => this.model(model), (l) => this.onSnapshot(l), opts);
  }

  hold(model: string): () => void {
    if (this.term) return this.term.reconciler.hold(model);
    // a standby: the leader hears of it at both ends (and every ACTIVITY_TOUCH_MS while it is proxied)
    this.touch(model);
    return () => this.touch(model);
  }

  touch(model: string): void {
    if (this.term) return this.term.reconciler.touch(model);
    if (this.spec()?.models[model]?.scaling.mode !== 'on_demand') return;
    this.touched.add(model);
    if (this.touchTimer) return;
    this.touchTimer = setTimeout(() => {
      this.touchTimer = null;
      const models = [...this.touched];
      this.touched = new Set();
      this.forward('touch', { models }).catch((err: unknown) => this.log.warn({ models, code: reasonOf(err).code }, 'standby: forwarding request activity to the leader failed'));
    }, TOUCH_FLUSH_MS);
    this.touchTimer.unref();
  }

  retry(model: string): Promise<{ model: string; outcome: RetryOutcome }> {
    return this.term ? this.term.reconciler.retry(model) : this.forward('retry', { model });
  }

  restart(req: RestartRequest): Promise<readonly string[]> {
    return this.term ? this.term.reconciler.restart(req) : this.forward('restart', req);
  }

  /** On a standby: none of the replicas is running any more (each was replaced and stopped), as published. */
  restartDone(ids: readonly string[]): boolean {
    if (this.term) return this.term.reconciler.restartDone(ids);
    const live = new Set(this.current.models.flatMap((m) => m.replicas).filter((r) => r.phase === 'ready' || r.phase === 'starting').map((r) => r.id));
    return ids.every((id) => !live.has(id));
  }

  logs(replicaId: string, lines: number): Promise<string> {
    return this.term ? this.term.reconciler.logs(replicaId, lines) : this.forward('logs', { replica: replicaId, lines });
  }

  requestPass(trigger: string): Promise<void> {
    return this.term ? this.term.reconciler.requestPass(trigger) : this.forward<void>('pass', { trigger });
  }

  /** The reconciler of the current term (tests, bench). */
  reconciler(): Reconciler | null {
    return this.term?.reconciler ?? null;
  }
}
