/**
 * The router: llmgw's OpenAI-compatible data plane (fastify + undici).
 *
 *   POST /v1/chat/completions, /v1/completions, /v1/embeddings and any other POST /v1/* naming a
 *        `model` in its JSON body → proxied to the least-busy ready replica of that model
 *   GET  /v1/models, /v1/models/:model → the models the key may use, with their phase (`llmgw` field)
 *
 * Every error is the OpenAI envelope {error:{message,type,code,param}} (see errors.ts); what a model
 * with no ready replica gets is in resolve.ts, the proxying itself in proxy.ts.
 *
 * Hot path (a ready model): one route-level onRequest hook (spec + key lookup: one sha256 and one
 * Map get, tables precomputed per spec object), the raw body buffered once (JSON.parse only to read
 * `model`; the original bytes are forwarded), then the reply is hijacked and the upstream response
 * streamed to the raw socket by an undici dispatch handler. No per-request logging.
 *
 * Response headers added: `x-llmgw-replica` (the replica id that served a proxied response) and, on
 * errors, `x-llmgw-reason` (the catalogue code), `x-should-retry` and, where it applies, `Retry-After`.
 */
import type { ServerResponse } from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerFactory } from 'fastify';
import { noRouterMetrics, type RouterMetrics } from '../metrics/ports.js';
import type { FleetView, ReplicaView } from '../reconciler/view.js';
import type { FleetSpec } from '../spec/types.js';
import { LlmgwError } from '../errors/catalogue.js';
import { authenticate, compileSpec, extractKey, grantAllows, type CompiledSpec, type KeyGrant } from './auth.js';
import { RouterError, renderError } from './errors.js';
import { listModels, modelEntry } from './models-route.js';
import { ActiveCalls, CLIENT_CLOSED_STATUS, ProxyCall, Upstreams, modelCounter, type ProxyContext } from './proxy.js';
import { Activator } from './resolve.js';

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
}

export const DEFAULT_ROUTER_LIMITS: RouterLimits = Object.freeze({
  bodyBytes: 8 * 1024 * 1024,
  connectTimeoutMs: 5_000,
  firstByteTimeoutMs: 300_000,
  streamIdleTimeoutMs: 120_000,
  shutdownGraceMs: 30_000,
});

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
}

/** Live numbers, for tests and the admin API. */
export interface RouterStats {
  /** Requests being proxied right now. */
  readonly active: number;
  /** In-flight proxied requests to a replica endpoint. */
  inFlight(endpoint: string): number;
}

interface RouterRequest extends FastifyRequest {
  llmgwT0: number;
  llmgwSpec: FleetSpec | null;
  llmgwCompiled: CompiledSpec | null;
  llmgwGrant: KeyGrant | null;
  llmgwModel: string;
}

const ROUTER_STATS = Symbol.for('llmgw.router.stats');

/** Live numbers of a router built by buildRouter. */
export function routerStats(app: FastifyInstance): RouterStats {
  const s = (app as unknown as Record<symbol, RouterStats | undefined>)[ROUTER_STATS];
  if (!s) throw new Error('not an llmgw router');
  return s;
}

class ClientGoneDuringActivation extends Error {}

function quote(name: string): string {
  return name.length > 200 ? `${name.slice(0, 200)}…` : name;
}

