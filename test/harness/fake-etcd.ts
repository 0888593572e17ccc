/**
 * A fake etcd for fast tests of the election (src/ha/etcd-leader-io.ts's LeaderIO): one revision
 * counter, keys with create and mod revisions and versions, leases that expire on a FakeClock (their
 * keys deleted with them), compare-and-swap txns, watch events, a snapshot and a restore (revisions
 * go back, leases come back with a fresh TTL, watches are cancelled). Each instance talks to it
 * through its own client, which can be cut off (calls fail as unreachable; watch events wait, as on
 * a stalled connection, and arrive when it is restored). A client is also the forwarded-request
 * channel's RequestsIO (src/ha/etcd-requests-io.ts): puts on a lease, prefix lists and watches, a
 * lease's time to live with its keys.
 */
import { GRPCUnavailableError } from 'etcd3';
import type { GuardCompare, Kv, LeaderIO, TxnOp, TxnResult, WatchHandlers } from '../../src/ha/etcd-leader-io.js';
import type { RequestsIO } from '../../src/ha/etcd-requests-io.js';
import { isWriteOp } from '../../src/ha/etcd-leader-io.js';
import type { FakeClock } from './fake-node.js';

interface Stored {
  value: string;
  createRevision: number;
  modRevision: number;
  version: number;
  lease: string;
}

interface Snapshot {
  readonly revision: number;
  readonly kvs: ReadonlyMap<string, Stored>;
  readonly leases: ReadonlyMap<string, number>;
}

type Event = { readonly kind: 'put'; readonly kv: Kv } | { readonly kind: 'delete'; readonly key: string; readonly modRevision: number };

interface Watch {
  readonly key: string;
  /** Every key under `key` (a prefix watch), not only `key`. */
  readonly prefix?: boolean;
  readonly on: WatchHandlers;
  readonly client: FakeEtcdClient;
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

export class FakeEtcd {
  revision = 1;
  private kvs = new Map<string, Stored>();
  /** Lease id → TTL seconds, and when each expires (the clock's monotonic ms). */
  private leaseTtl = new Map<string, number>();
  private leaseExpiry = new Map<string, number>();
  private leaseSeq = 0x7000;
  private readonly watches = new Set<Watch>();
  /** Every txn and call, for assertions (kind and client name). */
  readonly calls: { readonly client: string; readonly call: string }[] = [];

  constructor(readonly clock: FakeClock) {}

  client(name: string): FakeEtcdClient {
    return new FakeEtcdClient(this, name);
  }

  /** Expires the leases whose TTL has run out (their keys go, with delete events). */
  expire(): void {
    const now = this.clock.monotonic();
    const gone = [...this.leaseExpiry].filter(([, at]) => at <= now).map(([id]) => id);
    for (const id of gone) this.dropLease(id);
  }

  get(key: string): Kv | null {
    this.expire();
    const s = this.kvs.get(key);
    return s ? { key, value: s.value, createRevision: s.createRevision, modRevision: s.modRevision, lease: s.lease } : null;
  }

  /** A put by hand (etcdctl put): a new key gets this revision as its create revision. */
  put(key: string, value: string, lease = '0'): number {
    this.expire();
    if (lease !== '0' && !this.leaseTtl.has(lease)) throw new Error('etcdserver: requested lease not found');
    this.revision++;
    this.write(key, value, lease);
    return this.revision;
  }

  /** A delete by hand. */
  delete(key: string): void {
    this.expire();
    if (!this.kvs.has(key)) return;
    this.revision++;
    this.kvs.delete(key);
    this.emit({ kind: 'delete', key, modRevision: this.revision });
  }

  /** A value no etcd call can make: the key set as given (e.g. a create revision above the revision). */
  forge(key: string, kv: Omit<Stored, 'version'>): void {
    this.kvs.set(key, { ...kv, version: 1 });
    this.emit({ kind: 'put', kv: { key, ...kv } });
  }

  snapshot(): Snapshot {
    this.expire();
    return { revision: this.revision, kvs: new Map([...this.kvs].map(([k, v]) => [k, { ...v }])), leases: new Map(this.leaseTtl) };
  }

  /** etcd restored from a snapshot: its revision and keys, its leases with a fresh TTL; every watch cancelled. */
  restore(s: Snapshot): void {
    this.revision = s.revision;
    this.kvs = new Map([...s.kvs].map(([k, v]) => [k, { ...v }]));
    this.leaseTtl = new Map(s.leases);
    this.leaseExpiry = new Map([...s.leases].map(([id, ttl]) => [id, this.clock.monotonic() + ttl * 1000]));
    for (const w of [...this.watches]) {
      this.watches.delete(w);
      w.client.deliver(() => w.on.error(new Error('fake etcd: watch cancelled (etcd restored)')));
    }
  }

