/**
 * The action planner (pure): from desired state, observation, health and what is already in
 * flight, the actions of one pass. Level-triggered: a second pass over an unchanged world plans
 * nothing. Replicas on unreachable nodes are unknown — counted as present, never replaced or
 * stopped from a missing observation.
 */
import type { ReplicaObservation, ReplicaFailure } from '../nodes/driver.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { mayStart, type ModelHealth } from './health.js';
import type { PlacementNode, PlacementRequest, PlacementResult, Unplaceable } from './placement.js';
import { placeInOrder } from './place-order.js';
import type { PlannedRollout } from './rollout-life.js';
import { stablePlan, stableRank } from './stable-replicas.js';
import { avoidKey } from './state.js';
import { countNow, rangeNow, scales } from '../scale/range.js';
import { evictFor, optionalDevice } from './evict.js';
import { modelsInOrder } from './spec-order.js';
// --- devices (#24): the planner's only device hooks are marked "devices (#24)" ---
import { addDeviceUse, applyDeviceDelta, deviceRequestOf, placedDeviceBytes, placementDevices, type DeviceDelta, type ObservedDevice } from './device-use.js';
import type { DeviceNeed } from './memory.js';

export interface ObservedNode {
  readonly name: string;
  readonly reachable: boolean;
  /** Capacity as observed (total memory); null when never observed. */
  readonly memoryTotalBytes: number | null;
  /** The last good observation's replicas (for an unreachable node: the last known ones). */
  readonly replicas: readonly ReplicaObservation[];
  /** devices (#24): the devices the node's engines list (absent: none known). */
  readonly devices?: readonly ObservedDevice[];
  /** CPU cores the node shows (nproc); absent: not observed (the cores rule, #42). */
  readonly cpus?: number;
  /**
   * Epoch ms (controller clock) when the look these replicas come from began; absent: unknown (taken
   * as older than any start's outcome). A replica that was ready before it is in it, unless gone.
   */
  readonly lookedAt?: number;
}

export interface InflightStart {
  readonly replicaId: string;
  readonly model: string;
  readonly node: string;
  readonly digest: string;
}

export interface Demand {
  /** Epoch ms of the last request for the model (on-demand activity). */
  readonly lastRequestAt: number;
}

export interface PlanInput {
  readonly spec: FleetSpec;
  readonly nodes: readonly ObservedNode[];
  readonly health: Readonly<Record<string, ModelHealth>>;
  readonly inflightStarts: readonly InflightStart[];
  /**
   * Replica ids being stopped (stops.ts): not counted as serving, not stopped again — but their
   * memory is in use until their process is gone, and a rolling model starts its next replacement
   * only once its previous stop has finished.
   */
  readonly stopping: ReadonlySet<string>;
  /** Replica ids with requests in flight (llama-server's /slots): never stopped as idle, never evicted. */
  readonly busy?: ReadonlySet<string>;
  /** Requests in flight per replica (its /slots), where read: scale-in takes the one with fewest (#42). */
  readonly inFlight?: ReadonlyMap<string, number>;
  /** On-demand activity per model. */
  readonly demand: Readonly<Record<string, Demand>>;
  /** The count the record keeps for each model whose count follows its load (scale-life.ts), within its range. */
  readonly scaled?: Readonly<Record<string, number>>;
  /** Replica ids an operator asked to restart (replaced surge-first, like an outdated digest). */
  readonly restarts: ReadonlySet<string>;
  /** Replica id → epoch ms when it began draining because a restart had no room to surge. */
  readonly draining: Readonly<Record<string, number>>;
  /** Memory per replica of each model (override or estimate); missing/null = unknown. */
  readonly memory: Readonly<Record<string, number | null>>;
  /** devices (#24): the device need of models whose profile offloads layers. */
  readonly deviceNeeds?: Readonly<Record<string, DeviceNeed>>;
  /** Replica ids whose failure was already counted. */
  readonly accountedFailures: ReadonlySet<string>;
  /** "model@node" pairs to place elsewhere for now (the node failed the model's start). */
  readonly avoid?: ReadonlySet<string>;
  /**
   * Models whose new revision proves itself first (rollout-life.ts): their replicas of the stable
   * revision are kept as they are (never replaced while it runs), and `want` replicas of the new one
   * run beside them (a check replica, or none while the revision is held).
   */
  readonly rollouts?: Readonly<Record<string, PlannedRollout>>;
  /**
   * The fingerprint of the engine key this controller starts replicas with: a replica recorded with
   * another (the key was lost and made anew) refuses the router, so it is replaced like an outdated one.
   */
  readonly keyFingerprint?: string | null;
  readonly now: number;
  /** Makes a new replica id for a model (deterministic in tests). */
  readonly newReplicaId: (model: string, digest: string) => string;
}

