/**
 * ShellNodeDriver: the NodeDriver over a Shell (ssh or local). Every action is one or two POSIX sh
 * scripts (scripts.ts); the controller side adds coalescing, port picking, health polling (undici)
 * and failure classification (failure.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { isIP } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, fetch, request } from 'undici';
import { LlmgwError, Reasons, type ReasonCode } from '../errors/catalogue.js';
import type { EngineVersionSpec, NodeSpec } from '../fleet-spec/types.js';
import { cacheRamMiB } from '../fleet-spec/digest.js';
import type {
  DownloadToken,
  EngineObservation, Fence, NodeFenceView, ModelFileObservation, NodeDriver, NodeObservation, ReplicaFailure, ReplicaHandle,
  ReplicaObservation, ReplicaStartSpec,
} from './driver.js';
import { engineKeyFingerprint } from './driver.js';
import { classifyFailure } from './failure.js';
import { mergeDevices, parseListDevices, parseNvidiaSmiQuery, replicaDeviceSetup, withLiveCudaMemory, type NvidiaGpu } from './devices.js';
import { checkFence, EXIT_FENCE_REFUSED, fenceError, parseFenceSection, refusalOf } from './fence.js';
import { parseProcNetTcp, pickPort } from './ports.js';
import {
  artifactInstallScript, buildInstallScript, engineCleanupScript, engineInstalledScript, engineStageScript,
  EXIT_PORT_TAKEN, EXIT_REPLICA_EXISTS, inspectReplicaScript, logTailScript, readRangeScript, modelFromFileScript,
  modelFromUrlScript, observeScript, pathEngineScript, startReplicaScript, stopReplicaScript, usedPortsScript,
  type EnginePaths,
} from './scripts.js';
import type { ExecResult, Shell } from './shell.js';
import { resolveModelSource } from './sources.js';
import { openShell, type OpenShellOptions } from './transport.js';

export interface DriverTimeouts {
  /** Small scripts: inspect, log tail, port query, start (default 60 s). */
  readonly opMs: number;
  /** observe() (default 30 s). */
  readonly observeMs: number;
  /** Artifact and model downloads and their sha256 checks (default 60 min). */
  readonly downloadMs: number;
  /** Engine builds (default 120 min). */
  readonly buildMs: number;
  /** One GET /health (default 2 s). */
  readonly healthMs: number;
}

export const DEFAULT_DRIVER_TIMEOUTS: DriverTimeouts = Object.freeze({
  opMs: 60_000,
  observeMs: 30_000,
  downloadMs: 60 * 60_000,
  buildMs: 120 * 60_000,
  healthMs: 2_000,
});

export interface ShellNodeDriverOptions {
  /**
   * Address llama-server binds. Default: 127.0.0.1 for the local transport; for ssh, node.host when
   * it is an IP address, else 0.0.0.0 (replicas always require the engine API key).
   */
  readonly bindHost?: string;
  /** Host in replica endpoints (http://host:port). Default: 127.0.0.1 for local, node.host for ssh. */
  readonly endpointHost?: string;
  /** Controller-side cache for `fetch: controller` artifacts. Default ~/.cache/llmgw/artifacts. */
  readonly artifactCacheDir?: string;
  readonly timeouts?: Partial<DriverTimeouts>;
  /** Parallel jobs for engine builds. Default: the node's nproc. */
  readonly buildJobs?: number;
  /** Lines of log kept in failures (default 40). */
  readonly logTailLines?: number;
  /** Whether close() closes the shell (default true). */
  readonly ownsShell?: boolean;
  /**
   * The fence every action carries (called for each action, so an epoch change applies to the next
   * one). Absent: no fencing, the node's owner record is neither read nor written.
   */
  readonly fence?: () => Fence;
}

/** Replica ids: chosen by the reconciler; safe as a path segment. */
export const REPLICA_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const ENGINE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;
const SHA256_RE = /^[0-9a-f]{64}$/;
/** A secret's name (a file in the controller's secrets dir; the schema's name pattern is stricter). */
const SECRET_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/** A bearer token: one line of visible ASCII, no spaces (RFC 6750's b64token, loosely). */
export const TOKEN_RE = /^[\x21-\x7e]+$/;

interface ReplicaState {
  readonly id: string;
  readonly model: string;
  readonly digest: string;
  readonly port: number;
  readonly argv: readonly string[];
  readonly log: string;
  readonly pid: number;
  readonly procStartTime: number;
  readonly startedAt: number;
  /** engineKeyFingerprint of the key it was started with; null when not recorded. */
  readonly keyFingerprint: string | null;
  /** The node's devices it was started on ([] = none) and its -ngl there. */
  readonly devices: readonly string[];
  readonly gpuLayers: number | 'all' | null;
}

