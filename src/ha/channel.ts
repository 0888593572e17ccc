/**
 * What the leader and the standbys exchange through etcd:
 * - Published: the leader's fleet snapshot, one key per model and node under `<prefix>/published/`
 *   (guarded txns of what changed); every instance watches it (current value first, then every change).
 * - Requests: a standby's request for the leader (on-demand activation, retry, restart) at
 *   `<prefix>/requests/<id>`, attached to a lease of the sender's so an unhandled one vanishes when
 *   the sender gives up. The leader handles pending requests and then new ones, writes the answer
 *   to `<prefix>/responses/<id>` on the same lease (guarded by its epoch, and only while the request
 *   still exists) and deletes the request in the same txn. The sender waits for the answer.
 *
 * Every request is checked before it runs (checkRequest: the ForwardedRequest union, no unknown
 * fields, the sender's id and lease; then live, leaseProblem: that lease still exists and holds the
 * request); anything else is refused with a reason and deleted, never run.
 *
 * Delivery is at least once: a leader that dies after handling a request and before its txn lands
 * leaves it for the next leader. Handlers are idempotent by the request's id (retries are handled
 * once by id in the state record).
 */
import { randomUUID } from 'node:crypto';
import type { Etcd3, IKeyValue, Lease, Watcher } from 'etcd3';
import { LlmgwError, Reasons, reasonOf, type ReasonCode, type ReasonRef } from '../errors/catalogue.js';
import { cancelWatcher, type Election } from './election.js';
import { etcdError } from './etcd.js';
import { applyChanges, ETCD_LIMITS, HEAD, type EtcdLimits } from './keyed-layout.js';
import { DocWriter, readDoc, type DocWriteStats } from './keyed-store.js';
import { parsePublished, publishedEntries, publishedFromEntries, type EntryCache, type PublishedSnapshot } from './published.js';

const CANCEL_TIMEOUT_MS = 2_000;

/**
 * A look at etcd followed by a watch from the next revision, kept up for as long as it is open:
 * `look` reads what is there now (unless `closed()`) and returns a watcher from the revision after
 * its read. A watch etcd cancels (compacted past its revision) is replaced by a fresh look, so what
 * was seen may repeat but is never missed for good; etcd3 has dropped such a watcher already, and
 * cancelling it again would make etcd3 throw on the stream. Resolves to a closer.
 */
async function lookAndWatch(what: string, look: (closed: () => boolean) => Promise<Watcher | null>): Promise<() => Promise<void>> {
  let closed = false;
  let watcher: Watcher | null = null;
  let retry: NodeJS.Timeout | null = null;
  const open = async (): Promise<void> => {
    const w = await look(() => closed);
    if (!w) return;
    watcher = w;
    w.on('error', () => {
      if (watcher !== w) return;
      watcher = null;
      again();
    });
  };
  const again = (): void => {
    if (closed) return;
    retry = setTimeout(() => open().catch(again), 1_000);
  };
  try {
    await open();
  } catch (e) {
    throw etcdError(e, what);
  }
  return async () => {
    closed = true;
    if (retry) clearTimeout(retry);
    const w = watcher;
    watcher = null;
    if (w) await cancelWatcher(w, CANCEL_TIMEOUT_MS);
  };
}

/** Watches one key: the current value first, then every change (null: deleted). */
function watchKey(client: Etcd3, key: string, onValue: (v: string | null) => void): Promise<() => Promise<void>> {
  return lookAndWatch(`reading ${key}`, async (closed) => {
    const res = await client.get(key).exec();
    if (closed()) return null;
    const kv = res.kvs[0];
    onValue(kv ? kv.value.toString('utf8') : null);
    const w = client.watch().key(key).startRevision(String(Number(res.header.revision) + 1)).watcher();
    w.on('put', (k: IKeyValue) => onValue(k.value.toString('utf8')));
    w.on('delete', () => onValue(null));
    return w;
  });
}

/**
 * The leader's published snapshot, one key per model and node under `<prefix>/published/`
 * (keyed-layout.ts: diffs in guarded txns under etcd's limits, the head last). Every instance
 * watches it: one consistent range read, then the watch's changes, applied a whole save at a time
 * (when its head arrives), so a standby never routes from half of one save and half of another.
 *
 * The layout before it was one value at `<prefix>/snapshot`: a leader deletes it with its first
 * publish; a watcher reads it while no per-key snapshot exists (a leader of the old version).
 */
