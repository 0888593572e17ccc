/**
 * The upstream half of the router: one undici Pool (keep-alive) per replica endpoint, least-busy
 * replica selection, and `ProxyCall`, a low-level undici dispatch handler that streams the replica's
 * response to the client's raw ServerResponse chunk by chunk:
 *
 * - backpressure: when the client's socket buffer is full, the upstream read is paused until 'drain';
 * - a client that goes away aborts the upstream request (llama-server then cancels the generation);
 * - a connect failure, or a connection closed before any response byte, retries on another ready
 *   replica (each at most once) and marks the failed one down for a moment; a reset connection is
 *   first retried once on the same replica (a keep-alive connection it had just closed), so a
 *   conversation is not moved off its prompt cache by a stale socket;
 * - distinct timeouts: connect (UPSTREAM_CONNECT), first byte / response headers
 *   (UPSTREAM_FIRST_BYTE_TIMEOUT) and a stream idle for too long (UPSTREAM_STALLED); after the
 *   headers went out an SSE stream gets a final `data: {"error":…}` event, other bodies are cut;
 * - only a small allowlist of upstream response headers is forwarded (nothing that could echo the
 *   engine API key); the engine key goes upstream as `Authorization: Bearer`, the client's never does.
 */
import type { ServerResponse } from 'node:http';
import { Pool, type Dispatcher } from 'undici';
import { NO_REASON, type RouterMetrics } from '../metrics/ports.js';
import type { ReplicaView } from '../reconciler/view.js';
import { chooseSticky, Ring, StickyKeys, type ReplicaLoads, type StickyEntry } from './affinity.js';
import { RouterError, renderFor, sseEvent, writeRendered, type RouterReasonCode } from './errors.js';
import { ReplicaTimes } from './move.js';
import type { WaitQueue } from './queue.js';
import { promptTokensOf, slotTimesOf, USAGE_TAIL_BYTES } from './usage.js';

export interface UpstreamTimeouts {
  /** TCP connect to a replica. */
  readonly connectTimeoutMs: number;
  /** From sending the request to the response headers (for llama-server: to the first byte). */
  readonly firstByteTimeoutMs: number;
  /** Longest gap between two body chunks before a stream counts as stalled. */
  readonly streamIdleTimeoutMs: number;
}

/** How long a replica that refused a connection is avoided when another is available. */
export const DOWN_FOR_MS = 2000;
/** Pools unused for this long (and idle) are closed by the sweep. */
export const POOL_IDLE_CLOSE_MS = 5 * 60_000;

export class Upstream {
  /** Requests in flight to this replica (least-busy selection). */
  inFlight = 0;
  /** performance.now() until which the replica is avoided after a connect failure. */
  downUntil = 0;
  /** performance.now() of the last request. */
  lastUsed = 0;
  /**
   * Requests other routers have on this replica, as its GET /slots last said (busy slots beyond this
   * router's own in-flight requests, the smaller of the last two readings, so a reading that raced a
   * response's end does not count); 0 where /slots is not exposed. See slots.ts.
   */
  external = 0;
  /** Slots the replica reported in its last GET /slots (0: not known). */
  reportedSlots = 0;
  /** Its slot time and evaluation speed, from its responses' timings (for weighing a move, move.ts). */
  readonly times = new ReplicaTimes();
  readonly pool: Pool;
  /** Path prefix of the endpoint ('' for http://host:port). */
  readonly prefix: string;
  constructor(
    readonly endpoint: string,
    t: UpstreamTimeouts,
  ) {
    const u = new URL(endpoint);
    this.prefix = u.pathname === '/' ? '' : u.pathname.replace(/\/+$/, '');
    this.pool = new Pool(u.origin, {
      connect: { timeout: t.connectTimeoutMs },
      headersTimeout: t.firstByteTimeoutMs,
      bodyTimeout: t.streamIdleTimeoutMs,
    });
  }
}

/** The load of a replica for choosing: this router's requests on it, plus other routers' as /slots said. */
export function loadOf(u: Upstream | undefined): number {
  return u === undefined ? 0 : u.inFlight + u.external;
}

/** A model's ring, kept while its ready replicas stay the same. */
interface CachedRing {
  readonly ids: string[];
  readonly ring: Ring;
}

