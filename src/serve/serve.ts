/**
 * `llmgw serve`: one process running git sync, the reconciler, the router and the admin API
 * (router and admin on separate ports), with metrics on the admin port.
 */
import { mkdirSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { buildAdminApp } from '../admin/app.js';
import { FleetRepo } from '../git/repo.js';
import { SpecTracker } from '../git/tracker.js';
import { createMetrics, type LlmgwMetrics } from '../metrics/index.js';
import { serveMetrics } from '../metrics/http.js';
import { openNodeDriver } from '../nodes/shell-driver.js';
import { Reconciler } from '../reconciler/reconciler.js';
import { MemoryEstimator } from '../reconciler/memory.js';
import { loadState, StateStore } from '../reconciler/state-store.js';
import { clientTimeoutOptions } from '../util/client-timeouts.js';
import { buildRouter } from '../router/app.js';
import type { ServeConfig } from './config.js';
import { ReloadingTls } from './tls.js';
import { tokenSecrets } from './secrets.js';
import { operatorSecretEnv, operatorSecretFile, stateSecret, type StateSecret } from './state-secrets.js';

/** Paths logs must never show. */
export const REDACT = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
  '*.token',
  '*.apiKey',
  '*.password',
  '*.secret',
];

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino({ level, redact: { paths: REDACT, censor: '[redacted]' }, base: { service: 'llmgw' } }, destination);
}

export interface Served {
  readonly routerUrl: string;
  readonly adminUrl: string;
  readonly reconciler: Reconciler;
  readonly metrics: LlmgwMetrics;
  readonly router: FastifyInstance;
  readonly admin: FastifyInstance;
  /** Where the admin token is, when llmgw made one. */
  readonly adminTokenFile: string | null;
  close(): Promise<void>;
}

