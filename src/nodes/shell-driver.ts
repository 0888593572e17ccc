/**
 * ShellNodeDriver: the NodeDriver over a Shell (ssh or local). Every action is one or two POSIX sh
 * scripts, each beside the parser of its output under ops/; the driver orchestrates them: checks its
 * inputs, coalesces installs and fetches, picks ports, polls health (undici), and turns a failed
 * script into its catalogue reason (script-errors.ts, fence.ts).
 */
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent } from '../util/undici-lean.js';
import { healthStatus, servesModel } from './replica-probe.js';
import { LlmgwError } from '../errors/catalogue.js';
import type { EngineVersionSpec, NodeSpec } from '../fleet-spec/types.js';
import type { DownloadToken, Fence, NodeDriver, NodeObservation, ReplicaHandle, ReplicaObservation, ReplicaStartSpec, RpcWorkerHandle, RpcWorkerStartSpec } from './driver.js';
import { replicaDeviceSetup } from './devices.js';
import { checkFence, EXIT_FENCE_REFUSED, fenceError, refusalOf } from './fence.js';
import { engineFingerprint, installEngine, type EngineInstallContext } from './engine-install.js';
import { engineStillInstalled } from './ops/engine.js';
import { modelFromFileScript, modelFromUrlInput, modelFromUrlScript, modelPath, parseModelBytes } from './ops/model-fetch.js';
import { observeScript, parseObservation } from './ops/observe.js';
import { failureOf, inspectReplicaScript, parseInspection, type Inspection, type ReplicaState } from './ops/replica-inspect.js';
import { logTailScript, parseRange, readRangeScript } from './ops/replica-log.js';
import {
  EXIT_INPUT_GONE, EXIT_PORT_TAKEN, EXIT_REPLICA_EXISTS, parseStarted, parseUsedPorts, replicaArgv, replicaStateHead, startReplicaScript, usedPortsScript,
  type StartScriptInput,
} from './ops/replica-start.js';
import { stopReplicaScript } from './ops/replica-stop.js';
import { tailOf } from './ops/sections.js';
import { firstPick, pickPort } from './ports.js';
import { scriptError } from './script-errors.js';
import type { ExecResult, Shell } from './shell.js';
import { resolveModelSource } from './sources.js';
import { openShell, type OpenShellOptions } from './transport.js';
import { healthPollDelayMs } from './health-poll.js';
import { replicaBindHost } from './bind-host.js';
import { startRpcWorker, stopRpcWorker, type RpcWorkerContext } from './rpc-workers.js';
import { slotSaveDir } from '../engine-api/slot-files.js';

