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
 * A proxied request is one `Exchange` (exchange.ts), made in `handle()` once it is admitted and handed
 * whole to `route`, `proxy`, `dispatch`, the slot queues and the call. Its body is buffered as bytes
 * (up to the body limit) and parsed once only to read `model` and its affinity key; the original bytes
 * are forwarded, and a request that waits holds only them. No per-request logging. The shutdown flag
 * and the drain's wait for idleness are the core's `Lifecycle` (lifecycle.ts).
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { NO_REASON, type RouterMetrics } from '../metrics/ports.js';
import type { FleetView, ReplicaView } from '../reconciler/view.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { affinityKey, isolatedKey, isPromptPath } from './affinity.js';
import { ConnectionKeys, authenticate, compileSpec, extractKey, grantAllows, type CompiledSpec, type KeyGrant } from './auth.js';
import { RouterError, modelNotFound, renderFor, routeNotFound, writeRendered } from './errors.js';
import { limitError, track, usageHook } from './key-usage.js';
import { KeyLimiter, Ticket } from './limits.js';
import type { UsageSink } from './usage.js';
import { ReplicaChoice } from './choose.js';
import { ProxyCall } from './proxy.js';
import { ActiveCalls, CLIENT_CLOSED_STATUS, modelCounter, type ProxyContext } from './proxy-context.js';
import { Upstreams } from './upstreams.js';
import { Activator } from './resolve.js';
import { SlotQueues } from './slot-queues.js';
import { Ejections } from './eject.js';
import { CanarySplitter } from './canary.js';
import { RouterRollouts } from './rollout-figures.js';
import { redactsPath } from './redact.js';
import { readRequestBody } from './request-body.js';
import { forwardsPath } from './api-paths.js';
import { ByteBudget } from './byte-budget.js';
import type { HotPrefixes } from './hot-prefixes.js';
import { hotUsage } from './hot-usage.js';
import { Exchange } from './exchange.js';
import { Lifecycle } from './lifecycle.js';
import type { CoreLimits, CoreLog, RouterCoreOptions } from './core-options.js';

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
  /** Serving, then shutting down; the drain's wait for idleness (lifecycle.ts). */
  private readonly life: Lifecycle;
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
  /** The models' hot prefixes, for a new replica's warm-up (hot-prefixes.ts); null: not kept. */
  readonly hot: HotPrefixes | null;
  private readonly fleet: FleetView;
  private readonly metrics: RouterMetrics;
  private readonly limits: CoreLimits;
  private readonly authRequired: boolean;
  private readonly log: CoreLog | null;
  private readonly usage: UsageSink | null;

  constructor(o: RouterCoreOptions) {
    const { fleet, metrics, limits } = o;
    const clock = o.clock ?? Date.now;
    const hot = (this.hot = o.hot ?? null);
    this.fleet = fleet;
    this.metrics = metrics;
    this.limits = limits;
    this.authRequired = o.authRequired;
    const log = (this.log = o.log ?? null);
    this.usage = o.usage ?? null;
    this.keyLimiter = new KeyLimiter(clock, o.routers ?? (() => 1));
    this.canary = new CanarySplitter(fleet, o.rollouts ?? new RouterRollouts(), clock);
    this.upstreams = new Upstreams(limits);
    this.choice = new ReplicaChoice(this.upstreams);
    const warn = (obj: object, msg: string): void => log?.warn(obj, msg);
    this.ejections = new Ejections(this.upstreams, metrics, { warn }, () => this.engineHeaders());
    this.life = new Lifecycle(() => this.busy);
    this.ctx = {
      upstreams: this.upstreams,
      choice: this.choice,
      metrics,
      active: new ActiveCalls(),
      modelInFlight: new Map(),
      life: this.life,
      release: (model, counter) => this.queues.drainQueue(model, counter),
      health: this.ejections,
      readyReplicas: (model) => this.fleet.readyReplicas(model),
      log: { warn },
      onUsage: hot === null ? usageHook : (x, replica, tail, early) => hotUsage(hot, x, replica, tail, early),
      buffers: new ByteBudget(limits.maxBufferedBytes),
    };
    this.activator = new Activator(fleet);
    this.queues = new SlotQueues({
      ctx: this.ctx,
      fleet,
      metrics,
      dispatch: (x, replicas, fromQueue) => this.dispatch(x, replicas, fromQueue),
      fail: (x, e) => this.refuse(x, e),
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
    if (this.life.shuttingDown) throw new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.', { retryAfterSeconds: 1 });
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
    const x = new Exchange(res, t0, adm.spec, adm.compiled, adm.grant, req.url ?? '/');
    track(x, this.usage);
    const limit = this.limits.bodyBytes;
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) {
      this.refuse(x, this.tooLarge(), true);
      return;
    }
    if (this.admitted >= this.limits.maxInFlight) {
      this.refuse(x, this.overloaded(`${this.admitted} requests in progress, the limit is ${this.limits.maxInFlight}`), true);
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
        this.refuse(x, this.tooLarge(), true);
        return;
      }
      if (!fits) {
        over = true;
        first = parts = null;
        this.refuse(x, this.overloaded(`the requests in progress hold more than ${this.limits.maxBufferedBytes} bytes`), true);
        return;
      }
      if (first === null) first = chunk;
      else (parts ??= [first]).push(chunk);
    });
    req.on('end', () => {
      if (over) return;
      if (parts !== null) x.body = Buffer.concat(parts, size);
      else if (first !== null) x.body = first;
      try {
        this.route(x);
      } catch (e) {
        x.reason = this.fail(res, '', t0, e);
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
  private route(x: Exchange): void {
    const { fields, name } = readRequestBody(x.body);
    const g = x.grant;
    const model = x.compiled.names.get(name);
    if (model === undefined) {
      throw modelNotFound(name);
    }
    x.model = model;
    if (!grantAllows(g, model)) {
      this.refuse(x, new RouterError('MODEL_FORBIDDEN', `This API key may not use model '${model}'.`, { param: 'model' }));
      return;
    }
    if (g.limited) {
      const t = this.keyLimiter.admit(g.name, model, g.limits, g.modelLimits.get(model) ?? null);
      if (!(t instanceof Ticket)) {
        this.refuse(x, limitError(t, model));
        return;
      }
      x.ticket = t;
    }
    // the only things read from the parsed body (the key; a canary step's split): `fields` is not held past here
    const path = x.path;
    const ms = x.fleetSpec.models[model]!;
    x.spec = ms;
    // slots per replica: the profile's parallel; Infinity (no queueing) when the profile is unknown
    x.slots = x.fleetSpec.profiles[ms.profile]?.parallel ?? Infinity;
    const prefix = ms.routing === 'affinity' ? affinityKey(path, fields) : null;
    x.key = prefix !== null && g.isolateCache ? isolatedKey(prefix, g.name) : prefix;
    x.split = this.canary.of(model, g.name, x.key, path, fields);
    x.redact = !g.trusted && redactsPath(path);
    // activity from here until the response closes: waiting for activation, queued or proxied
    x.res.once('close', this.fleet.hold(model));
    const replicas = this.fleet.readyReplicas(model);
    if (replicas.length > 0) {
      this.proxy(x, replicas);
      return;
    }
    void this.activateThenProxy(x);
  }

  /**
   * Sends the request to a replica, or, when every slot of the model's ready replicas is busy (or
   * others are already waiting), into the model's queue.
   */
  private proxy(x: Exchange, replicas: readonly ReplicaView[]): void {
    const model = x.model;
    const counter = modelCounter(this.ctx, model);
    const max = x.spec!.maxConcurrency;
    if (max != null && counter.n >= max) {
      this.refuse(x, new RouterError('CONCURRENCY_LIMIT', `Model '${model}' is at its concurrency limit of ${max} requests; retry shortly.`, { model, retryAfterSeconds: 1 }));
      return;
    }
    const q = counter.queue;
    if ((q !== null && q.length > 0) || !this.choice.hasFreeSlot(x.split === null ? replicas : x.split.replicas(replicas), x.slots, performance.now())) {
      this.queues.enqueue(x, counter, replicas.length);
      // a slot may be free while others wait (a replica just became ready): the oldest go now
      if (q !== null) this.queues.drainQueue(model, counter);
      return;
    }
    this.dispatch(x, replicas);
  }

  /**
   * Picks the replica (by affinity where the model and request have a key, else least-busy) and starts
   * the call. A request from the queue (`fromQueue`) goes only to a replica with a free slot: it has
   * waited for one already.
   */
  private dispatch(x: Exchange, ready: readonly ReplicaView[], fromQueue = false): void {
    const now = performance.now();
    // in a canary step, the replicas of the request's arm (canary.ts)
    const replicas = x.split === null ? ready : x.split.replicas(ready);
    const key = replicas.length > 1 ? x.key : null;
    let first: ReplicaView | null = null;
    const call = new ProxyCall(this.ctx, x, this.engineHeaders(), replicas, key, isPromptPath(x.path));
    if (key !== null) {
      const c = this.choice.affine(x.split === null ? x.model : x.split.scope(replicas), replicas, key, x.slots, null, now, fromQueue);
      if (c !== null) {
        first = c.replica;
        call.sticky = c.entry;
        this.metrics.affinity(x.model, c.home);
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

  private async activateThenProxy(x: Exchange): Promise<void> {
    const { res, t0, model } = x;
    const gone = new AbortController();
    const onClose = (): void => {
      if (!res.writableFinished) gone.abort(new ClientGoneDuringActivation('client went away'));
    };
    res.once('close', onClose);
    const signal = AbortSignal.any([gone.signal, this.life.signal]);
    this.metrics.inFlight(model, 1);
    this.activating++;
    let replicas: readonly ReplicaView[] | null = null;
    let failure: unknown = null;
    try {
      const startedAt = Date.now() - (performance.now() - t0);
      replicas = await this.activator.activate(model, { windowMs: x.fleetSpec.settings.activationWindowMs, startedAt, signal });
    } catch (e) {
      failure = e;
    } finally {
      res.removeListener('close', onClose);
      this.metrics.inFlight(model, -1);
      this.activating--;
      this.life.left();
    }
    if (replicas !== null) {
      try {
        this.proxy(x, replicas);
      } catch (e) {
        this.refuse(x, e);
      }
      return;
    }
    if (gone.signal.aborted) {
      res.destroy();
      this.metrics.request(model, CLIENT_CLOSED_STATUS, (performance.now() - t0) / 1000, NO_REASON);
      return;
    }
    if (this.life.shuttingDown) {
      failure = new RouterError('ROUTER_SHUTTING_DOWN', `The router is shutting down; model '${model}' was still starting.`, { retryAfterSeconds: 1 });
    }
    this.refuse(x, failure);
  }

  /** The error envelope for a request that is not proxied, and its metrics. `close` ends the connection. */
  fail(res: ServerResponse, model: string, t0: number, e: unknown, close = false): string {
    const r = renderFor(res, e);
    if (r.code === 'INTERNAL') this.log?.error({ err: e }, 'router: internal error');
    this.metrics.request(model, r.status, (performance.now() - t0) / 1000, r.code);
    writeRendered(res, r, close || this.life.shuttingDown ? { connection: 'close' } : undefined);
    return r.code;
  }

  /** `fail` for an admitted request: its usage row says the reason. */
  private refuse(x: Exchange, e: unknown, close = false): void {
    x.reason = this.fail(x.res, x.model, x.t0, e, close);
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
    this.life.stop(new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.'));
    this.queues.refuseAll();
    await this.life.whenIdle(graceMs);
    if (this.ctx.active.size > 0) {
      this.log?.warn({ active: this.ctx.active.size, graceMs }, 'router: shutdown grace over; aborting in-flight requests');
      const gone = new RouterError('ROUTER_SHUTTING_DOWN', 'The router shut down before the response was complete.');
      for (const call of this.ctx.active.toArray()) call.abort(gone);
      await this.life.whenIdle(1000);
    }
  }
}
