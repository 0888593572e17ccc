/**
 * Leader election on etcd with a lease, and the writes a leader makes guarded by its epoch: the
 * shell around the pure state machine in leadership.ts (read that for the rules). This file owns
 * the clock reads and the timers (both injectable), runs the machine's effects over the etcd calls
 * of etcd-leader-io.ts, and feeds their results back to it as events.
 *
 * Every write the leader makes is a txn `if <prefix>/leader createRevision == epoch then …`: a
 * deposed leader's write fails, it steps down (LEADER_DEPOSED) and the write throws. Standbys hold
 * no lease and write nothing: they watch the key (current()) and look at it every retryPeriodMs.
 * The renew deadline must also leave room for etcd electing its own Raft leader when the member that
 * led dies (requests wait 1–2 s with etcd's default election timeout): 10 s does, 2 s does not
 * always (test/integration/etcd-cluster.test.ts).
 *
 * Events: 'elected'(epoch), 'deposed'(reason), 'leader'(LeaderInfo | null), 'reachable'(ok).
 * stop() resigns (a guarded delete of the key), revokes the lease and emits no 'deposed'.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { Etcd3, type IKeyValue } from 'etcd3';
import { LlmgwError, type ReasonRef } from '../errors/catalogue.js';
import { nodeTimers, type LoopTimers } from '../reconciler/loop.js';
import { etcdError } from './etcd.js';
import { Etcd3LeaderIO, type GuardCompare, type Kv, type LeaderIO, type TxnOp } from './etcd-leader-io.js';
import { dueAt, epochAt, initialLeadership, leaderRecord, leads, shownProblem, step, type Effect, type LeaderInfo, type LeadershipEvent, type LeadershipState } from './leadership.js';

export { cancelWatcher, type GuardCompare, type TxnOp, type WriteOp } from './etcd-leader-io.js';
export type { LeaderInfo } from './leadership.js';

export interface ElectionOptions {
  readonly prefix: string;
  /** This instance's id (unique per process). */
  readonly id: string;
  /** What status shows for it (host:port, a name). */
  readonly label: string;
  readonly leaseTtlSeconds: number;
  readonly renewDeadlineMs: number;
  readonly retryPeriodMs: number;
  /** Deadline of each etcd call (default renewDeadlineMs / 2). */
  readonly requestTimeoutMs?: number;
  /** Wall clock (epoch ms) for `since`. */
  readonly clock?: () => number;
  /** Monotonic ms for renewal timing. */
  readonly monotonic?: () => number;
  /** The timers (fake ones in tests, with `monotonic` on the same fake clock). */
  readonly timers?: LoopTimers;
  readonly logger: Logger;
}

export function leaderKey(prefix: string): string {
  return `${prefix}/leader`;
}

/** The leader record in the key's value, or null when it is not one. */
export function parseLeader(kv: Pick<IKeyValue, 'value' | 'create_revision'>): LeaderInfo | null {
  return leaderRecord(kv.value.toString('utf8'), Number(kv.create_revision));
}

/** Whether these timings can fence: the leader must stop before its lease can expire. */
export function electionTimingProblem(o: Pick<ElectionOptions, 'leaseTtlSeconds' | 'renewDeadlineMs' | 'retryPeriodMs'>): string | null {
  if (!Number.isInteger(o.leaseTtlSeconds) || o.leaseTtlSeconds < 2) return `the lease TTL must be a whole number of seconds, at least 2 (got ${o.leaseTtlSeconds})`;
  if (!(o.renewDeadlineMs < o.leaseTtlSeconds * 1000)) return `the renew deadline (${o.renewDeadlineMs} ms) must be shorter than the lease TTL (${o.leaseTtlSeconds} s), or a leader could act after its lease expired`;
  if (!(o.retryPeriodMs > 0 && o.retryPeriodMs < o.renewDeadlineMs)) return `the retry period (${o.retryPeriodMs} ms) must be positive and shorter than the renew deadline (${o.renewDeadlineMs} ms)`;
  return null;
}

export declare interface Election {
  on(event: 'elected', listener: (epoch: number) => void): this;
  on(event: 'deposed', listener: (reason: ReasonRef) => void): this;
  on(event: 'leader', listener: (info: LeaderInfo | null) => void): this;
  on(event: 'reachable', listener: (ok: boolean) => void): this;
}

export class Election extends EventEmitter {
  private readonly key: string;
  private readonly io: LeaderIO;
  private readonly clock: () => number;
  private readonly mono: () => number;
  private readonly timers: LoopTimers;
  private readonly log: Logger;