export class Upstreams {
  private readonly byEndpoint = new Map<string, Upstream>();
  private rr = 0;
  private readonly rings = new Map<string, CachedRing>();
  /** Per model: where each affinity key was served last. */
  private readonly sticky = new Map<string, StickyKeys>();
  /** `choose`'s view of the replicas of the current call (one object, reused: no allocation per request). */
  private readonly loads = new (class implements ReplicaLoads {
    replicas: readonly ReplicaView[] = [];
    upstreams: Map<string, Upstream> = new Map();
    exclude: ReadonlySet<string> | null = null;
    now = 0;
    slotCount = Infinity;
    usable(i: number): boolean {
      const r = this.replicas[i]!;
      if (this.exclude !== null && this.exclude.has(r.endpoint)) return false;
      const u = this.upstreams.get(r.endpoint);
      return u === undefined || u.downUntil <= this.now;
    }
    load(i: number): number {
      return loadOf(this.upstreams.get(this.replicas[i]!.endpoint));
    }
    slots(): number {
      return this.slotCount;
    }
    slotSeconds(i: number): number {
      return this.upstreams.get(this.replicas[i]!.endpoint)?.times.slotSeconds ?? 0;
    }
    secondsPerToken(i: number): number {
      return this.upstreams.get(this.replicas[i]!.endpoint)?.times.secondsPerToken ?? 0;
    }
  })();

  /** The endpoints with a pool (for the /slots refresh). */
  all(): IterableIterator<Upstream> {
    return this.byEndpoint.values();
  }
  constructor(private readonly timeouts: UpstreamTimeouts) {}

  get(endpoint: string): Upstream {
    let u = this.byEndpoint.get(endpoint);
    if (!u) {
      u = new Upstream(endpoint, this.timeouts);
      this.byEndpoint.set(endpoint, u);
    }
    return u;
  }

  /** Other routers' requests on an endpoint, as its /slots said (for tests and status). */
  external(endpoint: string): number {
    return this.byEndpoint.get(endpoint)?.external ?? 0;
  }

  /** In-flight requests per endpoint (for tests and status). */
  inFlight(endpoint: string): number {
    return this.byEndpoint.get(endpoint)?.inFlight ?? 0;
  }

  /**
   * The least-busy replica not in `exclude`; replicas marked down lose to any other. Ties rotate,
   * so equal replicas share the load. `now` is performance.now().
   */
  pick(replicas: readonly ReplicaView[], exclude: ReadonlySet<string> | null, now: number): ReplicaView | null {
    const n = replicas.length;
    if (n === 1) {
      const r = replicas[0]!;
      return exclude !== null && exclude.has(r.endpoint) ? null : r;
    }
    this.rr = (this.rr + 1) & 0x3fffffff;
    const start = this.rr % n;
    let best: ReplicaView | null = null;
    let bestScore = Infinity;
    for (let i = 0; i < n; i++) {
      const r = replicas[(start + i) % n]!;
      if (exclude !== null && exclude.has(r.endpoint)) continue;
      const u = this.byEndpoint.get(r.endpoint);
      const score = u === undefined ? 0 : u.inFlight + u.external + (u.downUntil > now ? 1e9 : 0);
      if (score < bestScore) {
        best = r;
        bestScore = score;
        if (score === 0) break;
      }
    }
    return best;
  }

  /**
   * The replica for an affinity key among `replicas` (each with `slots` slots; Infinity when unknown),
   * skipping those in `exclude` and those marked down: where the key was served last, or by consistent
   * hashing with bounded load, a move off a busy replica weighed by its cost (affinity.ts, move.ts);
   * `home` says whether it stayed (an affinity hit). With `freeSlotOnly` (a request that waited in
   * the queue) only replicas with a free slot are considered, and the key's last replica where
   * waiting for its slot costs less than moving. Null when none is usable (the caller then falls back
   * to `pick`, which also tries replicas marked down).
   */
  affine(model: string, replicas: readonly ReplicaView[], key: number, slots: number, exclude: ReadonlySet<string> | null, now: number, freeSlotOnly = false): { replica: ReplicaView; home: boolean; entry: StickyEntry } | null {
    const ring = this.ringFor(model, replicas);
    const l = this.loads;
    l.replicas = replicas;
    l.upstreams = this.byEndpoint;
    l.exclude = exclude;
    l.now = now;
    l.slotCount = slots;
    let keys = this.sticky.get(model);
    if (keys === undefined) {
      keys = new StickyKeys();
      if (this.sticky.size > 10_000) this.sticky.clear();
      this.sticky.set(model, keys);
    }
    const seen = keys.get(key);
    let last = -1;
    if (seen !== undefined) for (let i = 0; i < replicas.length; i++) if (replicas[i]!.id === seen.id) last = i;
    const c = chooseSticky(ring, key, { last, shared: seen !== undefined && seen.active > 0, tokens: last >= 0 ? seen!.tokens : 0, freeSlotOnly: freeSlotOnly && slots !== Infinity }, l);
    l.replicas = [];
    l.exclude = null;
    if (c.index < 0) return null;
    const replica = replicas[c.index]!;
    const entry = keys.set(key, replica.id);
    entry.active++;
    return { replica, home: c.home, entry };
  }