export class Published {
  readonly base: string;
  readonly legacyKey: string;
  private readonly writer: DocWriter;
  private legacyDeleted = false;
  private lastErrorValue: ReasonRef | null = null;

  constructor(
    private readonly election: Election,
    private readonly client: Etcd3,
    prefix: string,
    limits: EtcdLimits = ETCD_LIMITS,
  ) {
    this.base = `${prefix}/published`;
    this.legacyKey = `${prefix}/snapshot`;
    this.writer = new DocWriter(election, client, this.base, limits);
  }

  get writes(): number {
    return this.writer.stats.writes;
  }

  get stats(): DocWriteStats {
    return this.writer.stats;
  }

  /** Why the last publish failed (ETCD_VALUE_TOO_LARGE, LEADER_DEPOSED, ETCD_*), null after one that did not. */
  get lastError(): ReasonRef | null {
    return this.lastErrorValue;
  }

  /** Guarded txns of what changed since the last publish (nothing when nothing did). */
  async publish(p: PublishedSnapshot): Promise<void> {
    try {
      await this.writer.write(publishedEntries(p), 'publishing the fleet snapshot', this.legacyDeleted ? [] : [{ delete: this.legacyKey }]);
      this.legacyDeleted = true;
      this.lastErrorValue = null;
    } catch (e) {
      const r = reasonOf(e);
      this.lastErrorValue = { code: r.code, message: r.message };
      throw e;
    }
  }

  /**
   * Calls onValue with the current snapshot (null: none; `problem`: entries or a value this version
   * does not read), then after every complete save; resolves to a closer.
   */
  async watch(onValue: (p: PublishedSnapshot | null, problem: string | null) => void): Promise<() => Promise<void>> {
    let entries: Map<string, string> | null = null;
    const pending = new Map<string, string | null>();
    const cache: EntryCache = new Map();
    let legacy: { readonly p: PublishedSnapshot | null; readonly text: string } | null = null;
    const emit = (): void => {
      if (entries) {
        const { snapshot, bad } = publishedFromEntries(entries, cache);
        onValue(snapshot, snapshot === null ? `the published snapshot under ${this.base}/ is not one this version reads` : bad.length > 0 ? `published entries this version does not read (left out): ${bad.slice(0, 5).join(', ')}` : null);
      } else if (legacy) onValue(legacy.p, legacy.p ? null : `the published snapshot at ${this.legacyKey} is not one this version reads`);
      else onValue(null, null);
    };
    const prefix = `${this.base}/`;
    const closeNew = await lookAndWatch(`reading ${prefix}`, async (closed) => {
      const r = await readDoc(this.client, this.base);
      if (closed()) return null;
      // `raw`: the entries as of the read, then with each whole save applied; the view only once a save is whole
      let raw = new Map(r.view ?? r.present);
      entries = r.view ? raw : null;
      pending.clear();
      emit();
      const w = this.client.watch().prefix(prefix).startRevision(String(r.revision + 1)).watcher();
      w.on('put', (kv: IKeyValue) => {
        const name = kv.key.toString('utf8').slice(prefix.length);
        if (name !== HEAD) return void pending.set(name, kv.value.toString('utf8'));
        raw = applyChanges(raw, pending);
        entries = raw;
        pending.clear();
        emit();
      });
      w.on('delete', (kv: IKeyValue) => {
        const name = kv.key.toString('utf8').slice(prefix.length);
        if (name !== HEAD) return void pending.set(name, null);
        entries = null;
        emit();
      });
      return w;
    });
    let closeLegacy: () => Promise<void>;
    try {
      closeLegacy = await watchKey(this.client, this.legacyKey, (v) => {
        legacy = v === null ? null : { p: parsePublished(v), text: v };
        if (!entries) emit();
      });
    } catch (e) {
      await closeNew();
      throw e;
    }
    return async () => {
      await Promise.all([closeNew(), closeLegacy()]);
    };
  }
}

type WireResponse = { readonly ok: unknown } | { readonly error: ReasonRef };

