/**
 * A test implementation of the router's `FleetView` (src/reconciler/view.ts): models, phases and
 * ready replicas set by the test, a scriptable `demand()`, `waitReady()` woken by `setReady()`, and
 * call counters. Replicas are whatever endpoints the test points at: real llama-server processes or
 * the stub upstream below (a plain node:http server answering OpenAI-shaped JSON and SSE, recording
 * every request it gets).
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ReasonRef } from '../../src/errors/catalogue.js';
import type { Unplaceable } from '../../src/reconciler/placement.js';
import type { DemandResult, FleetView, ModelPhase, ModelView, ReplicaView } from '../../src/reconciler/view.js';
import type { AccessKeySpec, FleetSettings, KeyLimits, FleetSpec, ModelScaling, ModelSpec, ProfileSpec, QueueSpec, Routing } from '../../src/fleet-spec/types.js';

export const DEFAULT_SETTINGS: FleetSettings = Object.freeze({
  pollIntervalMs: 30_000,
  parkAfterFailures: 5,
  backoff: { initialMs: 10_000, maxMs: 300_000 },
  readyResetMs: 600_000,
  activationWindowMs: 120_000,
  drainGraceMs: 300_000,
  statusBranch: 'llmgw/status',
  placementReserveBytes: 1 << 30,
  unplaceableLogIntervalMs: 600_000,
  stopGraceMs: 30_000,
  queue: { max: 64, timeoutMs: 60_000 },
});

export interface FakeModelInit {
  readonly aliases?: readonly string[];
  readonly scaling?: ModelScaling;
  readonly maxConcurrency?: number | null;
  readonly routing?: Routing;
  readonly queue?: QueueSpec;
  /**
   * Slots per replica (the profile's parallel): the model gets a profile of its own with it. Unset: the
   * spec has no profile for the model and the router counts no slots (no queueing).
   */
  readonly parallel?: number;
}

export interface FakeKey {
  readonly name: string;
  /** The plain key the client sends (the spec keeps its sha256). */
  readonly key: string;
  /** Names or aliases, or '*'. */
  readonly models: readonly string[];
  readonly limits?: KeyLimits;
  /** Per model (name or alias). */
  readonly modelLimits?: Readonly<Record<string, KeyLimits>>;
}

export const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

/** A FleetSpec holding just what the router reads: models (with aliases), keys and settings. */
export function fakeSpec(opts: { models: Record<string, FakeModelInit>; keys?: readonly FakeKey[]; settings?: Partial<FleetSettings>; modelLimits?: Readonly<Record<string, KeyLimits>> }): FleetSpec {
  const models: Record<string, ModelSpec> = {};
  const modelNames: Record<string, string> = {};
  const profiles: Record<string, ProfileSpec> = {};
  const settings = { ...DEFAULT_SETTINGS, ...(opts.settings ?? {}) };
  for (const [name, m] of Object.entries(opts.models)) {
    models[name] = Object.freeze({
      name,
      file: `models/${name}.yaml`,
      source: `file:///models/${name}.gguf`,
      sha256: sha256(name),
      profile: m.parallel === undefined ? 'default' : `p-${name}`,
      scaling: m.scaling ?? ({ mode: 'replicas', replicas: 1 } as const),
      aliases: m.aliases ?? [],
      nodeSelector: {},
      memoryBytes: null,
      maxConcurrency: m.maxConcurrency ?? null,
      routing: m.routing ?? 'affinity',
      queue: m.queue ?? settings.queue,
      token: null,
      digest: sha256(`digest:${name}`),
    });
    if (m.parallel !== undefined) {
      profiles[`p-${name}`] = Object.freeze({
        name: `p-${name}`, file: `profiles/p-${name}.yaml`, engine: 'llama-cpp', engineVersion: 'test', ctxSize: 4096, threads: null,
        parallel: m.parallel, batchSize: null, embeddings: false, extraArgs: [], memoryOverheadBytes: 0, cacheRamBytes: 0, startTimeoutMs: 60_000,
      });
    }
    modelNames[name] = name;
    for (const a of m.aliases ?? []) modelNames[a] = name;
  }
  const keys: AccessKeySpec[] = (opts.keys ?? []).map((k) => ({
    name: k.name,
    sha256: sha256(k.key),
    models: k.models.map((m) => (m === '*' ? m : (modelNames[m] ?? m))),
    limits: k.limits ?? null,
    modelLimits: Object.fromEntries(Object.entries(k.modelLimits ?? {}).map(([m, l]) => [modelNames[m] ?? m, l])),
  }));
  const modelLimits = Object.fromEntries(Object.entries(opts.modelLimits ?? {}).map(([m, l]) => [modelNames[m] ?? m, l]));
  return Object.freeze({
    revision: 'fake',
    settings,
    nodes: {},
    engines: {},
    profiles,
    models,
    access: { keys, file: 'access/keys.yaml', modelLimits },
    modelNames,
  });
}

