/**
 * The etcd calls the election makes, behind a small interface (I/O at the edge): a lease (grant,
 * one keepalive, revoke), a get, a compare-and-swap txn, and a watch of one key. `Etcd3LeaderIO` is
 * the real one over etcd3, every unary call with a deadline; test/harness/fake-etcd.ts is a fake
 * with revisions, create revisions, leases expiring on a fake clock and watch events.
 *
 * Shell: the deadlines and the watch cancel's time limit come from the ShellTime it is given (the
 * election passes its own clock and timers); this file reads no clock and sets no timer of its own.
 */
import type { Etcd3, IOperation, IKeyValue, Lease, Watcher } from 'etcd3';
import { EtcdLeaseInvalidError } from 'etcd3';
import type { LoopTimers, ShellTime } from './shell-time.js';

/** One key's value as etcd holds it (revisions as numbers; lease '0' = none). */
export interface Kv {
  readonly key: string;
  readonly value: string;
  readonly createRevision: number;
  readonly modRevision: number;
  readonly lease: string;
}

/** A compare of a txn: `key`'s `column` `cmp` `value` (etcd's own semantics: an absent key has Create 0). */
export interface GuardCompare {
  readonly key: string;
  readonly column: 'Value' | 'Version' | 'Create' | 'Mod' | 'Lease';
  readonly cmp: '==' | '!=' | '>' | '<';
  readonly value: string | number;
}

/** A write of a txn. The real implementation also takes etcd3's own operations (built on its client). */
export type WriteOp = { readonly put: string; readonly value: string; readonly lease?: string } | { readonly delete: string };
export type TxnOp = WriteOp | IOperation;

export interface TxnResult {
  readonly succeeded: boolean;
  /** etcd's revision when it answered. */
  readonly revision: number;
  /** When it failed: the value of the key named by `elseGet` (null: absent, or none asked). */
  readonly current: Kv | null;
}

export interface WatchHandlers {
  put(kv: Kv): void;
  /** The key was deleted at this revision. */
  delete(modRevision: number): void;
  /** The watch ended (etcd cancelled it, e.g. compacted past its revision): start another. */
  error(e: unknown): void;
}

export interface LeaderIO {
  /** A new lease of `ttlSeconds`; its id. */
  grantLease(ttlSeconds: number): Promise<string>;
  /** One renewal; ttl 0 when etcd no longer has the lease (expired, revoked, or etcd restored without it). */
  keepAlive(lease: string): Promise<{ readonly ttl: number }>;
  revokeLease(lease: string): Promise<void>;
  get(key: string): Promise<{ readonly kv: Kv | null; readonly revision: number }>;
  /** If every compare holds, run `ops`; else read `elseGet` (when given). */
  txn(compares: readonly GuardCompare[], ops: readonly TxnOp[], elseGet: string | null): Promise<TxnResult>;
  /** Watches `key` from now on; resolves the canceller. */
  watch(key: string, on: WatchHandlers): { cancel(): Promise<void> };
}

export function isWriteOp(op: TxnOp): op is WriteOp {
  return typeof (op as { op?: unknown }).op !== 'function';
}

function kvOf(kv: IKeyValue): Kv {
  return { key: kv.key.toString('utf8'), value: kv.value.toString('utf8'), createRevision: Number(kv.create_revision), modRevision: Number(kv.mod_revision), lease: String(kv.lease ?? '0') };
}

/** Cancels a watcher without hanging on a stalled connection (etcd3 waits for the cancel's answer). */
export async function cancelWatcher(w: Pick<Watcher, 'cancel'>, timeoutMs: number, timers: LoopTimers): Promise<void> {
  let t: unknown = null;
  await Promise.race([w.cancel().catch(() => undefined), new Promise<void>((r) => (t = timers.setTimeout(r, timeoutMs)))]);
  timers.clearTimeout(t);
}

/** Leases granted over etcd3 with no automatic keepalive, held by id until revoked (the election's, a forwarded request's). */
export class HeldLeases {
  private readonly leases = new Map<string, Lease>();

