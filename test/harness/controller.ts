/**
 * A whole llmgw controller against real components: a fleet repo served by git http-backend
 * (token auth), nodes that are real sshd instances on loopback, the real llama-server build as
 * the engine (path method) and tiny GGUF models. Operators change the fleet with the git CLI.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { createMetrics, serveMetrics } from '../../src/metrics/index.js';
import { FleetRepo } from '../../src/git/repo.js';
import { SpecTracker } from '../../src/git/tracker.js';
import { openNodeDriver } from '../../src/nodes/shell-driver.js';
import { Reconciler, type ReconcilerOptions } from '../../src/reconciler/reconciler.js';
import { StatusWriter } from '../../src/serve/status-writer.js';
import { loadState, StateStore } from '../../src/reconciler/state-store.js';
import type { NodeDriver, ReplicaStartSpec } from '../../src/nodes/driver.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { startGitHttpServer, type GitHttpServer } from './git-http.js';
import { cleanupTempDirs, makeTempDir, WorkRepo } from './git.js';
import { llamaServerDir } from './llama-server.js';
import { replicaPortRange } from './ports.js';
import { startSshd, type SshdInstance } from './sshd.js';
import { until } from './wait.js';

export interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly [k: string]: unknown;
}

export interface TestFleet {
  readonly git: GitHttpServer;
  readonly operator: WorkRepo;
  readonly nodes: readonly SshdInstance[];
  readonly secretsDir: string;
  readonly stateDir: string;
  readonly models: Readonly<Record<'good' | 'good2' | 'kev' | 'kev2', TinyModelFile>>;
  readonly engineBinary: string;
  /** The fleet files (path → content) of a healthy base fleet. */
  baseFiles(): Record<string, string>;
  /** Write files (null deletes), commit with the message and push to the served repo. */
  push(files: Record<string, string | null>, message: string): Promise<string>;
  startController(opts?: Partial<ReconcilerOptions>): Promise<TestController>;
  cleanup(): Promise<void>;
}

export interface TestController {
  readonly reconciler: Reconciler;
  /** The controller's metrics, served on /metrics by a fastify app (as the admin port does). */
  readonly metricsApp: FastifyInstance;
  readonly logs: LogLine[];
  /** startReplica calls per model, through every driver this controller made. */
  readonly starts: Map<string, number>;
  /** Runs passes until `check` holds (each pass waits for the previous), or fails after `timeoutMs` naming each model's phase. */
  until(what: string, timeoutMs: number, check: () => boolean): Promise<void>;
  stop(): Promise<void>;
}

const yamlModel = (m: TinyModelFile, extra: string[] = []): string =>
  [`source: file://${m.path}`, `sha256: ${m.sha256}`, 'profile: tiny', ...extra, ''].join('\n');

/** SIGKILL every llama-server whose model file lives under a node's data dir. */
export function killReplicasUnder(dataDir: string): void {
  spawnSync('pkill', ['-9', '-f', `${dataDir}/models/`]);
}

export function modelYaml(m: TinyModelFile, extra: string[] = []): string {
  return yamlModel(m, extra);
}

