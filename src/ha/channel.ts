/**
 * What the leader and the standbys exchange through etcd:
 * - Published: the leader's fleet snapshot, one key per model and node under `<prefix>/published/`
 *   (guarded txns of what changed); every instance watches it (current value first, then every change).
 * - Requests: a standby's request for the leader (on-demand activation, retry, rollout override,
 *   restart) at `<prefix>/requests/<id>`, attached to a lease of the sender's so an unhandled one vanishes when
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
 *
 * Shell: Requests makes its etcd calls through RequestsIO (etcd-requests-io.ts; a fake in tests) and
 * its timeouts on the ShellTime it is given; Published on the timers it is given. This file reads no
 * clock and sets no timer of its own.
 */
import { randomUUID } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { LlmgwError, Reasons, reasonOf, type ReasonCode, type ReasonRef } from '../errors/catalogue.js';
import type { Election } from './election.js';
import { etcdError } from './etcd.js';
import type { Kv } from './etcd-leader-io.js';
import { Etcd3RequestsIO, type RequestsIO } from './etcd-requests-io.js';
import { lookAndWatch } from './look-and-watch.js';
import type { ShellTime } from './shell-time.js';

type WireResponse = { readonly ok: unknown } | { readonly error: ReasonRef };

function isReasonCode(code: string): code is ReasonCode {
  return Object.hasOwn(Reasons, code);
}

