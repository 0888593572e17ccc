/**
 * Leader election on etcd with a lease, and the writes a leader makes guarded by its epoch.
 *
 * Built from etcd3 primitives (a lease, a transaction, a watch), the way client-go's leaderelection
 * and etcd's own concurrency.Election do it:
 * - campaign: when `<prefix>/leader` is absent, grant a lease (autoKeepAlive off) and, in one txn,
 *   create the key (JSON {id,label,since}) attached to it if its create revision is still 0. The
 *   winner's **epoch** is the key's create revision: every later leader's is higher.
 * - leading: renew the lease with keepaliveOnce every retryPeriodMs, recording the monotonic SEND
 *   time of each renewal that succeeds. Leadership holds only while the last good renewal was sent
 *   less than renewDeadlineMs ago: `isLeader()` checks that itself, and a timer deposes the leader
 *   (LEADER_RENEWAL_OVERDUE) the moment it lapses. Since etcd starts the lease's TTL when it
 *   receives a renewal, after we sent it, and renewDeadlineMs < TTL, the leader has stopped before
 *   etcd can let anyone else win.
 * - every write the leader makes is a txn `if <prefix>/leader createRevision == epoch then …`: a
 *   deposed leader's write fails, it steps down (LEADER_DEPOSED) and the write throws.
 * - a leader whose key is deleted or replaced (seen by the watch, a renewal answering TTL 0, or a
 *   guarded write failing) steps down; a deposed instance abandons its lease (revoked best-effort,
 *   so a key it still holds goes at once) and campaigns again with a fresh lease when etcd answers.
 * - standbys hold no lease and write nothing: they watch the key (current()) and look at it every
 *   retryPeriodMs, campaigning again when it is gone.
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
import type { Etcd3, IKeyValue, IOperation, Lease, Watcher } from 'etcd3';
import { EtcdLeaseInvalidError } from 'etcd3';
import { LlmgwError, type ReasonRef } from '../errors/catalogue.js';
import { etcdError } from './etcd.js';

/** How soon a failed renewal is tried again (the retry period when that is shorter). */
const FAILED_RENEWAL_RETRY_MS = 250;

export interface LeaderInfo {
  readonly id: string;
  readonly label: string;
  /** Epoch ms the leader was elected (its own clock). */
  readonly since: number;
  readonly epoch: number;
}

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
  readonly logger: Logger;
}

/** An extra compare of a guarded txn: `key`'s `column` `cmp` `value`. */
export interface GuardCompare {
  readonly key: string;
  readonly column: 'Value' | 'Version' | 'Create' | 'Mod' | 'Lease';
  readonly cmp: '==' | '!=' | '>' | '<';
  readonly value: string | number;
}

export function leaderKey(prefix: string): string {
  return `${prefix}/leader`;
}

