/**
 * The etcd calls of the forwarded-request channel (channel.ts Requests), behind a small interface
 * (I/O at the edge): a sender's lease, a watch of its answer's key, the put of its request; the
 * leader's read and watch of the pending requests, and the live check of a request's lease.
 * `Etcd3RequestsIO` is the real one over etcd3; test/harness/fake-etcd.ts's client is a fake.
 *
 * Shell: deadlines and the watch cancel's time limit come from the ShellTime it is given; this file
 * reads no clock and sets no timer of its own.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import { cancelWatcher, HeldLeases, type Kv } from './etcd-leader-io.js';
import type { ShellTime } from './shell-time.js';

/** How long closing a watch may wait for etcd's answer (a stalled connection does not hang a close). */
export const CANCEL_TIMEOUT_MS = 2_000;

export interface RequestsIO {
  /** A lease of `ttlSeconds` (not kept alive); its id. */
  grantLease(ttlSeconds: number): Promise<string>;
  revokeLease(lease: string): Promise<void>;
  /** Watches puts of one key from now on; `connected` resolves once a put can no longer be missed. */
  watchPuts(key: string, onPut: (value: string) => void): { readonly connected: Promise<void>; cancel(): Promise<void> };
  put(key: string, value: string, lease: string): Promise<void>;
  /** The keys under `prefix` in mod-revision order, and the revision they were read at. */
  list(prefix: string): Promise<{ readonly kvs: readonly Kv[]; readonly revision: number }>;
  /** Watches puts under `prefix` from `fromRevision`; `ended` when etcd ends the watch (start another). */
  watchPrefix(prefix: string, fromRevision: number, onPut: (kv: Kv) => void, ended: (e: unknown) => void): { cancel(): Promise<void> };
  /** A lease as etcd holds it now: its remaining TTL (≤ 0: gone) and the keys attached to it. */
  leaseTimeToLive(lease: string): Promise<{ readonly ttl: number; readonly keys: readonly string[] }>;
}

function kvOf(kv: IKeyValue): Kv {
  return { key: kv.key.toString('utf8'), value: kv.value.toString('utf8'), createRevision: Number(kv.create_revision), modRevision: Number(kv.mod_revision), lease: String(kv.lease ?? '0') };
}

/** The real calls, over etcd3 (unary calls take the client's default deadline; revoke its own). */
export class Etcd3RequestsIO implements RequestsIO {
  private readonly leases: HeldLeases;

  constructor(
    readonly client: Etcd3,
    private readonly time: ShellTime,
  ) {
    this.leases = new HeldLeases(client);
  }

  /** With the client's default deadline (the sender's own timer bounds the whole exchange). */
  grantLease(ttlSeconds: number): Promise<string> {
    return this.leases.grant(ttlSeconds, {});
  }

  revokeLease(id: string): Promise<void> {
    return this.leases.revoke(id, { deadline: new Date(this.time.now() + CANCEL_TIMEOUT_MS) });
  }

  watchPuts(key: string, onPut: (value: string) => void): { connected: Promise<void>; cancel(): Promise<void> } {
    const w = this.client.watch().key(key).only('put').watcher();
    w.on('put', (kv: IKeyValue) => onPut(kv.value.toString('utf8')));
    w.on('error', () => undefined); // a watch etcd ends: the sender's timer answers (an unheard 'error' would throw)
    const connected = new Promise<void>((resolve) => w.once('connected', () => resolve()));
    return { connected, cancel: () => cancelWatcher(w, CANCEL_TIMEOUT_MS, this.time.timers) };
  }

  async put(key: string, value: string, lease: string): Promise<void> {
    await this.client.put(key).value(value).lease(lease).exec();
  }

  async list(prefix: string): Promise<{ kvs: Kv[]; revision: number }> {
    const res = await this.client.getAll().prefix(prefix).sort('Mod', 'Ascend').exec();
    return { kvs: res.kvs.map(kvOf), revision: Number(res.header.revision) };
  }

  watchPrefix(prefix: string, fromRevision: number, onPut: (kv: Kv) => void, ended: (e: unknown) => void): { cancel(): Promise<void> } {
    const w = this.client.watch().prefix(prefix).only('put').startRevision(String(fromRevision)).watcher();
    w.on('put', (kv: IKeyValue) => onPut(kvOf(kv)));
    // Ended by etcd (compacted past the revision): etcd3 has dropped this watcher; cancelling it again would make it throw on the stream.
    let over = false;
    w.on('error', (e: unknown) => {
      over = true;
      ended(e);
    });
    return { cancel: () => (over ? Promise.resolve() : cancelWatcher(w, CANCEL_TIMEOUT_MS, this.time.timers)) };
  }

  async leaseTimeToLive(id: string): Promise<{ ttl: number; keys: string[] }> {
    const res = await this.client.leaseClient.leaseTimeToLive({ ID: id, keys: true });
    return { ttl: Number(res.TTL), keys: res.keys.map((k) => k.toString('utf8')) };
  }
}