interface Inspection {
  readonly state: ReplicaState | null;
  readonly alive: boolean;
  readonly logTail: string;
}

/** In-flight controller-side artifact downloads, shared by every driver in the process. */
const artifactDownloads = new Map<string, Promise<string>>();

/** The most bytes one readFileRange returns (a shorter read than asked is possible, as with read(2)). */
export const MAX_RANGE_READ = 2_500_000;

export class ShellNodeDriver implements NodeDriver {
  readonly node: string;
  private readonly dataDir: string;
  private readonly bindHost: string;
  private readonly endpointHost: string;
  private readonly timeouts: DriverTimeouts;
  private readonly logLines: number;
  private readonly engines = new Map<string, Promise<{ binary: string }>>();
  private readonly models = new Map<string, Promise<{ path: string; bytes: number }>>();
  /** Ports of replicas this driver started or observed, for waitReady without a round trip. */
  private readonly known = new Map<string, { port: number }>();
  private readonly agent = new Agent({ keepAliveTimeout: 1_000, keepAliveMaxTimeout: 1_000, connections: 4 });
  private startQueue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly spec: NodeSpec, private readonly shell: Shell, private readonly opts: ShellNodeDriverOptions = {}) {
    this.node = spec.name;
    if (!spec.dataDir.startsWith('/')) throw new Error(`node ${spec.name}: dataDir must be an absolute path, got ${spec.dataDir}`);
    this.dataDir = spec.dataDir.replace(/\/+$/, '') || '/';
    const local = spec.transport === 'local';
    this.bindHost = opts.bindHost ?? (local ? '127.0.0.1' : isIP(spec.host) !== 0 ? spec.host : '0.0.0.0');
    this.endpointHost = opts.endpointHost ?? (local ? '127.0.0.1' : spec.host);
    this.timeouts = { ...DEFAULT_DRIVER_TIMEOUTS, ...opts.timeouts };
    this.logLines = opts.logTailLines ?? 40;
  }

  // ------------------------------------------------------------------------------- observe

  async observe(): Promise<NodeObservation> {
    const at = Date.now();
    const nonce = randomBytes(8).toString('hex');
    const fence = this.fence();
    const res = await this.exec(observeScript(this.dataDir, nonce, this.logLines, fence, this.spec.env ?? {}), 'observe', { timeoutMs: this.timeouts.observeMs });
    const sections = parseSections(res.stdout, nonce);
    if (sections.length === 0 || sections[sections.length - 1]!.name !== 'end') {
      throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: observe: truncated output`, { node: this.node, stderr: tailOf(res.stderr, 20) });
    }
    let totalKb = 0;
    let availKb = 0;
    let cpus = 0;
    let cpuFlags: string[] = [];
    let arch = '';
    let diskFreeBytes = 0;
    const engines: EngineObservation[] = [];
    const models: ModelFileObservation[] = [];
    let gpus: NvidiaGpu[] = [];
    let fenceView: NodeFenceView | null = null;
    const pending: { id: string; stateText: string; alive: boolean; logTail: string }[] = [];
    let cur: { id: string; stateText: string; alive: boolean; logTail: string } | null = null;
    for (const s of sections) {
      switch (s.name) {
        case 'mem':
          for (const l of s.lines) {
            const m = /^(MemTotal|MemAvailable):\s+(\d+)/.exec(l);
            if (m?.[1] === 'MemTotal') totalKb = Number(m[2]);
            else if (m?.[1] === 'MemAvailable') availKb = Number(m[2]);
          }
          break;
        case 'cpus':
          cpus = Number(s.lines[0]?.trim()) || 0;
          break;
        case 'flags':
          cpuFlags = (s.lines[0] ?? '').trim().split(/\s+/).filter((f) => f !== '');
          break;
        case 'arch':
          arch = (s.lines[0] ?? '').trim();
          break;
        case 'df':
          diskFreeBytes = parseDfAvailableKb(s.lines[0] ?? '') * 1024;
          break;
        case 'engine': {
          const [engine, version, binary] = s.lines;
          if (engine && version && binary) engines.push({ engine, version, binary });
          break;
        }
        case 'devices': {
          const last = engines[engines.length - 1];
          const devices = parseListDevices(s.lines.join('\n'));
          if (last && devices.length > 0) engines[engines.length - 1] = { ...last, devices };
          break;
        }
        case 'gpus':
          gpus = parseNvidiaSmiQuery(s.lines.join('\n'));
          break;
        case 'model': {
          const [path, size] = s.lines;
          const m = path === undefined ? null : /\/([0-9a-f]{64})\.gguf$/.exec(path);
          if (path && m?.[1]) models.push({ sha256: m[1], path, bytes: Number(size?.trim()) || 0 });
          break;
        }
        case 'fence':
          fenceView = parseFenceSection(s.lines);
          if (fenceView === null) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: observe: unreadable owner record report`, { node: this.node, lines: s.lines.slice(0, 3) });
          break;
        case 'replica':
          cur = { id: (s.lines[0] ?? '').trim(), stateText: '', alive: false, logTail: '' };
          pending.push(cur);
          break;
        case 'state':
          if (cur) cur.stateText = s.lines.join('\n');
          break;
        case 'alive':
          if (cur) cur.alive = true;
          break;
        case 'dead':
          if (cur) { cur.alive = false; cur.logTail = s.lines.join('\n'); }
          break;
        default:
          break;
      }
    }
    // CUDA devices' free memory from nvidia-smi where the node has it (live), else as the engine listed it
    if (gpus.length > 0) {
      engines.forEach((e, i) => { if (e.devices) engines[i] = { ...e, devices: withLiveCudaMemory(e.devices, gpus, this.spec.env ?? {}) }; });
    }
    const replicas = await Promise.all(pending.map((p) => this.replicaObservation(p.id, parseState(p.stateText), p.alive, p.logTail)));
    return {
      node: this.node,
      at,
      memory: { totalBytes: totalKb * 1024, availableBytes: availKb * 1024 },
      cpus,
      cpuFlags,
      arch,
      diskFreeBytes,
      engines,
      ...(engines.some((e) => e.devices) ? { devices: mergeDevices(engines.map((e) => e.devices ?? [])) } : {}),
      models,
      replicas,
      ...(fenceView !== null ? { fence: fenceView } : {}),
    };
  }

  private async replicaObservation(id: string, st: ReplicaState | null, alive: boolean, logTail: string): Promise<ReplicaObservation> {
    if (st === null) {
      return {
        id, model: '', digest: '', port: 0, pid: 0, startedAt: 0, endpoint: '', state: 'failed',
        failure: { code: 'REPLICA_EXITED', message: `replica ${id}: state.json is unreadable`, logTail },
      };
    }
    this.known.set(id, { port: st.port });
    const base = {
      id, model: st.model, digest: st.digest, port: st.port, pid: st.pid, startedAt: st.startedAt, endpoint: this.endpoint(st.port),
      ...(st.keyFingerprint !== null ? { keyFingerprint: st.keyFingerprint } : {}),
      ...(st.devices.length > 0 ? { devices: st.devices, ...(st.gpuLayers !== null ? { gpuLayers: st.gpuLayers } : {}) } : {}),
    };
    if (!alive) return { ...base, state: 'failed', failure: failureOf(logTail) };
    const code = await this.health(st.port);
    return { ...base, state: code === 200 ? 'ready' : 'starting' };
  }

  // ------------------------------------------------------------------------------- engines

  ensureEngine(v: EngineVersionSpec): Promise<{ binary: string }> {
    const key = `${v.engine}@${v.version}`;
    const inflight = this.engines.get(key);
    if (inflight) return inflight;
    const p = this.installEngine(v).finally(() => this.engines.delete(key));
    this.engines.set(key, p);
    return p;
  }

  private async installEngine(v: EngineVersionSpec): Promise<{ binary: string }> {
    if (!ENGINE_NAME_RE.test(v.engine) || !ENGINE_NAME_RE.test(v.version)) {
      throw new Error(`bad engine name or version: ${JSON.stringify(v.engine)}@${JSON.stringify(v.version)}`);
    }
    const what = `install engine ${v.engine}@${v.version}`;
    const fingerprint = createHash('sha256').update(JSON.stringify(v.install)).digest('hex').slice(0, 32);
    const fence = this.fence();
    const paths: EnginePaths = { dataDir: this.dataDir, engine: v.engine, version: v.version, nonce: randomBytes(6).toString('hex'), fingerprint, fence };
    const inst = v.install;
    if (inst.method === 'path') {
      if (!inst.path.startsWith('/')) throw new LlmgwError('ENGINE_NOT_FOUND', `engine ${v.engine}@${v.version}: path must be absolute: ${inst.path}`, { node: this.node });
      const res = await this.exec(pathEngineScript({ ...paths, path: inst.path }), what, { timeoutMs: this.timeouts.opMs, fence });
      return { binary: lastLine(res.stdout) };
    }
    const installed = await this.exec(engineInstalledScript(paths), `${what}: check`, { timeoutMs: this.timeouts.opMs });
    if (installed.stdout.trim() !== '') return { binary: lastLine(installed.stdout) };

    if (inst.method === 'artifact') {
      checkRelativePath(inst.binary, `engine ${v.engine}@${v.version} binary`);
      const sha256 = inst.sha256.toLowerCase();
      if (!SHA256_RE.test(sha256)) throw new Error(`engine ${v.engine}@${v.version}: bad sha256 ${inst.sha256}`);
      if (inst.fetch === 'node') {
        const res = await this.exec(artifactInstallScript({ ...paths, url: inst.url, sha256, binary: inst.binary }), what, { timeoutMs: this.timeouts.downloadMs, fence });
        return { binary: lastLine(res.stdout) };
      }
      const local = await fetchArtifact(inst.url, sha256, this.opts.artifactCacheDir ?? join(homedir(), '.cache', 'llmgw', 'artifacts'), this.timeouts.downloadMs);
      await this.exec(engineStageScript(paths), `${what}: stage`, { timeoutMs: this.timeouts.opMs, fence });
      try {
        const stage = `${this.dataDir}/engines/${v.engine}/.${v.version}.tmp-${paths.nonce}`;
        await this.shell.upload(local, `${stage}/.artifact`, { timeoutMs: this.timeouts.downloadMs, mode: 0o644 });
      } catch (e) {
        await this.exec(engineCleanupScript(paths), `${what}: cleanup`, { timeoutMs: this.timeouts.opMs }).catch(() => {});
        throw e;
      }
      const res = await this.exec(artifactInstallScript({ ...paths, url: null, sha256, binary: inst.binary }), what, { timeoutMs: this.timeouts.downloadMs, fence });
      return { binary: lastLine(res.stdout) };
    }
    // build
    if (!/^[A-Za-z0-9._-]+$/.test(inst.target)) throw new Error(`engine ${v.engine}@${v.version}: bad build target ${inst.target}`);
    const res = await this.exec(
      buildInstallScript({ ...paths, git: inst.git, ref: inst.ref, cmakeFlags: inst.cmakeFlags, target: inst.target, jobs: this.opts.buildJobs ?? null }),
      what,
      { timeoutMs: this.timeouts.buildMs, fence },
    );
    return { binary: lastLine(res.stdout) };
  }

  // ------------------------------------------------------------------------------- models

  ensureModel(source: string, sha256: string, token?: DownloadToken): Promise<{ path: string; bytes: number }> {
    const sha = sha256.toLowerCase();
    const inflight = this.models.get(sha);
    if (inflight) return inflight;
    const p = this.fetchModel(source, sha, token).finally(() => this.models.delete(sha));
    this.models.set(sha, p);
    return p;
  }

  private async fetchModel(source: string, sha: string, token: DownloadToken | undefined): Promise<{ path: string; bytes: number }> {
    if (!SHA256_RE.test(sha)) throw new Error(`bad model sha256: ${sha}`);
    if (token && !SECRET_NAME_RE.test(token.secret)) throw new Error(`bad secret name: ${JSON.stringify(token.secret)}`);
    if (token && !TOKEN_RE.test(token.value)) {
      throw new LlmgwError('SECRET_INVALID', `node ${this.node}: secret '${token.secret}' is not a bearer token (one line of visible ASCII, no spaces)`, { node: this.node, secret: token.secret });
    }
    let src;
    try {
      src = resolveModelSource(source);
    } catch (e) {
      throw new LlmgwError('MODEL_DOWNLOAD_FAILED', `node ${this.node}: ${(e as Error).message}`, { node: this.node, source });
    }
    const fence = this.fence();
    const script = src.kind === 'file' ? modelFromFileScript(this.dataDir, sha, src.path, fence) : modelFromUrlScript(this.dataDir, sha, src.url, token?.secret ?? null, fence);
    const stdin = src.kind === 'url' && token ? { stdin: `${token.value}\n` } : {};
    const res = await this.exec(script, `fetch model ${sha.slice(0, 12)}`, { timeoutMs: this.timeouts.downloadMs, fence, ...stdin });
    return { path: `${this.dataDir}/models/${sha}.gguf`, bytes: Number(lastLine(res.stdout)) || 0 };
  }

  // ------------------------------------------------------------------------------- replicas

  startReplica(spec: ReplicaStartSpec): Promise<ReplicaHandle> {
    // One start at a time per driver (the node-side lock also serializes across controllers).
    const p = this.startQueue.then(() => this.start(spec));
    this.startQueue = p.catch(() => {});
    return p;
  }

  private async start(spec: ReplicaStartSpec): Promise<ReplicaHandle> {
    if (!REPLICA_ID_RE.test(spec.id)) throw new Error(`bad replica id: ${JSON.stringify(spec.id)}`);
    if (/[\n\r\0]/.test(spec.apiKey)) throw new Error('the engine API key may not contain newlines or NUL');
    const fence = this.fence();
    const avoid = new Set<number>();
    for (let attempt = 0; attempt < 8; attempt++) {
      const nonce = randomBytes(8).toString('hex');
      const q = await this.exec(usedPortsScript(this.dataDir, nonce), 'query ports', { timeoutMs: this.timeouts.opMs });
      const used = parseUsedPorts(q.stdout, nonce);
      let port: number;
      if (spec.port !== undefined) {
        port = spec.port;
        if (used.has(port)) throw new LlmgwError('REPLICA_PORT_IN_USE', `node ${this.node}: port ${port} is in use`, { node: this.node, replica: spec.id, port });
      } else {
        port = pickPort(this.node, this.spec.ports, used, avoid);
      }
      const argv = replicaArgv(spec, this.bindHost, port);
      const stateHead = JSON.stringify({
        version: 1, id: spec.id, model: spec.model, digest: spec.digest, port, argv,
        log: `${this.dataDir}/replicas/${spec.id}/log`, bindHost: this.bindHost,
        keyFingerprint: engineKeyFingerprint(spec.apiKey),
        ...((spec.devices?.length ?? 0) > 0 ? { devices: spec.devices, gpuLayers: spec.gpuLayers ?? 'all' } : {}),
      }).replace(/\}$/, '');
      // the node's env, then the visibility of the devices placement chose (none: nothing visible)
      const env = { ...(this.spec.env ?? {}), ...replicaDeviceSetup(spec.devices ?? [], this.spec.env ?? {}).env };
      const res = await this.shell.run(startReplicaScript({ dataDir: this.dataDir, id: spec.id, port, argv, stateHead, fence, env }), {
        stdin: `${spec.apiKey}\n`,
        timeoutMs: this.timeouts.opMs,
      });
      if (res.code === EXIT_PORT_TAKEN) {
        if (spec.port !== undefined) throw new LlmgwError('REPLICA_PORT_IN_USE', `node ${this.node}: port ${port} is in use`, { node: this.node, replica: spec.id, port });
        avoid.add(port);
        continue;
      }
      if (res.code === EXIT_REPLICA_EXISTS) {
        throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: replica ${spec.id} already exists and is running`, { node: this.node, replica: spec.id });
      }
      this.check(res, `start replica ${spec.id}`, fence);
      const m = /pid=(\d+) starttime=(\d+) started=(\d+)/.exec(res.stdout);
      if (!m) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: start replica ${spec.id}: unexpected output`, { node: this.node, stdout: tailOf(res.stdout, 5) });
      this.known.set(spec.id, { port });
      return { id: spec.id, port, pid: Number(m[1]), endpoint: this.endpoint(port), startedAt: Number(m[3]) * 1000 };
    }
    throw new LlmgwError('NODE_NO_FREE_PORT', `node ${this.node}: every port tried was taken meanwhile`, { node: this.node, tried: [...avoid] });
  }

  async waitReady(id: string, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<void> {
    const deadline = Date.now() + opts.timeoutMs;
    let port = this.known.get(id)?.port;
    let nextCheck = 0;
    for (;;) {
      opts.signal?.throwIfAborted();
      if (port === undefined || Date.now() >= nextCheck) {
        const ins = await this.inspect(id, opts.signal);
        if (ins.state === null) throw new LlmgwError('REPLICA_NOT_FOUND', `node ${this.node}: no replica ${id}`, { node: this.node, replica: id });
        port = ins.state.port;
        if (!ins.alive) throw this.failureError(id, ins.logTail);
        nextCheck = Date.now() + 1_000;
      }
      if ((await this.health(port, opts.signal)) === 200) {
        // make sure the 200 came from our process, not from whatever else answers on the port
        const ins = await this.inspect(id, opts.signal);
        if (ins.alive) return;
        throw this.failureError(id, ins.logTail);
      }
      if (Date.now() >= deadline) {
        const logTail = await this.logTail(id, this.logLines).catch(() => '');
        throw new LlmgwError('REPLICA_START_TIMEOUT', `node ${this.node}: replica ${id} was not healthy within ${opts.timeoutMs} ms`, {
          node: this.node, replica: id, logTail,
        });
      }
      await sleep(Math.min(250, Math.max(0, deadline - Date.now())), undefined, opts.signal ? { signal: opts.signal } : undefined).catch((e: unknown) => {
        throw opts.signal?.reason ?? e;
      });
    }
  }

  async stopReplica(id: string, graceMs: number): Promise<void> {
    if (!REPLICA_ID_RE.test(id)) return; // no such replica can exist
    const fence = this.fence();
    await this.exec(stopReplicaScript(this.dataDir, id, graceMs, fence), `stop replica ${id}`, { timeoutMs: graceMs + 30_000, fence });
    this.known.delete(id);
  }

  async logTail(id: string, lines: number): Promise<string> {
    if (!REPLICA_ID_RE.test(id)) throw new LlmgwError('REPLICA_NOT_FOUND', `node ${this.node}: no replica ${id}`, { node: this.node, replica: id });
    const res = await this.exec(logTailScript(this.dataDir, id, Math.max(1, Math.floor(lines))), `log tail ${id}`, { timeoutMs: this.timeouts.opMs });
    return res.stdout;
  }

  async readFileRange(path: string, offset: number, length: number): Promise<{ data: Buffer; size: number }> {
    if (!path.startsWith('/')) throw new LlmgwError('MODEL_FILE_NOT_FOUND', `node ${this.node}: not an absolute path: ${path}`, { node: this.node, path });
    // base64 of at most MAX_RANGE_READ bytes stays within the shell's output cap
    const res = await this.exec(readRangeScript(path, offset, Math.min(length, MAX_RANGE_READ)), `read ${path}`, { timeoutMs: this.timeouts.opMs });
    const m = /^size=(\d+)\n([A-Za-z0-9+/=]*)\n?$/.exec(res.stdout);
    if (!m) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: unexpected output reading ${path}`, { node: this.node, path });
    return { size: Number(m[1]), data: Buffer.from(m[2]!, 'base64') };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.agent.close().catch(() => {});
    if (this.opts.ownsShell !== false) await this.shell.close();
  }

  // ------------------------------------------------------------------------------- helpers

  private endpoint(port: number): string {
    const h = isIP(this.endpointHost) === 6 ? `[${this.endpointHost}]` : this.endpointHost;
    return `http://${h}:${port}`;
  }

  /** GET /health: the status code, or null when nothing answered. */
  private async health(port: number, signal?: AbortSignal): Promise<number | null> {
    const t = this.timeouts.healthMs;
    const sig = signal ? AbortSignal.any([signal, AbortSignal.timeout(t)]) : AbortSignal.timeout(t);
    try {
      const res = await request(`${this.endpoint(port)}/health`, { method: 'GET', dispatcher: this.agent, headersTimeout: t, bodyTimeout: t, signal: sig });
      await res.body.dump();
      return res.statusCode;
    } catch {
      return null;
    }
  }

  private async inspect(id: string, signal?: AbortSignal): Promise<Inspection> {
    const nonce = randomBytes(8).toString('hex');
    const res = await this.exec(inspectReplicaScript(this.dataDir, id, nonce, this.logLines), `inspect replica ${id}`, {
      timeoutMs: this.timeouts.opMs, ...(signal ? { signal } : {}),
    });
    const sections = parseSections(res.stdout, nonce);
    if (sections.some((s) => s.name === 'missing')) return { state: null, alive: false, logTail: '' };
    const stateText = sections.find((s) => s.name === 'state')?.lines.join('\n') ?? '';
    const dead = sections.find((s) => s.name === 'dead');
    return { state: parseState(stateText), alive: sections.some((s) => s.name === 'alive'), logTail: dead?.lines.join('\n') ?? '' };
  }

  /**
   * The failure of a start from its own log, read once the process is dead: nothing is written to it
   * after that (what a silent log lacks was lost inside llama-server, failure.ts), so it is not read
   * again.
   */
  private failureError(id: string, logTail: string): LlmgwError {
    const f = failureOf(logTail);
    return new LlmgwError(f.code, `node ${this.node}: replica ${id}: ${f.message}`, { node: this.node, replica: id, logTail, engineMessage: f.message, silent: f.silent === true });
  }

  private async exec(
    script: string, what: string, opts: { timeoutMs: number; stdin?: string; signal?: AbortSignal; fence?: Fence | null },
  ): Promise<ExecResult> {
    if (this.closed) throw new LlmgwError('NODE_UNREACHABLE', `node ${this.node}: driver is closed`, { node: this.node });
    const { fence, ...run } = opts;
    const res = await this.shell.run(script, run);
    return this.check(res, what, fence ?? null);
  }

  /** The fence for this action (checked), or null without one. */
  private fence(): Fence | null {
    return this.opts.fence ? checkFence(this.opts.fence()) : null;
  }

  private check(res: ExecResult, what: string, fence: Fence | null = null): ExecResult {
    if (res.code === 0) return res;
    if (fence !== null && res.code === EXIT_FENCE_REFUSED) {
      const r = refusalOf(res.stderr);
      if (r !== null) throw fenceError(this.node, what, fence, r);
    }
    throw scriptError(this.node, what, res);
  }
}

