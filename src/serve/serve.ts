/**
 * `llmgw serve`: one process running git sync, the reconciler, the router and the admin API
 * (router and admin on separate ports), with metrics on the admin port.
 */
import { UsageBook, fanOut } from '../router/usage-book.js';
import { UsageLog } from '../router/usage-log.js';
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
import { StatusWriter } from './status-writer.js';
import type { SupersedeOf } from '../reconciler/node-fleet.js';
import { MemoryEstimator } from '../reconciler/memory.js';
import { loadState, StateStore } from '../reconciler/state-store.js';
import { clientTimeoutOptions } from '../util/client-timeouts.js';
import { buildRouter } from '../router/app.js';
import { HotPrefixes } from '../router/hot-prefixes.js';
import { replicaWarmup } from '../router/warm-replica.js';
import { RouterRollouts } from '../router/rollout-figures.js';
import { RouterLoad } from '../router/load-report.js';
import type { ServeConfig } from './config.js';
import { ReloadingTls } from './tls.js';
import type { Etcd3 } from 'etcd3';
import type { NodeSpec } from '../fleet-spec/types.js';
import type { Fence, NodeDriver } from '../nodes/driver.js';
import type { ControlView } from '../reconciler/view.js';
import type { HaController } from '../ha/controller.js';
import type { RouterShares } from '../ha/router-shares.js';
import type { RolloutBoard } from '../ha/rollout-figures.js';
import { instanceOf } from './instance.js';
import { isLoopbackListen, type LocalOnly } from '../util/local-only.js';

