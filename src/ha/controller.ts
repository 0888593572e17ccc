/**
 * One of several llmgw instances on etcd (the shell around the reconciler). Every instance serves
 * the router and the admin API; only the leader runs a Reconciler, made afresh for each term from
 * the state record in etcd, so a new leader resumes failure counts and parking where the old one
 * stopped. The leader publishes its snapshot; a standby answers from the published one and carries
 * demand, retries, rollout overrides, restarts, log reads and webhook passes to the leader through etcd.
 *
 * What the router and the admin API ask of it is the one ControllerShell (reconciler/controller-shell.ts):
 * its view is the snapshot it publishes (the term reconciler's, or the standby's look at the published
 * one), and who acts is the term's reconciler while it leads, else StandbyActs (standby.ts).
 *
 * Terms begin on 'elected' and end on 'deposed' (an overdue renewal, a lost key, a refused guarded
 * write, or a node that has seen a newer epoch), one transition at a time.
 *
 * Shell: its clock and timers (the standby's spec sync, the waits between tries) are the injected
 * ShellTime (HaControllerOptions.time, the real one from src/serve/serve.ts); this file reads no
 * clock and sets no timer of its own.
 */
import type { Logger } from 'pino';
import { isLlmgwError, reasonOf, type ReasonRef } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { ControllerShell, type ControllerActs } from '../reconciler/controller-shell.js';
import type { FleetSource, Reconciler } from '../reconciler/reconciler.js';
import type { ControllerState } from '../reconciler/state.js';
import type { ControlView, FleetSnapshot } from '../reconciler/view.js';
import type { Requests, RequestMsg } from './channel.js';
import type { Election } from './election.js';
import type { LoadedEtcdState } from './etcd-state.js';
import { publishedOf, refusedEndpoints, standbySnapshot, type PublishedSnapshot } from './published.js';
import { sleep, type ShellTime } from './shell-time.js';
import type { RouterApplied, RoutingAcks } from '../reconciler/routing-acks.js';
import { StandbyActs } from './standby.js';

/** What a term's reconciler is made with (serve builds it: tracker, drivers with the epoch's fence, status repo). */
export interface TermOptions {
  readonly initialState: ControllerState;
  readonly initialStateProblem: ReasonRef | null;
  readonly epoch: number;
  readonly leader: () => boolean;
  readonly control: () => ControlView;
  readonly onDeposed: (reason: ReasonRef) => void;
  /** The other routers a drain waits for: the revision each routes from, and the save that took a replica out. */
  readonly routing: RoutingAcks;
}

/** What the controller needs of the published snapshot (channel.ts Published; a fake in tests). */
export interface PublishedChannel {
  /** Guarded txns of what changed in the leader's snapshot since the last publish (nothing when nothing did). */
  publish(p: PublishedSnapshot): Promise<void>;
  /**
   * Calls onValue with the current snapshot (null: none; `problem`: what this version could not read)
   * and the revision of its save (null: none known), then after every complete save; resolves to a closer.
   */
  watch(onValue: (p: PublishedSnapshot | null, problem: string | null, revision: number | null) => void): Promise<() => Promise<void>>;
}

/** What the controller needs of the state record (etcd-state.ts EtcdStateStore; a fake in tests): the read a term begins with. */
export interface StateRecordSource {
  load(): Promise<LoadedEtcdState>;
}

export interface HaControllerOptions {
  readonly election: Election;
  readonly published: PublishedChannel;
  readonly requests: Requests;
  readonly stateStore: StateRecordSource;
  readonly instance: { readonly id: string; readonly label: string };
  /** The --etcd-prefix (this cluster's keys). */
  readonly prefix: string;
  /** The standby's own look at the fleet repo (the spec it routes by). */
  readonly tracker: FleetSource;
  readonly engineApiKey: string;
  readonly makeReconciler: (o: TermOptions) => Reconciler;
  readonly logger: Logger;
  /** The clock and timers (fake ones in tests, on the election's fake clock). */
  readonly time: ShellTime;
  /** How long a standby waits for the leader to carry out a forwarded request. */
  readonly forwardTimeoutMs?: number;
  /** This instance gained (true) or lost (false) leadership. */
  readonly onLeadership?: (leading: boolean) => void;
  /**
   * This router's applied revision in etcd, and every other router's (router-revisions.ts; stopped
   * with the controller). Absent: a leader's drains wait for no other router.
   */
  readonly routerRevisions?: RouterRevisionsPort;
}