/** Open the node's transport (openShell) and a driver over it. */
export function openNodeDriver(
  node: NodeSpec,
  opts: OpenShellOptions & { readonly driver?: ShellNodeDriverOptions; readonly fence?: () => Fence },
): NodeDriver {
  const { driver, fence, ...shellOpts } = opts;
  const fenced = fence ?? driver?.fence;
  return new ShellNodeDriver(node, openShell(node, shellOpts), { ...driver, ...(fenced ? { fence: fenced } : {}) });
}

// ------------------------------------------------------------------------------- pure helpers

/** llama-server's argv for a replica (argv[0] = the binary). Profile extra args come last. */
export function replicaArgv(spec: ReplicaStartSpec, bindHost: string, port: number): string[] {
  const p = spec.profile;
  const n = (x: number) => {
    if (!Number.isSafeInteger(x)) throw new Error(`profile ${p.name}: expected an integer, got ${x}`);
    return String(x);
  };
  return [
    spec.binary,
    '-m', spec.modelPath,
    '--host', bindHost,
    '--port', n(port),
    '--alias', spec.model,
    '-c', n(p.ctxSize),
    '-np', n(p.parallel),
    ...(p.threads !== null ? ['-t', n(p.threads)] : []),
    ...(p.batchSize !== null ? ['-b', n(p.batchSize)] : []),
    ...(p.embeddings ? ['--embeddings'] : []),
    ...(p.reranking ? ['--reranking'] : []),
    '--cache-ram', n(cacheRamMiB(p.cacheRamBytes)),
    ...deviceArgv(spec, n),
    ...p.extraArgs,
  ];
}