  private s: LeadershipState = initialLeadership;
  private running = false;
  private stopping: Promise<void> | null = null;
  /** The one timer, armed for the machine's next due time. */
  private timer: { at: number; handle: unknown } | null = null;
  private tickQueued = false;
  /** etcd calls in flight (stop() waits for them, and for what their results set off). */
  private readonly inflight = new Set<Promise<void>>();
  private watchHandle: { cancel(): Promise<void> } | null = null;
  private watchGen = 0;
  private watchRetry: unknown = null;
  private reachableValue = false;
  private lastErrorValue: ReasonRef | null = null;

  constructor(
    client: Etcd3 | LeaderIO,
    private readonly o: ElectionOptions,
  ) {
    super();
    const problem = electionTimingProblem(o);
    if (problem) throw new LlmgwError('ETCD_CONFIG_INVALID', problem);
    this.key = leaderKey(o.prefix);
    this.clock = o.clock ?? Date.now;
    this.mono = o.monotonic ?? (() => performance.now());
    this.timers = o.timers ?? nodeTimers;
    this.io = client instanceof Etcd3 ? new Etcd3LeaderIO(client, o.requestTimeoutMs ?? Math.max(500, Math.floor(o.renewDeadlineMs / 2)), { now: this.clock, timers: this.timers }) : client;
    this.log = o.logger.child({ instance: o.id });
  }

  get id(): string {
    return this.o.id;
  }
  get prefix(): string {
    return this.o.prefix;
  }
  /** The leader key's create revision while this instance leads (the fencing epoch), else null. */
  get epoch(): number | null {
    return this.isLeader() ? epochAt(this.s, this.mono(), this.o) : null;
  }
  get reachable(): boolean {
    return this.reachableValue;
  }
  get lastError(): ReasonRef | null {
    return this.lastErrorValue;
  }
  /** Monotonic send time of the last lease grant or renewal etcd confirmed (kept after a deposition), or null. */
  get lastRenewalSent(): number | null {
    return this.s.lastRenewalSent;
  }
  /**
   * The last thing about the leader key an operator must act on (LEADER_KEY_FORGED: someone else
   * writes the etcd prefix; ETCD_REVISION_WENT_BACK: etcd was restored), with its wall-clock time,
   * while it was seen in the last hour (KEY_PROBLEM_SHOWN_MS), or null.
   */
  get keyProblem(): (ReasonRef & { readonly at: number }) | null {
    const p = shownProblem(this.s, this.mono());
    return p ? { ...p.reason, at: this.clock() - (this.mono() - p.at) } : null;
  }
  /** The machine's state (tests, diagnostics). */
  get state(): LeadershipState {
    return this.s;
  }

  start(): void {
    if (this.running || this.stopping) return;
    this.running = true;
    this.startWatch(false);
    this.dispatch({ kind: 'start' });
  }

  /** Elected, and the last good renewal was sent less than renewDeadlineMs ago. */
  isLeader(): boolean {
    if (!this.running) return false;
    if (leads(this.s, this.mono(), this.o)) return true;
    if (this.s.phase.kind === 'leading' && !this.tickQueued) {
      // Overdue and not told yet: depose now (not from inside the caller's stack).
      this.tickQueued = true;
      this.timers.setTimeout(() => {
        this.tickQueued = false;
        this.dispatch({ kind: 'tick' });
      }, 0);
    }
    return false;
  }

  current(): LeaderInfo | null {
    return this.s.info;
  }

  /**
   * Ends this term at once, for a reason found outside the election (the reconciler refused by a
   * node or the status branch): the lease is revoked, so the key goes now and another instance can
   * be elected without waiting for the TTL (this one holds back one retry period); 'deposed' is
   * emitted and this instance campaigns again after that.
   */
  resignTerm(reason: ReasonRef): void {
    this.dispatch({ kind: 'resign', reason });
  }

  /**
   * etcd's current revision: no leader epoch (a create revision) can be above it, so an epoch that
   * is was not made by this etcd (a forgery, or a record from before a restore).
   */
  async revision(): Promise<number> {
    const sent = this.mono();
    let revision: number;
    try {
      revision = (await this.io.get(this.key)).revision;
      this.noteOk();
    } catch (e) {
      throw this.noteError(e, 'reading the etcd revision');
    }
    this.dispatch({ kind: 'revisionSeen', sent, revision });
    return revision;
  }