export async function startTestFleet(opts: { nodes?: number } = {}): Promise<TestFleet> {
  const nodeCount = opts.nodes ?? 2;
  const root = await makeTempDir('llmgw-e2e-');
  const secretsDir = join(root, 'secrets');
  const stateDir = join(root, 'state');
  const modelsDir = join(root, 'models');
  mkdirSync(secretsDir, { mode: 0o700 });
  mkdirSync(modelsDir);
  const [engineDir, nodes, good, good2, kev, kev2] = await Promise.all([
    llamaServerDir(),
    Promise.all(Array.from({ length: nodeCount }, () => startSshd())),
    writeTinyModel(join(modelsDir, 'good.gguf'), { seed: 1 }),
    writeTinyModel(join(modelsDir, 'good2.gguf'), { seed: 2 }),
    writeTinyModel(join(modelsDir, 'kev.gguf'), { seed: 3, architecture: 'kev' }),
    writeTinyModel(join(modelsDir, 'kev2.gguf'), { seed: 4, architecture: 'kev' }),
  ]);
  const ports = nodes.map(() => replicaPortRange());
  nodes.forEach((n, i) => copyFileSync(join(n.secretsDir, n.identityName), join(secretsDir, `node-${i + 1}-key`)));
  const gitRoot = join(root, 'git');
  mkdirSync(gitRoot);
  const git = await startGitHttpServer({ root: gitRoot });
  writeFileSync(join(secretsDir, 'git-token'), git.token, { mode: 0o600 });
  const operator = await WorkRepo.init();
  const engineBinary = join(engineDir, 'llama-server');

  const baseFiles = (): Record<string, string> => {
    const files: Record<string, string> = {
      'fleet.yaml': ['poll_interval: 1h', 'park_after_failures: 5', 'backoff: { initial: 100ms, max: 400ms }', 'placement_reserve: 256MiB', 'stop_grace: 2s', 'drain_grace: 3s', ''].join('\n'),
      'engines/llama-cpp.yaml': ['versions:', '  test:', `    path: ${engineBinary}`, ''].join('\n'),
      'profiles/tiny.yaml': ['engine: llama-cpp@test', 'ctx_size: 256', 'threads: 1', 'parallel: 1', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n'),
      'models/good.yaml': yamlModel(good, ['replicas: 1', 'aliases: [good-alias]']),
      'models/kev.yaml': yamlModel(kev, ['replicas: 1']),
      'models/huge.yaml': yamlModel(good2, ['replicas: 1', 'memory: 1TiB']),
    };
    nodes.forEach((n, i) => {
      files[`nodes/node-${i + 1}.yaml`] = [
        'transport: ssh',
        'host: 127.0.0.1',
        `port: ${n.port}`,
        `user: ${n.user}`,
        `host_key: ${n.hostKey}`,
        `identity: node-${i + 1}-key`,
        `data_dir: ${n.dataDir}`,
        `ports: { from: ${ports[i]!.from}, to: ${ports[i]!.to} }`,
        '',
      ].join('\n');
    });
    return files;
  };

  let bare = false;
  const push = async (files: Record<string, string | null>, message: string): Promise<string> => {
    const writes: Record<string, string> = {};
    for (const [p, c] of Object.entries(files)) if (c !== null) writes[p] = c;
    await operator.write(writes);
    for (const [p, c] of Object.entries(files)) if (c === null) await operator.remove(p);
    const oid = await operator.commit(message);
    if (!bare) {
      await operator.bareCopy(gitRoot, 'fleet.git');
      bare = true;
    } else await operator.push(git.authUrl('fleet.git'), 'HEAD:main');
    return oid;
  };

  const controllers: TestController[] = [];
  const startController = async (over: Partial<ReconcilerOptions> = {}): Promise<TestController> => {
    const logs: LogLine[] = [];
    const logger: Logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(JSON.parse(s) as LogLine) });
    const repo = new FleetRepo({ url: git.url('fleet.git'), token: { file: join(secretsDir, 'git-token') }, cacheDir: join(stateDir, 'fleet.git') });
    const { state } = await loadState(join(stateDir, 'state.json'));
    const tracker = new SpecTracker(repo, { resumeFrom: state.appliedRevision ?? undefined });
    const starts = new Map<string, number>();
    const driverFor = (n: Parameters<ReconcilerOptions['driverFor']>[0]): NodeDriver => {
      const d = openNodeDriver(n, { secretsDir });
      const startReplica = d.startReplica.bind(d);
      return Object.assign(Object.create(d) as NodeDriver, {
        startReplica: (spec: ReplicaStartSpec) => {
          starts.set(spec.model, (starts.get(spec.model) ?? 0) + 1);
          return startReplica(spec);
        },
      });
    };
    const metrics = createMetrics({ defaultMetrics: false, ...(over.clock ? { clock: over.clock } : {}) });
    const reconciler = new Reconciler({
      tracker,
      status: new StatusWriter(repo),
      driverFor,
      stateStore: new StateStore(join(stateDir, 'state.json')),
      initialState: state,
      engineApiKey: 'test-engine-key',
      logger,
      observeTimeoutMs: 20_000,
      onPass: (result, seconds) => metrics.passFinished(result, seconds),
      onEngineInstall: (node, engine, version, result) => metrics.engineInstall(node, engine, version, result),
      ...over,
    });
    reconciler.onSnapshot((snap) => metrics.applySnapshot(snap));
    const metricsApp = Fastify();
    serveMetrics(metricsApp, metrics);
    const c: TestController = {
      reconciler,
      metricsApp,
      logs,
      starts,
      async until(what, timeoutMs, check) {
        const models = (): string => {
          const s = reconciler.snapshot();
          return `models: ${JSON.stringify(s.models.map((m) => ({ m: m.name, phase: m.phase, f: m.consecutiveFailures, err: m.lastError, un: m.unplaceable, r: m.replicas.map((r) => r.phase) })))}; last pass: ${JSON.stringify(s.lastPass)}`;
        };
        await until(what, timeoutMs, async () => check() || (await reconciler.requestPass('test'), check()), { diag: models });
      },
      async stop() {
        await reconciler.stop();
        await metricsApp.close();
      },
    };
    controllers.push(c);
    await reconciler.start();
    return c;
  };

  return {
    git,
    operator,
    nodes,
    secretsDir,
    stateDir,
    models: { good, good2, kev, kev2 },
    engineBinary,
    baseFiles,
    push,
    startController,
    async cleanup() {
      await Promise.all(controllers.map((c) => c.stop().catch(() => undefined)));
      // stop every replica the nodes still run (they are detached: they outlive sshd and the controller)
      for (const n of nodes) killReplicasUnder(n.dataDir);
      await Promise.all(nodes.map((n) => n.stop().catch(() => undefined)));
      await git.close().catch(() => undefined);
      await cleanupTempDirs();
    },
  };
}