  private ringFor(model: string, replicas: readonly ReplicaView[]): Ring {
    const cached = this.rings.get(model);
    if (cached !== undefined && cached.ids.length === replicas.length) {
      let same = true;
      for (let i = 0; i < replicas.length; i++) {
        if (cached.ids[i] !== replicas[i]!.id) {
          same = false;
          break;
        }
      }
      if (same) return cached.ring;
    }
    const ids = replicas.map((r) => r.id);
    const ring = new Ring(ids);
    if (this.rings.size > 10_000) this.rings.clear();
    this.rings.set(model, { ids, ring });
    return ring;
  }

  /** True when some replica not marked down has a free slot (`slots` each; always with unknown slots). */
  hasFreeSlot(replicas: readonly ReplicaView[], slots: number, now: number): boolean {
    if (slots === Infinity) return true;
    let anyUp = false;
    for (const r of replicas) {
      const u = this.byEndpoint.get(r.endpoint);
      if (u !== undefined && u.downUntil > now) continue;
      anyUp = true;
      if (loadOf(u) < slots) return true;
    }
    // every replica marked down: not "busy"; the request goes on and tries them
    return !anyUp;
  }

  /** Closes pools that are idle and unused for `idleMs` (`now` from performance.now()). */
  sweep(now: number, idleMs = POOL_IDLE_CLOSE_MS): void {
    for (const [endpoint, u] of this.byEndpoint) {
      if (u.inFlight === 0 && now - u.lastUsed > idleMs) {
        this.byEndpoint.delete(endpoint);
        void u.pool.close().catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    const pools = [...this.byEndpoint.values()].map((u) => u.pool);
    this.byEndpoint.clear();
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
  }
}

export type UpstreamFailure = 'connect' | 'connect_timeout' | 'reset' | 'first_byte_timeout' | 'stall_timeout' | 'auth' | 'error';

const CONNECT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN', 'EADDRNOTAVAIL', 'ENOTFOUND', 'EAI_AGAIN']);
const RESET_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED', 'ECONNABORTED']);

/** What kind of upstream failure an undici error is. */
export function classifyUpstreamError(err: unknown): UpstreamFailure {
  let e = err as { code?: unknown; cause?: unknown } | null;
  for (let depth = 0; e && depth < 3; depth++) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (code === 'UND_ERR_CONNECT_TIMEOUT') return 'connect_timeout';
    if (code === 'UND_ERR_HEADERS_TIMEOUT') return 'first_byte_timeout';
    if (code === 'UND_ERR_BODY_TIMEOUT') return 'stall_timeout';
    if (CONNECT_CODES.has(code)) return 'connect';
    if (RESET_CODES.has(code)) return 'reset';
    e = e.cause as typeof e;
  }
  return 'error';
}

/** Failures before any response byte after which another replica is tried. */
export function isRetryableBeforeResponse(f: UpstreamFailure): boolean {
  return f === 'connect' || f === 'connect_timeout' || f === 'reset';
}

/**
 * The catalogue code of a failed attempt (what `llmgw_router_upstream_errors_total{reason}` counts):
 * the error the client gets if no other replica is tried. A failure before any response byte that is
 * retried on another replica is a connect failure; the finer kind stays in the log.
 */
export function upstreamReason(f: UpstreamFailure, responded: boolean): RouterReasonCode {
  if (f === 'auth') return 'UPSTREAM_AUTH';
  if (!responded && isRetryableBeforeResponse(f)) return 'UPSTREAM_CONNECT';
  if (f === 'first_byte_timeout') return 'UPSTREAM_FIRST_BYTE_TIMEOUT';
  if (f === 'stall_timeout') return 'UPSTREAM_STALLED';
  return 'UPSTREAM_FAILED';
}

/** Upstream response headers passed to the client; everything else (server, CORS, auth echoes…) is dropped. */
const FORWARD_HEADERS = ['content-type', 'content-length', 'content-encoding', 'cache-control', 'retry-after'] as const;

/**
 * The calls in flight, as an intrusive doubly-linked list: O(1) add/remove with no hashing and no
 * table churn (a Set of short-lived objects measurably costs GC time at saturation).
 */
export class ActiveCalls {
  size = 0;
  /** @internal */
  head: ProxyCall | null = null;

