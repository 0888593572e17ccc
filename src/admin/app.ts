/**
 * The admin API (fastify): thin routes over the controller. Each route validates its input
 * (schema), makes one backend call and shapes the reply; one error handler renders every failure
 * as `{ error: { code, message, hint, retryable } }` with the catalogue's HTTP status.
 *
 * Under /admin/v1, all but the webhook need `Authorization: Bearer <admin token>`:
 *   GET  /status                     fleet summary
 *   GET  /models[?phase=a,b&name=GLOB&limit=N&after=NAME]  models by name (a page; total, next); GET /models/:name one
 *   POST /models/:name/retry         unpark / clear backoff; answers after the pass that handled it
 *   GET  /models/:name/rollout, POST /models/:name/rollout/promote|abort   a model's rollout (rollout-routes.ts)
 *   GET  /replicas                   every replica
 *   GET  /replicas/:id/logs?lines=N  a replica's log tail
 *   GET  /nodes                      nodes: reachable, memory, engines
 *   GET  /usage?since=&key=&model=   requests, errors, tokens, p50 latency per key × model (usage-route.ts)
 *   POST /restart[?wait=true&timeout=S]  body {replicas}|{model}|{all:true}: surge-first replacement
 *   GET  /restart?ids=a,b[&wait=true&timeout=S]  whether a restart is done (200 done, 202 not yet)
 *   POST /webhook                    git push webhook, authenticated by its signature (webhook.ts)
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
import type { ModelPhase } from '../reconciler/view.js';
import { renderAdminError } from './errors.js';
import {
  MODEL_PHASES,
  modelJson,
  modelsJson,
  nodesJson,
  replicasJson,
  statusJson,
  type LogsJson,
  type ModelOneJson,
  type ModelsJson,
  type NodesJson,
  type RestartJson,
  type RetryJson,
} from '../wire/shape.js';
import { registerUsageRoute, type UsageSource } from './usage-route.js';
import { registerRolloutRoutes } from './rollout-routes.js';
import { registerUi } from '../ui/routes.js';
import type { WebhookConfig } from './webhook.js';
import { registerWebhook } from './webhook-route.js';
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

export interface AdminLimits {
  /** Longest a `?wait=true` restart request may hold the connection. */
  readonly maxWaitMs: number;
  /** Wait when `?wait=true` gives no timeout. */
  readonly defaultWaitMs: number;
  /** How often a waiting restart request checks restartDone. */
  readonly pollMs: number;
  /** Largest webhook body (GitHub caps deliveries at 25 MB). */
  readonly webhookBodyBytes: number;
  /** Most log lines one request may ask for. */
  readonly maxLogLines: number;
  /** A client's request line and headers must arrive within this (408 and closed after). */
  readonly headersTimeoutMs: number;
  /** A client's whole request, body included, must arrive within this (408 and closed after). */
  readonly requestTimeoutMs: number;
  /** Most token-authenticated requests in progress on the admin port at once (503 ADMIN_OVERLOADED above; doors.ts). */
  readonly maxInFlight: number;
  /** Most requests without a token (/metrics, the page's files, webhooks) in progress at once (503 above). */
  readonly maxPublicInFlight: number;
  /** Most event streams (the status page's) open at once (503 above). */
  readonly maxStreams: number;
  /** A response of which the client has taken nothing for this long is cut (a client that stopped reading). */
  readonly sendTimeoutMs: number;
  /** Most webhook bodies read at once before their signature is checked (503 above). */
  readonly webhookUnverified: number;
  /** Of those, most from one client address. */
  readonly webhookUnverifiedPerAddress: number;
  /** A webhook body must be in within this, or its connection is closed. */
  readonly webhookBodyMs: number;
  /** A webhook delivery (its id, or its signed body) seen within this asks for no pass again. */
  readonly webhookReplayMs: number;
  /** Passes asked for by webhooks: at most one per this. */
  readonly webhookPassEveryMs: number;
}

export const DEFAULT_ADMIN_LIMITS: AdminLimits = Object.freeze({
  maxWaitMs: 600_000,
  defaultWaitMs: 30_000,
  pollMs: 200,
  // read before the signature is checked, so kept small: a push event's JSON is a few KiB per
  // commit; a bigger delivery is refused (413) and the poll picks the push up
  webhookBodyBytes: 64 * 1024,
  maxLogLines: 10_000,
  headersTimeoutMs: DEFAULT_CLIENT_TIMEOUTS.headersMs,
  requestTimeoutMs: DEFAULT_CLIENT_TIMEOUTS.requestMs,
  maxInFlight: 256,
  maxPublicInFlight: 64,
  maxStreams: 64,
  sendTimeoutMs: 15_000,
  webhookUnverified: 8,
  webhookUnverifiedPerAddress: 2,
  webhookBodyMs: 5_000,
  webhookReplayMs: 3_600_000,
  webhookPassEveryMs: 1_000,
});

