/**
 * A test implementation of the router's `FleetView` (src/reconciler/view.ts): models, phases and
 * ready replicas set by the test, a scriptable `demand()`, `waitReady()` woken by `setReady()`, and
 * call counters. Replicas are whatever endpoints the test points at: real llama-server processes or
 * a stub upstream (stub-upstream.ts).
 */
import { createHash } from 'node:crypto';
import type { ReasonRef } from '../../src/errors/catalogue.js';
import type { Unplaceable } from '../../src/reconciler/placement.js';
import type { DemandResult, FleetView, ModelPhase, ModelView, ReplicaView } from '../../src/reconciler/view.js';
import type { AccessKeySpec, FleetSettings, KeyLimits, FleetSpec, ModelScaling, ModelSpec, ProfileSpec, QueueSpec, Routing } from '../../src/fleet-spec/types.js';
import { modelView } from './views.js';

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
  /** access/keys.yaml's `trusted:` (default false: the router takes the prompt-cache figures out of its answers). */
  readonly trusted?: boolean;
  /** access/keys.yaml's `isolate_cache:`. */
  readonly isolateCache?: boolean;
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
      rollout: null,
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
    trusted: k.trusted ?? false,
    isolateCache: k.isolateCache ?? false,
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
    return modelView(spec, {
      phase: s.phase,
      desired: spec.scaling.mode === 'replicas' ? spec.scaling.replicas : s.ready.length,
      ready: s.ready.length,
      replicas: s.ready,
      consecutiveFailures: s.consecutiveFailures,
      lastError: s.lastError,
      parked: parkedView(s.parked),
      unplaceable: unplaceableView(s.unplaceable),
      nextAttemptAt: s.nextAttemptAt === null ? null : Date.parse(s.nextAttemptAt),
    });
  }

  readyReplicas(model: string): readonly ReplicaView[] {
    this.calls.readyReplicas++;
    return this.states.get(model)?.ready ?? [];
  }

  async demand(model: string, opts?: { readonly timeoutMs?: number }): Promise<DemandResult> {
    this.calls.demand.push(model);
    this.demandTimeouts.push(opts?.timeoutMs);
    if (this.demandDelayMs > 0) await new Promise((r) => setTimeout(r, this.demandDelayMs)); // deliberate: the fleet's simulated latency
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
