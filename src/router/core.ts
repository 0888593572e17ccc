/**
 * The router's request handling on node:http's own request and response objects: admission (shutdown,
 * spec, API key), the proxied POST /v1/* requests from the first body byte to the last response byte,
 * activation of models with no ready replica, and the drain on shutdown. The wait for a free slot is
 * in slot-queues.ts, the call to a replica in proxy.ts.
 *
 * The proxied requests are the data path, so they do not go through fastify's routing, hooks, body
 * parser and reply objects: the server's request listener hands POST /v1/* straight to `handle()`
 * (see app.ts), which costs a few microseconds less per request. fastify still serves everything else
 * (GET /v1/models, 404s) and its inject() reaches `handle()` through a route that hands over the raw
 * request and response, so tests of the HTTP surface exercise this same code.
 *
 * A proxied request: the body is buffered as bytes (up to the body limit) and parsed once only to read
 * `model` and its affinity key; the original bytes are forwarded, and a request that waits holds only
 * them. No per-request logging.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { NO_REASON, type RouterMetrics } from '../metrics/ports.js';
import type { FleetView, ReplicaView } from '../reconciler/view.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { affinityKey, isolatedKey, isPromptPath } from './affinity.js';
import { ConnectionKeys, authenticate, compileSpec, extractKey, grantAllows, type CompiledSpec, type KeyGrant } from './auth.js';
import { RouterError, modelNotFound, renderFor, routeNotFound, writeRendered } from './errors.js';
import { limitError, track, trackedOf, usageHook } from './key-usage.js';
import { KeyLimiter, Ticket, type RouterCount } from './limits.js';
import type { UsageSink } from './usage.js';
import { ReplicaChoice } from './choose.js';
import { ProxyCall } from './proxy.js';
import { ActiveCalls, CLIENT_CLOSED_STATUS, modelCounter, type ModelCounter, type ProxyContext } from './proxy-context.js';
import { Upstreams, type UpstreamTimeouts } from './upstreams.js';
import { Activator } from './resolve.js';
import { SlotQueues, slotsOf, type Pending } from './slot-queues.js';
import { Ejections } from './eject.js';
import { CanarySplitter, type Split } from './canary.js';
import { RouterRollouts } from './rollout-figures.js';
import { redactsPath } from './redact.js';
import { readRequestBody } from './request-body.js';
import { forwardsPath } from './api-paths.js';
import { ByteBudget } from './byte-budget.js';
import type { HotPrefixes } from './hot-prefixes.js';
import { hotUsage, type HotRequest } from './hot-usage.js';

export interface CoreLimits extends UpstreamTimeouts {
  /** Largest request body accepted (413 above). */
  readonly bodyBytes: number;
  /** Most requests in handle() at once (body, activation wait, proxying); 503 ROUTER_OVERLOADED above. */
  readonly maxInFlight: number;
  /** Most bytes held at once over those requests (bodies; answers held to redact them); 503 ROUTER_OVERLOADED above. */
  readonly maxBufferedBytes: number;
}

/** Where the warnings and internal errors go (a pino logger fits). */
export interface CoreLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** A request's spec and what its key may use. */
export interface Admission {
  readonly spec: FleetSpec;
  readonly compiled: CompiledSpec;
  readonly grant: KeyGrant;
}

/** True for the requests `handle()` serves: POST /v1/…. */
export function isProxyRequest(method: string | undefined, url: string | undefined): boolean {
  return method === 'POST' && url !== undefined && url.startsWith('/v1/');
}

class ClientGoneDuringActivation extends Error {}