export { replicaBindHost } from './bind-host.js';

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
   * Address llama-server binds. Default: replicaBindHost(node) (replicas always require the
   * engine API key; the trust model in docs/ha-and-trust.md says to set listen_address).
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
const SHA256_RE = /^[0-9a-f]{64}$/;
/** A secret's name (a file in the controller's secrets dir; the schema's name pattern is stricter). */
const SECRET_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/** A bearer token: one line of visible ASCII, no spaces (RFC 6750's b64token, loosely). */
export const TOKEN_RE = /^[\x21-\x7e]+$/;

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
  /** Engines and model files found installed (by engine@version and by sha256): a start checks them in its own script. */
  private readonly enginesSeen = new Map<string, { fingerprint: string; binary: string; check: string }>();
  private readonly modelsSeen = new Map<string, { path: string; bytes: number }>();
  /** Ports of replicas this driver started or observed, for waitReady without a round trip. */
  private readonly known = new Map<string, { port: number; launched?: { apiKey: string; modelPath: string } }>();
  private readonly agent = new Agent({ keepAliveTimeout: 1_000, keepAliveMaxTimeout: 1_000, connections: 4 });
  private startQueue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly spec: NodeSpec, private readonly shell: Shell, private readonly opts: ShellNodeDriverOptions = {}) {
    this.node = spec.name;
    if (!spec.dataDir.startsWith('/')) throw new LlmgwError('SPEC_INVALID_VALUE', `node ${spec.name}: dataDir must be an absolute path, got ${spec.dataDir}`, { node: spec.name });
    this.dataDir = spec.dataDir.replace(/\/+$/, '') || '/';
    const local = spec.transport === 'local';
    this.bindHost = opts.bindHost ?? replicaBindHost(spec);
    this.endpointHost = opts.endpointHost ?? (local ? '127.0.0.1' : spec.host);
    this.timeouts = { ...DEFAULT_DRIVER_TIMEOUTS, ...opts.timeouts };
    this.logLines = opts.logTailLines ?? 40;
  }

  // ------------------------------------------------------------------------------- observe

  async observe(): Promise<NodeObservation> {
    const at = Date.now();
    const nonce = randomBytes(8).toString('hex');
    const fence = this.fence();
    const env = this.spec.env ?? {};
    const res = await this.exec(observeScript(this.dataDir, nonce, this.logLines, fence, env), 'observe', { timeoutMs: this.timeouts.observeMs });
    const o = parseObservation(res.stdout, res.stderr, nonce, this.node, env);
    const replicas = await Promise.all(o.replicas.map((r) => this.replicaObservation(r.id, r.state, r.alive, r.logTail, r.offloaded)));
    // what the look no longer finds installed is forgotten: the next ensure checks it with its own script
    for (const [key, e] of this.enginesSeen) if (!o.engines.some((x) => `${x.engine}@${x.version}` === key && x.binary === e.binary)) this.enginesSeen.delete(key);
    for (const sha of this.modelsSeen.keys()) if (!o.models.some((x) => x.sha256 === sha)) this.modelsSeen.delete(sha);
    return {
      node: this.node,
      at,
      memory: o.memory,
      cpus: o.cpus,
      cpuFlags: o.cpuFlags,
      arch: o.arch,
      diskFreeBytes: o.diskFreeBytes,
      engines: o.engines,
      ...(o.devices !== undefined ? { devices: o.devices } : {}),
      models: o.models,
      replicas,
      ...(o.fence !== undefined ? { fence: o.fence } : {}),
      ...(o.rpcWorkers !== undefined ? { rpcWorkers: o.rpcWorkers } : {}),
    };
  }

  private async replicaObservation(id: string, st: ReplicaState | null, alive: boolean, logTail: string, offloaded?: ReplicaObservation['offloaded']): Promise<ReplicaObservation> {
    if (st === null) {
      return {
        id, model: '', digest: '', port: 0, pid: 0, startedAt: 0, endpoint: '', state: 'failed',
        failure: { code: 'REPLICA_EXITED', message: `replica ${id}: state.json is unreadable`, logTail },
      };
    }
    const k = this.known.get(id);
    this.known.set(id, k?.port === st.port ? k : { port: st.port });
    const base = {
      id, model: st.model, digest: st.digest, port: st.port, pid: st.pid, startedAt: st.startedAt, endpoint: this.endpoint(st.port),
      ...(st.keyFingerprint !== null ? { keyFingerprint: st.keyFingerprint } : {}),
      ...(st.devices.length > 0 ? { devices: st.devices, ...(st.gpuLayers !== null ? { gpuLayers: st.gpuLayers } : {}), ...(offloaded ? { offloaded } : {}) } : {}),
    };
    if (!alive) return { ...base, state: 'failed', failure: failureOf(logTail) };
    const code = await this.health(st.port);
    return { ...base, state: code === 200 ? 'ready' : 'starting' };
  }

  // ------------------------------------------------------------------------------- engines

  ensureEngine(v: EngineVersionSpec): Promise<{ binary: string }> {
    const key = `${v.engine}@${v.version}`;
    const fingerprint = engineFingerprint(v);
    // found installed before: the start's preflight checks it is still there (#38: no exec now)
    const seen = this.enginesSeen.get(key);
    if (seen?.fingerprint === fingerprint) return Promise.resolve({ binary: seen.binary });
    const inflight = this.engines.get(key);
    if (inflight) return inflight;
    const p = installEngine(this.installContext(), v)
      .then((r) => {
        const check = engineStillInstalled({ dataDir: this.dataDir, engine: v.engine, version: v.version, fingerprint }, v.install.method, r.binary);
        if (r.binary !== '') this.enginesSeen.set(key, { fingerprint, binary: r.binary, check });
        return r;
      })
      .finally(() => this.engines.delete(key));
    this.engines.set(key, p);
    return p;
  }

  private installContext(): EngineInstallContext {
    return {
      node: this.node, dataDir: this.dataDir, timeouts: this.timeouts, shell: this.shell,
      artifactCacheDir: this.opts.artifactCacheDir ?? join(homedir(), '.cache', 'llmgw', 'artifacts'), buildJobs: this.opts.buildJobs ?? null,
      fence: () => this.fence(), exec: (script, what, opts) => this.exec(script, what, opts),
    };
  }

  // ------------------------------------------------------------------------------- models

  ensureModel(source: string, sha256: string, token?: DownloadToken): Promise<{ path: string; bytes: number }> {
    const sha = sha256.toLowerCase();
    const seen = this.modelsSeen.get(sha);
    if (seen) return Promise.resolve(seen); // the start's preflight checks it is still there (#38)
    const inflight = this.models.get(sha);
    if (inflight) return inflight;
    const p = this.fetchModel(source, sha, token)
      .then((r) => (this.modelsSeen.set(sha, r), r))
      .finally(() => this.models.delete(sha));
    this.models.set(sha, p);
    return p;
  }

  private async fetchModel(source: string, sha: string, token: DownloadToken | undefined): Promise<{ path: string; bytes: number }> {
    if (!SHA256_RE.test(sha)) throw new LlmgwError('SPEC_INVALID_VALUE', `bad model sha256: ${sha}`, { node: this.node });
    if (token && !SECRET_NAME_RE.test(token.secret)) throw new LlmgwError('SPEC_INVALID_VALUE', `bad secret name: ${JSON.stringify(token.secret)}`, { node: this.node });
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
    const script = src.kind === 'file' ? modelFromFileScript(this.dataDir, sha, src.path, fence) : modelFromUrlScript(this.dataDir, sha, token?.secret ?? null, fence);
    // the URL (a presigned one's signature) and the token on stdin: in no argv on the node
    const stdin = src.kind === 'url' ? { stdin: modelFromUrlInput(src.url, token?.value ?? null) } : {};
    const res = await this.exec(script, `fetch model ${sha.slice(0, 12)}`, { timeoutMs: this.timeouts.downloadMs, fence, ...stdin });
    return { path: modelPath(this.dataDir, sha), bytes: parseModelBytes(res.stdout) };
  }

  // ------------------------------------------------------------------------------- replicas

  startReplica(spec: ReplicaStartSpec): Promise<ReplicaHandle> {
    // One start at a time per driver (the node-side lock also serializes across controllers).
    const p = this.startQueue.then(() => this.start(spec));
    this.startQueue = p.catch(() => {});
    return p;
  }

  private async start(spec: ReplicaStartSpec): Promise<ReplicaHandle> {
    if (!REPLICA_ID_RE.test(spec.id)) throw new LlmgwError('INTERNAL', `bad replica id: ${JSON.stringify(spec.id)}`, { node: this.node });
    if (/[\n\r\0]/.test(spec.apiKey)) throw new LlmgwError('SECRET_INVALID', 'the engine API key may not contain newlines or NUL', { node: this.node });
    const fence = this.fence();
    const avoid = new Set<number>();
    for (let attempt = 0; attempt < 8; attempt++) {
      // first a port around those this driver knows, without asking the node (#38: one exec less); the start script
      // checks it under the node's lock, and a port taken meanwhile or by another process makes the next attempt ask
      let port = spec.port === undefined && attempt === 0 ? firstPick(this.node, this.spec.ports, [...this.known.values()].map((k) => k.port)) : null;
      if (port === null) {
        const nonce = randomBytes(8).toString('hex');
        const used = parseUsedPorts((await this.exec(usedPortsScript(this.dataDir, nonce), 'query ports', { timeoutMs: this.timeouts.opMs })).stdout, nonce);
        if (spec.port !== undefined && used.has(spec.port)) throw new LlmgwError('REPLICA_PORT_IN_USE', `node ${this.node}: port ${spec.port} is in use`, { node: this.node, replica: spec.id, port: spec.port });
        port = spec.port ?? pickPort(this.node, this.spec.ports, used, avoid);
      }
      const argv = replicaArgv(spec, this.bindHost, port, slotSaveDir(this.dataDir, spec.model));
      const stateHead = replicaStateHead(spec, this.dataDir, this.bindHost, port, argv);
      // the node's env, then the visibility of the devices placement chose (none: nothing visible)
      const env = { ...(this.spec.env ?? {}), ...replicaDeviceSetup(spec.devices ?? [], this.spec.env ?? {}).env };
      const inputs = this.inputsOf(spec);
      const res = await this.shell.run(startReplicaScript({ dataDir: this.dataDir, id: spec.id, port, argv, stateHead, fence, env, ...(inputs ? { inputs } : {}) }), {
        stdin: `${spec.apiKey}\n`,
        timeoutMs: this.timeouts.opMs,
      });
      if (res.code === EXIT_INPUT_GONE) throw this.inputGone(spec, res.stderr);
      if (res.code === EXIT_PORT_TAKEN) {
        if (spec.port !== undefined) throw new LlmgwError('REPLICA_PORT_IN_USE', `node ${this.node}: port ${port} is in use`, { node: this.node, replica: spec.id, port });
        avoid.add(port);
        continue;
      }
      if (res.code === EXIT_REPLICA_EXISTS) {
        throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: replica ${spec.id} already exists and is running`, { node: this.node, replica: spec.id });
      }
      this.check(res, `start replica ${spec.id}`, fence);
      const started = parseStarted(res.stdout);
      if (!started) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: start replica ${spec.id}: unexpected output`, { node: this.node, stdout: tailOf(res.stdout, 5) });
      this.known.set(spec.id, { port, launched: { apiKey: spec.apiKey, modelPath: spec.modelPath } });
      return { id: spec.id, port, pid: started.pid, endpoint: this.endpoint(port), startedAt: started.startedAtMs };
    }
    throw new LlmgwError('NODE_NO_FREE_PORT', `node ${this.node}: every port tried was taken meanwhile`, { node: this.node, tried: [...avoid] });
  }

  /** What the start's preflight checks: the engine and the model file as this driver found them (none when it did not). */
  private inputsOf(spec: ReplicaStartSpec): StartScriptInput['inputs'] {
    const engine = [...this.enginesSeen.values()].find((e) => e.binary === spec.binary);
    const model = [...this.modelsSeen.values()].some((m) => m.path === spec.modelPath);
    return engine && model ? { engine: engine.check, modelPath: spec.modelPath } : undefined;
  }

  /** The preflight found the engine or the model gone: forgotten, so the next ensure checks them with their own scripts. */
  private inputGone(spec: ReplicaStartSpec, stderr: string): LlmgwError {
    for (const [k, e] of this.enginesSeen) if (e.binary === spec.binary) this.enginesSeen.delete(k);
    for (const [k, m] of this.modelsSeen) if (m.path === spec.modelPath) this.modelsSeen.delete(k);
    const why = /llmgw-start-input: (.*)/.exec(stderr)?.[1] ?? 'the engine or the model file is gone';
    return new LlmgwError('REPLICA_INPUT_GONE', `node ${this.node}: start replica ${spec.id}: ${why}`, { node: this.node, replica: spec.id });
  }

  async waitReady(id: string, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<void> {
    const deadline = Date.now() + opts.timeoutMs;
    let port = this.known.get(id)?.port;
    // one this driver just launched (the start script saw it run): its process looked at after a second, not before /health
    let nextCheck = port === undefined ? 0 : Date.now() + 1_000;
    let polls = 0;
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
        // make sure the 200 came from our process, not from whatever else answers on the port: one this
        // driver launched answers /props to the engine key with its model file (#38: no exec; none of
        // our replicas holds its port, claimed under the node's lock); else a look at the process
        const launched = this.known.get(id)?.launched;
        if (launched && (await servesModel(this.endpoint(port), this.agent, this.timeouts.healthMs, launched, opts.signal))) return;
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
      await sleep(Math.min(healthPollDelayMs(polls++), Math.max(0, deadline - Date.now())), undefined, opts.signal ? { signal: opts.signal } : undefined).catch((e: unknown) => {
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

  // RPC workers of split models (rpc-workers.ts, ops/rpc-worker.ts)
  startRpcWorker(spec: RpcWorkerStartSpec): Promise<RpcWorkerHandle> { return startRpcWorker(this.rpcContext(), spec); }
  stopRpcWorker(id: string, graceMs: number): Promise<void> { return stopRpcWorker(this.rpcContext(), id, graceMs); }
  private rpcContext(): RpcWorkerContext { return { spec: this.spec, dataDir: this.dataDir, shell: this.shell, fence: this.fence(), opMs: this.timeouts.opMs }; }

  async readFileRange(path: string, offset: number, length: number): Promise<{ data: Buffer; size: number }> {
    if (!path.startsWith('/')) throw new LlmgwError('MODEL_FILE_NOT_FOUND', `node ${this.node}: not an absolute path: ${path}`, { node: this.node, path });
    // base64 of at most MAX_RANGE_READ bytes stays within the shell's output cap
    const res = await this.exec(readRangeScript(path, offset, Math.min(length, MAX_RANGE_READ)), `read ${path}`, { timeoutMs: this.timeouts.opMs });
    return parseRange(res.stdout, this.node, path);
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
  private health(port: number, signal?: AbortSignal): Promise<number | null> {
    return healthStatus(this.endpoint(port), this.agent, this.timeouts.healthMs, signal);
  }

  private async inspect(id: string, signal?: AbortSignal): Promise<Inspection> {
    const nonce = randomBytes(8).toString('hex');
    const res = await this.exec(inspectReplicaScript(this.dataDir, id, nonce, this.logLines), `inspect replica ${id}`, {
      timeoutMs: this.timeouts.opMs, ...(signal ? { signal } : {}),
    });
    return parseInspection(res.stdout, nonce);
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
