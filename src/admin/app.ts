/**
 * The admin API (fastify): the hooks (doors.ts), the one error handler (every failure as
 * `{ error: { code, message, hint, retryable } }` with the catalogue's HTTP status) and one list of
 * route groups (routes/*.ts), each a fastify plugin over the context built here. A route validates
 * its input (schema), makes one backend call and shapes the reply.
 *
 * Under /admin/v1, all but the webhook need `Authorization: Bearer <admin token>`:
 *   GET  /status                     fleet summary
 *   GET  /models[?phase=a,b&name=GLOB&limit=N&after=NAME]  models by name (a page; total, next); GET /models/:name one
 *   POST /models/:name/retry         unpark / clear backoff; answers after the pass that handled it
 *   GET  /models/:name/rollout, POST /models/:name/rollout/promote|abort   a model's rollout (routes/rollout.ts)
 *   GET  /replicas                   every replica
 *   GET  /replicas/:id/logs?lines=N  a replica's log tail
 *   GET  /nodes                      nodes: reachable, memory, engines
 *   GET  /usage?since=&key=&model=   requests, errors, tokens, p50 latency per key × model (routes/usage.ts)
 *   POST /restart[?wait=true&timeout=S]  body {replicas}|{model}|{all:true}: surge-first replacement
 *   GET  /restart?ids=a,b[&wait=true&timeout=S]  whether a restart is done (200 done, 202 not yet)
 *   POST /webhook                    git push webhook, authenticated by its signature (routes/webhook.ts)
 *   GET  /events, /events/stream, /view, /view/stream   the status page's feeds (src/ui/routes.ts)
 * and, without a token, the status page itself at /ui/ (/ redirects there), and for load balancers
 *   GET  /healthz                    200 while the process answers (no token, no gate)
 *   GET  /readyz                     200 when this instance can route (a valid spec and a snapshot), else 503
 * /metrics, which the embedding process adds, needs no token either. Which door each route is, and
 * what each door may hold, is in doors.ts.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerFactory } from 'fastify';
import type { Registry } from 'prom-client';
import { LlmgwError } from '../errors/catalogue.js';
import { applyClientTimeouts, clientErrorHandler, clientTimeoutOptions, DEFAULT_CLIENT_TIMEOUTS } from '../util/client-timeouts.js';
import { adminAuth } from './auth.js';
import type { AdminBackend } from './backend.js';
import { renderAdminError } from './errors.js';
import { registerUi } from '../ui/routes.js';
import type { WebhookConfig } from './webhook.js';
import { DEFAULT_ADMIN_LIMITS, type AdminLimits } from './limits.js';
import type { AdminRouteContext, AdminRoutes, UsageSource } from './routes/context.js';
import { fleetRoutes } from './routes/fleet.js';
import { healthRoutes } from './routes/health.js';
import { logRoutes } from './routes/logs.js';
import { restartRoutes } from './routes/restart.js';
import { retryRoutes } from './routes/retry.js';
import { rolloutRoutes } from './routes/rollout.js';
import { usageRoutes } from './routes/usage.js';
import { registerWebhook } from './routes/webhook.js';
import { doorsHook, SendWatch } from './doors.js';
import type { LocalOnly } from '../util/local-only.js';

export const ADMIN_PREFIX = '/admin/v1';

export interface AdminAppDeps {
  readonly backend: AdminBackend;
  /** The admin token; `null` disables authentication (explicit local mode only). */
  readonly token: string | null;
  /** Without it, POST /admin/v1/webhook answers 404 WEBHOOK_NOT_CONFIGURED. */
  readonly webhook?: WebhookConfig;
  readonly logger?: FastifyBaseLogger;
  /** For TLS: a factory returning an https server (see fastify's serverFactory). */
  readonly serverFactory?: FastifyServerFactory;
  readonly limits?: Partial<AdminLimits>;
  /** The router's usage per key × model (GET /admin/v1/usage); none: the route answers no rows. */
  readonly usage?: UsageSource;
  /** The controller's metrics registry: the status page shows the router's figures from it. */
  readonly metricsRegistry?: Registry;
  /** Auth off: serve only requests whose Host and Origin are this machine's (or allowed hosts); null/absent: no check. */
  readonly localOnly?: LocalOnly | null;
}

export { DEFAULT_ADMIN_LIMITS, type AdminLimits } from './limits.js';

/** The token-authenticated route groups, under /admin/v1, in one list. */
const AUTHENTICATED: readonly AdminRoutes[] = [fleetRoutes, usageRoutes, retryRoutes, rolloutRoutes, logRoutes, restartRoutes];

