/**
 * The router: llmgw's OpenAI-compatible data plane (fastify + undici).
 *
 *   POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages and the
 *        other paths of api-paths.ts's allow-list, naming a `model` in their JSON body → proxied to a
 *        ready replica of that model; any other POST /v1/* → 404 ROUTE_NOT_FOUND, never proxied
 *   GET  /v1/models, /v1/models/:model → the models the key may use, with their phase (`llmgw` field)
 *
 * Every error is the OpenAI envelope {error:{message,type,code,param}} (see errors.ts); what a model
 * with no ready replica gets is in resolve.ts, the proxying itself in proxy.ts.
 *
 * Hot path: the HTTP server's request listener sends POST /v1/* straight to RouterCore.handle (core.ts)
 * on node's own request and response, skipping fastify's routing, hooks and reply objects; everything
 * else goes to fastify. The same POST routes are also registered in fastify (handing the raw request
 * and response to the same handler), so inject() and the real server run the same code.
 *
 * Response headers added: `x-llmgw-replica` (the replica id that served a proxied response) and, on
 * errors, `x-llmgw-reason` (the catalogue code), `x-should-retry` and, where it applies, `Retry-After`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerFactory } from 'fastify';
import { NO_REASON, noRouterMetrics, type RouterMetrics } from '../metrics/ports.js';
import { applyClientTimeouts, clientErrorHandler, clientTimeoutOptions, DEFAULT_CLIENT_TIMEOUTS } from '../util/client-timeouts.js';
import type { FleetView } from '../reconciler/view.js';
import { LlmgwError } from '../errors/catalogue.js';
import { grantAllows } from './auth.js';
import { RouterCore, isProxyRequest, type Admission } from './core.js';
import { SLOTS_REFRESH_MS, SlotWatcher } from './slots.js';
import { RouterError, modelNotFound, renderError, routeNotFound } from './errors.js';
import { listModels, modelEntry } from './models-route.js';
import type { UsageSink } from './usage.js';
import { RouterRollouts, type RolloutFigures } from './rollout-figures.js';
import { countingInFlight, type ModelLoad, type RouterLoad } from './load-report.js';
import { foreignRequest, type LocalOnly } from '../util/local-only.js';
import type { RouterCount } from './limits.js';
import type { HotPrefixes } from './hot-prefixes.js';

export interface RouterLimits {
  /** Largest request body accepted (413 above). */
  readonly bodyBytes: number;
  /** TCP connect to a replica (then the next replica is tried). */
  readonly connectTimeoutMs: number;
  /** From sending a request upstream to the response headers (llama-server sends them with the first byte). */
  readonly firstByteTimeoutMs: number;
  /** Longest pause between two chunks of an upstream response. */
  readonly streamIdleTimeoutMs: number;
  /** How long close() lets in-flight requests finish before aborting them. */
  readonly shutdownGraceMs: number;
  /** A client's request line and headers must arrive within this (408 and closed after). */
  readonly headersTimeoutMs: number;
  /** A client's whole request, body included, must arrive within this (408 and closed after). */
  readonly requestTimeoutMs: number;
  /** Most POST /v1/* requests in progress at once (reading the body, waiting for activation, proxied); 503 ROUTER_OVERLOADED above. */
  readonly maxInFlight: number;
  /** Most bytes held at once over all requests in progress (bodies; answers held to redact them); 503 ROUTER_OVERLOADED above. */
  readonly maxBufferedBytes: number;
}

export const DEFAULT_ROUTER_LIMITS: RouterLimits = Object.freeze({
  bodyBytes: 8 * 1024 * 1024,
  connectTimeoutMs: 5_000,
  firstByteTimeoutMs: 300_000,
  streamIdleTimeoutMs: 120_000,
  shutdownGraceMs: 30_000,
  headersTimeoutMs: DEFAULT_CLIENT_TIMEOUTS.headersMs,
  requestTimeoutMs: DEFAULT_CLIENT_TIMEOUTS.requestMs,
  maxInFlight: 1024,
  maxBufferedBytes: 512 * 1024 * 1024,
});

/**
 * How often the models with requests in flight count as active (FleetView.touch), so a request
 * longer than an on-demand model's idle timeout keeps it (each request also touches at its start and end).
 */
export const ACTIVITY_TOUCH_MS = 5_000;

/** How often the models' queues look for a replica that became ready meanwhile. */
export const QUEUE_RECHECK_MS = 250;

/** Idle keep-alive connections from clients are closed after this long (fastify's default). */
const CLIENT_KEEP_ALIVE_MS = 72_000;