  /**
   * The highest status-branch epoch that can be real (#36, N2). While this instance holds the leader
   * key (read now: its create revision is this term's epoch and it is attached to this term's lease),
   * no leader of a higher epoch exists, so the bound is this term's own epoch and a pushed
   * `Llmgw-Epoch: <epoch + 1>` is a forgery. Otherwise it is etcd's current revision (revision()).
   */
  async fenceBound(): Promise<number> {
    const sent = this.mono();
    let read: { readonly kv: Kv | null; readonly revision: number };
    try {
      read = await this.io.get(this.key);
      this.noteOk();
    } catch (e) {
      throw this.noteError(e, 'reading the leader key');
    }
    this.dispatch({ kind: 'revisionSeen', sent, revision: read.revision });
    const p = this.s.phase;
    const held = p.kind === 'leading' && read.kv !== null && read.kv.createRevision === p.term.epoch && read.kv.lease === p.term.lease;
    return held ? p.term.epoch : read.revision;
  }

  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  async guardedPut(key: string, value: string, opts: { lease?: string } = {}): Promise<void> {
    await this.guardedTxn([{ put: key, value, ...(opts.lease !== undefined ? { lease: opts.lease } : {}) }], [], `writing ${key}`);
  }

  async guardedDelete(key: string): Promise<void> {
    await this.guardedTxn([{ delete: key }], [], `deleting ${key}`);
  }

  /**
   * One txn: if the leader key's create revision is this instance's epoch (and every `extra` compare
   * holds), run `ops`. Resolves true when they ran, false when only an extra compare failed; throws
   * LEADER_DEPOSED (and steps down) when another leader holds the key, or an ETCD_* reason.
   */
  async guardedTxn(ops: readonly TxnOp[], extra: readonly GuardCompare[], what = 'a guarded write'): Promise<boolean> {
    const sent = this.mono();
    const epoch = this.running ? epochAt(this.s, sent, this.o) : null;
    if (epoch === null) {
      this.isLeader(); // an overdue leader is deposed now
      throw new LlmgwError('LEADER_DEPOSED', `${what}: this instance is not the leader`, { instance: this.o.id });
    }
    let res;
    try {
      res = await this.io.txn([{ key: this.key, column: 'Create', cmp: '==', value: epoch }, ...extra], ops, extra.length > 0 ? this.key : null);
      this.noteOk();
    } catch (e) {
      throw this.noteError(e, what);
    }
    this.dispatch({ kind: 'revisionSeen', sent, revision: res.revision });
    if (res.succeeded) return true;
    if (extra.length > 0 && res.current?.createRevision === epoch) return false;
    // Only the leadership this write was made under is ended (the machine checks the epoch).
    this.dispatch({ kind: 'guardRefused', epoch, what });
    throw new LlmgwError('LEADER_DEPOSED', `${what}: refused by etcd, the leader key no longer has this instance's epoch ${epoch} (a newer leader exists or the lease expired)`, { epoch, instance: this.o.id });
  }

  // --- the machine and its effects ----------------------------------------------------------

  private dispatch(ev: LeadershipEvent): void {
    const { state, effects } = step(this.s, ev, this.mono(), this.clock(), this.o);
    this.s = state;
    for (const e of effects) this.run(e);
  }

  private run(e: Effect): void {
    const ttl = this.o.leaseTtlSeconds;
    switch (e.kind) {
      case 'look':
        return this.call('looking at the leader key', () => this.io.get(this.key), (r) => ({ kind: 'looked', sent: e.sent, kv: r.kv, revision: r.revision }), () => ({ kind: 'lookFailed' }));
      case 'grant':
        return this.call('granting the election lease', () => this.io.grantLease(ttl), (lease) => ({ kind: 'granted', lease }), () => ({ kind: 'grantFailed' }));
      case 'create':
        return this.call(
          'campaigning',
          () => this.io.txn([{ key: this.key, column: 'Create', cmp: '==', value: 0 }], [{ put: this.key, value: e.value, lease: e.lease }], this.key),
          (r) => ({ kind: 'createAnswered', lease: e.lease, created: r.succeeded, revision: r.revision, current: r.current }),
          () => ({ kind: 'createFailed', lease: e.lease }),
        );
      case 'keepalive':
        return this.call('renewing the election lease', () => this.io.keepAlive(e.lease), (r) => ({ kind: 'renewed', lease: e.lease, sent: e.sent, ttl: r.ttl }), (error) => ({ kind: 'renewalFailed', lease: e.lease, sent: e.sent, error }));
      case 'revoke':
        // Best effort: when etcd is out of reach the lease expires by itself.
        return this.call('revoking the election lease', () => this.io.revokeLease(e.lease), null, null, true);
      case 'deleteKey': {
        const cmp: GuardCompare[] = [];
        if (e.epoch !== null) cmp.push({ key: this.key, column: 'Create', cmp: '==', value: e.epoch });
        if (e.mod !== null) cmp.push({ key: this.key, column: 'Mod', cmp: '==', value: e.mod });
        return this.call('removing the leader key', () => this.io.txn(cmp, [{ delete: this.key }], null), null, null);
      }
      case 'elected':
        return this.safeEmit('elected', e.epoch);
      case 'deposed':
        return this.safeEmit('deposed', e.reason);
      case 'leader':
        return this.safeEmit('leader', e.info);
      case 'note':
        return void this.log[e.level](e.fields, e.msg);
      case 'wake':
        // From the state now, not the effect's: a listener may have stepped the machine since.
        return this.rearm(this.s.phase.kind === 'stopped' ? null : dueAt(this.s, this.o));
    }
  }