/** Tests give times as ISO strings and reasons as text; the view holds epoch ms and structured reasons. */
function parkedView(p: { since: string; lastError: ReasonRef } | null): ModelView['parked'] {
  return p ? { since: Date.parse(p.since), lastError: p.lastError } : null;
}

export function unplaceableView(reason: string | null): Unplaceable | null {
  return reason === null ? null : { code: 'PLACEMENT_NO_ROOM', reason, needBytes: null, largestFree: null, checked: 1, excludedBySelector: 0, unknown: 0, avoided: 0 };
}

let replicaSeq = 0;
export function replica(model: string, endpoint: string, id = `${model}-r${++replicaSeq}`): ReplicaView {
  return { id, model, node: 'fake-node', endpoint, phase: 'ready', digest: 'd', startedAt: Date.now() };
}

interface ModelState {
  phase: ModelPhase;
  ready: ReplicaView[];
  parked: { since: string; lastError: ReasonRef } | null;
  unplaceable: string | null;
  lastError: ReasonRef | null;
  nextAttemptAt: string | null;
  consecutiveFailures: number;
}

export class FakeFleetView implements FleetView {
  engineApiKey: string;
  private currentSpec: FleetSpec | null;
  private readonly states = new Map<string, ModelState>();
  private readonly waiters = new Map<string, Set<() => void>>();
  /** Every call, by method. */
  /** Requests held per model (FleetView.hold), released at their end. */
  readonly held = new Map<string, number>();
  readonly calls = { demand: [] as string[], touch: [] as string[], waitReady: [] as string[], readyReplicas: 0 };
  /**
   * What demand() answers (after `demandDelayMs`). Default: from the model's state — ready replicas →
   * ready, parked/unplaceable/failing → that, anything else → starting.
   */
  onDemand: ((model: string, opts?: { readonly timeoutMs?: number }) => DemandResult | Promise<DemandResult>) | null = null;
  /** The timeoutMs of each demand() call, in order. */
  readonly demandTimeouts: Array<number | undefined> = [];
  demandDelayMs = 0;

  constructor(spec: FleetSpec | null, engineApiKey = 'engine-key-for-tests') {
    this.currentSpec = spec;
    this.engineApiKey = engineApiKey;
  }

  setSpec(spec: FleetSpec | null): void {
    this.currentSpec = spec;
  }

  private state(model: string): ModelState {
    let s = this.states.get(model);
    if (!s) {
      s = { phase: 'pending', ready: [], parked: null, unplaceable: null, lastError: null, nextAttemptAt: null, consecutiveFailures: 0 };
      this.states.set(model, s);
    }
    return s;
  }

  /** Sets the ready replicas (phase ready, or starting/idle when none) and wakes waitReady(). */
  setReady(model: string, replicas: readonly ReplicaView[], phase?: ModelPhase): void {
    const s = this.state(model);
    s.ready = [...replicas];
    s.phase = phase ?? (replicas.length > 0 ? 'ready' : s.phase === 'ready' ? 'starting' : s.phase);
    if (replicas.length > 0) {
      s.parked = null;
      s.unplaceable = null;
    }
    this.wake(model);
  }