export function buildAdminApp(deps: AdminAppDeps): FastifyInstance {
  const { backend } = deps;
  const limits: AdminLimits = { ...DEFAULT_ADMIN_LIMITS, ...(deps.limits ?? {}) };
  const auth = adminAuth(deps.token);
  const log = deps.logger;
  if (deps.webhook && deps.webhook.secret === '') throw new Error('the webhook secret is empty');

  const timeouts = { headersMs: limits.headersTimeoutMs, requestMs: limits.requestTimeoutMs };
  const app = Fastify({
    ...(log ? { loggerInstance: log, logController: new LogController({ disableRequestLogging: true }) } : { logger: false }),
    ...(deps.serverFactory ? { serverFactory: deps.serverFactory } : { http: clientTimeoutOptions(timeouts), requestTimeout: clientTimeoutOptions(timeouts).requestTimeout }),
    // reject unknown body fields instead of silently dropping them
    ajv: { customOptions: { removeAdditional: false } },
    return503OnClosing: true,
    // a URL fastify cannot route (bad percent-encoding, a parameter too long): the catalogue's envelope
    frameworkErrors: (err, _req, reply) => {
      const r = renderAdminError(new LlmgwError('ADMIN_BAD_REQUEST', err.message));
      void (reply as FastifyReply).code(r.status).header('cache-control', 'no-store').send(r.body);
    },
    clientErrorHandler: clientErrorHandler((kind, message) => {
      const r = renderAdminError(new LlmgwError(kind, message));
      return { status: r.status, headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }, body: JSON.stringify(r.body) };
    }),
  }) as unknown as FastifyInstance;
  applyClientTimeouts(app.server, timeouts);
  const sendWatch = new SendWatch(limits.sendTimeoutMs, (res) => log?.warn({ code: 'REQUEST_TIMEOUT', url: res.req?.url?.split('?')[0]?.slice(0, 200) }, 'admin: the client took nothing of its response for too long; cut'));
  app.addHook('onClose', async () => sendWatch.stop());
  app.addHook('onRequest', doorsHook({ auth, prefix: ADMIN_PREFIX, limits, localOnly: deps.localOnly ?? null, sendWatch }));

  app.setErrorHandler((err, request, reply) => {
    const r = renderAdminError(err);
    if (r.internal) log?.error({ err, url: request.url, method: request.method }, 'admin API: internal error');
    if (r.body.error.code === 'ADMIN_AUTH_MISSING' || r.body.error.code === 'ADMIN_AUTH_INVALID') void reply.header('www-authenticate', 'Bearer realm="llmgw-admin"');
    void reply.code(r.status).header('cache-control', 'no-store').send(r.body);
  });

  const checkAuth = (request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void): void => {
    try {
      auth.check(request.headers);
      done();
    } catch (e) {
      done(e as Error);
    }
  };

  app.setNotFoundHandler({ preHandler: checkAuth }, (request) => {
    throw new LlmgwError('ADMIN_ROUTE_NOT_FOUND', `No admin route ${request.method} ${request.url.split('?')[0]!.slice(0, 200)}.`);
  });

  const whatSpec = (): string => {
    const rev = backend.snapshot().appliedRevision;
    return rev ? `the fleet in force (revision ${rev.slice(0, 12)})` : 'the fleet in force';
  };

  /** A model name or alias → its canonical name; NO_VALID_SPEC before the first valid revision, NOT_FOUND when unknown. */
  const canonicalModel = (name: string): string => {
    const spec = backend.spec();
    if (!spec) throw new LlmgwError('NO_VALID_SPEC', 'No valid fleet revision has been applied yet; there are no models.');
    const canonical = spec.modelNames[name];
    if (canonical === undefined) throw new LlmgwError('NOT_FOUND', `No model named "${name}" in ${whatSpec()}.`, { model: name });
    return canonical;
  };

  // waiting requests answer (done:false) at once when the app closes, so close() is not held up
  const closing = new AbortController();
  app.addHook('preClose', async () => closing.abort());
  const ctx: AdminRouteContext = { backend, limits, log, canonicalModel, whatSpec, usage: deps.usage ?? null, closing: closing.signal };

  // ------------------------------------------------------------------ token-authenticated routes (routes/*.ts)
  void app.register(
    async (api) => {
      api.addHook('onRequest', checkAuth);
      for (const routes of AUTHENTICATED) await api.register(async (group) => routes(group, ctx));
    },
    { prefix: ADMIN_PREFIX },
  );

  // ------------------------------------------------------------------ the status page and its feeds (src/ui)
  registerUi(app, { backend, checkAuth, prefix: ADMIN_PREFIX, authEnabled: auth.enabled, ...(deps.metricsRegistry ? { registry: deps.metricsRegistry } : {}) });

  // ------------------------------------------------------------------ webhook (signature-authenticated; routes/webhook.ts)
  registerWebhook(app, { prefix: ADMIN_PREFIX, webhook: deps.webhook, backend, limits, log });

  // ------------------------------------------------------------------ load balancers: no token, no gate (doors.ts)
  healthRoutes(app, ctx);

  return app;
}