/** The kinds a standby forwards, and what each body must be (a typed union, checked on receipt). */
export type ForwardedRequest =
  | { readonly kind: 'demand'; readonly body: { readonly model: string } }
  | { readonly kind: 'touch'; readonly body: { readonly models: readonly string[] } }
  | { readonly kind: 'retry'; readonly body: { readonly model: string } }
  | { readonly kind: 'rollout'; readonly body: { readonly model: string; readonly how: 'promote' | 'abort'; readonly by: string } }
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
  rollout: { keys: ['model', 'how', 'by'], ok: (b) => NAME(b.model) && (b.how === 'promote' || b.how === 'abort') && NAME(b.by) },
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
export function leaseProblem(lease: { readonly ttl: number; readonly keys: readonly string[] }, requestKey: string): string | null {
  if (!(lease.ttl > 0)) return 'its sender\'s lease no longer exists (the sender gave up, or it never was an instance\'s)';
  if (!lease.keys.includes(requestKey)) return 'its sender\'s lease does not hold it';
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
  private readonly io: RequestsIO;

  constructor(
    client: Etcd3 | RequestsIO,
    prefix: string,
    private readonly from: string,
    private readonly time: ShellTime,
  ) {
    this.io = client instanceof Etcd3 ? new Etcd3RequestsIO(client, time) : client;
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
    const timers = this.time.timers;
    let watch: { cancel(): Promise<void> } | null = null;
    let leaseId: string | null = null;
    let timer: unknown = null;
    // One timer for the whole exchange: until the request is in etcd, etcd is what did not answer.
    let sent = false;
    const expired = new Promise<never>((_, reject) => {
      timer = timers.setTimeout(
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
    const etcd = <T>(p: Promise<T>): Promise<T> => within(p.catch((e: unknown) => Promise.reject(etcdError(e, `sending ${kind} to the leader`))));
    const granting = this.io.grantLease(Math.max(2, Math.ceil(timeoutMs / 1000) + 1));
    try {
      leaseId = await etcd(granting);
      let answered!: (text: string) => void;
      const answer = new Promise<string>((r) => (answered = r));
      const w = this.io.watchPuts(responseKey, (text) => answered(text));
      watch = w;
      // Wait until the watch is in place before the request can be answered.
      await within(w.connected);
      const msg = { id, kind, body, from: this.from, lease: leaseId } as WireRequest;
      await etcd(this.io.put(this.requestsPrefix + id, JSON.stringify(msg), leaseId));
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
      timers.clearTimeout(timer);
      // not awaited: the caller's answer does not wait on an etcd that may be gone
      if (watch) void watch.cancel();
      // Removes the request (if unhandled) and the answer with the lease (a grant still on its way: once it lands).
      const revoke = (l: string): void => void this.io.revokeLease(l).catch(() => undefined);
      if (leaseId !== null) revoke(leaseId);
      else void granting.then(revoke, () => undefined);
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
    const enqueue = (kv: Kv): void => {
      if (seen.has(kv.key)) return;
      seen.add(kv.key);
      chain = chain.then(() => (closed ? undefined : this.handleOne(election, kv, handle, onRefused))).finally(() => seen.delete(kv.key));
    };
    // Pending requests first (a compacted watch lists them again), then new ones.
    const close = await lookAndWatch('reading pending requests', this.time.timers, async (isClosed, ended) => {
      const res = await this.io.list(this.requestsPrefix);
      if (isClosed()) return null;
      const w = this.io.watchPrefix(this.requestsPrefix, res.revision + 1, enqueue, ended);
      for (const kv of res.kvs) enqueue(kv);
      return w;
    });
    return async () => {
      closed = true;
      await close();
      await chain;
    };
  }

  private async handleOne(election: Election, kv: Kv, handle: (m: RequestMsg) => Promise<unknown>, onRefused: (r: Refusal) => void): Promise<void> {
    const requestKey = kv.key;
    const checked = checkRequest(requestKey, kv.value, kv.lease);
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
      live = leaseProblem(await this.io.leaseTimeToLive(req.lease), requestKey);
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
        [
          { put: this.responsesPrefix + req.id, value: answerText(req.kind, response), lease: req.lease },
          { delete: requestKey },
        ],
        [{ key: requestKey, column: 'Mod', cmp: '==', value: kv.modRevision }],
        `answering ${req.kind} ${req.id}`,
      );
    } catch {
      // Deposed (the election says so and steps down) or etcd gone: the request stays for the next leader.
    }
  }
}

/** The most bytes of an answer's JSON: etcd takes 1.5 MiB in one request by default; this leaves room for the txn. */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/**
 * An answer as it goes into etcd: at most MAX_ANSWER_BYTES of JSON, or etcd would refuse the txn
 * and the sender wait out its timeout. A text answer (a replica's log) longer than that keeps its
 * end, from a line's start, after a line saying it was truncated; any other answer that large is
 * an error naming its size. Pure.
 */
export function answerText(kind: string, response: WireResponse, max: number = MAX_ANSWER_BYTES): string {
  const text = JSON.stringify(response);
  if (Buffer.byteLength(text) <= max) return text;
  if ('ok' in response && typeof response.ok === 'string') {
    const whole = response.ok;
    // JSON escapes (a log's colour codes: 6 bytes each) can take more than the text: cut until it fits
    for (let keep = max - 256; keep > 0; keep = Math.floor(keep / 2)) {
      const out = JSON.stringify({ ok: truncatedTail(whole, keep) });
      if (Buffer.byteLength(out) <= max) return out;
    }
  }
  const error: ReasonRef = { code: 'INTERNAL', message: `the leader's answer to ${kind} is ${Buffer.byteLength(text)} bytes, above the ${max} an answer through etcd may have` };
  return JSON.stringify({ error });
}

/** The end of `text` in at most about `keep` bytes, from a line's start, after a line saying how much was left out. */
export function truncatedTail(text: string, keep: number): string {
  const buf = Buffer.from(text, 'utf8');
  if (buf.length <= keep) return text;
  let from = buf.length - keep;
  const nl = buf.indexOf(0x0a, from);
  from = nl >= 0 && nl < buf.length - 1 ? nl + 1 : from;
  while (from < buf.length && (buf[from]! & 0xc0) === 0x80) from++; // not inside a character
  return `[llmgw: truncated: the first ${from} of ${buf.length} bytes are left out; an answer through a standby is at most 1 MiB (ask the leader for more)]\n${buf.subarray(from).toString('utf8')}`;
}
