/**
 * The nodes as the controller sees them (I/O): one driver per node (re-made when its spec changes),
 * and the last observation of each. An unreachable node keeps its last good observation, marked
 * unreachable: its replicas are unknown, never gone.
 */
import type { Logger } from 'pino';
import { LlmgwError, reasonOf } from '../errors/catalogue.js';
import type { NodeDriver, NodeObservation } from '../nodes/driver.js';
import type { EngineVersionSpec, FleetSpec, ModelSpec, NodeSpec } from '../fleet-spec/types.js';
import type { RangeReader } from './memory.js';
import { selectorMatches } from './placement.js';
import type { NodeFence, Supersede } from './ownership.js';
import { orphanWorkers, withGroupHealth } from './group-health.js';
import type { GroupMember } from './replica-life.js';
import type { ObservedNode } from './planner.js';
import type { NodeState } from './summarize.js';

export async function mapLimit<T>(items: readonly T[], limit: number, fn: (t: T) => Promise<void>): Promise<void> {
  let i = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (i < items.length) await fn(items[i++]!);
  });
  await Promise.all(workers);
}

function withTimeout<T>(p: Promise<T>, ms: number, node: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new LlmgwError('NODE_TIMEOUT', `observing node ${node} took longer than ${ms} ms`, { node })), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** A node's owner record its fence names to take over (fence.ts), as the driver's fence asks for it. */
export type SupersedeOf = () => { readonly epoch: number; readonly seq: number } | undefined;

/** The spec's models whose profile offloads layers, with their engine version (once per spec). */
const gpuModelsOf = new WeakMap<FleetSpec, readonly { readonly m: ModelSpec; readonly v: EngineVersionSpec }[]>();
function gpuModels(spec: FleetSpec): readonly { readonly m: ModelSpec; readonly v: EngineVersionSpec }[] {
  let out = gpuModelsOf.get(spec);
  if (out !== undefined) return out;
  out = Object.values(spec.models).flatMap((m) => {
    const p = spec.profiles[m.profile];
    const v = p && spec.engines[p.engine]?.versions[p.engineVersion];
    // a GPU profile (its engine lists the node's devices), or a model that may run as an RPC group (#40: its hosts' builds)
    const ahead = (p?.gpuLayers != null && p.gpuLayers !== 0) || m.placement?.spread === 'rpc';
    return !p || !v || !ahead ? [] : [{ m, v }];
  });
  gpuModelsOf.set(spec, out);
  return out;
}

export class NodeFleet {
  private readonly drivers = new Map<string, { fingerprint: string; driver: NodeDriver }>();
  /** Owner records above etcd's revision to take over, by node (the last decision's; ownership.ts). */
  private superseding = new Map<string, Supersede>();
  /** The last look at each node. */
  readonly states = new Map<string, NodeState>();
  /** Replicas being warmed before they take traffic (warm-up.ts): a look shows them starting until released. */
  private readonly warming = new Set<string>();
  /** Those of them the last look saw ready (shown starting): shown ready again when released. */
  private readonly heldReady = new Set<string>();

  constructor(
    private readonly driverFor: (node: NodeSpec, supersede: SupersedeOf) => NodeDriver,
    /** clock: the controller's wall clock, for when each look began (the record's times are on it). */
    private readonly opts: { readonly concurrency: number; readonly observeTimeoutMs: number; readonly clock: () => number },
  ) {}

  driver(n: NodeSpec): NodeDriver {
    const fingerprint = JSON.stringify(n);
    const have = this.drivers.get(n.name);
    if (have && have.fingerprint === fingerprint) return have.driver;
    if (have) void have.driver.close().catch(() => undefined);
    const driver = this.driverFor(n, () => {
      const s = this.superseding.get(n.name);
      return s && { epoch: s.epoch, seq: s.seq };
    });
    this.drivers.set(n.name, { fingerprint, driver });
    return driver;
  }

