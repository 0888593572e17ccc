/**
 * The call to a replica: `ProxyCall`, a low-level undici dispatch handler that streams the replica's
 * response to the client's raw ServerResponse chunk by chunk, with its retries. The upstream pool is
 * in upstreams.ts, the replica choice in choose.ts, the failure vocabulary and what follows each
 * failure in failover.ts, what the calls of one router share in proxy-context.ts, the forwarded
 * headers in forward-headers.ts.
 *
 * - backpressure: when the client's socket buffer is full, the upstream read is paused until 'drain';
 * - a client that goes away aborts the upstream request (llama-server then cancels the generation);
 * - fail over before the first byte (failover.ts decides): the response headers are held back until
 *   the first body byte, so a refused or reset connection, a replica gone, or llama-server's 503 while
 *   loading sends the request on to another ready replica as long as the client has got nothing; the
 *   failed replica is marked down for a moment, and one that fails so EJECT_AFTER times in a row
 *   leaves routing until it is seen healthy (breaker.ts, eject.ts);
 * - distinct timeouts: connect (UPSTREAM_CONNECT), first byte / response headers
 *   (UPSTREAM_FIRST_BYTE_TIMEOUT) and a stream idle for too long (UPSTREAM_STALLED); after the first
 *   byte a stream ends with an error event in its API's shape, other bodies are cut;
 * - only a small allowlist of upstream response headers is forwarded (nothing that could echo the
 *   engine API key); the engine key goes upstream as `Authorization: Bearer`, the client's never does;
 * - for a key not marked trusted (`redact`), the response's prompt-cache figures are taken out on the
 *   way (redact.ts): a stream line by line, another body held whole (its status and headers with it,
 *   so one that cannot be rid of them gets an error envelope instead); the router's own reading of
 *   the figures (the tail) sees the replica's bytes as they came.
 */
import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { NO_REASON } from '../metrics/ports.js';
import type { ReplicaView } from '../reconciler/view.js';
import type { StickyEntry } from './affinity.js';
import { heldOverBound, notRedactable, RouterError, renderFor, writeRendered } from './errors.js';
import { classifyUpstreamError, ejectable, failoverOf, isMove, ReplicaUnavailable, streamApiOf, streamErrorEvent, upstreamError, upstreamReason } from './failover.js';
import type { Exchange } from './exchange.js';
import { forwardedHeaders } from './forward-headers.js';
import { CLIENT_CLOSED_STATUS, modelCounter, SERVICE_EWMA, type ActiveCall, type EarlyEnd, type ModelCounter, type ProxyContext } from './proxy-context.js';
import { countEvents, promptTokensOf, slotTimesOf, USAGE_TAIL_BYTES, type PromptTokens } from './usage.js';
import { bodyRedactor, REDACT_HOLD_BYTES, type BodyRedactor } from './redact.js';
import { HeldBytes } from './byte-budget.js';
import { DOWN_FOR_MS, type Upstream } from './upstreams.js';