  /** The keys under `prefix`, in mod-revision order. */
  list(prefix: string): Kv[] {
    this.expire();
    return [...this.kvs]
      .filter(([k]) => k.startsWith(prefix))
      .map(([key, v]) => ({ key, value: v.value, createRevision: v.createRevision, modRevision: v.modRevision, lease: v.lease }))
      .sort((a, b) => a.modRevision - b.modRevision);
  }

  /** A lease's remaining TTL in seconds (-1: gone) and the keys attached to it. */
  timeToLive(id: string): { ttl: number; keys: string[] } {
    this.expire();
    const at = this.leaseExpiry.get(id);
    if (at === undefined) return { ttl: -1, keys: [] };
    return { ttl: Math.max(0, Math.ceil((at - this.clock.monotonic()) / 1000)), keys: [...this.kvs].filter(([, v]) => v.lease === id).map(([k]) => k) };
  }

  /** Whether a lease is alive now. */
  hasLease(id: string): boolean {
    this.expire();
    return this.leaseTtl.has(id);
  }

  // --- the calls, as a client makes them --------------------------------------------------------

  grant(ttl: number): string {
    this.expire();
    const id = String(++this.leaseSeq);
    this.leaseTtl.set(id, ttl);
    this.leaseExpiry.set(id, this.clock.monotonic() + ttl * 1000);
    return id;
  }

  keepAlive(id: string): number {
    this.expire();
    const ttl = this.leaseTtl.get(id);
    if (ttl === undefined) return 0;
    this.leaseExpiry.set(id, this.clock.monotonic() + ttl * 1000);
    return ttl;
  }

  revoke(id: string): void {
    this.expire();
    if (!this.leaseTtl.has(id)) throw new Error('etcdserver: requested lease not found');
    this.dropLease(id);
  }

  txn(compares: readonly GuardCompare[], ops: readonly TxnOp[], elseGet: string | null): TxnResult {
    this.expire();
    if (compares.every((c) => this.holds(c))) {
      const writes = ops.map((op) => {
        if (!isWriteOp(op)) throw new Error('the fake etcd takes WriteOps only, not etcd3 operations');
        return op;
      });
      for (const op of writes) if ('put' in op && op.lease !== undefined && op.lease !== '0' && !this.leaseTtl.has(op.lease)) throw new Error('etcdserver: requested lease not found');
      if (writes.some((op) => 'put' in op || this.kvs.has(op.delete))) this.revision++;
      for (const op of writes) {
        if ('put' in op) this.write(op.put, op.value, op.lease ?? '0');
        else if (this.kvs.delete(op.delete)) this.emit({ kind: 'delete', key: op.delete, modRevision: this.revision });
      }
      return { succeeded: true, revision: this.revision, current: null };
    }
    return { succeeded: false, revision: this.revision, current: elseGet === null ? null : this.get(elseGet) };
  }

  watch(w: Watch): () => void {
    this.watches.add(w);
    return () => this.watches.delete(w);
  }

  // --- inside ---------------------------------------------------------------------------------

  private holds(c: GuardCompare): boolean {
    const s = this.kvs.get(c.key);
    const have: string | number = c.column === 'Create' ? (s?.createRevision ?? 0) : c.column === 'Mod' ? (s?.modRevision ?? 0) : c.column === 'Version' ? (s?.version ?? 0) : c.column === 'Lease' ? Number(s?.lease ?? 0) : (s?.value ?? '');
    const want = typeof have === 'number' ? Number(c.value) : String(c.value);
    switch (c.cmp) {
      case '==':
        return have === want;
      case '!=':
        return have !== want;
      case '>':
        return have > want;
      case '<':
        return have < want;
    }
  }

  private write(key: string, value: string, lease: string): void {
    const before = this.kvs.get(key);
    const s: Stored = { value, lease, createRevision: before?.createRevision ?? this.revision, modRevision: this.revision, version: (before?.version ?? 0) + 1 };
    this.kvs.set(key, s);
    this.emit({ kind: 'put', kv: { key, value, createRevision: s.createRevision, modRevision: s.modRevision, lease } });
  }

  private dropLease(id: string): void {
    this.leaseTtl.delete(id);
    this.leaseExpiry.delete(id);
    const keys = [...this.kvs].filter(([, s]) => s.lease === id).map(([k]) => k);
    if (keys.length === 0) return;
    this.revision++;
    for (const k of keys) {
      this.kvs.delete(k);
      this.emit({ kind: 'delete', key: k, modRevision: this.revision });
    }
  }