export interface RouterDeps {
  readonly fleet: FleetView;
  readonly metrics?: RouterMetrics;
  /** A pino (or pino-compatible) logger; none by default. The router logs nothing per request at info level. */
  readonly logger?: FastifyBaseLogger;
  /** `required: false` turns API keys off (local single-user setups only); there is no default. */
  readonly auth: { readonly required: boolean };
  readonly limits?: Partial<RouterLimits>;
  /** For TLS: a factory returning an https server (see fastify's serverFactory). */
  readonly serverFactory?: FastifyServerFactory;
  /** How often replicas in use are asked for their slots (GET /slots); 0 turns it off. Default SLOTS_REFRESH_MS. */
  readonly slotsRefreshMs?: number;
  /** How often models with requests in flight count as active (FleetView.touch). Default ACTIVITY_TOUCH_MS. */
  readonly activityTouchMs?: number;
  /** Where each request's usage (key name, model, replica, tokens, status, duration) goes. */
  readonly usage?: UsageSink;
  /** The per-key limits' clock (ms); Date.now by default. */
  readonly clock?: () => number;
  /** The routers sharing the per-key limits and this one's rank (instances on etcd: ha/router-shares.ts); 1 by default. */
  readonly routers?: () => RouterCount;
  /** Where the canary figures go (#34; serve hands the same object to the controller); the router's own by default. */
  readonly rollouts?: RouterRollouts;
  /** Where the models' hot prefixes are kept (#38; serve hands the same table to the controller's warm-ups); none by default. */
  readonly hot?: HotPrefixes;
  /** Where each model's load goes (#42; serve hands the same object to the controller, which scales on it). */
  readonly load?: RouterLoad;
  /** Auth off: serve only requests whose Host and Origin are this machine's (or allowed hosts); null/absent: no check. */
  readonly localOnly?: LocalOnly | null;
}

/** A JSON media type (`application/json`, `application/*+json`, any parameters). */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined) return false;
  const type = value.split(';')[0]!.trim().toLowerCase();
  return type === 'application/json' || /^application\/[a-z0-9.+-]+\+json$/.test(type);
}

/** Live numbers, for tests and the admin API. */
export interface RouterStats {
  /** Requests being proxied right now. */
  readonly active: number;
  /** Bytes held now against maxBufferedBytes: request bodies, answers held to redact them (byte-budget.ts). */
  readonly buffered: number;
  /** In-flight proxied requests to a replica endpoint. */
  inFlight(endpoint: string): number;
  /** Requests waiting in a model's queue. */
  queued(model: string): number;
  /** Other routers' requests on a replica endpoint, as its /slots last said. */
  external(endpoint: string): number;
  /** Runs one /slots refresh round now. */
  refreshSlots(): Promise<void>;
}

interface RouterRequest extends FastifyRequest {
  llmgwT0: number;
  llmgwAdmission: Admission | null;
}

const ROUTER_STATS = Symbol.for('llmgw.router.stats');
const ROLLOUT_FIGURES = Symbol.for('llmgw.router.rollouts');

/** Live numbers of a router built by buildRouter. */
export function routerStats(app: FastifyInstance): RouterStats {
  const s = (app as unknown as Record<symbol, RouterStats | undefined>)[ROUTER_STATS];
  if (!s) throw new Error('not an llmgw router');
  return s;
}

/** What a router built by buildRouter saw of each arm of its models' canary steps (rollout-figures.ts). */
export function rolloutFiguresOf(app: FastifyInstance): RolloutFigures {
  const f = (app as unknown as Record<symbol, RolloutFigures | undefined>)[ROLLOUT_FIGURES];
  if (!f) throw new Error('not an llmgw router');
  return f;
}