  add(c: ProxyCall): void {
    c.prev = null;
    c.next = this.head;
    if (this.head) this.head.prev = c;
    this.head = c;
    this.size++;
  }

  delete(c: ProxyCall): void {
    if (c.prev) c.prev.next = c.next;
    else if (this.head === c) this.head = c.next;
    else return; // not in the list
    if (c.next) c.next.prev = c.prev;
    c.prev = null;
    c.next = null;
    this.size--;
  }

  toArray(): ProxyCall[] {
    const out: ProxyCall[] = [];
    for (let c = this.head; c; c = c.next) out.push(c);
    return out;
  }
}

/** In-flight proxied requests of one model; one mutable counter per model, looked up once per request. */
export interface ModelCounter {
  n: number;
  /** Moving average of a request's time on a replica (dispatch to end), in seconds; 0 before the first. */
  serviceSeconds: number;
  /** Requests waiting for a free slot (core.ts), created on first use. */
  queue: WaitQueue<unknown> | null;
}

/** Weight of the latest request in `serviceSeconds`. */
const SERVICE_EWMA = 0.2;

/** Shared by every ProxyCall of one router. */
export interface ProxyContext {
  readonly upstreams: Upstreams;
  readonly metrics: RouterMetrics;
  /** Calls in flight (graceful shutdown waits for them, then aborts the rest). */
  readonly active: ActiveCalls;
  /** In-flight proxied requests per model (for max_concurrency). */
  readonly modelInFlight: Map<string, ModelCounter>;
  /** True once the router is shutting down: responses say `connection: close`. */
  shuttingDown: boolean;
  /** Called when `active` shrinks. */
  onIdle: (() => void) | null;
  /** Called when a call of the model ends (its slot is free): the queue's turn. */
  onRelease: ((model: string, counter: ModelCounter) => void) | null;
  readonly log: { warn(obj: object, msg: string): void };
  /**
   * keys hook (usage and per-key limits, core.ts): called once per call as it ends, with the
   * replica that answered and the last bytes of a 200 response (null: none kept), where the
   * replica reported its token usage.
   */
  readonly onUsage?: ((res: ServerResponse, replica: string, tail: string | null) => void) | null;
}

class ClientGone extends Error {
  constructor() {
    super('client went away');
    this.name = 'ClientGone';
  }
}

/** Status recorded for a request whose client went away (as nginx does). */
export const CLIENT_CLOSED_STATUS = 499;

/** The in-flight counter of a model (created on first use; one per model name, never removed). */
export function modelCounter(ctx: ProxyContext, model: string): ModelCounter {
  let c = ctx.modelInFlight.get(model);
  if (!c) {
    c = { n: 0, serviceSeconds: 0, queue: null };
    ctx.modelInFlight.set(model, c);
  }
  return c;
}

/**
 * The allowlisted names by length (their lengths differ: 11, 12, 13, 14, 16), so each upstream header
 * is compared with at most one name, and most (date, server, connection…) with none.
 */
const FORWARD_BY_LENGTH: ({ name: string; bytes: Buffer } | undefined)[] = [];
for (const name of FORWARD_HEADERS) {
  if (FORWARD_BY_LENGTH[name.length]) throw new Error(`two forwarded header names of length ${name.length}`);
  FORWARD_BY_LENGTH[name.length] = { name, bytes: Buffer.from(name, 'latin1') };
}

/** True when a raw header name equals `lower` (lowercase ASCII, same length), ignoring case; no string is made. */
function nameIs(n: Buffer, lower: Buffer): boolean {
  for (let i = 0; i < n.length; i++) {
    const c = n[i]!;
    if ((c >= 65 && c <= 90 ? c + 32 : c) !== lower[i]) return false;
  }
  return true;
}

/** The upstream response headers passed on, picked out of undici's raw [name, value, …] Buffers. */
export function forwardedHeaders(raw: readonly Buffer[], out: Record<string, string>): void {
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const n = raw[i]!;
    const f = FORWARD_BY_LENGTH[n.length];
    if (f !== undefined && out[f.name] === undefined && nameIs(n, f.bytes)) out[f.name] = raw[i + 1]!.toString('latin1');
  }
}