export type StopReason = 'removed' | 'surplus' | 'idle' | 'replaced' | 'drained' | 'evicted' | 'failed' | 'orphan';

export type Action =
  | { readonly kind: 'start'; readonly model: string; readonly node: string; readonly replicaId: string; readonly digest: string; readonly devices?: readonly string[]; readonly gpuLayers?: number | 'all' }
  | { readonly kind: 'stop'; readonly model: string; readonly node: string; readonly replicaId: string; readonly reason: StopReason };

export interface ObservedFailure {
  readonly model: string;
  /** The definition the failed replica ran. */
  readonly digest: string;
  readonly replicaId: string;
  readonly node: string;
  readonly failure: ReplicaFailure;
}

export interface PlanOutput {
  readonly actions: readonly Action[];
  /** Replica failures seen in observation and not counted yet (crashes, deaths while away). */
  readonly failures: readonly ObservedFailure[];
  /** What each model should have now. */
  readonly desired: Readonly<Record<string, number>>;
  /** Models wanting a replica that fits nowhere, and why. */
  readonly unplaceable: Readonly<Record<string, Unplaceable>>;
  /** Replicas that started draining in this pass (no room to surge). */
  readonly drainStarted: readonly string[];
  /**
   * On-demand models that fit once a busy on-demand replica of another model is done (an eviction
   * never takes a replica with work in flight): they wait — not unplaceable — and a pass soon looks again.
   */
  readonly waitingForRoom: readonly string[];
  /** Models serving at their floor whose extra replicas (scaling) fit nowhere: short, never unplaceable. */
  readonly short?: Readonly<Record<string, ShortOfRoom>>;
}

/** A scaling model that wants more replicas than fit: how many it wants, how many it has or got, and placement's reason. */
export interface ShortOfRoom {
  readonly wants: number;
  readonly fit: number;
  readonly code: string;
  readonly reason: string;
}

export interface Located {
  readonly node: string;
  readonly reachable: boolean;
  readonly r: ReplicaObservation;
}

/** A replica recorded with no fingerprint (started before llmgw recorded one) is taken to match. */
export function keyMatches(r: Pick<ReplicaObservation, 'keyFingerprint'>, fingerprint: string | null | undefined): boolean {
  return !fingerprint || r.keyFingerprint === undefined || r.keyFingerprint === fingerprint;
}

/** What the model should have now (scale/range.ts countNow; `scaled`: the count its load decided). */
export function desiredNow(m: ModelSpec, demand: Demand | undefined, now: number, scaled?: number): number {
  return countNow(m, m.scaling.mode !== 'on_demand' || (demand !== undefined && now - demand.lastRequestAt < m.scaling.idleTimeoutMs), now, scaled);
}

/**
 * Replica failures the nodes show that nobody counted yet: crashes after ready, deaths while the
 * controller was away, unresponsive replicas (marked failed by liveness). A replica whose start is in
 * flight is left to the start, which reports its own outcome.
 */