/** What the controller needs of the routers' revisions in etcd (router-revisions.ts RouterRevisions). */
export interface RouterRevisionsPort {
  applied(revision: number): void;
  others(): Promise<readonly RouterApplied[] | null>;
  stop(): Promise<void>;
}

interface Term {
  readonly epoch: number;
  readonly reconciler: Reconciler;
  readonly off: () => void;
  stopServing: (() => Promise<void>) | null;
}

/** A standby looks at the fleet repo at least this often (and when the published revision moves). */
const STANDBY_SYNC_MS = 30_000;
/** How long before etcd is tried again when a watch or the request channel cannot be opened. */
const RETRY_MS = 2_000;

export class HaController extends ControllerShell {
  readonly engineApiKey: string;
  private readonly log: Logger;
  private readonly standby: StandbyActs;
  private term: Term | null = null;
  private transitions: Promise<void> = Promise.resolve();
  private publishedValue: PublishedSnapshot | null = null;
  /** The revision of the published save in publishedValue (null: none known). */
  private publishedRevision: number | null = null;
  /** Replicas being drained: the revision of the first published save seen with each out of routing. */
  private readonly outSince = new Map<string, number>();
  /** Why the term's last publish failed (status: the etcd line), null once one went through. */
  private publishError: ReasonRef | null = null;
  /** The state record in etcd was written by a newer llmgw (STATE_VERSION_NEWER): this instance stands by and says so. */
  private versionProblem: ReasonRef | null = null;
  private unwatch: (() => Promise<void>) | null = null;
  private syncTimer: unknown = null;
  private syncing: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly o: HaControllerOptions) {
    super();
    this.engineApiKey = o.engineApiKey;
    this.log = o.logger.child({ component: 'ha' });
    this.standby = new StandbyActs({
      requests: o.requests,
      spec: () => this.o.tracker.applied?.spec ?? null,
      snapshot: () => this.snapshot(),
      forwardTimeoutMs: o.forwardTimeoutMs ?? 60_000,
      timers: o.time.timers,
      log: this.log,
    });
    this.setSnapshot(this.standbyView());
  }

  async start(): Promise<void> {
    const e = this.o.election;
    e.on('elected', (epoch: number) => this.transition(() => this.beginTerm(epoch)));
    e.on('deposed', (reason: ReasonRef) => this.transition(() => this.endTerm(reason)));
    e.on('leader', () => this.refreshStandby());
    e.on('reachable', () => this.refreshStandby());
    await this.syncSpec();
    this.syncTimer = this.o.time.timers.setInterval(() => void this.syncSpec(), STANDBY_SYNC_MS);
    e.start();
    await this.watchPublished();
  }

  /** The leader's published snapshot, watched for as long as this instance runs (etcd may be down at first). */
  private async watchPublished(): Promise<void> {
    while (!this.stopped && !this.unwatch) {
      try {
        this.unwatch = await this.o.published.watch((p, problem, revision) => this.onPublished(p, problem, revision));
      } catch (err) {
        this.log.warn({ code: reasonOf(err).code, err: reasonOf(err).message }, 'standby: cannot watch the published snapshot yet; trying again');
        await sleep(this.o.time.timers, RETRY_MS);
      }
    }
    if (this.stopped) await this.unwatch?.();
  }

  private onPublished(p: PublishedSnapshot | null, problem: string | null, revision: number | null): void {
    this.publishedValue = p;
    this.publishedRevision = revision;
    if (problem) this.log.error({ key: 'published', problem }, 'the published snapshot in etcd is not (wholly) one this version reads; standby answers wait for the next one');
    for (const r of refusedEndpoints(this.publishedValue, this.o.tracker.applied?.spec ?? null)) {
      this.log.error({ code: 'ETCD_ENDPOINT_REFUSED', ...r }, 'standby: a published endpoint the spec does not allow; not routed to');
    }
    if (this.publishedValue && this.publishedValue.appliedRevision !== this.o.tracker.applied?.revision) void this.syncSpec();
    this.refreshStandby();
    // this router routes from the save now (a standby's view was just set from it; a leader's is ahead of it)
    if (revision !== null) this.o.routerRevisions?.applied(revision);
    if (this.outSince.size > 0) {
      const listed = new Set((p?.models ?? []).flatMap((m) => (Array.isArray(m.replicas) ? m.replicas.map((r) => r.id) : [])));
      for (const id of this.outSince.keys()) if (!listed.has(id)) this.outSince.delete(id);
    }
  }

  /**
   * The revision of the first published save this instance saw showing the replica draining or
   * stopping (routing-acks.ts outAt); null until one does. Asked from a drain's first look on, so
   * it is that save or one a little after it, never one before.
   */
  private outAt(model: string, replica: string): number | null {
    const known = this.outSince.get(replica);
    if (known !== undefined) return known;
    const rev = this.publishedRevision;
    const listed = this.publishedValue?.models.find((m) => m.name === model)?.replicas;
    const r = Array.isArray(listed) ? listed.find((x) => x.id === replica) : undefined;
    if (rev === null || (r?.phase !== 'draining' && r?.phase !== 'stopping')) return null;
    this.outSince.set(replica, rev);
    return rev;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.syncTimer !== null) this.o.time.timers.clearInterval(this.syncTimer);
    this.standby.stop();
    await this.transition(() => this.endTerm(null));
    await this.unwatch?.().catch(() => undefined);
    await this.o.routerRevisions?.stop();
    await this.o.election.stop();
  }

  /** A publish that failed shows in status (control.etcd.error) and metrics until one goes through. */
  private publishOutcome(error: ReasonRef | null): void {
    if (error?.code === this.publishError?.code && error?.message === this.publishError?.message) return;
    this.publishError = error;
    if (this.term) this.refreshStandby();
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
    let loaded: LoadedEtcdState;
    try {
      loaded = await this.o.stateStore.load();
      this.versionProblem = null;
    } catch (e) {
      if (!isLlmgwError(e, 'STATE_VERSION_NEWER')) throw e;
      // written by a newer llmgw: never written over. Stand by, say so, and let an instance that knows it lead.
      this.versionProblem = reasonOf(e);
      log.error({ code: e.code, err: e.message }, 'not leading: the state record is newer than this llmgw');
      if (this.o.election.epoch === epoch) this.o.election.resignTerm(this.versionProblem);
      this.setSnapshot({ ...this.snapshot(), control: this.control(false) });
      return;
    }
    const { state, problem } = loaded;
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
      routing: { outAt: (model, replica) => this.outAt(model, replica), routers: () => this.o.routerRevisions?.others() ?? Promise.resolve([]) },
    });
    const off = reconciler.onSnapshot((s) => {
      this.setSnapshot(s);
      if (leading()) {
        void this.o.published.publish(publishedOf(s)).then(
          () => leading() && this.publishOutcome(null),
          (err: unknown) => {
            const r = reasonOf(err);
            log[r.code === 'ETCD_VALUE_TOO_LARGE' ? 'error' : 'warn']({ code: r.code, err: r.message }, 'publishing the fleet snapshot failed');
            if (leading()) this.publishOutcome({ code: r.code, message: r.message });
          },
        );
      }
    });
    const term: Term = { epoch, reconciler, off, stopServing: null };
    this.term = term;
    log.info({ instance: this.o.instance.id, failures: Object.values(state.models).reduce((n, m) => n + m.health.consecutiveFailures, 0) }, 'leading the fleet: resuming from the state record in etcd');
    this.o.onLeadership?.(true);
    // Until the term's first pass has looked at the nodes, the published snapshot is the better view
    // (the new reconciler knows no replica yet): routing goes on from it, saying who leads now.
    this.setSnapshot({ ...this.snapshot(), control: this.control(true) });
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
        await sleep(this.o.time.timers, RETRY_MS);
      }
    }
    if (this.term !== term) await term.stopServing?.();
  }

  private async endTerm(reason: ReasonRef | null): Promise<void> {
    const term = this.term;
    if (!term) return;
    this.term = null;
    this.publishError = null;
    if (reason) this.log.warn({ epoch: term.epoch, code: reason.code, reason: reason.message }, 'no longer leading: stopping the reconciler (replicas keep running for the next leader)');
    term.off();
    await term.stopServing?.().catch(() => undefined);
    await term.reconciler.stop();
    this.o.onLeadership?.(false);
    this.refreshStandby();
    void this.syncSpec();
  }

  /** The leader carries out what a standby forwarded (checked on receipt: channel.ts checkRequest). */
  private async handle(r: ControllerActs, m: RequestMsg): Promise<unknown> {
    switch (m.kind) {
      case 'demand':
        return r.demand(m.body.model);
      case 'touch':
        for (const model of m.body.models) r.touch(model);
        return null;
      case 'retry':
        return r.retry(m.body.model);
      case 'rollout':
        return r.overrideRollout(m.body.model, m.body.how, `${m.body.by} (via ${m.from})`);
      case 'restart':
        return r.restart(m.body);
      case 'restart-done':
        return r.restartDone(m.body.ids);
      case 'logs':
        return r.logs(m.body.replica, m.body.lines ?? 100);
      case 'pass':
        await r.requestPass(`${m.body.trigger} (via ${m.from})`);
        return null;
    }
  }

  // ------------------------------------------------------------------ standby

  private control(leading: boolean): ControlView {
    const e = this.o.election;
    const l = e.current();
    const etcd = { prefix: this.o.prefix, reachable: e.reachable, error: (leading ? this.publishError : null) ?? e.lastError, keyProblem: e.keyProblem };
    const leader = l ? { id: l.id, label: l.label, since: l.since, epoch: l.epoch } : null;
    if (leading) return { mode: 'etcd', instance: this.o.instance, leader, notActing: null, etcd };
    const notActing: ReasonRef = this.versionProblem ?? (l
      ? { code: 'CONTROLLER_STANDBY', message: `standby: ${l.label} leads (epoch ${l.epoch}, since ${new Date(l.since).toISOString()}); this instance routes from its published snapshot and forwards retries, restarts and demand to it` }
      : { code: 'LEADER_UNAVAILABLE', message: e.reachable ? 'no instance leads the fleet right now (an election is in progress)' : `etcd is not reachable from this instance${e.lastError ? `: ${e.lastError.message}` : ''}` });
    return { mode: 'etcd', instance: this.o.instance, leader, notActing, etcd };
  }

  private standbyView(): FleetSnapshot {
    return standbySnapshot(this.publishedValue, this.o.tracker.applied?.spec ?? null, this.control(false), this.o.time.now());
  }

  private refreshStandby(): void {
    if (this.term) {
      // the leader's own snapshot stays; only who-leads may have changed
      this.setSnapshot({ ...this.snapshot(), control: this.control(true) });
      return;
    }
    this.setSnapshot(this.standbyView());
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

  // ------------------------------------------------------------------ FleetView and AdminBackend (ControllerShell)

  /** The leader's term reconciler while it leads; else the standby, forwarding to the leader. */
  protected acts(): ControllerActs {
    return this.term?.reconciler ?? this.standby;
  }

  override spec(): FleetSpec | null {
    // A new term's reconciler has no spec before its first sync: the standby's look serves meanwhile.
    return (this.term ? this.term.reconciler.spec() : null) ?? this.o.tracker.applied?.spec ?? null;
  }

  /** The reconciler of the current term (tests, bench). */
  reconciler(): Reconciler | null {
    return this.term?.reconciler ?? null;
  }
}