  /**
   * One look at every node of the spec (nodes that left it are forgotten). `groups`: the record's RPC
   * groups (#40), whose head a look shows failed once a worker is gone (group-health.ts).
   */
  async observe(spec: FleetSpec, log: Logger, groups: ReadonlyMap<string, readonly GroupMember[]> = new Map()): Promise<void> {
    for (const name of [...this.drivers.keys()]) {
      if (spec.nodes[name]) continue;
      void this.drivers.get(name)?.driver.close().catch(() => undefined);
      this.drivers.delete(name);
      this.states.delete(name);
    }
    await mapLimit(Object.values(spec.nodes), this.opts.concurrency, async (n) => {
      // Before the look is asked for: whatever was on the node by then is in it (liveness.ts settles ready starts by it).
      const lookedAt = this.opts.clock();
      const prev = this.states.get(n.name);
      try {
        const obs = heldBack(await withTimeout(this.driver(n).observe(), this.opts.observeTimeoutMs, n.name), this.warming, this.heldReady);
        if (prev && !prev.reachable) log.info({ node: n.name }, 'node reachable again');
        this.states.set(n.name, { reachable: true, error: null, obs, lookedAt, installFailures: prev?.installFailures ?? {} });
      } catch (e) {
        const error = reasonOf(e);
        if (!prev || prev.reachable || prev.error?.message !== error.message) log.warn({ node: n.name, code: error.code, reason: error.message }, 'node unreachable: its replicas are unknown');
        this.states.set(n.name, { reachable: false, error, obs: prev?.obs ?? null, lookedAt: prev?.lookedAt ?? null, installFailures: prev?.installFailures ?? {} });
      }
    });
    const failedGroups = groups.size > 0 ? withGroupHealth(this.states, groups) : null;
    if (failedGroups) for (const [name, ns] of failedGroups) if (this.states.get(name) !== ns) this.states.set(name, ns);
  }

  /**
   * A replica's warm-up begins (`on`) or ends: while it runs, every look (and the last one) shows the
   * replica starting though its /health is 200, so no pass counts it ready (a surge's old replica
   * keeps serving) and no snapshot offers it to routers; at its end the last look shows it ready again.
   */
  warmingUp(id: string, on: boolean): void {
    if (on) this.warming.add(id);
    else this.warming.delete(id);
    const held = this.heldReady.delete(id);
    for (const [name, ns] of this.states) {
      const r = ns.obs?.replicas.find((x) => x.id === id);
      if (r === undefined || ns.obs === null) continue;
      if (on ? r.state !== 'ready' : !held || r.state !== 'starting') continue;
      if (on) this.heldReady.add(id);
      const state = on ? ('starting' as const) : ('ready' as const);
      this.states.set(name, { ...ns, obs: { ...ns.obs, replicas: ns.obs.replicas.map((x) => (x.id === id ? { ...x, state } : x)) } });
    }
  }

  /** Orphaned RPC workers being stopped (node|id): one stop each at a time. */
  private readonly reaping = new Set<string>();

  /** The RPC workers of no group in the record (group-health.ts orphanWorkers) stopped in the background. */
  reapOrphanWorkers(spec: FleetSpec, replicas: Parameters<typeof orphanWorkers>[1], log: Logger): void {
    for (const { node, worker } of orphanWorkers(this.states, replicas)) {
      const n = spec.nodes[node];
      const key = `${node}|${worker}`;
      if (!n || this.reaping.has(key)) continue;
      this.reaping.add(key);
      log.info({ node, worker }, 'stopping an rpc worker of no group');
      void (this.driver(n).stopRpcWorker?.(worker, 0) ?? Promise.resolve()).then(
        () => this.reaping.delete(key),
        (e: unknown) => {
          this.reaping.delete(key);
          const r = reasonOf(e);
          log.warn({ node, worker, code: r.code, reason: r.message }, 'stopping an rpc worker of no group failed; tried again next pass');
        },
      );
    }
  }

  private readonly deviceInstalls = new Set<string>();

  /**
   * devices (#24): a node's devices are what its installed engines list, so a GPU profile's engine
   * (and the engine of a model that may run as an RPC group, #40: a group forms on nodes whose build
   * of it is known) is installed ahead of placement on every reachable node its models may use (the selector
   * matches) that lacks it; `onInstalled` (a new pass) runs when one finishes. Until then the node's
   * devices are unknown and placement finds no device there.
   */
  prepareDeviceEngines(spec: FleetSpec, log: Logger, onInstalled: () => void): void {
    for (const { m, v } of gpuModels(spec)) {
      for (const n of Object.values(spec.nodes)) {
        const ns = this.states.get(n.name);
        if (!ns?.reachable || !ns.obs || !selectorMatches(m.nodeSelector, n.labels)) continue;
        if (ns.obs.engines.some((e) => e.engine === v.engine && e.version === v.version)) continue;
        const key = `${n.name}|${v.engine}@${v.version}`;
        if (this.deviceInstalls.has(key)) continue;
        this.deviceInstalls.add(key);
        log.info({ node: n.name, engine: v.engine, version: v.version, model: m.name }, m.placement?.spread === 'rpc' ? 'installing the engine of a model that may run as an RPC group, ahead of its placement' : 'installing a GPU profile\'s engine to list the node\'s devices');
        void this.driver(n).ensureEngine(v).then(
          () => {
            this.deviceInstalls.delete(key);
            onInstalled();
          },
          (e: unknown) => {
            const r = reasonOf(e);
            log.warn({ node: n.name, engine: v.engine, version: v.version, code: r.code, reason: r.message }, 'engine install for device listing failed: tried again in a minute');
            setTimeout(() => this.deviceInstalls.delete(key), 60_000).unref();
          },
        );
      }
    }
  }