  constructor(private readonly client: Etcd3) {}

  get(id: string): Lease | undefined {
    return this.leases.get(id);
  }

  async grant(ttlSeconds: number, deadline: { deadline: Date } | Record<string, never>): Promise<string> {
    const lease = this.client.lease(ttlSeconds, { autoKeepAlive: false, ...deadline });
    lease.on('lost', () => undefined); // reported where it matters: the renewal and the grant
    try {
      const id = await lease.grant();
      this.leases.set(id, lease);
      return id;
    } catch (e) {
      lease.release();
      throw e;
    }
  }

  async revoke(id: string, deadline: { deadline: Date }): Promise<void> {
    const lease = this.leases.get(id);
    this.leases.delete(id);
    if (lease) await lease.revoke(deadline);
    else await this.client.leaseClient.leaseRevoke({ ID: id }, deadline);
  }
}

/** The real calls, over etcd3; each unary call gets a deadline of `timeoutMs`. */
export class Etcd3LeaderIO implements LeaderIO {
  private readonly leases: HeldLeases;

  constructor(
    readonly client: Etcd3,
    private readonly timeoutMs: number,
    private readonly time: ShellTime,
  ) {
    this.leases = new HeldLeases(client);
  }

  private deadline(): { deadline: Date } {
    return { deadline: new Date(this.time.now() + this.timeoutMs) };
  }

  grantLease(ttlSeconds: number): Promise<string> {
    return this.leases.grant(ttlSeconds, this.deadline());
  }

  async keepAlive(id: string): Promise<{ ttl: number }> {
    const lease = this.leases.get(id);
    if (!lease) return { ttl: 0 };
    try {
      const res = await lease.keepaliveOnce(this.deadline());
      return { ttl: Number(res.TTL) };
    } catch (e) {
      if (e instanceof EtcdLeaseInvalidError) return { ttl: 0 };
      throw e;
    }
  }

  revokeLease(id: string): Promise<void> {
    return this.leases.revoke(id, this.deadline());
  }

  async get(key: string): Promise<{ kv: Kv | null; revision: number }> {
    const res = await this.client.get(key).options(this.deadline()).exec();
    const kv = res.kvs[0];
    return { kv: kv ? kvOf(kv) : null, revision: Number(res.header.revision) };
  }

  async txn(compares: readonly GuardCompare[], ops: readonly TxnOp[], elseGet: string | null): Promise<TxnResult> {
    const [first, ...rest] = compares;
    if (!first) throw new Error('a txn without a compare');
    let txn = this.client.if(first.key, first.column, first.cmp, first.value);
    for (const c of rest) txn = txn.and(c.key, c.column, c.cmp, c.value);
    txn = txn.then(...ops.map((op) => this.operation(op)));
    if (elseGet !== null) txn = txn.else(this.client.get(elseGet));
    const res = await txn.options(this.deadline()).commit();
    const kv = res.succeeded ? undefined : res.responses[0]?.response_range?.kvs?.[0];
    return { succeeded: res.succeeded, revision: Number(res.header.revision), current: kv ? kvOf(kv) : null };
  }

  private operation(op: TxnOp): IOperation {
    if (!isWriteOp(op)) return op;
    if ('delete' in op) return this.client.delete().key(op.delete);
    const put = this.client.put(op.put).value(op.value);
    if (op.lease !== undefined) put.lease(op.lease);
    return put;
  }

  watch(key: string, on: WatchHandlers): { cancel(): Promise<void> } {
    const w = this.client.watch().key(key).watcher();
    w.on('put', (kv) => on.put(kvOf(kv)));
    w.on('delete', (kv) => on.delete(Number(kv.mod_revision)));
    // Cancelled by etcd: etcd3 has dropped this watcher already; cancelling it again would make it throw on the stream.
    let ended = false;
    w.on('error', (e) => {
      ended = true;
      on.error(e);
    });
    return { cancel: () => (ended ? Promise.resolve() : cancelWatcher(w, this.timeoutMs, this.time.timers)) };
  }
}