export async function serve(cfg: ServeConfig, log: Logger): Promise<Served> {
  mkdirSync(cfg.stateDir, { recursive: true, mode: 0o700 });
  const noteGenerated = (s: StateSecret, what: string): string => {
    if (s.generated === 'empty') log.warn({ file: s.path }, `${what} file was empty (cut off while being written): generated a new one`);
    else if (s.generated === 'missing') log.info({ file: s.path }, `generated the ${what}`);
    return s.value;
  };
  const engineApiKey = noteGenerated(stateSecret(cfg.stateDir, 'engine-api-key'), 'engine API key');
  let adminToken: string | null = null;
  let adminTokenFile: string | null = null;
  if (cfg.admin.auth) {
    if (cfg.admin.tokenFile) adminToken = operatorSecretFile(cfg.admin.tokenFile, 'admin token');
    else if (process.env[cfg.admin.tokenEnv]) adminToken = operatorSecretEnv(cfg.admin.tokenEnv, process.env[cfg.admin.tokenEnv]!, 'admin token');
    else {
      adminTokenFile = join(cfg.stateDir, 'admin-token');
      adminToken = noteGenerated(stateSecret(cfg.stateDir, 'admin-token'), 'admin token');
    }
  }
  const webhookSecret = cfg.webhookSecretFile ? operatorSecretFile(cfg.webhookSecretFile, 'webhook secret') : null;
  const tls = cfg.tls ? new ReloadingTls(cfg.tls.cert, cfg.tls.key, log.child({ component: 'tls' })) : null;

  const repo = new FleetRepo({
    ...(cfg.fleet.url ? { url: cfg.fleet.url, cacheDir: join(cfg.stateDir, 'fleet.git') } : { path: cfg.fleet.path! }),
    branch: cfg.fleet.branch,
    token: { ...(cfg.fleet.tokenFile ? { file: cfg.fleet.tokenFile } : {}), ...(cfg.fleet.tokenEnv ? { env: cfg.fleet.tokenEnv } : {}) },
  });
  const statePath = join(cfg.stateDir, 'state.json');
  const { state, problem: stateProblem } = await loadState(statePath);
  const tracker = new SpecTracker(repo, state.appliedRevision ? { resumeFrom: state.appliedRevision } : {});
  const metrics = createMetrics({ certificates: () => (cfg.tls ? [cfg.tls.cert] : []) });
  const reconciler = new Reconciler({
    tracker,
    statusRepo: repo,
    driverFor: (n) => openNodeDriver(n, { secretsDir: cfg.secretsDir, logger: log.child({ component: 'node', node: n.name }) }),
    stateStore: new StateStore(statePath),
    initialState: state,
    initialStateProblem: stateProblem,
    engineApiKey,
    memory: new MemoryEstimator({ httpTimeoutMs: cfg.sourceTimeoutMs }),
    readSecret: tokenSecrets(cfg.secretsDir),
    logger: log,
    onPass: (result, seconds) => metrics.passFinished(result, seconds),
    onEngineInstall: (node, engine, version, result) => metrics.engineInstall(node, engine, version, result),
  });
  reconciler.onSnapshot((s) => metrics.applySnapshot(s));
  metrics.applySnapshot(reconciler.snapshot());

  // With TLS both apps run on https servers whose certificate follows the files.
  const serverFactory = tls
    ? (handler: (req: IncomingMessage, res: ServerResponse) => void): Server => {
        const server = createHttpsServer({ cert: tls.current.cert, key: tls.current.key, ...clientTimeoutOptions(cfg.clientTimeouts) }, handler);
        tls.attach(server);
        return server as unknown as Server;
      }
    : null;
  const router = buildRouter({
    fleet: reconciler,
    metrics: metrics.router,
    logger: log.child({ component: 'router' }),
    auth: { required: cfg.router.auth },
    limits: {
      ...(cfg.router.bodyLimitBytes ? { bodyBytes: cfg.router.bodyLimitBytes } : {}),
      ...(cfg.routerMaxInFlight ? { maxInFlight: cfg.routerMaxInFlight } : {}),
      headersTimeoutMs: cfg.clientTimeouts.headersMs,
      requestTimeoutMs: cfg.clientTimeouts.requestMs,
    },
    ...(serverFactory ? { serverFactory } : {}),
  });
  const admin = buildAdminApp({
    backend: reconciler,
    token: adminToken,
    ...(webhookSecret ? { webhook: { secret: webhookSecret, branch: cfg.fleet.branch } } : {}),
    logger: log.child({ component: 'admin' }),
    limits: { headersTimeoutMs: cfg.clientTimeouts.headersMs, requestTimeoutMs: cfg.clientTimeouts.requestMs },
    ...(serverFactory ? { serverFactory } : {}),
  });
  serveMetrics(admin, metrics);

  await router.listen({ host: cfg.router.listen.host, port: cfg.router.listen.port });
  await admin.listen({ host: cfg.admin.listen.host, port: cfg.admin.listen.port });
  const scheme = tls ? 'https' : 'http';
  const url = (app: FastifyInstance): string => {
    const a = app.server.address();
    if (!a || typeof a === 'string') return `${scheme}://${a ?? 'unknown'}`;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `${scheme}://${host}:${a.port}`;
  };
  const routerUrl = url(router);
  const adminUrl = url(admin);
  log.info({ router: routerUrl, admin: adminUrl, fleet: repo.label, routerAuth: cfg.router.auth, adminAuth: cfg.admin.auth }, 'llmgw serving');
  void reconciler.start();

  let closed: Promise<void> | null = null;
  return {
    routerUrl,
    adminUrl,
    reconciler,
    metrics,
    router,
    admin,
    adminTokenFile,
    close() {
      closed ??= (async () => {
        log.info('shutting down: router drains in-flight requests, replicas keep running');
        tls?.close();
        await Promise.allSettled([router.close(), admin.close()]);
        await reconciler.stop();
      })();
      return closed;
    },
  };
}