  /** The last observation of every node in the spec, in the planner's terms. */
  observed(spec: FleetSpec): ObservedNode[] {
    return Object.values(spec.nodes).map((n) => {
      const ns = this.states.get(n.name);
      return {
        name: n.name, reachable: ns?.reachable ?? false, memoryTotalBytes: ns?.obs?.memory.totalBytes ?? null, replicas: ns?.obs?.replicas ?? [],
        devices: (ns?.obs?.devices ?? []).map((d) => ({ name: d.name, totalBytes: d.totalBytes })),
        ...(ns?.obs ? { engines: enginesOf(ns.obs) } : {}),
        ...(ns?.obs?.cpus ? { cpus: ns.obs.cpus } : {}),
        ...(ns?.lookedAt != null ? { lookedAt: ns.lookedAt } : {}),
      };
    });
  }

  /** The records the drivers' fences name to take over from now (replacing the last decision's). */
  supersede(list: readonly Supersede[]): void {
    this.superseding = new Map(list.map((s) => [s.node, s]));
  }

  /** What each node reached this pass says about who owns it (ownership.ts). */
  fences(spec: FleetSpec): NodeFence[] {
    return Object.values(spec.nodes).map((n) => {
      const ns = this.states.get(n.name);
      return { node: n.name, fence: ns?.reachable ? ns.obs?.fence : undefined };
    });
  }

  /** The reachable nodes a model may run on, to read its file:// source's header where it is. */
  rangeReaders(spec: FleetSpec, m: ModelSpec): RangeReader[] {
    return Object.values(spec.nodes)
      .filter((n) => this.states.get(n.name)?.reachable === true && selectorMatches(m.nodeSelector, n.labels))
      .map((n) => {
        const d = this.driver(n);
        return { where: n.name, readFileRange: (path, offset, length) => d.readFileRange(path, offset, length) };
      });
  }

  /** The model of each replica the nodes show. */
  modelOf(): Map<string, string> {
    const out = new Map<string, string>();
    for (const ns of this.states.values()) for (const r of ns.obs?.replicas ?? []) out.set(r.id, r.model);
    return out;
  }

  /** A stopped replica leaves the last observation at once, so nothing routes to it until the next look. */
  forgetReplica(node: string, replicaId: string): void {
    const ns = this.states.get(node);
    if (!ns?.obs) return;
    this.states.set(node, { ...ns, obs: { ...ns.obs, replicas: ns.obs.replicas.filter((r) => r.id !== replicaId) } });
  }

  engineInstallFailed(node: string, engine: string): void {
    const ns = this.states.get(node);
    if (!ns) return;
    this.states.set(node, { ...ns, installFailures: { ...ns.installFailures, [engine]: (ns.installFailures[engine] ?? 0) + 1 } });
  }

  async close(): Promise<void> {
    await Promise.all([...this.drivers.values()].map((d) => d.driver.close().catch(() => undefined)));
  }
}

/**
 * An observation with the replicas being warmed up shown starting (NodeFleet.warmingUp); `heldReady`
 * follows which of them it saw ready (a replica that died meanwhile is not shown ready at release).
 */
export function heldBack(obs: NodeObservation, warming: ReadonlySet<string>, heldReady: Set<string>): NodeObservation {
  if (warming.size === 0) return obs;
  for (const r of obs.replicas) {
    if (!warming.has(r.id)) continue;
    if (r.state === 'ready') heldReady.add(r.id);
    else heldReady.delete(r.id);
  }
  if (!obs.replicas.some((r) => r.state === 'ready' && warming.has(r.id))) return obs;
  return { ...obs, replicas: obs.replicas.map((r) => (r.state === 'ready' && warming.has(r.id) ? { ...r, state: 'starting' as const } : r)) };
}

/** The engine versions a look found installed, with their builds (by observation: one object each). */
const enginesOfObs = new WeakMap<NodeObservation, Readonly<Record<string, string | null>>>();
function enginesOf(obs: NodeObservation): Readonly<Record<string, string | null>> {
  let out = enginesOfObs.get(obs);
  if (out === undefined) enginesOfObs.set(obs, (out = Object.fromEntries(obs.engines.map((e) => [`${e.engine}@${e.version}`, e.build ?? null]))));
  return out;
}