/** The leader record in the key's value, or null when it is not one. */
export function parseLeader(kv: Pick<IKeyValue, 'value' | 'create_revision'>): LeaderInfo | null {
  try {
    const v = JSON.parse(kv.value.toString('utf8')) as { id?: unknown; label?: unknown; since?: unknown };
    if (typeof v.id !== 'string' || typeof v.label !== 'string' || typeof v.since !== 'number') return null;
    return { id: v.id, label: v.label, since: v.since, epoch: Number(kv.create_revision) };
  } catch {
    return null;
  }
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
  private readonly clock: () => number;
  private readonly mono: () => number;
  private readonly timeoutMs: number;
  private readonly log: Logger;

  private running = false;
  private loop: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;
  /** Wakes the loop out of its current wait (a delete seen, stop()). */
  private wake: (() => void) | null = null;

  private lease: Lease | null = null;
  private elected = false;
  private epochValue: number | null = null;
  /** Monotonic send time of the last renewal (or grant) etcd confirmed. */
  private lastGoodSend = Number.NEGATIVE_INFINITY;
  private overdueTimer: NodeJS.Timeout | null = null;

  private watcher: Watcher | null = null;
  private watchRetry: NodeJS.Timeout | null = null;
  private info: LeaderInfo | null = null;
  /** The revision of a leader key value that is not a leader record, warned about once. */
  private badRecordRev: string | null = null;
  private reachableValue = false;
  private lastErrorValue: ReasonRef | null = null;

  constructor(
    private readonly client: Etcd3,
    private readonly o: ElectionOptions,
  ) {
    super();
    const problem = electionTimingProblem(o);
    if (problem) throw new LlmgwError('ETCD_CONFIG_INVALID', problem);
    this.key = leaderKey(o.prefix);
    this.clock = o.clock ?? Date.now;
    this.mono = o.monotonic ?? (() => performance.now());
    this.timeoutMs = o.requestTimeoutMs ?? Math.max(500, Math.floor(o.renewDeadlineMs / 2));
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
    return this.isLeader() ? this.epochValue : null;
  }
  get reachable(): boolean {
    return this.reachableValue;
  }
  get lastError(): ReasonRef | null {
    return this.lastErrorValue;
  }
  /** Monotonic send time of the last lease grant or renewal etcd confirmed (kept after a deposition), or null. */
  get lastRenewalSent(): number | null {
    return Number.isFinite(this.lastGoodSend) ? this.lastGoodSend : null;
  }

  start(): void {
    if (this.running || this.stopping) return;
    this.running = true;
    this.startWatch();
    this.loop = this.run().catch((e: unknown) => {
      this.log.error({ err: (e as Error).message }, 'election loop failed');
    });
  }

  /** Elected, and the last good renewal was sent less than renewDeadlineMs ago. */
  isLeader(): boolean {
    if (!this.elected || !this.running) return false;
    if (this.mono() - this.lastGoodSend < this.o.renewDeadlineMs) return true;
    setImmediate(() => this.checkOverdue());
    return false;
  }

  current(): LeaderInfo | null {
    return this.info;
  }

  /**
   * Ends this term at once, for a reason found outside the election (the reconciler refused by a
   * node or the status branch): the lease is revoked, so the key goes now and any instance may be
   * elected without waiting for the TTL; 'deposed' is emitted and this instance campaigns again.
   */
  resignTerm(reason: ReasonRef): void {
    this.stepDown(reason);
  }

  /**
   * etcd's current revision: no leader epoch (a create revision) can be above it, so an epoch that
   * is was not made by this etcd (a forgery, or a record from before a restore).
   */
  async revision(): Promise<number> {
    try {
      const res = await this.client.get(this.key).options(this.callOptions()).exec();
      this.noteOk();
      return Number(res.header.revision);
    } catch (e) {
      throw this.noteError(e, 'reading the etcd revision');
    }
  }

  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  async guardedPut(key: string, value: string, opts: { lease?: string } = {}): Promise<void> {
    const put = this.client.put(key).value(value);
    if (opts.lease !== undefined) put.lease(opts.lease);
    await this.guardedTxn([put], [], `writing ${key}`);
  }

  async guardedDelete(key: string): Promise<void> {
    await this.guardedTxn([this.client.delete().key(key)], [], `deleting ${key}`);
  }

  /**
   * One txn: if the leader key's create revision is this instance's epoch (and every `extra` compare
   * holds), run `ops`. Resolves true when they ran, false when only an extra compare failed; throws
   * LEADER_DEPOSED (and steps down) when another leader holds the key, or an ETCD_* reason.
   */
  async guardedTxn(ops: readonly IOperation[], extra: readonly GuardCompare[], what = 'a guarded write'): Promise<boolean> {
    const epoch = this.epochValue;
    if (!this.isLeader() || epoch === null) {
      this.checkOverdue();
      throw new LlmgwError('LEADER_DEPOSED', `${what}: this instance is not the leader`, { instance: this.o.id });
    }
    let txn = this.client.if(this.key, 'Create', '==', epoch);
    for (const c of extra) txn = txn.and(c.key, c.column, c.cmp, c.value);
    txn = txn.then(...ops);
    if (extra.length > 0) txn = txn.else(this.client.get(this.key));
    let res;
    try {
      res = await txn.commit();
      this.noteOk();
    } catch (e) {
      throw this.noteError(e, what);
    }
    if (res.succeeded) return true;
    if (extra.length > 0) {
      const kv = res.responses[0]?.response_range?.kvs?.[0];
      if (kv && Number(kv.create_revision) === epoch) return false;
    }
    const reason = new LlmgwError('LEADER_DEPOSED', `${what}: refused by etcd, the leader key no longer has this instance's epoch ${epoch} (a newer leader exists or the lease expired)`, { epoch, instance: this.o.id });
    // Only the leadership this write was made under: it may have ended, and a new one begun, while in flight.
    if (this.epochValue === epoch) this.stepDown({ code: reason.code, message: reason.message });
    throw reason;
  }

  // --- the loop -----------------------------------------------------------------------------

  private async run(): Promise<void> {
    while (this.running) {
      try {
        const holder = await this.client.get(this.key).options(this.callOptions()).exec();
        this.noteOk();
        const kv = holder.kvs[0];
        if (kv) {
          this.see(kv);
          await this.pause(this.o.retryPeriodMs);
          continue;
        }
        const won = await this.campaign();
        if (won !== null) await this.lead(won);
      } catch (e) {
        this.noteError(e, 'campaigning');
        await this.pause(this.o.retryPeriodMs);
      }
    }
  }

  /** Grants a lease and tries to create the key; the epoch if this instance won, else null. */
  private async campaign(): Promise<{ epoch: number; lease: Lease } | null> {
    const sent = this.mono();
    const lease = this.client.lease(this.o.leaseTtlSeconds, { autoKeepAlive: false, deadline: new Date(Date.now() + this.timeoutMs) });
    lease.on('lost', () => undefined); // reported where it matters: the renewal and the grant
    let leaseId: string;
    try {
      leaseId = await lease.grant();
    } catch (e) {
      lease.release();
      throw e;
    }
    const since = this.clock();
    const value = JSON.stringify({ id: this.o.id, label: this.o.label, since });
    let res;
    try {
      res = await this.client
        .if(this.key, 'Create', '==', 0)
        .then(this.client.put(this.key).value(value).lease(leaseId))
        .else(this.client.get(this.key))
        .options(this.callOptions())
        .commit();
    } catch (e) {
      this.revokeQuietly(lease);
      throw e;
    }
    this.noteOk();
    if (!res.succeeded) {
      this.revokeQuietly(lease);
      const kv = res.responses[0]?.response_range?.kvs?.[0];
      if (kv) this.see(kv);
      return null;
    }
    const epoch = Number(res.header.revision);
    if (!this.running) {
      // stop() began while the txn was in flight: resign at once.
      await this.resign(epoch, lease);
      return null;
    }
    this.lease = lease;
    this.epochValue = epoch;
    this.elected = true;
    this.lastGoodSend = sent;
    this.armOverdue();
    this.setInfo({ id: this.o.id, label: this.o.label, since, epoch });
    this.log.info({ epoch, label: this.o.label }, 'elected leader');
    this.safeEmit('elected', epoch);
    return { epoch, lease };
  }

  /** Renews the lease until this instance is deposed or stopped. */
  private async lead(won: { epoch: number; lease: Lease }): Promise<void> {
    while (this.running && this.elected && this.lease === won.lease) {
      const sent = this.mono();
      let ok = false;
      try {
        await won.lease.keepaliveOnce({ deadline: new Date(Date.now() + this.timeoutMs) });
        this.noteOk();
        ok = true;
        if (this.elected && this.lease === won.lease && sent > this.lastGoodSend) {
          if (this.mono() - this.lastGoodSend >= this.o.renewDeadlineMs) {
            // Confirmed too late: the deadline lapsed while it was in flight. Stay deposed.
            this.checkOverdue();
          } else {
            this.lastGoodSend = sent;
            this.armOverdue();
          }
        }
      } catch (e) {
        if (e instanceof EtcdLeaseInvalidError) {
          this.stepDown({ code: 'LEADER_DEPOSED', message: `the election lease of epoch ${won.epoch} expired in etcd (TTL 0 on renewal); another instance may lead` });
          break;
        }
        this.noteError(e, 'renewing the election lease');
      }
      this.checkOverdue();
      // After a failure, try again soon: with several endpoints the next call may pick a live one.
      const wait = ok ? sent + this.o.retryPeriodMs - this.mono() : Math.min(this.o.retryPeriodMs, FAILED_RENEWAL_RETRY_MS);
      if (wait > 0) await this.pause(wait);
    }
  }

  // --- leadership state ---------------------------------------------------------------------

  private armOverdue(): void {
    if (this.overdueTimer) clearTimeout(this.overdueTimer);
    const left = this.lastGoodSend + this.o.renewDeadlineMs - this.mono();
    this.overdueTimer = setTimeout(() => this.checkOverdue(), Math.max(0, left) + 1);
  }

  private checkOverdue(): void {
    if (!this.elected) return;
    const since = this.mono() - this.lastGoodSend;
    if (since < this.o.renewDeadlineMs) {
      this.armOverdue();
      return;
    }
    this.stepDown({ code: 'LEADER_RENEWAL_OVERDUE', message: `the election lease was last renewed ${Math.round(since)} ms ago (renew deadline ${this.o.renewDeadlineMs} ms, lease ${this.o.leaseTtlSeconds} s): stopped acting before the lease could expire${this.lastErrorValue ? ` (${this.lastErrorValue.code}: ${this.lastErrorValue.message})` : ''}` });
  }

  private stepDown(reason: ReasonRef): void {
    if (!this.elected) return;
    const epoch = this.epochValue;
    this.elected = false;
    this.epochValue = null;
    if (this.overdueTimer) clearTimeout(this.overdueTimer);
    this.overdueTimer = null;
    const lease = this.lease;
    this.lease = null;
    if (lease) this.revokeQuietly(lease);
    if (this.info?.epoch === epoch && this.info?.id === this.o.id) this.setInfo(null);
    this.log.warn({ code: reason.code, epoch, reason: reason.message }, 'deposed: stopped acting as leader');
    this.safeEmit('deposed', reason);
    this.wakeUp();
  }

  private revokeQuietly(lease: Lease): void {
    lease.revoke({ deadline: new Date(Date.now() + this.timeoutMs) }).catch(() => undefined);
  }

  private async resign(epoch: number, lease: Lease): Promise<void> {
    try {
      await this.client.if(this.key, 'Create', '==', epoch).then(this.client.delete().key(this.key)).options(this.callOptions()).commit();
    } catch (e) {
      this.noteError(e, 'resigning');
    }
    await lease.revoke({ deadline: new Date(Date.now() + this.timeoutMs) }).catch((e: unknown) => this.noteError(e, 'revoking the election lease'));
  }

  private async doStop(): Promise<void> {
    this.running = false;
    this.wakeUp();
    await this.loop;
    if (this.overdueTimer) clearTimeout(this.overdueTimer);
    this.overdueTimer = null;
    const { epochValue: epoch, lease, elected } = this;
    this.elected = false;
    this.epochValue = null;
    this.lease = null;
    if (elected && epoch !== null && lease) {
      await this.resign(epoch, lease);
      this.log.info({ epoch }, 'resigned leadership');
      if (this.info?.id === this.o.id) this.setInfo(null);
    }
    await this.stopWatch();
  }

  // --- watching the leader key --------------------------------------------------------------

  private startWatch(): void {
    if (!this.running) return;
    const w = this.client.watch().key(this.key).watcher();
    this.watcher = w;
    w.on('put', (kv) => this.see(kv));
    w.on('delete', (kv) => {
      const gone = Number(kv.mod_revision);
      if (this.info && this.info.epoch < gone) this.setInfo(null);
      if (this.elected && this.epochValue !== null && gone > this.epochValue) this.stepDown({ code: 'LEADER_DEPOSED', message: `the leader key ${this.key} of epoch ${this.epochValue} was deleted (lease expired or removed by hand)` });
      this.wakeUp();
    });
    w.on('error', (e) => {
      // Cancelled by etcd (e.g. compacted past the revision): start a new watch. etcd3 has dropped
      // this one already; cancelling it again would make etcd3 throw on the stream.
      this.noteError(e, 'watching the leader key');
      if (this.watcher === w) this.watcher = null;
      this.watchRetry = setTimeout(() => this.startWatch(), this.o.retryPeriodMs);
    });
  }

  private async stopWatch(): Promise<void> {
    if (this.watchRetry) clearTimeout(this.watchRetry);
    this.watchRetry = null;
    const w = this.watcher;
    this.watcher = null;
    if (w) await cancelWatcher(w, this.timeoutMs);
  }

  /** A value of the leader key seen (watch, get, failed campaign). */
  private see(kv: IKeyValue): void {
    const info = parseLeader(kv);
    // Events can be older than the txn that elected us (the watch delivers in revision order).
    if (this.elected && this.epochValue !== null && Number(kv.create_revision) > this.epochValue) {
      this.stepDown({ code: 'LEADER_DEPOSED', message: `the leader key now has epoch ${kv.create_revision} (${info?.label ?? 'unreadable value'}), not this instance's ${this.epochValue}` });
    }
    if (info === null) {
      if (this.badRecordRev !== kv.mod_revision) this.log.warn({ key: this.key, revision: kv.mod_revision }, 'the leader key does not hold an llmgw leader record; waiting for it to go');
      this.badRecordRev = kv.mod_revision;
      return;
    }
    if (this.info && this.info.epoch > info.epoch) return; // an older event than what we know
    this.setInfo(info);
  }

  private setInfo(info: LeaderInfo | null): void {
    const before = this.info;
    this.info = info;
    if (before?.epoch === info?.epoch && before?.id === info?.id) return;
    this.safeEmit('leader', info);
  }

  // --- plumbing -----------------------------------------------------------------------------

  private callOptions(): { deadline: Date } {
    return { deadline: new Date(Date.now() + this.timeoutMs) };
  }

  private pause(ms: number): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      const self = this;
      function done(): void {
        clearTimeout(t);
        if (self.wake === done) self.wake = null;
        resolve();
      }
      this.wake = done;
    });
  }

  private wakeUp(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

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

/** Cancels a watcher without hanging on a stalled connection (etcd3 waits for the cancel's answer). */
export async function cancelWatcher(w: Watcher, timeoutMs: number): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  await Promise.race([w.cancel().catch(() => undefined), new Promise<void>((r) => (t = setTimeout(r, timeoutMs)))]);
  clearTimeout(t);
}