/**
 * --device/-ngl (and -sm/-ts/-mg) for a replica placed on devices; the devices are named as the
 * replica sees them (its visibility env makes the first chosen device its device 0).
 */
function deviceArgv(spec: ReplicaStartSpec, n: (x: number) => string): string[] {
  const devices = spec.devices ?? [];
  if (devices.length === 0) return [];
  const p = spec.profile;
  const { deviceArgs } = replicaDeviceSetup(devices, {});
  const layers = spec.gpuLayers ?? 'all';
  return [
    '--device', deviceArgs.join(','),
    '-ngl', layers === 'all' ? 'all' : n(layers),
    ...(p.splitMode != null ? ['-sm', p.splitMode] : []),
    ...((p.tensorSplit?.length ?? 0) > 0 ? ['-ts', p.tensorSplit!.join(',')] : []),
    ...(p.mainGpu != null ? ['-mg', n(p.mainGpu)] : []),
  ];
}

/** `@@<nonce> name` sections of a script's stdout, in order. */
export function parseSections(stdout: string, nonce: string): { name: string; lines: string[] }[] {
  const marker = `@@${nonce} `;
  const out: { name: string; lines: string[] }[] = [];
  let cur: { name: string; lines: string[] } | null = null;
  for (const line of stdout.split('\n')) {
    if (line.startsWith(marker)) {
      cur = { name: line.slice(marker.length).trim(), lines: [] };
      out.push(cur);
    } else if (cur) {
      cur.lines.push(line);
    }
  }
  for (const s of out) while (s.lines.length > 0 && s.lines[s.lines.length - 1] === '') s.lines.pop();
  return out;
}