export function buildRouter(deps: RouterDeps): FastifyInstance {
  const fleet = deps.fleet;
  const metrics = deps.metrics ?? noRouterMetrics;
  const limits: RouterLimits = { ...DEFAULT_ROUTER_LIMITS, ...(deps.limits ?? {}) };
  const authRequired = deps.auth.required;
  const log = deps.logger;

  const app = Fastify({
    ...(log ? { loggerInstance: log, logController: new LogController({ disableRequestLogging: true }) } : { logger: false }),
    bodyLimit: limits.bodyBytes,
    return503OnClosing: false,
    ...(deps.serverFactory ? { serverFactory: deps.serverFactory } : {}),
  });

  const upstreams = new Upstreams(limits);
  const ctx: ProxyContext = {
    upstreams,
    metrics,
    active: new ActiveCalls(),
    modelInFlight: new Map(),
    shuttingDown: false,
    onIdle: null,
    log: { warn: (obj, msg) => log?.warn(obj, msg) },
  };
  const activator = new Activator(fleet);
  const shutdown = new AbortController();
  let activating = 0;
  const sweepTimer = setInterval(() => upstreams.sweep(performance.now()), 60_000);
  sweepTimer.unref();

  Object.defineProperty(app, ROUTER_STATS, {
    value: { get active() { return ctx.active.size; }, inFlight: (e: string) => upstreams.inFlight(e) } satisfies RouterStats,
  });

  // the engine key header, rebuilt only when the key changes
  let headersKey: string | null = null;
  let upstreamHeaders: Record<string, string> = {};
  const headersFor = (key: string): Record<string, string> => {
    if (key !== headersKey) {
      headersKey = key;
      upstreamHeaders = key ? { 'content-type': 'application/json', authorization: `Bearer ${key}` } : { 'content-type': 'application/json' };
    }
    return upstreamHeaders;
  };

  app.decorateRequest('llmgwT0', 0);
  app.decorateRequest('llmgwSpec', null);
  app.decorateRequest('llmgwCompiled', null);
  app.decorateRequest('llmgwGrant', null);
  app.decorateRequest('llmgwModel', '');

  // bodies are kept as bytes: parsed once to read `model`, forwarded unchanged
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: limits.bodyBytes }, (_req, body, done) => done(null, body));

  const sendError = (request: FastifyRequest, reply: FastifyReply, e: unknown): void => {
    const r = renderError(e);
    if (r.code === 'INTERNAL') log?.error({ err: e, url: request.url }, 'router: internal error');
    if (ctx.shuttingDown) r.headers['connection'] = 'close';
    const rr = request as RouterRequest;
    metrics.request(rr.llmgwModel, r.status, rr.llmgwT0 ? (performance.now() - rr.llmgwT0) / 1000 : 0);
    void reply.code(r.status).headers(r.headers).send(r.body);
  };

  app.setErrorHandler((err, request, reply) => {
    let e: unknown = err;
    if (!(err instanceof LlmgwError)) {
      const code = (err as { code?: unknown }).code;
      const status = (err as { statusCode?: unknown }).statusCode;
      if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
        e = new RouterError('BODY_TOO_LARGE', `The request body is larger than the router's limit of ${limits.bodyBytes} bytes.`);
      } else if (typeof status === 'number' && status >= 400 && status < 500) {
        e = new RouterError('BAD_REQUEST', (err as Error).message);
      }
    }
    sendError(request, reply, e);
  });

  app.setNotFoundHandler((request, reply) => {
    sendError(request, reply, new RouterError('ROUTE_NOT_FOUND', `Unknown request URL: ${request.method} ${quote(request.url)}.`));
  });

  /** Route-level onRequest: shutdown, spec and API key — before the body is read. */
  const admit = (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    const r = request as RouterRequest;
    r.llmgwT0 = performance.now();
    if (ctx.shuttingDown) {
      done(new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.', { retryAfterSeconds: 1 }));
      return;
    }
    const spec = fleet.spec();
    if (spec === null) {
      // no key table yet: a request without any key is still refused as such; one with a key cannot
      // be checked yet and gets a retryable answer (a 401 would make clients give up during startup)
      if (authRequired && extractKey(request.headers) === null) {
        done(new RouterError('AUTH_MISSING', 'No API key provided. Send it as "Authorization: Bearer KEY" (or "x-api-key: KEY").'));
        return;
      }
      done(new RouterError('NO_VALID_SPEC', 'The fleet has no valid revision applied yet; no models are served.', { retryAfterSeconds: 5 }));
      return;
    }
    const compiled = compileSpec(spec);
    r.llmgwSpec = spec;
    r.llmgwCompiled = compiled;
    try {
      r.llmgwGrant = authenticate(compiled, request.headers, authRequired);
    } catch (e) {
      done(e as Error);
      return;
    }
    done();
  };

  const startProxy = (r: RouterRequest, reply: FastifyReply, model: string, body: Buffer, replicas: readonly ReplicaView[]): void => {
    const max = r.llmgwSpec!.models[model]?.maxConcurrency;
    if (max != null && modelCounter(ctx, model).n >= max) {
      throw new RouterError('CONCURRENCY_LIMIT', `Model '${model}' is at its concurrency limit of ${max} requests; retry shortly.`, { model, retryAfterSeconds: 1 });
    }
    const first = upstreams.pick(replicas, null, performance.now())!;
    reply.hijack();
    new ProxyCall(ctx, model, r.url, headersFor(fleet.engineApiKey), body, replicas, reply.raw, r.llmgwT0).start(first);
  };

  const activateThenProxy = async (r: RouterRequest, reply: FastifyReply, model: string, body: Buffer): Promise<void> => {
    const res: ServerResponse = reply.raw;
    const gone = new AbortController();
    const onClose = (): void => {
      if (!res.writableFinished) gone.abort(new ClientGoneDuringActivation('client went away'));
    };
    res.once('close', onClose);
    const signal = AbortSignal.any([gone.signal, shutdown.signal]);
    metrics.inFlight(model, 1);
    activating++;
    let replicas: readonly ReplicaView[];
    try {
      const startedAt = Date.now() - (performance.now() - r.llmgwT0);
      replicas = await activator.activate(model, { windowMs: r.llmgwSpec!.settings.activationWindowMs, startedAt, signal });
    } catch (e) {
      if (gone.signal.aborted) {
        reply.hijack();
        res.destroy();
        metrics.request(model, CLIENT_CLOSED_STATUS, (performance.now() - r.llmgwT0) / 1000);
        return;
      }
      if (shutdown.signal.aborted) throw new RouterError('ROUTER_SHUTTING_DOWN', `The router is shutting down; model '${model}' was still starting.`, { retryAfterSeconds: 1 });
      throw e;
    } finally {
      res.removeListener('close', onClose);
      metrics.inFlight(model, -1);
      activating--;
      if (ctx.onIdle && ctx.active.size === 0 && activating === 0) ctx.onIdle();
    }
    startProxy(r, reply, model, body, replicas);
  };

  const proxyHandler = (request: FastifyRequest, reply: FastifyReply): Promise<void> | void => {
    const r = request as RouterRequest;
    const body = request.body;
    if (!Buffer.isBuffer(body) || body.length === 0) throw new RouterError('BAD_JSON', 'The request body is empty; send a JSON object naming a model.');
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (e) {
      throw new RouterError('BAD_JSON', `The request body is not valid JSON: ${(e as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new RouterError('BAD_REQUEST', 'The request body must be a JSON object.');
    }
    const name = (parsed as { model?: unknown }).model;
    if (name === undefined || name === null || name === '') {
      throw new RouterError('MODEL_MISSING', 'The request body names no model: set "model" to a model name or alias.', { param: 'model' });
    }
    if (typeof name !== 'string') throw new RouterError('BAD_REQUEST', '"model" must be a string.', { param: 'model' });
    const model = r.llmgwCompiled!.names.get(name);
    if (model === undefined) {
      throw new RouterError('MODEL_NOT_FOUND', `The model '${quote(name)}' does not exist or you do not have access to it.`, { param: 'model' });
    }
    r.llmgwModel = model;
    if (!grantAllows(r.llmgwGrant!, model)) {
      throw new RouterError('MODEL_FORBIDDEN', `This API key may not use model '${model}'.`, { param: 'model' });
    }
    fleet.touch(model);
    const replicas = fleet.readyReplicas(model);
    if (replicas.length > 0) {
      startProxy(r, reply, model, body, replicas);
      return;
    }
    return activateThenProxy(r, reply, model, body);
  };

  const modelsHandler = (request: FastifyRequest, reply: FastifyReply): void => {
    const r = request as RouterRequest;
    const body = JSON.stringify(listModels(fleet, r.llmgwSpec!, r.llmgwGrant!));
    metrics.request('', 200, (performance.now() - r.llmgwT0) / 1000);
    void reply.header('content-type', 'application/json; charset=utf-8').send(body);
  };

  const modelHandler = (request: FastifyRequest, reply: FastifyReply): void => {
    const r = request as RouterRequest;
    const name = (request.params as { model: string }).model;
    const model = r.llmgwCompiled!.names.get(name);
    const spec = model === undefined ? undefined : r.llmgwSpec!.models[model];
    if (model === undefined || spec === undefined || !grantAllows(r.llmgwGrant!, model)) {
      throw new RouterError('MODEL_NOT_FOUND', `The model '${quote(name)}' does not exist or you do not have access to it.`, { param: 'model' });
    }
    r.llmgwModel = model;
    metrics.request(model, 200, (performance.now() - r.llmgwT0) / 1000);
    void reply.header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(modelEntry(fleet, spec)));
  };

  for (const url of ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/*']) {
    app.post(url, { onRequest: admit }, proxyHandler);
  }
  app.get('/v1/models', { onRequest: admit }, modelsHandler);
  app.get('/v1/models/:model', { onRequest: admit }, modelHandler);

  // graceful shutdown: stop accepting, let in-flight requests finish up to the grace, then abort them
  const idle = (): boolean => ctx.active.size === 0 && activating === 0;
  const whenIdle = (ms: number): Promise<void> =>
    idle()
      ? Promise.resolve()
      : new Promise<void>((resolve) => {
          const t = setTimeout(resolve, ms);
          ctx.onIdle = () => {
            if (idle()) {
              clearTimeout(t);
              resolve();
            }
          };
        });
  app.addHook('preClose', async () => {
    ctx.shuttingDown = true; // from now on every response says `connection: close`
    shutdown.abort(new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.'));
    const server = app.server;
    if (server.listening) server.close(); // no new connections; the idle keep-alive ones are closed now
    await whenIdle(limits.shutdownGraceMs);
    if (ctx.active.size > 0) {
      log?.warn({ active: ctx.active.size, graceMs: limits.shutdownGraceMs }, 'router: shutdown grace over; aborting in-flight requests');
      const gone = new RouterError('ROUTER_SHUTTING_DOWN', 'The router shut down before the response was complete.');
      for (const call of ctx.active.toArray()) call.abort(gone);
      await whenIdle(1000);
    }
    ctx.onIdle = null;
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
    await upstreams.close();
  });

  return app;
}