/**
 * One client request proxied to a model's ready replicas: an undici dispatch handler.
 *
 * It implements the handler methods undici's own request/stream APIs use (onConnect, onHeaders,
 * onData, onComplete, onError; typed @deprecated in undici 7 in favour of onRequestStart & co.).
 * A handler with the newer methods is wrapped per request in an adapter that parses every response's
 * headers into an object and keeps the raw header Buffers for the life of the request: measurable CPU
 * per request and about 2 KB of heap per open stream (measured with heap snapshots under
 * bench/router.bench.ts's stream load).
 */
export class ProxyCall implements Dispatcher.DispatchHandler {
  /** @internal ActiveCalls links */
  prev: ProxyCall | null = null;
  /** @internal */
  next: ProxyCall | null = null;
  private counter: ModelCounter | null = null;
  /** undici's abort for the current attempt (set in onConnect). */
  private abortUpstream: ((err?: Error) => void) | null = null;
  /** undici's resume for a paused response (set in onHeaders). */
  private resumeUpstream: (() => void) | null = null;
  private upstream: Upstream | null = null;
  private replica: ReplicaView | null = null;
  private tried: Set<string> | null = null;
  /** True once a reset connection was retried on the same replica. */
  private retriedSame = false;
  private responded = false;
  private gotByte = false;
  private sse = false;
  private status = 0;
  private done = false;
  private abortReason: Error | null = null;
  /** performance.now() when the call went upstream (after any wait in the queue). */
  private dispatchedAt = 0;
  /** The last chunks of a response whose prompt tokens are counted (null: not counted). */
  private tail: Buffer[] | null = null;
  private tailBytes = 0;
  /** keys hook: the response's last bytes for onUsage. */
  private usageTail: string | null = null;
  /** The affinity key's entry, counting this call while it is in flight (set by the caller or a retry). */
  sticky: StickyEntry | null = null;
  private readonly resumeFn = (): void => {
    this.resumeUpstream?.();
  };
  private readonly onClientClose = (): void => {
    if (!this.res.writableFinished) this.abort(new ClientGone());
  };

  constructor(
    private readonly ctx: ProxyContext,
    private readonly model: string,
    private readonly path: string,
    private readonly headers: Record<string, string>,
    private readonly body: Buffer,
    private readonly replicas: readonly ReplicaView[],
    private readonly res: ServerResponse,
    /** performance.now() at the request's arrival. */
    private readonly t0: number,
    /** The request's affinity key (null: least-busy), for a retry on another replica. */
    private readonly key: number | null = null,
    /** Slots per replica (Infinity: unknown). */
    private readonly slots = Infinity,
    /** Read the prompt tokens off the response's end (chat and completion requests). */
    private readonly countTokens = false,
  ) {}

  /** Starts the call; `first` is the replica picked by the caller. */
  start(first: ReplicaView): void {
    this.ctx.active.add(this);
    this.counter = modelCounter(this.ctx, this.model);
    this.counter.n++;
    this.dispatchedAt = performance.now();
    this.ctx.metrics.inFlight(this.model, 1);
    if (this.res.destroyed) {
      // the client left before anything was sent upstream (e.g. while its model was activating)
      this.finish(CLIENT_CLOSED_STATUS, NO_REASON);
      return;
    }
    this.res.on('close', this.onClientClose);
    this.attempt(first);
  }

  /** Aborts the call (client gone, shutdown). */
  abort(reason: Error): void {
    if (this.done || this.abortReason) return;
    this.abortReason = reason;
    if (this.abortUpstream) this.abortUpstream(reason);
  }

