/**
 * A large fleet on one local node, served by a real `llmgw serve` and measured from outside only
 * (HTTP, /proc): N on-demand models that share one tiny GGUF, plus one always-on model ("hot")
 * for router traffic. Used by the scale bench (bench/scale.bench.ts) and the scrape-under-load test.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeTinyModel } from '../fixtures/gguf.js';
import { writeFleet, type FleetFilesMap } from './fleet.js';
import { llamaServerDir } from './llama-server.js';
import { freePort, replicaPortRange } from './ports.js';
import { GiveUp, until } from './wait.js';
import { repoRoot } from './paths.js';
import type { SshdInstance } from './sshd.js';

export interface ScaleFleet {
  readonly root: string;
  readonly fleetDir: string;
  readonly nodeDir: string;
  /** Files the serve's secrets dir holds (name → where to copy it from): an ssh node's identity. */
  readonly secrets: Readonly<Record<string, string>>;
  /** Names of the on-demand models (m-00000 …). */
  readonly onDemand: readonly string[];
  /** Commits the fleet repo's working tree (after writing files into it); returns the new head. */
  commit(message: string): string;
  cleanup(): void;
}

export function onDemandName(i: number): string {
  return `m-${String(i).padStart(5, '0')}`;
}

const git = (dir: string, ...args: string[]): string => {
  const r = spawnSync('git', ['-C', dir, '-c', 'user.name=scale', '-c', 'user.email=scale@example.invalid', ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
};

/** The fleet repo (a local git repo) with `models` on-demand models and the always-on "hot". */
export async function makeScaleFleet(models: number, opts: { hot?: boolean; ssh?: SshdInstance } = {}): Promise<ScaleFleet> {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-scale-'));
  const fleetDir = join(root, 'fleet');
  const nodeDir = join(root, 'node');
  mkdirSync(nodeDir, { recursive: true });
  const [engineDir, tiny] = await Promise.all([llamaServerDir(), writeTinyModel(join(root, 'tiny.gguf'), { seed: 1 })]);
  const ports = replicaPortRange(20);
  const files: FleetFilesMap = {
    'fleet.yaml': ['poll_interval: 1h', 'park_after_failures: 5', 'backoff: { initial: 100ms, max: 400ms }', 'placement_reserve: 256MiB', 'stop_grace: 2s', 'drain_grace: 1s', ''].join('\n'),
    ...(opts.ssh
      ? { 'nodes/ssh.yaml': `transport: ssh\nhost: 127.0.0.1\nport: ${opts.ssh.port}\nuser: ${opts.ssh.user}\nhost_key: ${opts.ssh.hostKey}\nidentity: node-ssh-key\ndata_dir: ${nodeDir}\nports: { from: ${ports.from}, to: ${ports.to} }\n` }
      : { 'nodes/local.yaml': `transport: local\ndata_dir: ${nodeDir}\nports: { from: ${ports.from}, to: ${ports.to} }\n` }),
    'engines/llama-cpp.yaml': ['versions:', '  test:', `    path: ${join(engineDir, 'llama-server')}`, ''].join('\n'),
    'profiles/tiny.yaml': ['engine: llama-cpp@test', 'ctx_size: 256', 'threads: 1', 'parallel: 1', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n'),
  };
  const model = (extra: string): string => `source: file://${tiny.path}\nsha256: ${tiny.sha256}\nprofile: tiny\n${extra}\n`;
  if (opts.hot ?? true) files['models/hot.yaml'] = model('replicas: 1');
  const onDemand: string[] = [];
  for (let i = 0; i < models; i++) {
    const name = onDemandName(i);
    onDemand.push(name);
    files[`models/${name}.yaml`] = model('on_demand: { idle_timeout: 1h }');
  }
  writeFleet(fleetDir, files);
  git(root, 'init', '-q', '-b', 'main', fleetDir);
  git(fleetDir, 'add', '-A');
  git(fleetDir, 'commit', '-qm', `scale fleet: ${models} on-demand models`);
  return {
    root,
    fleetDir,
    nodeDir,
    onDemand,
    secrets: opts.ssh ? { 'node-ssh-key': join(opts.ssh.secretsDir, opts.ssh.identityName) } : {},
    commit(message) {
      git(fleetDir, 'add', '-A');
      git(fleetDir, 'commit', '-qm', message);
      return git(fleetDir, 'rev-parse', 'HEAD');
    },
    cleanup() {
      // the replicas this fleet started run llama-server on models under this node's data dir
      spawnSync('pkill', ['-9', '-f', `${nodeDir}/`]);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

export interface ScaleServe {
  readonly child: ChildProcess;
  readonly routerUrl: string;
  readonly adminUrl: string;
  /** Everything it printed (the last 400 kB). */
  out(): string;
  /** VmRSS of the serve process in bytes, from /proc. */
  rssBytes(): number;
  stop(): Promise<void>;
}

/** `llmgw serve` on the fleet: no auth, JSON logs, its own state dir and ports. */
export async function serveScaleFleet(f: ScaleFleet, opts: { nodeArgs?: readonly string[] } = {}): Promise<ScaleServe> {
  const [routerPort, adminPort] = [await freePort(), await freePort()];
  const stateDir = join(f.root, 'state');
  const secretsDir = join(f.root, 'secrets');
  mkdirSync(secretsDir, { recursive: true, mode: 0o700 });
  for (const [name, from] of Object.entries(f.secrets)) {
    copyFileSync(from, join(secretsDir, name));
    chmodSync(join(secretsDir, name), 0o600);
  }
  let out = '';
  const child = spawn(
    process.execPath,
    [
      ...(opts.nodeArgs ?? []),
      join(repoRoot, 'bin', 'llmgw.js'),
      'serve',
      '--fleet', f.fleetDir,
      '--state-dir', stateDir,
      '--secrets-dir', secretsDir,
      '--router-listen', `127.0.0.1:${routerPort}`,
      '--admin-listen', `127.0.0.1:${adminPort}`,
      '--no-router-auth',
      '--no-admin-auth',
      '--log-format', 'json',
    ],
    { cwd: repoRoot, env: { ...process.env, LLMGW_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const keep = (d: Buffer): void => void (out = (out + d.toString()).slice(-400_000));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  return {
    child,
    routerUrl: `http://127.0.0.1:${routerPort}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    out: () => out,
    rssBytes() {
      const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      return m ? Number(m[1]) * 1024 : 0;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** `until` on a running serve: every 200 ms, giving up once it exited; a failure shows the serve's log tail. */
export function waitFor<T>(what: string, timeoutMs: number, s: ScaleServe, fn: () => Promise<T | null | undefined | false>): Promise<T> {
  const probe = (): Promise<T | null | undefined | false> => {
    if (s.child.exitCode !== null) throw new GiveUp(`llmgw serve exited (${s.child.exitCode})`);
    return fn();
  };
  return until(what, timeoutMs, probe, { everyMs: 200, diag: () => s.out().slice(-4000) });
}

/** A chat completion of one token from `model` through the router; its status and duration. */
export async function chatOnce(routerUrl: string, model: string): Promise<{ status: number; ms: number }> {
  const t0 = performance.now();
  const r = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    signal: AbortSignal.timeout(120_000),
  });
  await r.arrayBuffer();
  return { status: r.status, ms: performance.now() - t0 };
}

/** The value of an unlabelled sample in an exposition text (NaN when absent). */
export function sampleOf(text: string, name: string): number {
  const m = new RegExp(`^${name} ([^\\s]+)`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}