export function buildRouter(deps: RouterDeps): FastifyInstance {
  const fleet = deps.fleet;
  // requests per model in this router (waiting for activation, queued or proxied): its load (#42)
  const inRouter = new Map<string, number>();
  const load = deps.load;
  // each change of a model's count samples its figures: a report holds the peak since the last one
  const metrics = load ? countingInFlight(deps.metrics ?? noRouterMetrics, inRouter, (m) => load.sample(m)) : (deps.metrics ?? noRouterMetrics);
  const limits: RouterLimits = { ...DEFAULT_ROUTER_LIMITS, ...(deps.limits ?? {}) };
  const log = deps.logger;
  const localOnly = deps.localOnly ?? null;
  const foreign = (req: IncomingMessage): RouterError | null => {
    const f = localOnly ? foreignRequest(req.headers, localOnly) : null;
    return f ? new RouterError(f.code, f.message) : null;
  };
  /**
   * Why a POST /v1/* is refused before its body is read. Auth off only (with a key, a web page
   * elsewhere cannot send one without a CORS preflight, and `curl -d` without a content type keeps
   * working): a foreign Host or Origin, and a body not declared JSON (text/plain, a form, none: what
   * a page may send another site without a preflight).
   */
  const refusal = (req: IncomingMessage): RouterError | null => {
    if (localOnly === null) return null;
    const f = foreign(req);
    if (f) return f;
    const type = req.headers['content-type'];
    if (isJsonContentType(type)) return null;
    return new RouterError('UNSUPPORTED_MEDIA_TYPE', `The router reads the request body only as JSON; this request's Content-Type is ${type === undefined ? 'missing' : JSON.stringify(String(type).slice(0, 100))}: send \`Content-Type: application/json\`.`);
  };
  const rollouts = deps.rollouts ?? new RouterRollouts();
  const core = new RouterCore({ fleet, metrics, limits, authRequired: deps.auth.required, log: log ?? null, usage: deps.usage ?? null, clock: deps.clock ?? Date.now, routers: deps.routers ?? (() => 1), rollouts, hot: deps.hot ?? null });

  // POST /v1/* goes straight to the core; the rest to fastify
  type Handler = (req: IncomingMessage, res: ServerResponse) => void;
  const serverFactory = (fastifyHandler: Handler, opts: Parameters<FastifyServerFactory>[1]): Server => {
    const listener: Handler = (req, res) => {
      if (isProxyRequest(req.method, req.url)) {
        // refused from the headers, the body unread (and the connection closed with the answer)
        const why = refusal(req);
        if (why) core.fail(res, '', performance.now(), why, true);
        else core.handle(req, res);
      } else fastifyHandler(req, res);
    };
    const timeouts = { headersMs: limits.headersTimeoutMs, requestMs: limits.requestTimeoutMs };
    const server = deps.serverFactory ? (deps.serverFactory(listener, opts) as Server) : createServer(clientTimeoutOptions(timeouts), listener);
    applyClientTimeouts(server, timeouts);
    server.keepAliveTimeout = CLIENT_KEEP_ALIVE_MS;
    return server;
  };

  const app = Fastify({
    ...(log ? { loggerInstance: log, logController: new LogController({ disableRequestLogging: true }) } : { logger: false }),
    return503OnClosing: false,
    serverFactory: serverFactory as FastifyServerFactory,
    // a URL fastify cannot route (bad percent-encoding, a parameter too long): the OpenAI envelope
    frameworkErrors: (err, _req, reply) => {
      reply.hijack();
      core.fail(reply.raw, '', performance.now(), new RouterError('BAD_REQUEST', err.message));
    },
    clientErrorHandler: clientErrorHandler((kind, message) => {
      const r = renderError(new RouterError(kind, message));
      metrics.request('', r.status, 0, r.code);
      return { status: r.status, headers: r.headers, body: r.body };
    }),
  });

  Object.defineProperty(app, ROUTER_STATS, {
    value: {
      get active() { return core.ctx.active.size; },
      get buffered() { return core.ctx.buffers.held; },
      inFlight: (e: string) => core.upstreams.inFlight(e),
      queued: (m: string) => core.ctx.modelInFlight.get(m)?.queue?.length ?? 0,
      external: (e: string) => core.upstreams.external(e),
      refreshSlots: () => slots.refresh(),
    } satisfies RouterStats,
  });
  Object.defineProperty(app, ROLLOUT_FIGURES, { value: rollouts satisfies RolloutFigures });
  // each model's load (#42): its requests on replicas (slots busy), in its queue, and the oldest one's wait
  const figuresOf = (model: string): ModelLoad | undefined => {
    const n = inRouter.get(model) ?? 0;
    if (n <= 0) return undefined;
    // waiting for a slot: in the queue, or for the model's activation
    const counter = core.ctx.modelInFlight.get(model);
    const busy = counter?.n ?? 0;
    const head = counter?.queue?.peek() ?? null;
    const activating = core.activator.waitingSince(model);
    const waitMs = Math.max(0, head === null ? 0 : performance.now() - head.since, activating === null ? 0 : Date.now() - activating);
    return { busy, queued: Math.max(0, n - busy), waitMs: Math.round(waitMs) };
  };
  deps.load?.attach(() => {
    const out: Record<string, ModelLoad> = {};
    for (const model of inRouter.keys()) {
      const f = figuresOf(model);
      if (f) out[model] = f;
    }
    return out;
  }, figuresOf);
  const sweepTimer = setInterval(() => {
    for (const u of core.upstreams.sweep(performance.now())) core.ejections.forget(u);
    core.keyLimiter.sweep();
  }, 60_000);
  sweepTimer.unref();
  const activityTimer = setInterval(() => core.touchActive(), deps.activityTouchMs ?? ACTIVITY_TOUCH_MS);
  activityTimer.unref();
  // queued requests go to a replica that became ready since (a surge replica while every slot of the
  // old ones is busy) within QUEUE_RECHECK_MS, not when a call on the old ones ends
  const queueTimer = setInterval(() => core.drainQueues(), QUEUE_RECHECK_MS);
  queueTimer.unref();
  core.ejections.start();
  const slots = new SlotWatcher(core.upstreams, () => core.engineHeaders(), () => core.drainQueues(), deps.slotsRefreshMs || SLOTS_REFRESH_MS);
  if (deps.slotsRefreshMs !== 0) slots.start();

  app.decorateRequest('llmgwT0', 0);
  app.decorateRequest('llmgwAdmission', null);

  // bodies are left unread: the POST routes hand the raw request to the core, which reads it
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null));

  app.setErrorHandler((err, request, reply) => {
    let e: unknown = err;
    if (!(err instanceof LlmgwError)) {
      const status = (err as { statusCode?: unknown }).statusCode;
      if (typeof status === 'number' && status >= 400 && status < 500) e = new RouterError('BAD_REQUEST', (err as Error).message);
    }
    const r = request as RouterRequest;
    reply.hijack();
    core.fail(reply.raw, '', r.llmgwT0 || performance.now(), e);
  });

  // auth off: a foreign Host or Origin gets nothing, on every route (the POST /v1/* hot path checks in the listener)
  if (localOnly) {
    app.addHook('onRequest', (request, reply, done) => {
      const f = foreign(request.raw);
      if (!f) return done();
      reply.hijack();
      core.fail(reply.raw, '', performance.now(), f, true);
    });
  }

  app.setNotFoundHandler((request, reply) => {
    reply.hijack();
    core.fail(reply.raw, '', performance.now(), routeNotFound(request.method, request.url));
  });

  /** Route-level onRequest of the GET routes: shutdown, spec and API key. */
  const admit = (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    const r = request as RouterRequest;
    r.llmgwT0 = performance.now();
    try {
      r.llmgwAdmission = core.admit(request.headers);
    } catch (e) {
      done(e as Error);
      return;
    }
    done();
  };

  const proxyRoute = (request: FastifyRequest, reply: FastifyReply): void => {
    reply.hijack();
    const why = refusal(request.raw);
    if (why) core.fail(reply.raw, '', performance.now(), why, true);
    else core.handle(request.raw, reply.raw);
  };
  for (const url of ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/*']) app.post(url, proxyRoute);

  app.get('/v1/models', { onRequest: admit }, (request, reply) => {
    const r = request as RouterRequest;
    const adm = r.llmgwAdmission!;
    const body = JSON.stringify(listModels(fleet, adm.spec, adm.grant));
    metrics.request('', 200, (performance.now() - r.llmgwT0) / 1000, NO_REASON);
    void reply.header('content-type', 'application/json; charset=utf-8').send(body);
  });

  app.get('/v1/models/:model', { onRequest: admit }, (request, reply) => {
    const r = request as RouterRequest;
    const adm = r.llmgwAdmission!;
    const name = (request.params as { model: string }).model;
    const model = adm.compiled.names.get(name);
    const spec = model === undefined ? undefined : adm.spec.models[model];
    if (model === undefined || spec === undefined || !grantAllows(adm.grant, model)) {
      throw modelNotFound(name);
    }
    metrics.request(model, 200, (performance.now() - r.llmgwT0) / 1000, NO_REASON);
    void reply.header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(modelEntry(fleet, spec)));
  });

  // graceful shutdown: stop accepting, let in-flight requests finish up to the grace, then abort them
  app.addHook('preClose', async () => {
    const server = app.server;
    const draining = core.drain(limits.shutdownGraceMs); // sets `connection: close` on every response from now on
    if (server.listening) server.close(); // no new connections; the idle keep-alive ones are closed now
    await draining;
    // connections still open: responses being flushed (they close themselves) and keep-alive ones
    // that went idle after their stream ended (closed here)
    if (typeof server.closeIdleConnections === 'function') {
      const deadline = Date.now() + 1000;
      for (;;) {
        server.closeIdleConnections();
        const open = await new Promise<number>((resolve) => server.getConnections((_e, n) => resolve(n ?? 0)));
        if (open === 0 || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      server.closeAllConnections();
    }
  });
  app.addHook('onClose', async () => {
    clearInterval(sweepTimer);
    clearInterval(activityTimer);
    clearInterval(queueTimer);
    core.ejections.stop();
    slots.stop();
    await core.upstreams.close();
  });

  return app;
}