  private attempt(r: ReplicaView): void {
    const u = this.ctx.upstreams.get(r.endpoint);
    this.upstream = u;
    this.replica = r;
    this.abortUpstream = null;
    this.resumeUpstream = null;
    u.inFlight++;
    u.lastUsed = performance.now();
    u.pool.dispatch({ path: u.prefix + this.path, method: 'POST', headers: this.headers, body: this.body }, this);
  }

  private releaseUpstream(): void {
    if (this.upstream) {
      this.upstream.inFlight--;
      this.upstream = null;
    }
  }

  // --- undici dispatch handler ---

  onConnect(abort: (err?: Error) => void): void {
    this.abortUpstream = abort;
    if (this.abortReason) abort(this.abortReason);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx
    this.responded = true;
    if (statusCode === 401 || statusCode === 403) {
      // the replica refused the engine key: never hand its "invalid API key" to the client as if it were theirs
      this.abortUpstream?.(new RouterError('UPSTREAM_AUTH', `The replica of model '${this.model}' refused llmgw's engine API key (HTTP ${statusCode}).`, { model: this.model }));
      return false;
    }
    this.status = statusCode;
    this.resumeUpstream = resume;
    if ((this.countTokens || this.ctx.onUsage) && statusCode === 200) this.tail = [];
    const out: Record<string, string> = { 'x-llmgw-replica': this.replica!.id };
    forwardedHeaders(rawHeaders, out);
    const ct = out['content-type'];
    this.sse = ct !== undefined && ct.startsWith('text/event-stream');
    if (this.ctx.shuttingDown) out['connection'] = 'close';
    this.res.writeHead(statusCode, out);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (!this.gotByte) {
      this.gotByte = true;
      this.ctx.metrics.timeToFirstToken(this.model, (performance.now() - this.t0) / 1000);
    }
    const tail = this.tail;
    if (tail !== null) {
      tail.push(chunk);
      this.tailBytes += chunk.length;
      while (tail.length > 1 && this.tailBytes - tail[0]!.length >= USAGE_TAIL_BYTES) this.tailBytes -= tail.shift()!.length;
    }
    // node's ServerResponse.write corks the socket until the next tick, so the chunks and the end
    // that arrive in one tick (headers included) leave in one write
    if (this.res.write(chunk)) return true;
    this.res.once('drain', this.resumeFn);
    return false;
  }

  onComplete(): void {
    const u = this.upstream;
    this.releaseUpstream();
    if (this.tail !== null && this.tail.length > 0) {
      const t = this.tail.length === 1 ? this.tail[0]! : Buffer.concat(this.tail, this.tailBytes);
      const start = t.length > USAGE_TAIL_BYTES ? t.length - USAGE_TAIL_BYTES : 0;
      const text = t.toString('latin1', start);
      this.usageTail = text; // keys hook
      const tokens = this.countTokens ? promptTokensOf(text) : null;
      if (tokens !== null) {
        this.ctx.metrics.promptTokens(this.model, tokens.evaluated, tokens.cached);
        // what this replica's cache now holds of the key's prompt
        if (this.sticky !== null && this.sticky.id === this.replica!.id) this.sticky.tokens = tokens.evaluated + tokens.cached;
      }
      if (this.key !== null && u !== null) {
        const times = slotTimesOf(text);
        if (times !== null) u.times.observe(times.promptN, times.promptMs, times.predictedMs);
      }
      this.tail = null;
    }
    this.res.end();
    this.finish(this.status, NO_REASON);
  }