export class RouterCore {
  readonly upstreams: Upstreams;
  /** The replica choice over the pool (least-busy, affinity). */
  readonly choice: ReplicaChoice;
  readonly ctx: ProxyContext;
  /** The replicas' circuit breakers (their probe runs from app.ts). */
  readonly ejections: Ejections;
  readonly activator: Activator;
  /** Requests waiting for a free slot, per model. */
  private readonly queues: SlotQueues;
  private readonly connectionKeys = new ConnectionKeys();
  private readonly shutdown = new AbortController();
  /** Requests waiting for their model to become ready. */
  private activating = 0;
  /** Requests in handle(), from their headers until their response closes. */
  private admitted = 0;
  private headersKey: string | null = null;
  private upstreamHeaders: Record<string, string> = {};
  /** Per-key limits of access/keys.yaml. */
  readonly keyLimiter: KeyLimiter;
  /** The canary split and its figures (canary.ts, rollout-figures.ts). */
  readonly canary: CanarySplitter;
  /** Each keyed request, counted among its model's hot prefixes once answered 200 (hot-usage.ts). */
  private readonly hotOf = new WeakMap<ServerResponse, HotRequest>();

  constructor(
    private readonly fleet: FleetView,
    private readonly metrics: RouterMetrics,
    private readonly limits: CoreLimits,
    private readonly authRequired: boolean,
    private readonly log: CoreLog | null,
    private readonly usage: UsageSink | null = null,
    clock: () => number = Date.now,
    routers: () => RouterCount = () => 1,
    rollouts: RouterRollouts = new RouterRollouts(),
    /** The models' hot prefixes, for a new replica's warm-up (hot-prefixes.ts); null: not kept. */
    readonly hot: HotPrefixes | null = null,
  ) {
    this.keyLimiter = new KeyLimiter(clock, routers);
    this.canary = new CanarySplitter(fleet, rollouts, clock);
    this.upstreams = new Upstreams(limits);
    this.choice = new ReplicaChoice(this.upstreams);
    const warn = (obj: object, msg: string): void => log?.warn(obj, msg);
    this.ejections = new Ejections(this.upstreams, metrics, { warn }, () => this.engineHeaders());
    this.ctx = {
      upstreams: this.upstreams,
      choice: this.choice,
      metrics,
      active: new ActiveCalls(),
      modelInFlight: new Map(),
      shuttingDown: false,
      onIdle: null,
      onRelease: (model, counter) => this.queues.drainQueue(model, counter),
      health: this.ejections,
      readyReplicas: (model) => this.fleet.readyReplicas(model),
      log: { warn },
      onUsage: hot === null ? usageHook : (res, replica, tail, early) => hotUsage(hot, this.hotOf, res, replica, tail, early),
      buffers: new ByteBudget(limits.maxBufferedBytes),
    };
    this.activator = new Activator(fleet);
    this.queues = new SlotQueues({
      ctx: this.ctx,
      fleet,
      metrics,
      shutdown: this.shutdown.signal,
      dispatch: (p, replicas, fromQueue) => this.dispatch(p, replicas, fromQueue),
      fail: (res, model, t0, e) => this.fail(res, model, t0, e),
      left: () => {
        if (this.ctx.onIdle && this.busy === 0) this.ctx.onIdle();
      },
    });
  }

  /** Requests in progress: being proxied or waiting for their model. */
  get busy(): number {
    return this.ctx.active.size + this.activating + this.queues.size;
  }

  /**
   * The spec and grant for a request, or a RouterError (shutting down, no spec yet, 401). With the
   * request's `connection` (its socket), a key already verified on that connection is not hashed again.
   */
  admit(headers: IncomingHttpHeaders, connection?: object): Admission {
    if (this.ctx.shuttingDown) throw new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.', { retryAfterSeconds: 1 });
    const spec = this.fleet.spec();
    if (spec === null) {
      // no key table yet: a request without any key is still refused as such; one with a key cannot
      // be checked yet and gets a retryable answer (a 401 would make clients give up during startup)
      if (this.authRequired && extractKey(headers) === null) {
        throw new RouterError('AUTH_MISSING', 'No API key provided. Send it as "Authorization: Bearer KEY" (or "x-api-key: KEY").');
      }
      throw new RouterError('NO_VALID_SPEC', 'The fleet has no valid revision applied yet; no models are served.', { retryAfterSeconds: 5 });
    }
    const compiled = compileSpec(spec);
    const grant = connection === undefined ? authenticate(compiled, headers, this.authRequired) : this.connectionKeys.grant(compiled, headers, this.authRequired, connection);
    return { spec, compiled, grant };
  }