/** A node's owner record outlives its owner's last renewal by this much before another controller may take the node. */
const OWNER_TTL_SECONDS = 60;
import { tokenSecrets } from './secrets.js';
import { heapSizing } from './heap-sizing.js';
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
  /** The reconciler alone, or the HA shell with --etcd. */
  readonly controller: Reconciler | HaController;
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
  const instance = instanceOf(cfg.stateDir);
  // per-key series only when fleet.yaml asks for them (/metrics needs no token); `controller` is set below
  const metrics = createMetrics({ certificates: () => (cfg.tls ? [cfg.tls.cert] : []), perKey: () => controller?.spec()?.settings.metricsPerKey === true });
  const memory = new MemoryEstimator({ httpTimeoutMs: cfg.sourceTimeoutMs });
  const readSecret = tokenSecrets(cfg.secretsDir);
  // What this instance's router sees of each arm of a canary step; the controller judges the steps on it (#34)
  const rolloutFigures = new RouterRollouts();
  // Each model's load as this instance's router sees it; the controller scales models with a range on it (#42)
  const routerLoad = new RouterLoad(instance.id);
  // The prefixes this instance's router serves most; the controller replays them to a new replica before it takes traffic (#38)
  const hot = new HotPrefixes();
  const common = {
    rolloutFigures,
    // under HA every router's report, read from etcd (ha/router-shares.ts), the leader summing them
    modelLoad: () => routerShares?.loadReports() ?? [routerLoad.report()],
    memory,
    readSecret,
    logger: log,
    onPass: (result: 'ok' | 'error', seconds: number) => metrics.passFinished(result, seconds),
    onEngineInstall: (node: string, engine: string, version: string, result: 'ok' | 'error') => metrics.engineInstall(node, engine, version, result),
    // the key replicas are started with: under HA the cluster's (etcd), not this state dir's
    warmup: replicaWarmup(hot, () => controller?.engineApiKey ?? engineApiKey, (model, r) => metrics.warmup(model, r)),
  };
  // `supersede`: an owner record above etcd's revision the reconciler takes over (ownership.ts), named in every fence
  const openDriver = (n: NodeSpec, fence: () => Fence, supersede: SupersedeOf): NodeDriver =>
    openNodeDriver(n, {
      secretsDir: cfg.secretsDir,
      logger: log.child({ component: 'node', node: n.name }),
      fence: () => {
        const s = supersede();
        return s ? { ...fence(), supersede: s } : fence();
      },
    });
  let controller: Reconciler | HaController | undefined;
  let etcdClient: Etcd3 | null = null;
  let routerShares: RouterShares | null = null;
  let rolloutBoard: RolloutBoard | null = null;
  if (cfg.etcd) {
    // Several instances as one controller; etcd3 and the HA modules load only here.
    const { serveHa } = await import('./serve-ha.js');
    const ha = await serveHa(cfg.etcd, { repo, instance, engineApiKey, log, ownerTtlSeconds: OWNER_TTL_SECONDS, common, openDriver, onLeadership: (leading) => metrics.leaderChanged(leading) });
    controller = ha.controller;
    etcdClient = ha.client;
    routerShares = ha.routerShares;
    rolloutBoard = ha.rolloutBoard;
    // two readers of the router's peaks (router/load-report.ts): the etcd refresh's, and the leader's pass's
    routerShares.reportLoad(routerLoad.reporter(), routerLoad.reporter());
  } else {
    const statePath = join(cfg.stateDir, 'state.json');
    const { state, problem: stateProblem } = await loadState(statePath);
    const control = (): ControlView => ({ mode: 'standalone', instance, leader: { id: instance.id, label: instance.label, since: null, epoch: null }, notActing: null, etcd: null });
    let reconciler: Reconciler | null = null;
    // A lone controller owns its nodes; its record on them holds while it renews it (every pass).
    const ownerTtl = (): number => Math.max(OWNER_TTL_SECONDS, Math.ceil((3 * (reconciler?.spec()?.settings.pollIntervalMs ?? 30_000)) / 1000));
    reconciler = new Reconciler({
      ...common,
      status: new StatusWriter(repo),
      tracker: new SpecTracker(repo, state.appliedRevision ? { resumeFrom: state.appliedRevision } : {}),
      driverFor: (n, supersede) => openDriver(n, () => ({ owner: instance.id, label: instance.label, epoch: 0, ttlSeconds: ownerTtl() }), supersede),
      // a lone controller's epoch is always 0: a higher one of its own owner on a node is not its own
      epochBound: async () => 0,
      stateStore: new StateStore(statePath),
      initialState: state,
      initialStateProblem: stateProblem,
      engineApiKey,
      control,
    });
    controller = reconciler;
  }
  controller.onSnapshot((s) => metrics.applySnapshot(s));
  // the router's canary windows live as long as their step: a model whose canary ended drops its own
  controller.onSnapshot((s) => rolloutFigures.retain(new Set(s.models.filter((m) => m.rollout?.phase === 'canary').map((m) => m.name)), s.at));
  controller.onSnapshot((s) => hot.retain(new Set(s.models.map((m) => m.name))));
  metrics.applySnapshot(controller.snapshot());

  // With TLS both apps run on https servers whose certificate follows the files.
  const serverFactory = tls
    ? (handler: (req: IncomingMessage, res: ServerResponse) => void): Server => {
        const server = createHttpsServer({ cert: tls.current.cert, key: tls.current.key, ...clientTimeoutOptions(cfg.clientTimeouts) }, handler);
        tls.attach(server);
        return server as unknown as Server;
      }
    : null;
  // auth off means this machine only (#36, N7): loopback Hosts, the allowed ones, and the port's own listen address
  const localOnly = (auth: boolean, listen: { host: string }): LocalOnly | null => {
    if (auth) return null;
    if (!isLoopbackListen(listen.host)) log.warn({ listen: listen.host }, 'authentication is off on a port listening beyond loopback (--unsafe-listen-without-auth): anyone who reaches it may use it');
    const own = listen.host === '0.0.0.0' || listen.host === '::' ? [] : [listen.host.toLowerCase()];
    return { allowedHosts: [...new Set([...cfg.allowedHosts, ...own])] };
  };
  const usageBook = new UsageBook();
  const usageLog = cfg.usageLog ? new UsageLog({ path: cfg.usageLog.path, maxBytes: cfg.usageLog.maxBytes, log: log.child({ component: 'usage-log' }) }) : null;
  const router = buildRouter({
    fleet: controller,
    rollouts: rolloutFigures,
    load: routerLoad,
    hot,
    metrics: metrics.router,
    ...(routerShares ? { routers: () => routerShares.routers() } : {}),
    usage: fanOut(usageLog ? [metrics.keys, usageBook, usageLog] : [metrics.keys, usageBook]),
    logger: log.child({ component: 'router' }),
    auth: { required: cfg.router.auth },
    localOnly: localOnly(cfg.router.auth, cfg.router.listen),
    limits: {
      ...(cfg.router.bodyLimitBytes ? { bodyBytes: cfg.router.bodyLimitBytes } : {}),
      ...(cfg.routerMaxInFlight ? { maxInFlight: cfg.routerMaxInFlight } : {}),
      headersTimeoutMs: cfg.clientTimeouts.headersMs,
      requestTimeoutMs: cfg.clientTimeouts.requestMs,
      shutdownGraceMs: cfg.shutdownGraceMs,
    },
    ...(serverFactory ? { serverFactory } : {}),
  });
  const admin = buildAdminApp({
    backend: controller,
    token: adminToken,
    localOnly: localOnly(cfg.admin.auth, cfg.admin.listen),
    usage: usageBook,
    ...(webhookSecret ? { webhook: { secret: webhookSecret, branch: cfg.fleet.branch } } : {}),
    logger: log.child({ component: 'admin' }),
    metricsRegistry: metrics.registry,
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
  log.info({ router: routerUrl, admin: adminUrl, fleet: repo.label, routerAuth: cfg.router.auth, adminAuth: cfg.admin.auth, instance: instance.id, etcd: cfg.etcd ? cfg.etcd.hosts : null, heap: heapSizing() }, 'llmgw serving');
  controller.start().catch((err: unknown) => log.error({ err }, 'the controller failed to start'));
  routerShares?.start();
  rolloutBoard?.start();

  let closed: Promise<void> | null = null;
  return {
    routerUrl,
    adminUrl,
    controller,
    metrics,
    router,
    admin,
    adminTokenFile,
    close() {
      closed ??= (async () => {
        const t0 = Date.now();
        log.info({ graceMs: cfg.shutdownGraceMs }, 'shutting down: the router accepts no new connections and lets requests in flight finish; replicas keep running');
        tls?.close();
        // stops accepting at once; requests in flight finish (up to the grace), then are cut
        const routed = router.close();
        // With --etcd a leader resigns at once, while its router drains, so a standby leads (and acts
        // on the fleet) before this router has closed; a lone controller keeps its view up to date
        // for the requests still in flight and stops after them.
        const resigned = controller instanceof Reconciler ? null : controller.stop();
        await Promise.allSettled([routed, admin.close(), ...(resigned ? [resigned] : [])]);
        if (!resigned) await controller.stop();
        usageLog?.close();
        await routerShares?.stop();
        await rolloutBoard?.stop();
        etcdClient?.close();
        metrics.close();
        log.info({ ms: Date.now() - t0 }, 'shut down');
      })();
      return closed;
    },
  };
}