export function observedFailures(input: Pick<PlanInput, 'spec' | 'nodes' | 'inflightStarts' | 'stopping' | 'accountedFailures'>): ObservedFailure[] {
  const inflight = new Set(input.inflightStarts.map((s) => s.replicaId));
  const out: ObservedFailure[] = [];
  for (const n of input.nodes) {
    if (!n.reachable) continue;
    for (const r of n.replicas) {
      if (r.state !== 'failed' || !r.failure || input.stopping.has(r.id) || inflight.has(r.id) || input.accountedFailures.has(r.id) || !input.spec.models[r.model]) continue;
      out.push({ model: r.model, digest: r.digest, replicaId: r.id, node: n.name, failure: r.failure });
    }
  }
  return out;
}

export function planPass(input: PlanInput): PlanOutput {
  const { spec, now } = input;
  const actions: Action[] = [];
  const failures: ObservedFailure[] = [];
  const desired: Record<string, number> = {};
  const unplaceable: Record<string, Unplaceable> = {};
  const drainStarted: string[] = [];
  const waitingForRoom: string[] = [];
  const short: Record<string, ShortOfRoom> = {};

  // Every replica we know of, by model (those being stopped apart: they only hold memory).
  const byModel = new Map<string, Located[]>();
  const stoppingByModel = new Map<string, Located[]>();
  for (const n of input.nodes) {
    for (const r of n.replicas) {
      if (input.stopping.has(r.id)) {
        if (r.state !== 'failed') stoppingByModel.set(r.model, [...(stoppingByModel.get(r.model) ?? []), { node: n.name, reachable: n.reachable, r }]);
        continue;
      }
      const list = byModel.get(r.model) ?? [];
      list.push({ node: n.name, reachable: n.reachable, r });
      byModel.set(r.model, list);
    }
  }
  // A start in flight counts until its outcome is applied, and a ready one until a look shows it
  // (liveness.ts). Where the node shows its replica alive, that replica stands for it; where the node
  // shows it failed (it died before the start reported), it is still one start in flight, never room
  // for another.
  const aliveIds = new Set([...byModel.values()].flat().filter((l) => l.r.state !== 'failed').map((l) => l.r.id));
  const inflightByModel = new Map<string, InflightStart[]>();
  for (const s of input.inflightStarts) {
    if (aliveIds.has(s.replicaId)) continue; // visible on the node already
    inflightByModel.set(s.model, [...(inflightByModel.get(s.model) ?? []), s]);
  }
  const inflightIds = new Set(input.inflightStarts.map((s) => s.replicaId));

  const stop = (model: string, l: Located, reason: StopReason): void => {
    actions.push({ kind: 'stop', model, node: l.node, replicaId: l.r.id, reason });
  };

  // Failed replicas: reap them (reachable nodes only); count a failure unless a start op reports it.
  failures.push(...observedFailures(input));
  for (const [model, list] of byModel) {
    for (const l of list) if (l.r.state === 'failed' && l.reachable && !inflightIds.has(l.r.id)) stop(model, l, 'failed');
  }

  // Replicas of models that left the desired state.
  for (const [model, list] of byModel) {
    if (spec.models[model]) continue;
    for (const l of list) if (l.reachable && l.r.state !== 'failed') stop(model, l, 'removed');
  }

  // Memory in use per node: every replica whose process lives (including in-flight starts, and
  // replicas being stopped: their memory is free only once their process is gone).
  const used = new Map<string, number>();
  const mem = (model: string): number => input.memory[model] ?? 0;
  for (const [model, list] of byModel) for (const l of list) if (l.r.state !== 'failed') used.set(l.node, (used.get(l.node) ?? 0) + mem(model));
  for (const [model, list] of stoppingByModel) for (const l of list) used.set(l.node, (used.get(l.node) ?? 0) + mem(model));
  for (const [model, list] of inflightByModel) for (const s of list) used.set(s.node, (used.get(s.node) ?? 0) + mem(model));

  interface Want {
    model: ModelSpec;
    count: number;
    existingOn: string[];
    surge: boolean;
    outdated: Located[];
    /** A replica of the model is being stopped: room comes when it is gone (wait, not unplaceable). */
    roomComing: boolean;
    /** Replicas it serves with anyway (its range's min, 1 on demand): those above are extras (scaling); null: none are. */
    floor: number | null;
    /** Of `count`, those below the floor (all of them when the model does not scale). */
    floorCount: number;
  }
  const busy = input.busy ?? new Set<string>();
  const wants: Want[] = [];
  for (const m of modelsInOrder(spec)) {
    const rollout = input.rollouts?.[m.name];
    const asked = desiredNow(m, input.demand[m.name], now, input.scaled?.[m.name]);
    desired[m.name] = asked;
    // a rollout: the new revision's replicas are what it wants of the current digest
    const want = rollout ? rollout.want : asked;
    const located = byModel.get(m.name);
    const inflight = inflightByModel.get(m.name) ?? [];
    // a rollout's stable replicas starting again (stable-replicas.ts) are not the current revision's
    const pending = rollout ? inflight.filter((p) => p.digest !== rollout.stable) : inflight;
    // nothing of it anywhere and nothing wanted (most on-demand models): nothing to plan
    if (want === 0 && located === undefined && inflight.length === 0) continue;
    const h = input.health[m.name];
    const alive = (located ?? []).filter((l) => l.r.state !== 'failed');
    const isCurrent = (l: Located): boolean => l.r.digest === m.digest && !input.restarts.has(l.r.id) && keyMatches(l.r, input.keyFingerprint);
    const current = alive.filter(isCurrent);
    const outdated = alive.filter((l) => !isCurrent(l));
    const currentReady = current.filter((l) => l.r.state === 'ready' && l.reachable).length;
    const currentStarting = current.filter((l) => l.r.state === 'starting').length + pending.length;
    const haveCurrent = current.length + pending.length;

    // Too many current replicas: stop the extras (starting, then idle ones, newest first: the oldest is warmest).
    if (haveCurrent > want) {
      const inUse = (l: Located): number => input.inFlight?.get(l.r.id) ?? (busy.has(l.r.id) ? 1 : 0);
      const extra = [...current]
        .filter((l) => l.reachable)
        .sort((a, b) => (a.r.state === 'ready' ? 1 : 0) - (b.r.state === 'ready' ? 1 : 0) || inUse(a) - inUse(b) || b.r.startedAt - a.r.startedAt)
        .slice(0, haveCurrent - want);
      const reason: StopReason = m.scaling.mode === 'on_demand' && want === 0 ? 'idle' : 'surplus';
      // A request in flight is activity: an idle replica serving one is not stopped yet.
      for (const l of extra) if (!(reason === 'idle' && busy.has(l.r.id))) stop(m.name, l, reason);
    }

    // Outdated replicas (new digest or a restart): keep as many as still needed to serve — during a
    // rollout, every replica of the stable revision (and only those) until it is promoted.
    const stable = rollout ? stablePlan({ stable: outdated.filter((l) => l.r.digest === rollout.stable), restarts: input.restarts, pending: inflight.length - pending.length, asked: Math.max(0, asked - rollout.want), canStart: rollout.stableModel !== undefined }) : null;
    if (outdated.length) {
      const rank = (l: Located): number => (rollout ? stableRank(l, rollout.stable, input.restarts) : 0);
      const byAge = [...outdated].sort((a, b) => rank(a) - rank(b) || a.r.startedAt - b.r.startedAt || a.r.id.localeCompare(b.r.id));
      const keep = stable ? stable.keep : Math.max(0, want - currentReady);
      const toStop = byAge.slice(0, Math.max(0, byAge.length - keep));
      for (const l of toStop) if (l.reachable) stop(m.name, l, 'replaced');
      // A drain that has run its grace: stop it now, its room goes to the new replica.
      for (const l of byAge.slice(toStop.length)) {
        const since = input.draining[l.r.id];
        if (since !== undefined && now - since >= spec.settings.drainGraceMs && l.reachable) stop(m.name, l, 'drained');
      }
    }

    // a stable replica missing while the rollout is unpromoted: started again from the stable definition
    if (stable?.start && rollout?.stableModel && h && mayStart(h, now)) {
      const roomComing = (stoppingByModel.get(m.name) ?? []).length > 0 || actions.some((a) => a.kind === 'stop' && a.model === m.name);
      wants.push({ model: rollout.stableModel, count: 1, floorCount: 1, existingOn: alive.map((l) => l.node), surge: false, outdated: [], roomComing, floor: null });
    }

    const missing = want - haveCurrent;
    if (missing <= 0 || !h || !mayStart(h, now)) continue;
    // One start at a time while failing or rolling; all at once otherwise. A rolling model's next
    // replacement waits for the previous replaced replica's stop to finish (never more than
    // replicas + 1 processes): a stop of this pass or one still running holds it.
    const stoppingHere = (stoppingByModel.get(m.name) ?? []).length > 0 || actions.some((a) => a.kind === 'stop' && a.model === m.name && a.reason !== 'failed');
    const rolling = outdated.length > 0 || stoppingHere;
    if ((h.consecutiveFailures > 0 || rolling) && currentStarting > 0) continue;
    if (stoppingHere) continue;
    const count = h.consecutiveFailures > 0 || rolling ? 1 : missing;
    const floor = scales(m) && !rollout ? (m.scaling.mode === 'on_demand' ? 1 : rangeNow(m, now).min) : null;
    wants.push({
      model: m,
      count,
      existingOn: [...current.map((l) => l.node), ...pending.map((p) => p.node)],
      surge: outdated.length > 0,
      outdated,
      roomComing: stoppingHere,
      floor,
      // what is missing below the floor first; the rest are extras (placed last, under the cores rule)
      floorCount: floor === null ? count : Math.min(count, Math.max(0, floor - haveCurrent)),
    });
  }

  // This pass's stops free no room for its placement: a replica's memory is in use until its
  // process is gone (the stop finishes in the background, and the pass after it places).
  const stoppedIds = new Set(actions.filter((a) => a.kind === 'stop').map((a) => a.replicaId));
  const evictionsRunning = [...stoppingByModel.values()].flat().length > 0;

  // devices (#24): device room of the replicas on the node — a stopping one's until its process is gone, like its RAM
  const devices = placementDevices({
    spec, needs: input.deviceNeeds, pending: [...inflightByModel.values()].flat(),
    nodes: input.nodes.map((n) => ({ name: n.name, devices: n.devices ?? [], replicas: n.replicas.filter((r) => r.state !== 'failed').map((r) => ({ model: r.model, r })) })),
  });
  const devicesPlaced: DeviceDelta = new Map(); // devices (#24): what this pass's placements take
  const placementNodes = (extraFree: ReadonlyMap<string, number> = new Map(), devicesFreed: DeviceDelta = new Map()): PlacementNode[] =>
    input.nodes.map((n) => {
      const ns = spec.nodes[n.name];
      return {
        name: n.name,
        labels: ns?.labels ?? {},
        capacityBytes: ns?.capacity.memoryBytes ?? n.memoryTotalBytes,
        usedBytes: (used.get(n.name) ?? 0) - (extraFree.get(n.name) ?? 0),
        reachable: n.reachable && ns !== undefined,
        cores: ns?.capacity.cpus ?? n.cpus ?? null,
        devices: applyDeviceDelta(devices.get(n.name) ?? [], devicesPlaced.get(n.name), devicesFreed.get(n.name)),
      };
    });
  const avoided = (model: string): string[] => input.nodes.map((n) => n.name).filter((n) => input.avoid?.has(avoidKey(model, n)));
  const requests: PlacementRequest[] = wants.map((w) => ({
    model: w.model.name,
    count: w.floorCount,
    memoryBytes: input.memory[w.model.name] ?? null,
    nodeSelector: w.model.nodeSelector,
    existingOn: w.existingOn,
    avoidNodes: avoided(w.model.name),
    ...optionalDevice(deviceRequestOf(spec, w.model.name, input.deviceNeeds)),
  }));
  // What this pass's placements take, so an eviction below places against it, not against the room before them.
  const placedUse = new Map<string, number>();
  const take = (model: string, nodes: readonly string[]): void => {
    for (const n of nodes) placedUse.set(n, (placedUse.get(n) ?? 0) + mem(model));
  };
  // devices (#24): what each placement takes on its devices
  const placeDevices = (r: PlacementResult): void =>
    r.nodes.forEach((n, k) => addDeviceUse(devicesPlaced, n, placedDeviceBytes(spec, r.model, input.deviceNeeds, r.devices?.[k]), 1));
  // floors first (always-on together, then on-demand by recency), extras last (place-order.ts)
  const ordered = placeInOrder(
    wants.map((w, i) => ({
      onDemand: w.model.scaling.mode === 'on_demand',
      recency: input.demand[w.model.name]?.lastRequestAt ?? 0,
      floor: requests[i]!,
      extra: w.count > w.floorCount ? { ...requests[i]!, count: w.count - w.floorCount, cores: { threads: spec.profiles[w.model.profile]?.threads ?? null } } : null,
    })),
    () => placementNodes(new Map([...placedUse].map(([n, b]) => [n, -b]))),
    spec.settings.placementReserveBytes,
    (r) => {
      take(r.model, r.nodes);
      placeDevices(r); // devices (#24)
    },
  );
  const results = ordered.map((o) => o.result);
  const roomAfterPlacements = (freed: ReadonlyMap<string, number>, devicesFreed?: DeviceDelta): PlacementNode[] =>
    placementNodes(new Map(input.nodes.map((n) => [n.name, (freed.get(n.name) ?? 0) - (placedUse.get(n.name) ?? 0)])), devicesFreed);

  for (const [i, r] of results.entries()) {
    const w = wants[i]!;
    const nodes = r.nodes;
    // extra replicas (scaling) that fit nowhere: the model serves at its floor, evicts nobody and is not unplaceable
    const extraShort = ordered[i]!.extraUnplaceable;
    if (extraShort) short[w.model.name] = { wants: desired[w.model.name] ?? 0, fit: w.existingOn.length + nodes.length, code: extraShort.code, reason: extraShort.reason };
    if (r.unplaceable && nodes.length === 0) {
      // Surge restart without room: drain the oldest outdated replica, then take its place.
      if (w.surge) {
        const oldest = [...w.outdated].sort((a, b) => a.r.startedAt - b.r.startedAt)[0];
        if (oldest && input.draining[oldest.r.id] === undefined && !stoppedIds.has(oldest.r.id)) drainStarted.push(oldest.r.id);
        continue;
      }
      if (w.roomComing) continue;
      // An on-demand model may take the room of idle on-demand replicas (nothing in flight), least
      // recently used first. The victims drain and stop; the newcomer starts in the pass after
      // (their memory is in use until then), and waits meanwhile — so does any model while some
      // replica's stop is still running (its room may be the one it needs).
      if (w.model.scaling.mode === 'on_demand') {
        if (evictionsRunning) continue;
        const evicted = evictFor({ ...w, count: w.floorCount, avoidNodes: avoided(w.model.name) }, input, byModel, stoppedIds, roomAfterPlacements);
        if (evicted) {
          for (const l of evicted.stop) {
            stop(l.model, l.located, 'evicted');
            stoppedIds.add(l.located.r.id);
          }
          continue;
        }
        // room held by replicas with work in flight: the newcomer waits for it to end
        if (evictFor({ ...w, count: w.floorCount, avoidNodes: avoided(w.model.name) }, input, byModel, stoppedIds, roomAfterPlacements, true)) {
          waitingForRoom.push(w.model.name);
          continue;
        }
      }
      if (nodes.length === 0) {
        unplaceable[w.model.name] = r.unplaceable;
        continue;
      }
    }
    for (const [k, node] of nodes.entries()) {
      const dev = r.devices?.[k]; // devices (#24)
      const onDevice = dev && dev.devices.length > 0 ? { devices: dev.devices, gpuLayers: dev.gpuLayers } : {};
      actions.push({ kind: 'start', model: w.model.name, node, replicaId: input.newReplicaId(w.model.name, w.model.digest), digest: w.model.digest, ...onDevice });
    }
  }
  return { actions, failures, desired, unplaceable, drainStarted, waitingForRoom, short };
}