  /** Serves one POST /v1/… request on the raw request and response. Never throws. */
  handle(req: IncomingMessage, res: ServerResponse): void {
    const t0 = performance.now();
    let adm: Admission;
    try {
      const url = req.url ?? '';
      // an allow-list: llama-server's other /v1/ routes reach other clients' requests (api-paths.ts)
      if (!forwardsPath(url)) {
        throw routeNotFound(req.method ?? '', url);
      }
      adm = this.admit(req.headers, req.socket);
    } catch (e) {
      this.fail(res, '', t0, e);
      return;
    }
    track(res, adm.grant.name, t0, this.usage);
    const limit = this.limits.bodyBytes;
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) {
      this.fail(res, '', t0, this.tooLarge(), true);
      return;
    }
    if (this.admitted >= this.limits.maxInFlight) {
      this.fail(res, '', t0, this.overloaded(`${this.admitted} requests in progress, the limit is ${this.limits.maxInFlight}`), true);
      return;
    }
    // counted from here until the response closes (body, activation wait, proxying), with its bytes
    this.admitted++;
    let size = 0;
    res.once('close', () => {
      this.admitted--;
      this.ctx.buffers.give(size);
    });
    let first: Buffer | null = null;
    let parts: Buffer[] | null = null;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      const fits = this.ctx.buffers.take(chunk.length);
      if (size > limit) {
        over = true;
        first = parts = null;
        this.fail(res, '', t0, this.tooLarge(), true);
        return;
      }
      if (!fits) {
        over = true;
        first = parts = null;
        this.fail(res, '', t0, this.overloaded(`the requests in progress hold more than ${this.limits.maxBufferedBytes} bytes`), true);
        return;
      }
      if (first === null) first = chunk;
      else (parts ??= [first]).push(chunk);
    });
    req.on('end', () => {
      if (over) return;
      const body = parts !== null ? Buffer.concat(parts, size) : (first ?? Buffer.alloc(0));
      try {
        this.route(req, res, t0, adm, body);
      } catch (e) {
        this.fail(res, '', t0, e);
      }
    });
    req.on('error', () => {
      // the client went away while sending the body
      if (!over && !res.headersSent) this.metrics.request('', CLIENT_CLOSED_STATUS, (performance.now() - t0) / 1000, NO_REASON);
      over = true;
      res.destroy();
    });
  }

  /** A whole body: read `model`, check the key's grant, then proxy (or activate first). */
  private route(req: IncomingMessage, res: ServerResponse, t0: number, adm: Admission, body: Buffer): void {
    const { fields, name } = readRequestBody(body);
    const model = adm.compiled.names.get(name);
    if (model === undefined) {
      throw modelNotFound(name);
    }
    const tracked = trackedOf(res);
    if (tracked !== undefined) tracked.model = model;
    if (!grantAllows(adm.grant, model)) {
      this.fail(res, model, t0, new RouterError('MODEL_FORBIDDEN', `This API key may not use model '${model}'.`, { param: 'model' }));
      return;
    }
    if (adm.grant.limited) {
      const g = adm.grant;
      const t = this.keyLimiter.admit(g.name, model, g.limits, g.modelLimits.get(model) ?? null);
      if (!(t instanceof Ticket)) {
        this.fail(res, model, t0, limitError(t, model));
        return;
      }
      if (tracked !== undefined) tracked.ticket = t;
      else t.end(0);
    }
    // the only things read from the parsed body (the key; a canary step's split): `fields` is not held past here
    const path = req.url ?? '/';
    const prefix = adm.spec.models[model]?.routing === 'affinity' ? affinityKey(path, fields) : null;
    const key = prefix !== null && adm.grant.isolateCache ? isolatedKey(prefix, adm.grant.name) : prefix;
    const split = this.canary.of(model, adm.grant.name, key, path, fields);
    const redact = !adm.grant.trusted && redactsPath(path);
    // activity from here until the response closes: waiting for activation, queued or proxied
    res.once('close', this.fleet.hold(model));
    const replicas = this.fleet.readyReplicas(model);
    if (replicas.length > 0) {
      this.proxy(req, res, t0, adm.spec, model, body, key, split, redact, replicas);
      return;
    }
    void this.activateThenProxy(req, res, t0, adm.spec, model, body, key, split, redact);
  }

  /**
   * Sends the request to a replica, or, when every slot of the model's ready replicas is busy (or
   * others are already waiting), into the model's queue.
   */
  private proxy(req: IncomingMessage, res: ServerResponse, t0: number, spec: FleetSpec, model: string, body: Buffer, key: number | null, split: Split | null, redact: boolean, replicas: readonly ReplicaView[]): void {
    const ms = spec.models[model]!;
    const counter = modelCounter(this.ctx, model);
    const max = ms.maxConcurrency;
    if (max != null && counter.n >= max) {
      this.fail(res, model, t0, new RouterError('CONCURRENCY_LIMIT', `Model '${model}' is at its concurrency limit of ${max} requests; retry shortly.`, { model, retryAfterSeconds: 1 }));
      return;
    }
    const p: Pending = { res, t0, model, spec: ms, path: req.url ?? '/', body, key, slots: slotsOf(spec, ms), split, redact };
    const q = counter.queue;
    if ((q !== null && q.length > 0) || !this.choice.hasFreeSlot(split === null ? replicas : split.replicas(replicas), p.slots, performance.now())) {
      this.queues.enqueue(p, counter, replicas.length);
      // a slot may be free while others wait (a replica just became ready): the oldest go now
      if (q !== null) this.queues.drainQueue(model, counter);
      return;
    }
    this.dispatch(p, replicas);
  }

  /**
   * Picks the replica (by affinity where the model and request have a key, else least-busy) and starts
   * the call. A request from the queue (`fromQueue`) goes only to a replica with a free slot: it has
   * waited for one already.
   */
  private dispatch(p: Pending, ready: readonly ReplicaView[], fromQueue = false): void {
    const now = performance.now();
    // in a canary step, the replicas of the request's arm (canary.ts)
    const replicas = p.split === null ? ready : p.split.replicas(ready);
    const key = replicas.length > 1 ? p.key : null;
    let first: ReplicaView | null = null;
    const call = new ProxyCall(this.ctx, p.model, p.path, this.engineHeaders(), p.body, replicas, p.res, p.t0, key, p.slots, isPromptPath(p.path));
    call.split = p.split;
    call.redact = p.redact;
    if (p.key !== null && this.hot !== null) this.hotOf.set(p.res, { model: p.model, key: p.key, path: p.path, body: p.body });
    if (key !== null) {
      const c = this.choice.affine(p.split === null ? p.model : p.split.scope(replicas), replicas, key, p.slots, null, now, fromQueue);
      if (c !== null) {
        first = c.replica;
        call.sticky = c.entry;
        this.metrics.affinity(p.model, c.home);
      }
    }
    call.start(first ?? this.choice.pick(replicas, null, now)!);
  }

  /** Drains every model's queue that has a free slot (after the /slots refresh saw other routers' load drop). */
  drainQueues(): void {
    this.queues.drainQueues();
  }

  /**
   * Activity of the models with requests in flight, for long requests (a stream longer than the idle
   * timeout): app.ts calls it every ACTIVITY_TOUCH_MS; the start and the end of each request touch too.
   */
  touchActive(): void {
    for (const [model, counter] of this.ctx.modelInFlight) if (counter.n > 0) this.fleet.touch(model);
  }

  private async activateThenProxy(req: IncomingMessage, res: ServerResponse, t0: number, spec: FleetSpec, model: string, body: Buffer, key: number | null, split: Split | null, redact: boolean): Promise<void> {
    const gone = new AbortController();
    const onClose = (): void => {
      if (!res.writableFinished) gone.abort(new ClientGoneDuringActivation('client went away'));
    };
    res.once('close', onClose);
    const signal = AbortSignal.any([gone.signal, this.shutdown.signal]);
    this.metrics.inFlight(model, 1);
    this.activating++;
    let replicas: readonly ReplicaView[] | null = null;
    let failure: unknown = null;
    try {
      const startedAt = Date.now() - (performance.now() - t0);
      replicas = await this.activator.activate(model, { windowMs: spec.settings.activationWindowMs, startedAt, signal });
    } catch (e) {
      failure = e;
    } finally {
      res.removeListener('close', onClose);
      this.metrics.inFlight(model, -1);
      this.activating--;
      if (this.ctx.onIdle && this.busy === 0) this.ctx.onIdle();
    }
    if (replicas !== null) {
      try {
        this.proxy(req, res, t0, spec, model, body, key, split, redact, replicas);
      } catch (e) {
        this.fail(res, model, t0, e);
      }
      return;
    }
    if (gone.signal.aborted) {
      res.destroy();
      this.metrics.request(model, CLIENT_CLOSED_STATUS, (performance.now() - t0) / 1000, NO_REASON);
      return;
    }
    if (this.shutdown.signal.aborted) {
      failure = new RouterError('ROUTER_SHUTTING_DOWN', `The router is shutting down; model '${model}' was still starting.`, { retryAfterSeconds: 1 });
    }
    this.fail(res, model, t0, failure);
  }

  /** The error envelope for a request that is not proxied, and its metrics. `close` ends the connection. */
  fail(res: ServerResponse, model: string, t0: number, e: unknown, close = false): void {
    const r = renderFor(res, e);
    const tracked = trackedOf(res);
    if (tracked !== undefined) tracked.reason = r.code;
    if (r.code === 'INTERNAL') this.log?.error({ err: e }, 'router: internal error');
    this.metrics.request(model, r.status, (performance.now() - t0) / 1000, r.code);
    writeRendered(res, r, close || this.ctx.shuttingDown ? { connection: 'close' } : undefined);
  }

  private overloaded(why: string): RouterError {
    return new RouterError('ROUTER_OVERLOADED', `The router is overloaded (${why}); retry shortly.`, { retryAfterSeconds: 1 });
  }

  private tooLarge(): RouterError {
    return new RouterError('BODY_TOO_LARGE', `The request body is larger than the router's limit of ${this.limits.bodyBytes} bytes.`);
  }

  /** The headers for a replica: the engine key (rebuilt only when the key changes). */
  engineHeaders(): Record<string, string> {
    const key = this.fleet.engineApiKey;
    if (key !== this.headersKey) {
      this.headersKey = key;
      this.upstreamHeaders = key ? { 'content-type': 'application/json', authorization: `Bearer ${key}` } : { 'content-type': 'application/json' };
    }
    return this.upstreamHeaders;
  }

  /**
   * Shutdown: from now on every response says `connection: close`, new requests get 503, waits for
   * activations are cut; in-flight requests finish up to `graceMs`, then are aborted.
   */
  async drain(graceMs: number): Promise<void> {
    this.ctx.shuttingDown = true;
    this.shutdown.abort(new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.'));
    this.queues.refuseAll();
    await this.whenIdle(graceMs);
    if (this.ctx.active.size > 0) {
      this.log?.warn({ active: this.ctx.active.size, graceMs }, 'router: shutdown grace over; aborting in-flight requests');
      const gone = new RouterError('ROUTER_SHUTTING_DOWN', 'The router shut down before the response was complete.');
      for (const call of this.ctx.active.toArray()) call.abort(gone);
      await this.whenIdle(1000);
    }
    this.ctx.onIdle = null;
  }

  private whenIdle(ms: number): Promise<void> {
    if (this.busy === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.ctx.onIdle = () => {
        if (this.busy === 0) {
          clearTimeout(t);
          resolve();
        }
      };
    });
  }
}