function parseUsedPorts(stdout: string, nonce: string): Set<number> {
  const sections = parseSections(stdout, nonce);
  const used = parseProcNetTcp(sections.find((s) => s.name === 'listen')?.lines.join('\n') ?? '');
  for (const l of sections.find((s) => s.name === 'claimed')?.lines ?? []) {
    const p = Number(l.trim());
    if (Number.isInteger(p) && p > 0) used.add(p);
  }
  return used;
}

/** Available KiB from one `df -Pk` data line (the field before "NN%"). */
export function parseDfAvailableKb(line: string): number {
  const f = line.trim().split(/\s+/);
  const i = f.findIndex((x, k) => k > 0 && /^\d+%$/.test(x));
  return i > 0 ? Number(f[i - 1]) || 0 : 0;
}

function parseState(text: string): ReplicaState | null {
  try {
    const j = JSON.parse(text) as Record<string, unknown>;
    const num = (k: string) => (typeof j[k] === 'number' ? (j[k] as number) : NaN);
    const str = (k: string) => (typeof j[k] === 'string' ? (j[k] as string) : '');
    const st: ReplicaState = {
      id: str('id'), model: str('model'), digest: str('digest'), port: num('port'),
      argv: Array.isArray(j['argv']) ? (j['argv'] as unknown[]).map(String) : [], log: str('log'),
      pid: num('pid'), procStartTime: num('procStartTime'), startedAt: num('startedAt'),
      keyFingerprint: /^[0-9a-f]{16}$/.test(str('keyFingerprint')) ? str('keyFingerprint') : null,
      devices: Array.isArray(j['devices']) ? (j['devices'] as unknown[]).map(String).filter((d) => /^[A-Za-z][A-Za-z_-]*[0-9]+$/.test(d)) : [],
      gpuLayers: j['gpuLayers'] === 'all' ? 'all' : typeof j['gpuLayers'] === 'number' ? (j['gpuLayers'] as number) : null,
    };
    if (!Number.isInteger(st.port) || !Number.isInteger(st.pid)) return null;
    return st;
  } catch {
    return null;
  }
}