  setParked(model: string, lastError: ReasonRef, since = new Date().toISOString()): void {
    const s = this.state(model);
    Object.assign(s, { phase: 'parked', ready: [], parked: { since, lastError }, lastError, consecutiveFailures: 5 });
    this.wake(model);
  }

  setUnplaceable(model: string, reason: string): void {
    const s = this.state(model);
    Object.assign(s, { phase: 'unplaceable', ready: [], unplaceable: reason });
    this.wake(model);
  }

  setFailing(model: string, lastError: ReasonRef, nextAttemptAt: string | null): void {
    const s = this.state(model);
    Object.assign(s, { phase: 'failing', ready: [], lastError, nextAttemptAt, consecutiveFailures: 2 });
    this.wake(model);
  }

  setPhase(model: string, phase: ModelPhase): void {
    this.state(model).phase = phase;
    this.wake(model);
  }

  private wake(model: string): void {
    for (const w of this.waiters.get(model) ?? []) w();
  }

  // --- FleetView ---

  spec(): FleetSpec | null {
    return this.currentSpec;
  }

  model(name: string): ModelView | null {
    const spec = this.currentSpec?.models[name];
    if (!spec) return null;
    const s = this.state(name);
    return {
      name,
      spec,
      phase: s.phase,
      desired: spec.scaling.mode === 'replicas' ? spec.scaling.replicas : s.ready.length,
      ready: s.ready.length,
      replicas: s.ready,
      consecutiveFailures: s.consecutiveFailures,
      lastError: s.lastError,
      parked: parkedView(s.parked),
      unplaceable: unplaceableView(s.unplaceable),
      nextAttemptAt: s.nextAttemptAt === null ? null : Date.parse(s.nextAttemptAt),
      memoryBytes: null,
      lastHandledRetry: null,
    };
  }

  readyReplicas(model: string): readonly ReplicaView[] {
    this.calls.readyReplicas++;
    return this.states.get(model)?.ready ?? [];
  }

  async demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult> {
    this.calls.demand.push(model);
    this.demandTimeouts.push(opts?.timeoutMs);
    if (this.demandDelayMs > 0) await new Promise((r) => setTimeout(r, this.demandDelayMs));
    const s = this.state(model);
    if (this.onDemand) {
      const r = await this.onDemand(model, opts);
      // like the reconciler: a fresh attempt replaces the previous placement result
      if (r.kind === 'starting' && s.ready.length === 0) Object.assign(s, { phase: 'starting', unplaceable: null });
      return r;
    }
    if (s.ready.length > 0) return { kind: 'ready', replicas: s.ready };
    if (s.phase === 'parked' && s.parked) return { kind: 'parked', ...parkedView(s.parked)! };
    if (s.phase === 'unplaceable' && s.unplaceable) return { kind: 'unplaceable', code: 'PLACEMENT_NO_ROOM', reason: s.unplaceable };
    if (s.phase === 'failing') return { kind: 'failing', lastError: s.lastError, nextAttemptAt: s.nextAttemptAt === null ? null : Date.parse(s.nextAttemptAt) };
    s.phase = 'starting';
    return { kind: 'starting' };
  }

  waitReady(model: string, opts: { readonly timeoutMs: number; readonly signal?: AbortSignal }): Promise<readonly ReplicaView[]> {
    this.calls.waitReady.push(model);
    return new Promise((resolve) => {
      const check = (): boolean => {
        const s = this.state(model);
        if (s.ready.length > 0) {
          done(s.ready);
          return true;
        }
        if (s.phase === 'parked' || s.phase === 'unplaceable') {
          done([]);
          return true;
        }
        return false;
      };
      const set = this.waiters.get(model) ?? new Set();
      this.waiters.set(model, set);
      const onAbort = (): void => done([]);
      const timer = setTimeout(() => done([]), opts.timeoutMs);
      const waiter = (): void => void check();
      function done(r: readonly ReplicaView[]): void {
        clearTimeout(timer);
        set.delete(waiter);
        opts.signal?.removeEventListener('abort', onAbort);
        resolve(r);
      }
      set.add(waiter);
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      if (opts.signal?.aborted) done([]);
      else check();
    });
  }