const MAX_NAME = 256;

const waitQuery = {
  wait: { type: 'boolean', default: false },
  /** seconds */
  timeout: { type: 'number', minimum: 0 },
} as const;

function waitUntil(cond: () => boolean, ms: number, pollMs: number, signal: AbortSignal): Promise<boolean> {
  if (cond()) return Promise.resolve(true);
  if (ms <= 0 || signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const deadline = Date.now() + ms;
    const finish = (v: boolean): void => {
      clearInterval(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(v);
    };
    const onAbort = (): void => finish(cond());
    const timer = setInterval(() => {
      if (cond()) finish(true);
      else if (Date.now() >= deadline) finish(false);
    }, Math.max(1, Math.min(pollMs, ms)));
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Aborts when the client goes away before the reply is sent. */
function clientGone(reply: FastifyReply): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  const onClose = (): void => {
    if (!reply.raw.writableEnded) ac.abort();
  };
  reply.raw.once('close', onClose);
  return { signal: ac.signal, dispose: () => reply.raw.removeListener('close', onClose) };
}

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

  const noStore = (reply: FastifyReply): FastifyReply => reply.header('cache-control', 'no-store');

  // waiting requests answer (done:false) at once when the app closes, so close() is not held up
  const closing = new AbortController();
  app.addHook('preClose', async () => closing.abort());

  // ------------------------------------------------------------------ token-authenticated routes
  void app.register(
    async (api) => {
      api.addHook('onRequest', checkAuth);

      api.get('/status', async (_req, reply) => noStore(reply).send(statusJson(backend.snapshot())));

      registerUsageRoute(api, deps.usage ?? null);

      api.get<{ Querystring: { phase?: string; name?: string; limit?: number; after?: string } }>(
        '/models',
        {
          schema: {
            querystring: {
              type: 'object',
              additionalProperties: false,
              properties: {
                phase: { type: 'string', pattern: `^(${MODEL_PHASES.join('|')})(,(${MODEL_PHASES.join('|')}))*$` },
                name: { type: 'string', minLength: 1, maxLength: MAX_NAME },
                limit: { type: 'integer', minimum: 1, maximum: 100_000 },
                after: { type: 'string', minLength: 1, maxLength: MAX_NAME },
              },
            },
          },
        },
        async (req, reply) => {
          const q = req.query;
          const body: ModelsJson = modelsJson(backend.snapshot(), {
            ...(q.phase ? { phases: q.phase.split(',') as ModelPhase[] } : {}),
            ...(q.name !== undefined ? { name: q.name } : {}),
            ...(q.limit !== undefined ? { limit: q.limit } : {}),
            ...(q.after !== undefined ? { after: q.after } : {}),
          });
          return noStore(reply).send(body);
        },
      );

      api.get<{ Params: { name: string } }>(
        '/models/:name',
        { schema: { params: { type: 'object', properties: { name: { type: 'string', minLength: 1, maxLength: MAX_NAME } } } } },
        async (req, reply) => {
          const s = backend.snapshot();
          const name = req.params.name;
          const canonical = backend.spec()?.modelNames[name] ?? name;
          const m = s.models.find((x) => x.name === canonical);
          if (!m) throw new LlmgwError('NOT_FOUND', `No model named "${name}" in ${whatSpec()}.`, { model: name });
          const body: ModelOneJson = { at: new Date(s.at).toISOString(), model: modelJson(m, s.appliedRevision, s.at) };
          return noStore(reply).send(body);
        },
      );

      api.post<{ Params: { name: string } }>(
        '/models/:name/retry',
        { schema: { params: { type: 'object', properties: { name: { type: 'string', minLength: 1, maxLength: MAX_NAME } } } } },
        async (req, reply) => {
          const model = canonicalModel(req.params.name);
          const r = await backend.retry(model);
          const after = backend.snapshot().models.find((m) => m.name === r.model) ?? null;
          const message = r.outcome === 'unparked' ? `${r.model}: unparked; it will be started again` : `${r.model}: not parked; backoff cleared`;
          log?.info({ model: r.model, outcome: r.outcome }, 'admin: retry');
          const body: RetryJson = { model: r.model, outcome: r.outcome, phase: after?.phase ?? null, message };
          return noStore(reply).send(body);
        },
      );

      registerRolloutRoutes(api, { backend, canonicalModel, log });

      api.get('/replicas', async (_req, reply) => noStore(reply).send(replicasJson(backend.snapshot())));

      api.get<{ Params: { id: string }; Querystring: { lines: number } }>(
        '/replicas/:id/logs',
        {
          schema: {
            params: { type: 'object', properties: { id: { type: 'string', minLength: 1, maxLength: MAX_NAME } } },
            querystring: { type: 'object', properties: { lines: { type: 'integer', minimum: 1, maximum: limits.maxLogLines, default: 100 } }, additionalProperties: false },
          },
        },
        async (req, reply) => {
          const text = await backend.logs(req.params.id, req.query.lines);
          const body: LogsJson = { replica: req.params.id, lines: req.query.lines, log: text };
          return noStore(reply).send(body);
        },
      );

      api.get('/nodes', async (_req, reply) => {
        const body: NodesJson = nodesJson(backend.snapshot(), backend.spec());
        return noStore(reply).send(body);
      });

      const answerRestart = async (reply: FastifyReply, ids: readonly string[], wait: boolean, timeoutS: number | undefined): Promise<FastifyReply> => {
        let done = backend.restartDone(ids);
        if (!done && wait) {
          const ms = Math.min(limits.maxWaitMs, timeoutS === undefined ? limits.defaultWaitMs : timeoutS * 1000);
          const gone = clientGone(reply);
          try {
            done = await waitUntil(() => backend.restartDone(ids), ms, limits.pollMs, AbortSignal.any([gone.signal, closing.signal]));
          } finally {
            gone.dispose();
          }
        }
        const body: RestartJson = { ids, done };
        return noStore(reply).code(done ? 200 : 202).send(body);
      };

      api.post<{ Body: { replicas?: string[]; model?: string; all?: boolean }; Querystring: { wait: boolean; timeout?: number } }>(
        '/restart',
        {
          schema: {
            body: {
              type: 'object',
              properties: {
                replicas: { type: 'array', minItems: 1, maxItems: 1000, items: { type: 'string', minLength: 1, maxLength: MAX_NAME } },
                model: { type: 'string', minLength: 1, maxLength: MAX_NAME },
                all: { type: 'boolean' },
              },
              additionalProperties: false,
            },
            querystring: { type: 'object', properties: waitQuery, additionalProperties: false },
          },
        },
        async (req, reply) => {
          const b = req.body;
          const given = [b.replicas !== undefined, b.model !== undefined, b.all === true].filter(Boolean).length;
          if (given !== 1) {
            throw new LlmgwError(
              'ADMIN_BAD_REQUEST',
              given === 0 ? 'Name what to restart: exactly one of "replicas" (ids), "model" or "all": true.' : 'Give exactly one of "replicas", "model" or "all": true, not several.',
            );
          }
          const request = b.replicas !== undefined ? { replicas: [...new Set(b.replicas)] } : b.model !== undefined ? { model: canonicalModel(b.model) } : { all: true };
          const ids = await backend.restart(request);
          log?.info({ request, ids }, 'admin: restart');
          return answerRestart(reply, ids, req.query.wait, req.query.timeout);
        },
      );

      api.get<{ Querystring: { ids: string; wait: boolean; timeout?: number } }>(
        '/restart',
        {
          schema: {
            querystring: { type: 'object', properties: { ids: { type: 'string', maxLength: 100_000 }, ...waitQuery }, required: ['ids'], additionalProperties: false },
          },
        },
        async (req, reply) => {
          const ids = req.query.ids.split(',').map((s) => s.trim()).filter((s) => s !== '');
          return answerRestart(reply, ids, req.query.wait, req.query.timeout);
        },
      );
    },
    { prefix: ADMIN_PREFIX },
  );

  // ------------------------------------------------------------------ the status page and its feeds (src/ui)
  registerUi(app, { backend, checkAuth, prefix: ADMIN_PREFIX, authEnabled: auth.enabled, ...(deps.metricsRegistry ? { registry: deps.metricsRegistry } : {}) });

  // ------------------------------------------------------------------ webhook (signature-authenticated; webhook-route.ts)
  registerWebhook(app, { prefix: ADMIN_PREFIX, webhook: deps.webhook, backend, limits, log });

  // ------------------------------------------------------------------ load balancers: no token, no gate (doors.ts)
  app.get('/healthz', async (_req, reply) => noStore(reply).send({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    const s = backend.snapshot();
    const ready = backend.spec() !== null && s.appliedRevision !== null;
    return noStore(reply)
      .code(ready ? 200 : 503)
      .send({ ready, revision: s.appliedRevision, leader: s.leader, ...(ready ? {} : { reason: 'NO_VALID_SPEC' }) });
  });

  return app;
}