function isReasonCode(code: string): code is ReasonCode {
  return Object.hasOwn(Reasons, code);
}

/** The kinds a standby forwards, and what each body must be (a typed union, checked on receipt). */
export type ForwardedRequest =
  | { readonly kind: 'demand'; readonly body: { readonly model: string } }
  | { readonly kind: 'touch'; readonly body: { readonly models: readonly string[] } }
  | { readonly kind: 'retry'; readonly body: { readonly model: string } }
  | { readonly kind: 'restart'; readonly body: { readonly all?: boolean; readonly model?: string; readonly replicas?: readonly string[] } }
  | { readonly kind: 'restart-done'; readonly body: { readonly ids: readonly string[] } }
  | { readonly kind: 'logs'; readonly body: { readonly replica: string; readonly lines?: number } }
  | { readonly kind: 'pass'; readonly body: { readonly trigger: string } };

/** A forwarded request as the leader runs it: checked (checkRequest), with its id and the sending instance's id. */
export type RequestMsg = ForwardedRequest & { readonly id: string; readonly from: string };

/** As etcd holds it: with the sender's lease, the one the request and its answer are attached to. */
type WireRequest = RequestMsg & { readonly lease: string };

/** The body of a kind of request. */
export type RequestBody<K extends ForwardedRequest['kind']> = Extract<ForwardedRequest, { kind: K }>['body'];

const NAME = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 256;
const NAMES = (v: unknown): v is string[] => Array.isArray(v) && v.length <= 10_000 && v.every(NAME);
const SHAPES: Record<ForwardedRequest['kind'], { readonly keys: readonly string[]; readonly ok: (b: Record<string, unknown>) => boolean }> = {
  demand: { keys: ['model'], ok: (b) => NAME(b.model) },
  touch: { keys: ['models'], ok: (b) => NAMES(b.models) },
  retry: { keys: ['model'], ok: (b) => NAME(b.model) },
  restart: { keys: ['all', 'model', 'replicas'], ok: (b) => (b.all === undefined || typeof b.all === 'boolean') && (b.model === undefined || NAME(b.model)) && (b.replicas === undefined || NAMES(b.replicas)) },
  'restart-done': { keys: ['ids'], ok: (b) => NAMES(b.ids) },
  logs: { keys: ['replica', 'lines'], ok: (b) => NAME(b.replica) && (b.lines === undefined || (Number.isSafeInteger(b.lines) && (b.lines as number) > 0 && (b.lines as number) <= 100_000)) },
  pass: { keys: ['trigger'], ok: (b) => NAME(b.trigger) },
};

/**
 * A request as etcd holds it, checked before anything runs: its fields, its kind and body (the
 * ForwardedRequest union, no unknown keys), its id the key's, and attached to the very lease it
 * names (etcd attaches a put only to a live lease: a request written without one — by hand, or by
 * anyone but a sending instance — is refused). Else why not.
 */
export function checkRequest(key: string, value: string, kvLease: string): { readonly req: WireRequest } | { readonly why: string } {
  let v: Partial<WireRequest>;
  try {
    v = JSON.parse(value) as Partial<WireRequest>;
  } catch {
    return { why: 'not JSON' };
  }
  if (typeof v !== 'object' || v === null) return { why: 'not an object' };
  if (typeof v.id !== 'string' || !/^[0-9a-f-]{36}$/.test(v.id) || !key.endsWith(`/${v.id}`)) return { why: 'its id is not a request id, or not its key\'s' };
  if (!NAME(v.from)) return { why: 'no sender instance id' };
  if (typeof v.lease !== 'string' || !/^[1-9][0-9]{0,19}$/.test(v.lease)) return { why: 'no sender lease' };
  if (kvLease !== v.lease) return { why: `not attached to the sender's lease ${v.lease} (attached to ${kvLease === '0' ? 'none' : kvLease})` };
  if (typeof v.kind !== 'string' || !Object.hasOwn(SHAPES, v.kind)) return { why: `unknown kind ${JSON.stringify(String(v.kind).slice(0, 40))}` };
  const shape = SHAPES[v.kind as ForwardedRequest['kind']];
  const body = v.body;
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { why: `${v.kind}: the body is not an object` };
  const extra = Object.keys(body).filter((k) => !shape.keys.includes(k));
  if (extra.length > 0) return { why: `${v.kind}: unknown body fields ${extra.slice(0, 5).join(', ')}` };
  if (!shape.ok(body as Record<string, unknown>)) return { why: `${v.kind}: a malformed body` };
  // the shape just checked is the union's member for this kind
  return { req: { id: v.id, kind: v.kind, body, from: v.from, lease: v.lease } as WireRequest };
}