  private emit(e: Event): void {
    for (const w of this.watches) {
      const key = e.kind === 'put' ? e.kv.key : e.key;
      if (w.prefix ? !key.startsWith(w.key) : w.key !== key) continue;
      w.client.deliver(() => (e.kind === 'put' ? w.on.put(e.kv) : w.on.delete(e.modRevision)));
    }
  }
}

/** One instance's connection to the fake etcd. */
export class FakeEtcdClient implements LeaderIO, RequestsIO {
  private cutOff = false;
  private held: (() => void)[] = [];

  /** Ticks each call takes to be answered (varied per call in tests of interleavings). */
  latency: () => number = () => 1;

  constructor(
    readonly etcd: FakeEtcd,
    readonly name: string,
  ) {}

  /** Calls fail as unreachable; watch events wait (a stalled stream) until restore(). */
  cut(): void {
    this.cutOff = true;
  }
  restore(): void {
    this.cutOff = false;
    const held = this.held;
    this.held = [];
    for (const f of held) f();
  }
  get isCut(): boolean {
    return this.cutOff;
  }

  /** A watch event to this client: later (as a stream delivers), or when the connection is back. */
  deliver(f: () => void): void {
    if (this.cutOff) this.held.push(f);
    else void tick().then(() => (this.cutOff ? this.held.push(f) : f()));
  }

  private async call<T>(what: string, f: () => T): Promise<T> {
    this.etcd.calls.push({ client: this.name, call: what });
    const n = Math.max(1, this.latency());
    for (let i = 0; i < n; i++) await tick();
    if (this.cutOff) throw new GRPCUnavailableError(`fake etcd: ${this.name} is cut off`);
    return f();
  }

  grantLease(ttlSeconds: number): Promise<string> {
    return this.call('grant', () => this.etcd.grant(ttlSeconds));
  }
  keepAlive(lease: string): Promise<{ ttl: number }> {
    return this.call('keepalive', () => ({ ttl: this.etcd.keepAlive(lease) }));
  }
  revokeLease(lease: string): Promise<void> {
    return this.call('revoke', () => this.etcd.revoke(lease));
  }
  get(key: string): Promise<{ kv: Kv | null; revision: number }> {
    return this.call('get', () => ({ kv: this.etcd.get(key), revision: this.etcd.revision }));
  }
  txn(compares: readonly GuardCompare[], ops: readonly TxnOp[], elseGet: string | null): Promise<TxnResult> {
    return this.call('txn', () => this.etcd.txn(compares, ops, elseGet));
  }
  watch(key: string, on: WatchHandlers): { cancel(): Promise<void> } {
    const off = this.etcd.watch({ key, on, client: this });
    return { cancel: async () => off() };
  }

  // --- the forwarded-request channel (RequestsIO) -------------------------------------------------

  put(key: string, value: string, lease: string): Promise<void> {
    return this.call('put', () => void this.etcd.put(key, value, lease));
  }
  list(prefix: string): Promise<{ kvs: Kv[]; revision: number }> {
    return this.call('list', () => ({ kvs: this.etcd.list(prefix), revision: this.etcd.revision }));
  }
  leaseTimeToLive(lease: string): Promise<{ ttl: number; keys: string[] }> {
    return this.call('timeToLive', () => this.etcd.timeToLive(lease));
  }
  /** In place at once (events from now on); a cut client's events wait, as on a stalled stream. */
  watchPuts(key: string, onPut: (value: string) => void): { connected: Promise<void>; cancel(): Promise<void> } {
    const off = this.etcd.watch({ key, on: { put: (kv) => onPut(kv.value), delete: () => undefined, error: () => undefined }, client: this });
    return { connected: Promise.resolve(), cancel: async () => off() };
  }
  /** From now on (the fake answers a list and registers the watch with no revision between them). */
  watchPrefix(prefix: string, fromRevision: number, onPut: (kv: Kv) => void, ended: (e: unknown) => void): { cancel(): Promise<void> } {
    // the fake keeps no history: a watch from a revision already past would miss events, silently
    if (fromRevision <= this.etcd.revision) throw new Error(`fake etcd: a watch from revision ${fromRevision}, already past (now ${this.etcd.revision})`);
    const off = this.etcd.watch({ key: prefix, prefix: true, on: { put: onPut, delete: () => undefined, error: ended }, client: this });
    return { cancel: async () => off() };
  }
}