  touch(model: string): void {
    this.calls.touch.push(model);
  }

  hold(model: string): () => void {
    this.touch(model);
    this.held.set(model, (this.held.get(model) ?? 0) + 1);
    return () => {
      this.held.set(model, this.held.get(model)! - 1);
      this.touch(model);
    };
  }

  /** Requests waiting in waitReady for `model` right now. */
  waiting(model: string): number {
    return this.waiters.get(model)?.size ?? 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Stub upstream: a fake replica

export interface StubRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

export type StubHandler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

export interface StubUpstream {
  readonly url: string;
  readonly port: number;
  readonly server: Server;
  /** Every request received, in order. */
  readonly requests: StubRequest[];
  /** Requests whose client (the router) closed the connection before the response ended. */
  readonly clientAborts: string[];
  /** Replace to change the behaviour; `defaultStubHandler` by default. */
  handler: StubHandler;
  close(): Promise<void>;
}

export function chatCompletionJson(model: string, content = 'hello from the stub'): string {
  return JSON.stringify({
    id: 'chatcmpl-stub',
    object: 'chat.completion',
    created: 1700000000,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 },
  });
}

export function sseChunk(model: string, content: string, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: 'chatcmpl-stub', object: 'chat.completion.chunk', created: 1700000000, model, choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
}

/**
 * Answers chat completions (JSON, or SSE with `stream: true`: `chunks` chunks `intervalMs` apart),
 * embeddings, and echoes anything else as JSON. Header `x-stub-*` in the request are not needed.
 */
export function defaultStubHandler(opts: { chunks?: number; intervalMs?: number } = {}): StubHandler {
  const chunks = opts.chunks ?? 3;
  const intervalMs = opts.intervalMs ?? 5;
  return (req, res, body) => {
    let parsed: { model?: string; stream?: boolean } = {};
    try {
      parsed = JSON.parse(body) as typeof parsed;
    } catch {
      /* echo */
    }
    const model = parsed.model ?? 'stub';
    if (parsed.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      let i = 0;
      const tick = (): void => {
        if (res.destroyed) return;
        if (i < chunks) {
          res.write(sseChunk(model, `t${i}`, i === chunks - 1 ? 'length' : null));
          i++;
          setTimeout(tick, intervalMs);
        } else {
          res.end('data: [DONE]\n\n');
        }
      };
      tick();
      return;
    }
    let out: string;
    if (req.url?.startsWith('/v1/embeddings')) {
      out = JSON.stringify({ object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2, 0.3] }], model, usage: { prompt_tokens: 2, total_tokens: 2 } });
    } else if (req.url?.startsWith('/v1/chat/completions') || req.url?.startsWith('/v1/completions')) {
      out = chatCompletionJson(model);
    } else {
      out = JSON.stringify({ echo: req.url, model });
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  };
}

export async function startStubUpstream(handler: StubHandler = defaultStubHandler()): Promise<StubUpstream> {
  const requests: StubRequest[] = [];
  const clientAborts: string[] = [];
  const sockets = new Set<import('node:net').Socket>();
  const stub: StubUpstream = {
    url: '',
    port: 0,
    server: createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (d: Buffer) => parts.push(d));
      req.on('end', () => {
        const body = Buffer.concat(parts).toString('utf8');
        requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
        res.on('close', () => {
          if (!res.writableFinished) clientAborts.push(req.url ?? '');
        });
        stub.handler(req, res, body);
      });
    }),
    requests,
    clientAborts,
    handler,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        stub.server.close(() => resolve());
      }),
  };
  stub.server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => stub.server.listen(0, '127.0.0.1', resolve));
  const port = (stub.server.address() as AddressInfo).port;
  Object.assign(stub, { port, url: `http://127.0.0.1:${port}` });
  return stub;
}