class ClientGone extends Error {
  constructor() {
    super('client went away');
    this.name = 'ClientGone';
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
export class ProxyCall implements Dispatcher.DispatchHandler, ActiveCall {
  /** @internal ActiveCalls links */
  prev: ActiveCall | null = null;
  /** @internal */
  next: ActiveCall | null = null;
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
  /** Moves to another replica after the request had reached one (failover.ts MAX_MOVES). */
  private moves = 0;
  /** The replica's response headers arrived (for this attempt). */
  private responded = false;
  /** The status and headers of the response, held back until its first body byte (then written). */
  private head: Record<string, string> | null = null;
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
  /** keys hook: stream events passed to the client (what an early end is charged, usage.ts). */
  private events = 0;
  /** The replica's response ended whole (onComplete). */
  private completed = false;
  /** The keys hook was told (once per call). */
  private usageReported = false;
  /** The affinity key's entry, counting this call while it is in flight (set by the caller or a retry). */
  sticky: StickyEntry | null = null;
  /** The current attempt's redactor (null: the bytes pass as they come), and its bytes counted in maxBufferedBytes. */
  private redactor: BodyRedactor | null = null;
  private held: HeldBytes | null = null;
  /** performance.now() at the first response byte (0: none yet), and the prompt tokens read off the tail. */
  private firstByteAt = 0;
  private tokens: PromptTokens | null = null;
  private readonly resumeFn = (): void => {
    this.resumeUpstream?.();
  };
  private readonly onClientClose = (): void => {
    if (this.res.writableFinished) return;
    this.abort(new ClientGone());
    // now, before the close's other listeners: key-usage.ts records the request at its close
    this.reportUsage();
  };

  private readonly res: ServerResponse;

  constructor(
    private readonly ctx: ProxyContext,
    /** The request (exchange.ts): its model, path, body, times, canary side, and what its answer said. */
    private readonly x: Exchange,
    /** The headers for the replica (the engine key; core.ts engineHeaders). */
    private readonly headers: Record<string, string>,
    private readonly replicas: readonly ReplicaView[],
    /** The request's affinity key (null: least-busy), for a retry on another replica. */
    private readonly key: number | null = null,
    /** Read the prompt tokens off the response's end (chat and completion requests). */
    private readonly countTokens = false,
  ) {
    this.res = x.res;
  }

  /** Starts the call; `first` is the replica picked by the caller. */
  start(first: ReplicaView): void {
    this.ctx.active.add(this);
    this.counter = modelCounter(this.ctx, this.x.model);
    this.counter.n++;
    this.dispatchedAt = performance.now();
    this.ctx.metrics.inFlight(this.x.model, 1);
    if (this.res.destroyed) {
      // the client left before anything was sent upstream (e.g. while its model was activating)
      this.finish(CLIENT_CLOSED_STATUS, NO_REASON);
      return;
    }
    // first among the close's listeners: the usage of an early end is known before it is recorded
    this.res.prependListener('close', this.onClientClose);
    // held answer bytes count until the response closes (they may sit in the socket's buffer until then)
    if (this.x.redact) this.res.once('close', (this.held = new HeldBytes(this.ctx.buffers)).release);
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
    this.responded = false;
    this.head = null;
    this.status = 0;
    this.sse = false;
    this.tail = null;
    this.tailBytes = 0;
    this.redactor = null;
    this.held?.release();
    u.model = this.x.model;
    u.replicaId = r.id;
    u.inFlight++;
    u.lastUsed = performance.now();
    u.pool.dispatch({ path: u.prefix + this.x.path, method: 'POST', headers: this.headers, body: this.x.body }, this);
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
      this.abortUpstream?.(upstreamError('auth', true, { model: this.x.model, status: statusCode }));
      return false;
    }
    if (statusCode === 503 && failoverOf({ failure: 'unavailable', clientGotByte: false, replicaResponded: true, retriedSame: this.retriedSame, moves: this.moves }) === 'other' && this.nextReplica(false) !== null) {
      // llama-server still loading (or otherwise not serving): the request goes to another replica
      this.abortUpstream?.(new ReplicaUnavailable(statusCode));
      return false;
    }
    this.status = statusCode;
    this.resumeUpstream = resume;
    if (((this.countTokens || this.ctx.onUsage) && statusCode === 200) || (this.x.split !== null && statusCode >= 400)) this.tail = [];
    const out: Record<string, string> = { 'x-llmgw-replica': this.replica!.id };
    forwardedHeaders(rawHeaders, out);
    const ct = out['content-type'];
    this.sse = ct !== undefined && ct.startsWith('text/event-stream');
    if (this.x.redact) {
      this.redactor = bodyRedactor(this.sse);
      delete out['content-length'];
    }
    if (this.ctx.life.shuttingDown) out['connection'] = 'close';
    // written with the first body byte: until then the request may still go to another replica
    this.head = out;
    return true;
  }

  /** Writes the held-back status and headers (the first byte of the response to the client). */
  private writeHead(): void {
    const head = this.head;
    if (head === null) return;
    this.head = null;
    if (this.ctx.life.shuttingDown) head['connection'] = 'close';
    this.res.writeHead(this.status, head);
    if (this.upstream !== null) this.ctx.health.responded(this.upstream);
  }

  onData(chunk: Buffer): boolean {
    if (!this.gotByte) {
      this.gotByte = true;
      this.firstByteAt = performance.now();
      this.ctx.metrics.timeToFirstToken(this.x.model, (this.firstByteAt - this.x.t0) / 1000);
      if (this.redactor === null || this.redactor.streams) this.writeHead();
    }
    const tail = this.tail;
    if (tail !== null) {
      if (this.sse) this.events += countEvents(chunk);
      tail.push(chunk);
      this.tailBytes += chunk.length;
      while (tail.length > 1 && this.tailBytes - tail[0]!.length >= USAGE_TAIL_BYTES) this.tailBytes -= tail.shift()!.length;
    }
    let out = chunk;
    if (this.redactor !== null) {
      const o = this.redactor.push(chunk);
      if (o === null) {
        this.abort(notRedactable(`the replica's answer holds more than ${REDACT_HOLD_BYTES} bytes ${this.sse ? 'in one line' : 'not streamed'}`));
        return false;
      }
      if (!this.held!.hold(this.redactor.held)) {
        this.abort(heldOverBound(this.ctx.buffers.max));
        return false;
      }
      if (o.length === 0) return true;
      out = o;
    }
    // node's ServerResponse.write corks the socket until the next tick, so the chunks and the end
    // that arrive in one tick (headers included) leave in one write
    if (this.res.write(out)) return true;
    this.res.once('drain', this.resumeFn);
    return false;
  }

  onComplete(): void {
    this.completed = true;
    const u = this.upstream;
    const rest = this.redactor === null ? undefined : this.redactor.end();
    if (rest != null && this.head !== null && !this.redactor!.streams) this.head['content-length'] = String(rest.length);
    if (rest !== null) this.writeHead();
    this.releaseUpstream();
    if (this.tail !== null && this.tail.length > 0) {
      const t = this.tail.length === 1 ? this.tail[0]! : Buffer.concat(this.tail, this.tailBytes);
      const start = t.length > USAGE_TAIL_BYTES ? t.length - USAGE_TAIL_BYTES : 0;
      const text = t.toString('latin1', start);
      this.usageTail = text; // keys hook
      const tokens = (this.tokens = this.countTokens ? promptTokensOf(text) : null);
      if (tokens !== null) {
        this.ctx.metrics.promptTokens(this.x.model, tokens.evaluated, tokens.cached);
        // what this replica's cache now holds of the key's prompt
        if (this.sticky !== null && this.sticky.id === this.replica!.id) this.sticky.tokens = tokens.evaluated + tokens.cached;
      }
      if (this.key !== null && u !== null) {
        const times = slotTimesOf(text);
        if (times !== null) u.times.observe(times.promptN, times.promptMs, times.predictedMs);
      }
      this.tail = null;
    }
    if (rest === null) {
      this.fail(notRedactable('the replica\'s answer may carry prompt-cache figures and is not JSON'));
      return;
    }
    this.res.end(rest);
    this.finish(this.status, NO_REASON);
  }

  onError(err: Error): void {
    const u = this.upstream;
    this.releaseUpstream();
    if (this.done) return;
    const reason = this.abortReason;
    if (reason instanceof ClientGone) {
      this.finish(CLIENT_CLOSED_STATUS, NO_REASON);
      return;
    }
    if (reason) {
      // shutdown past its grace
      this.fail(reason);
      return;
    }
    if (err instanceof RouterError) {
      this.ctx.metrics.upstreamError(this.x.model, upstreamReason('auth', this.gotByte));
      this.ctx.log.warn({ model: this.x.model, replica: this.replica?.id, endpoint: this.replica?.endpoint, code: err.code, err: err.message }, "replica refused llmgw's engine API key");
      this.fail(err);
      return;
    }
    const kind = classifyUpstreamError(err);
    const failed = this.replica!;
    if (u !== null && ejectable(kind)) this.ctx.health.failed(u, kind);
    const decision = failoverOf({ failure: kind, clientGotByte: this.gotByte, replicaResponded: this.responded, retriedSame: this.retriedSame, moves: this.moves });
    this.ctx.metrics.upstreamError(this.x.model, upstreamReason(kind, this.gotByte || decision === 'none'));
    if (decision === 'same') {
      // most often a keep-alive connection the replica had just closed: once more on a new
      // connection to the same replica, which holds the request's prompt cache, before moving on
      this.retriedSame = true;
      this.ctx.log.warn({ model: this.x.model, replica: failed.id, endpoint: failed.endpoint, err: err.message, kind }, 'replica connection reset before a response; retrying it once');
      this.attempt(failed);
      return;
    }
    if (decision === 'other') {
      const next = this.nextReplica(true);
      if (next !== null) {
        if (isMove(kind)) this.moves++;
        this.x.split?.failedAttempt(failed, this.x.t0);
        this.ctx.log.warn({ model: this.x.model, replica: failed.id, endpoint: failed.endpoint, err: err.message, kind, to: next.id }, 'replica failed before the first byte; trying another replica');
        this.attempt(next);
        return;
      }
      this.fail(upstreamError(kind, false, { model: this.x.model, tried: this.tried?.size ?? 1, detail: err.message }));
      return;
    }
    this.ctx.log.warn({ model: this.x.model, replica: failed.id, err: err.message, kind, afterFirstByte: this.gotByte }, 'upstream request failed');
    this.fail(upstreamError(kind, true, { model: this.x.model, midResponse: this.gotByte, detail: err.message }));
  }

  /**
   * The replica to try after the current one failed, or null when none is left: by
   * affinity where the request has a key, else least-busy, never one tried already. With `take`, the
   * failed replica is recorded as tried and marked down for DOWN_FOR_MS, and the choice counts on
   * the affinity key.
   */
  private nextReplica(take: boolean): ReplicaView | null {
    const failed = this.replica!;
    const now = performance.now();
    const tried = (this.tried ??= new Set());
    tried.add(failed.endpoint);
    if (take) this.ctx.upstreams.get(failed.endpoint).downUntil = now + DOWN_FOR_MS;
    // the model's ready replicas now (one may have become ready while this request waited on the
    // failed one), else those it was dispatched among
    const fresh = this.ctx.readyReplicas(this.x.model);
    const all = fresh.length > 0 ? fresh : this.replicas;
    // in a canary step, its arm's replicas first, then the other arm's
    const split = this.x.split;
    const replicas = split === null ? all : split.replicas(all);
    let next: ReplicaView | null = null;
    if (this.key !== null && take) {
      if (this.sticky !== null) this.sticky.active--;
      const c = this.ctx.choice.affine(split === null ? this.x.model : split.scope(replicas), replicas, this.key, this.x.slots, tried, now);
      this.sticky = c?.entry ?? null;
      next = c?.replica ?? null;
    }
    next ??= this.ctx.choice.pick(replicas, tried, now);
    if (next === null && replicas !== all) next = this.ctx.choice.pick(all, tried, now);
    if (!take) tried.delete(failed.endpoint);
    return next;
  }

  /** Ends the client response with an error: an envelope before the first byte, a stream's error event or a cut after. */
  private fail(e: Error): void {
    const res = this.res;
    const r = renderFor(res, e);
    let status: number;
    this.head = null;
    if (!res.headersSent) {
      status = writeRendered(res, r, this.ctx.life.shuttingDown ? { connection: 'close' } : undefined) || 502;
    } else if (this.sse && !res.destroyed && !res.writableEnded) {
      res.end(streamErrorEvent(streamApiOf(this.x.path), r));
      status = this.status;
    } else {
      res.destroy();
      status = this.status;
    }
    this.finish(status, r.code);
  }

  /**
   * What an early end saw (keys hook): a call that reached a replica and ended before its response
   * did, the client gone or the stream cut after its first byte (a router's own error before it is
   * not charged). null: it completed, or was not early.
   */
  private earlyEnd(): EarlyEnd | null {
    if (this.ctx.onUsage == null || this.completed || this.replica === null) return null;
    if (!this.gotByte && !(this.abortReason instanceof ClientGone)) return null;
    const tail = this.tail !== null && this.tail.length > 0 ? Buffer.concat(this.tail).toString('latin1') : null;
    return { tail, events: this.events, bodyBytes: this.x.body.length };
  }

  /** The keys hook, once: the replica that answered, its usage, or what an early end saw. */
  private reportUsage(): void {
    if (this.usageReported) return;
    this.usageReported = true;
    this.ctx.onUsage?.(this.x, this.replica?.id ?? '', this.usageTail, this.earlyEnd());
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
    ctx.metrics.inFlight(this.x.model, -1);
    ctx.metrics.request(this.x.model, status, (now - this.x.t0) / 1000, reason);
    this.reportUsage();
    if (this.x.split !== null && this.replica !== null) {
      this.x.split.ended(this.replica, { status, reason, tail: this.usageTail, tokens: this.tokens, t0: this.x.t0, firstByteAt: this.firstByteAt, now });
    }
    ctx.active.delete(this);
    ctx.life.left();
    if (counter && counter.queue !== null && counter.queue.length > 0) ctx.release(this.x.model, counter);
  }
}