  /** Runs one etcd call; its result (or failure) goes back to the machine as an event. */
  private call<T>(what: string, fn: () => Promise<T>, ok: ((r: T) => LeadershipEvent) | null, fail: ((err: ReasonRef) => LeadershipEvent) | null, quiet = false): void {
    const p = (async () => {
      let r: T;
      try {
        r = await fn();
      } catch (e) {
        const err = quiet ? etcdError(e, what) : this.noteError(e, what);
        if (fail) this.dispatch(fail({ code: err.code, message: err.message }));
        return;
      }
      this.noteOk();
      if (ok) this.dispatch(ok(r));
    })().catch((e: unknown) => this.log.error({ err: (e as Error).message, what }, 'election: handling an etcd answer failed'));
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  private rearm(at: number | null): void {
    if (!this.running) at = null;
    if (this.timer?.at === at) return;
    if (this.timer) this.timers.clearTimeout(this.timer.handle);
    this.timer = null;
    if (at === null) return;
    const t: { at: number; handle: unknown } = { at, handle: null };
    t.handle = this.timers.setTimeout(() => {
      if (this.timer === t) this.timer = null;
      this.dispatch({ kind: 'tick' });
    }, Math.max(0, at - this.mono()) + 1);
    this.timer = t;
  }

  private async doStop(): Promise<void> {
    if (this.running) this.dispatch({ kind: 'stop' });
    this.running = false;
    this.rearm(null);
    if (this.watchRetry !== null) this.timers.clearTimeout(this.watchRetry);
    this.watchRetry = null;
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
    this.watchGen++;
    const w = this.watchHandle;
    this.watchHandle = null;
    await w?.cancel();
  }

  // --- watching the leader key --------------------------------------------------------------

  private startWatch(restart: boolean): void {
    if (!this.running) return;
    const gen = ++this.watchGen;
    const failed = (e: unknown): void => {
      if (gen !== this.watchGen) return;
      // Cancelled by etcd (e.g. compacted past the revision): start a new one a retry period on.
      this.noteError(e, 'watching the leader key');
      this.watchHandle = null;
      this.watchRetry = this.timers.setTimeout(() => {
        this.watchRetry = null;
        this.startWatch(true);
      }, this.o.retryPeriodMs);
    };
    try {
      this.watchHandle = this.io.watch(this.key, {
        put: (kv) => gen === this.watchGen && this.dispatch({ kind: 'watchPut', kv }),
        delete: (modRevision) => gen === this.watchGen && this.dispatch({ kind: 'watchDeleted', modRevision }),
        error: failed,
      });
    } catch (e) {
      failed(e);
      return;
    }
    if (restart) this.dispatch({ kind: 'watchStarted' }); // what it missed meanwhile: look again
  }

  // --- plumbing -----------------------------------------------------------------------------

  private noteOk(): void {
    this.lastErrorValue = null;
    if (!this.reachableValue) {
      this.reachableValue = true;
      this.log.info('etcd reachable');
      this.safeEmit('reachable', true);
    }
  }

  /** Records an etcd failure; returns it as an LlmgwError. */
  private noteError(e: unknown, what: string): LlmgwError {
    const err = etcdError(e, what);
    const changed = this.lastErrorValue?.code !== err.code;
    this.lastErrorValue = { code: err.code, message: err.message };
    if ((err.code === 'ETCD_UNAVAILABLE' || err.code === 'ETCD_AUTH_FAILED' || err.code === 'ETCD_TLS_FAILED') && this.reachableValue) {
      this.reachableValue = false;
      this.log.warn({ code: err.code, reason: err.message }, 'etcd not reachable');
      this.safeEmit('reachable', false);
    } else if (changed) {
      this.log.warn({ code: err.code, reason: err.message }, 'etcd call failed');
    }
    return err;
  }

  private safeEmit(event: string, arg: unknown): void {
    try {
      this.emit(event, arg);
    } catch (e) {
      this.log.error({ event, err: (e as Error).message }, 'an election listener threw');
    }
  }
}