function failureOf(logTail: string): ReplicaFailure {
  const f = classifyFailure(logTail, 'process gone');
  return { code: f.code, message: f.message, logTail, ...(f.silent ? { silent: true } : {}) };
}

/** Turn a failed script into an LlmgwError: its `llmgw-error: CODE msg` line, ENOSPC, or NODE_COMMAND_FAILED. */
export function scriptError(node: string, what: string, res: ExecResult): LlmgwError {
  const stderr = tailOf(res.stderr, 40);
  const how = res.code !== null ? `exit code ${res.code}` : `signal ${res.signal ?? 'unknown'}`;
  const lines = res.stderr.split('\n');
  let code: ReasonCode | null = null;
  let message = '';
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = /^llmgw-error: ([A-Z_]+) (.*)$/.exec(lines[i]!);
    if (m && m[1]! in Reasons) {
      code = m[1] as ReasonCode;
      message = m[2]!;
      break;
    }
  }
  const diskFull = /No space left on device|ENOSPC/i.test(res.stderr);
  const keep: readonly ReasonCode[] = ['ENGINE_CHECKSUM_MISMATCH', 'MODEL_CHECKSUM_MISMATCH', 'ENGINE_TOOL_MISSING', 'ENGINE_NOT_FOUND', 'MODEL_FILE_NOT_FOUND', 'REPLICA_NOT_FOUND'];
  if (diskFull && (code === null || !keep.includes(code))) {
    return new LlmgwError('NODE_DISK_FULL', `node ${node}: ${what}: no space left on device`, { node, what, stderr });
  }
  if (code !== null) {
    const logTail = stderr.split('\n').filter((l) => !l.startsWith('llmgw-error: ')).join('\n');
    return new LlmgwError(code, `node ${node}: ${what}: ${message}`, { node, what, logTail });
  }
  return new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: ${what} failed (${how})${stderr ? `: ${tailOf(stderr, 5)}` : ''}`, {
    node, what, code: res.code, signal: res.signal, stderr,
  });
}

function tailOf(s: string, lines: number): string {
  return s.trimEnd().split('\n').slice(-lines).join('\n').slice(-8000);
}

function lastLine(s: string): string {
  return s.trimEnd().split('\n').pop()?.trim() ?? '';
}

function checkRelativePath(p: string, what: string): void {
  if (p === '' || p.startsWith('/') || p.split('/').some((s) => s === '..' || s === '')) {
    throw new Error(`${what} must be a relative path inside the archive, got ${JSON.stringify(p)}`);
  }
}

/**
 * Download an artifact once into the controller's cache (named by sha256), verifying it while it
 * streams; concurrent calls for the same artifact share one download.
 */
export function fetchArtifact(url: string, sha256: string, cacheDir: string, timeoutMs: number): Promise<string> {
  const dest = join(cacheDir, `${sha256}.artifact`);
  const inflight = artifactDownloads.get(dest);
  if (inflight) return inflight;
  const p = (async () => {
    try {
      if ((await stat(dest)).isFile()) return dest;
    } catch {
      /* not cached */
    }
    await mkdir(cacheDir, { recursive: true });
    const tmp = `${dest}.part-${randomBytes(6).toString('hex')}`;
    const hash = createHash('sha256');
    try {
      let res;
      try {
        res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      } catch (e) {
        throw new LlmgwError('ENGINE_DOWNLOAD_FAILED', `controller: download of ${url} failed: ${(e as Error).message}`, { url }, { cause: e });
      }
      if (!res.ok || res.body === null) {
        throw new LlmgwError('ENGINE_DOWNLOAD_FAILED', `controller: download of ${url} failed: HTTP ${res.status}`, { url, status: res.status });
      }
      const hasher = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          hash.update(chunk);
          cb(null, chunk);
        },
      });
      try {
        await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>), hasher, createWriteStream(tmp, { mode: 0o644 }));
      } catch (e) {
        const nospc = (e as NodeJS.ErrnoException).code === 'ENOSPC';
        throw new LlmgwError(nospc ? 'NODE_DISK_FULL' : 'ENGINE_DOWNLOAD_FAILED', `controller: download of ${url} failed: ${(e as Error).message}`, { url }, { cause: e });
      }
      const got = hash.digest('hex');
      if (got !== sha256) {
        throw new LlmgwError('ENGINE_CHECKSUM_MISMATCH', `controller: artifact ${url} has sha256 ${got}, engines/ says ${sha256}`, { url, expected: sha256, got });
      }
      await rename(tmp, dest);
      return dest;
    } finally {
      await unlink(tmp).catch(() => {});
    }
  })().finally(() => artifactDownloads.delete(dest));
  artifactDownloads.set(dest, p);
  return p;
}