  onError(err: Error): void {
    this.releaseUpstream();
    if (this.done) return;
    const reason = this.abortReason;
    if (reason instanceof ClientGone) {
      this.finish(CLIENT_CLOSED_STATUS, NO_REASON);
      return;
    }
    if (reason) {
      // shutdown past its grace
      this.fail(reason, 'aborted');
      return;
    }
    if (err instanceof RouterError) {
      this.ctx.metrics.upstreamError(this.model, upstreamReason('auth', this.responded));
      this.ctx.log.warn({ model: this.model, replica: this.replica?.id, endpoint: this.replica?.endpoint }, err.message);
      this.fail(err, null);
      return;
    }
    const kind = classifyUpstreamError(err);
    this.ctx.metrics.upstreamError(this.model, upstreamReason(kind, this.responded));
    if (!this.responded && isRetryableBeforeResponse(kind)) {
      const failed = this.replica!;
      if (kind === 'reset' && !this.retriedSame) {
        // most often a keep-alive connection the replica had just closed: once more on a new
        // connection to the same replica, which holds the request's prompt cache, before moving on
        this.retriedSame = true;
        this.ctx.log.warn({ model: this.model, replica: failed.id, endpoint: failed.endpoint, err: err.message, kind }, 'replica connection reset before a response; retrying it once');
        this.responded = false;
        this.attempt(failed);
        return;
      }
      const now = performance.now();
      this.ctx.upstreams.get(failed.endpoint).downUntil = now + DOWN_FOR_MS;
      (this.tried ??= new Set()).add(failed.endpoint);
      this.ctx.log.warn({ model: this.model, replica: failed.id, endpoint: failed.endpoint, err: err.message, kind }, 'replica connection failed; trying another replica');
      let next: ReplicaView | null = null;
      if (this.key !== null) {
        if (this.sticky !== null) this.sticky.active--;
        const c = this.ctx.upstreams.affine(this.model, this.replicas, this.key, this.slots, this.tried, now);
        this.sticky = c?.entry ?? null;
        next = c?.replica ?? null;
      }
      next ??= this.ctx.upstreams.pick(this.replicas, this.tried, now);
      if (next) {
        this.responded = false;
        this.attempt(next);
        return;
      }
      this.fail(
        new RouterError('UPSTREAM_CONNECT', `No ready replica of model '${this.model}' accepted the connection (${this.tried.size} tried; last: ${err.message}).`, { model: this.model }),
        kind,
      );
      return;
    }
    this.ctx.log.warn({ model: this.model, replica: this.replica?.id, err: err.message, kind }, 'upstream request failed');
    let e: RouterError;
    if (kind === 'first_byte_timeout') {
      e = new RouterError('UPSTREAM_FIRST_BYTE_TIMEOUT', `The replica of model '${this.model}' sent no response within the first-byte timeout.`, { model: this.model });
    } else if (kind === 'stall_timeout') {
      e = new RouterError('UPSTREAM_STALLED', `The replica of model '${this.model}' stopped sending for longer than the stream idle timeout.`, { model: this.model });
    } else {
      e = new RouterError('UPSTREAM_FAILED', `The connection to the replica of model '${this.model}' failed: ${err.message}`, { model: this.model });
    }
    this.fail(e, kind);
  }

  /** Ends the client response with an error: an envelope before the headers, an SSE error event or a cut after. */
  private fail(e: Error, _kind: string | null): void {
    const res = this.res;
    const r = renderFor(res, e);
    let status: number;
    if (!res.headersSent) {
      status = writeRendered(res, r, this.ctx.shuttingDown ? { connection: 'close' } : undefined) || 502;
    } else if (this.sse && !res.destroyed && !res.writableEnded) {
      res.end(sseEvent(r));
      status = this.status;
    } else {
      res.destroy();
      status = this.status;
    }
    this.finish(status, r.code);
  }

  /** `reason`: the catalogue code the router ended the request with, NO_REASON for the replica's own answer. */
  private finish(status: number, reason: string): void {
    if (this.done) return;
    this.done = true;
    this.res.removeListener('close', this.onClientClose);
    if (this.sticky !== null) {
      this.sticky.active--;
      this.sticky = null;
    }
    const ctx = this.ctx;
    const now = performance.now();
    const counter = this.counter;
    if (counter) {
      counter.n--;
      const s = (now - this.dispatchedAt) / 1000;
      counter.serviceSeconds = counter.serviceSeconds === 0 ? s : counter.serviceSeconds + SERVICE_EWMA * (s - counter.serviceSeconds);
    }
    ctx.metrics.inFlight(this.model, -1);
    ctx.metrics.request(this.model, status, (now - this.t0) / 1000, reason);
    ctx.onUsage?.(this.res, this.replica?.id ?? '', this.usageTail); // keys hook
    ctx.active.delete(this);
    if (ctx.onIdle && ctx.active.size === 0) ctx.onIdle();
    if (counter && counter.queue !== null && counter.queue.length > 0 && ctx.onRelease) ctx.onRelease(this.model, counter);
  }
}