/**
 * Why a request's lease, as etcd describes it now, is not the live lease of the sender that wrote the
 * request (expired, revoked, or not the one holding `requestKey`), or null.
 */
export function leaseProblem(ttl: { readonly TTL: string; readonly keys: readonly Buffer[] }, requestKey: string): string | null {
  if (!(Number(ttl.TTL) > 0)) return 'its sender\'s lease no longer exists (the sender gave up, or it never was an instance\'s)';
  if (!ttl.keys.some((k) => k.toString('utf8') === requestKey)) return 'its sender\'s lease does not hold it';
  return null;
}

/** A request the leader did not run: its key and why; `live`: it passed checkRequest and its lease failed the live check (most often its sender gave up waiting). */
export interface Refusal {
  readonly key: string;
  readonly why: string;
  readonly live?: boolean;
}

export class Requests {
  private readonly requestsPrefix: string;
  private readonly responsesPrefix: string;

  constructor(
    private readonly client: Etcd3,
    prefix: string,
    private readonly from: string,
  ) {
    this.requestsPrefix = `${prefix}/requests/`;
    this.responsesPrefix = `${prefix}/responses/`;
  }

  /**
   * Sends a request to the leader and waits for its answer, all of it within timeoutMs. Rejects with
   * the LlmgwError the leader's handler failed with; ETCD_* when etcd did not take the request in
   * time (the lease, the watch for the answer, the put), LEADER_UNAVAILABLE when no leader answered.
   */
  async send<K extends ForwardedRequest['kind']>(kind: K, body: RequestBody<K>, timeoutMs: number): Promise<unknown> {
    const id = randomUUID();
    const responseKey = this.responsesPrefix + id;
    const lease: Lease = this.client.lease(Math.max(2, Math.ceil(timeoutMs / 1000) + 1), { autoKeepAlive: false });
    lease.on('lost', () => undefined);
    let watcher: Watcher | null = null;
    let timer: NodeJS.Timeout | undefined;
    // One timer for the whole exchange: until the request is in etcd, etcd is what did not answer.
    let sent = false;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            sent
              ? new LlmgwError('LEADER_UNAVAILABLE', `no leader answered the ${kind} request within ${timeoutMs} ms`, { kind, timeoutMs })
              : new LlmgwError('ETCD_UNAVAILABLE', `sending ${kind} to the leader: etcd did not take the request within ${timeoutMs} ms`, { kind, timeoutMs }),
          ),
        Math.max(0, timeoutMs),
      );
    });
    expired.catch(() => undefined);
    const within = <T>(p: Promise<T>): Promise<T> => Promise.race([p, expired]);
    try {
      const leaseId = await within(lease.grant().catch((e: unknown) => Promise.reject(etcdError(e, `sending ${kind} to the leader`))));
      let answered!: (text: string) => void;
      const answer = new Promise<string>((r) => (answered = r));
      const w = this.client.watch().key(responseKey).only('put').watcher();
      watcher = w;
      w.on('put', (kv: IKeyValue) => answered(kv.value.toString('utf8')));
      w.on('error', () => undefined); // a watch etcd ends: the timer answers (an unheard 'error' would throw)
      // Wait until the watch is in place before the request can be answered.
      await within(new Promise<void>((resolve) => w.once('connected', () => resolve())));
      const msg = { id, kind, body, from: this.from, lease: leaseId } as WireRequest;
      await within(
        this.client
          .put(this.requestsPrefix + id)
          .value(JSON.stringify(msg))
          .lease(leaseId)
          .exec()
          .catch((e: unknown) => Promise.reject(etcdError(e, `sending ${kind} to the leader`))),
      );
      sent = true;
      const text = await within(answer);
      let res: WireResponse;
      try {
        res = JSON.parse(text) as WireResponse;
      } catch {
        throw new LlmgwError('INTERNAL', `the leader's answer to ${kind} is not JSON`);
      }
      if ('error' in res) {
        const code = isReasonCode(res.error.code) ? res.error.code : 'INTERNAL';
        throw new LlmgwError(code, res.error.message, { fromLeader: true });
      }
      return res.ok;
    } finally {
      clearTimeout(timer);
      // not awaited: the caller's answer does not wait on an etcd that may be gone
      if (watcher) void cancelWatcher(watcher, CANCEL_TIMEOUT_MS);
      // Removes the request (if unhandled) and the answer with the lease.
      lease.revoke({ deadline: new Date(Date.now() + CANCEL_TIMEOUT_MS) }).catch(() => undefined);
    }
  }

  /**
   * Serves requests as the leader: those pending first, then new ones, one at a time in revision
   * order. Call it when elected; close it when deposed. A request that arrives while this instance
   * does not lead is left for the next leader. Resolves to a closer once watching.
   */
  async serve(election: Election, handle: (m: RequestMsg) => Promise<unknown>, onRefused: (r: Refusal) => void = () => undefined): Promise<() => Promise<void>> {
    let closed = false;
    let chain: Promise<void> = Promise.resolve();
    const seen = new Set<string>();
    const enqueue = (kv: IKeyValue): void => {
      const key = kv.key.toString('utf8');
      if (seen.has(key)) return;
      seen.add(key);
      chain = chain.then(() => (closed ? undefined : this.handleOne(election, kv, handle, onRefused))).finally(() => seen.delete(key));
    };
    // Pending requests first (a compacted watch lists them again), then new ones.
    const close = await lookAndWatch('reading pending requests', async (isClosed) => {
      const res = await this.client.getAll().prefix(this.requestsPrefix).sort('Mod', 'Ascend').exec();
      if (isClosed()) return null;
      const w = this.client.watch().prefix(this.requestsPrefix).only('put').startRevision(String(Number(res.header.revision) + 1)).watcher();
      w.on('put', (kv: IKeyValue) => enqueue(kv));
      for (const kv of res.kvs) enqueue(kv);
      return w;
    });
    return async () => {
      closed = true;
      await close();
      await chain;
    };
  }

  private async handleOne(election: Election, kv: IKeyValue, handle: (m: RequestMsg) => Promise<unknown>, onRefused: (r: Refusal) => void): Promise<void> {
    const requestKey = kv.key.toString('utf8');
    const checked = checkRequest(requestKey, kv.value.toString('utf8'), String(kv.lease ?? '0'));
    if (!election.isLeader()) return;
    if ('why' in checked) {
      // refused, never run: unknown, malformed, or not sent by an instance holding its lease
      onRefused({ key: requestKey, why: checked.why });
      await election.guardedDelete(requestKey).catch(() => undefined);
      return;
    }
    const req = checked.req;
    // checked live, just before it runs: its lease still exists in etcd and holds this very request
    let live: string | null;
    try {
      live = leaseProblem(await this.client.leaseClient.leaseTimeToLive({ ID: req.lease, keys: true }), requestKey);
    } catch {
      return; // etcd did not answer: the request stays (for this leader's next look, or the next leader)
    }
    if (live !== null) {
      onRefused({ key: requestKey, why: live, live: true });
      await election.guardedDelete(requestKey).catch(() => undefined);
      return;
    }
    let response: WireResponse;
    try {
      const { lease: _lease, ...msg } = req;
      response = { ok: (await handle(msg)) ?? null };
    } catch (e) {
      response = { error: reasonOf(e) };
    }
    try {
      // Only while the request exists (its sender's lease lives), so the answer's lease does too.
      await election.guardedTxn(
        [this.client.put(this.responsesPrefix + req.id).value(JSON.stringify(response)).lease(req.lease), this.client.delete().key(requestKey)],
        [{ key: requestKey, column: 'Mod', cmp: '==', value: Number(kv.mod_revision) }],
        `answering ${req.kind} ${req.id}`,
      );
    } catch {
      // Deposed (the election says so and steps down) or etcd gone: the request stays for the next leader.
    }
  }
}
