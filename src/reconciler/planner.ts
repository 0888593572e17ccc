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
import { countNow } from '../scale/range.js';
import type { ObservedDevice } from './device-use.js';
import { placeWants } from './plan-place.js';
import { wantsOf } from './plan-wants.js';
import type { DeviceNeed } from './memory.js';
import type { GroupMember } from './replica-life.js';

export interface ObservedNode {
  readonly name: string;
  readonly reachable: boolean;
  /** Capacity as observed (total memory); null when never observed. */
  readonly memoryTotalBytes: number | null;
  /** The last good observation's replicas (for an unreachable node: the last known ones). */
  readonly replicas: readonly ReplicaObservation[];
  /** devices (#24): the devices the node's engines list (absent: none known). */
  readonly devices?: readonly ObservedDevice[];
  /** The engine versions installed on it ("llama-cpp@b6500") and each one's build (null: not recorded); absent: not observed. */
  readonly engines?: Readonly<Record<string, string | null>>;
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
  /** The hosts of the replicas that run as RPC groups (#40), by replica id: their memory is each host's share. */
  readonly groups?: ReadonlyMap<string, readonly GroupMember[]>;
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
  | { readonly kind: 'start'; readonly model: string; readonly node: string; readonly replicaId: string; readonly digest: string; readonly devices?: readonly string[]; readonly gpuLayers?: number | 'all'; readonly group?: readonly GroupMember[] }
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

/** What a pass knows of the replicas, by model; those being stopped apart (they only hold memory). */
export interface Seen {
  readonly byModel: ReadonlyMap<string, Located[]>;
  readonly stoppingByModel: ReadonlyMap<string, Located[]>;
  /** Starts in flight that no look shows alive yet, by model. */
  readonly inflightByModel: ReadonlyMap<string, InflightStart[]>;
  readonly inflightIds: ReadonlySet<string>;
}

/** A pass's output as its steps build it. */
export interface PlanDraft {
  readonly actions: Action[];
  readonly failures: ObservedFailure[];
  readonly desired: Record<string, number>;
  readonly unplaceable: Record<string, Unplaceable>;
  readonly drainStarted: string[];
  readonly waitingForRoom: string[];
  readonly short: Record<string, ShortOfRoom>;
}

/** A stop of this pass. */
export function stopIn(out: PlanDraft, model: string, l: Located, reason: StopReason): void {
  out.actions.push({ kind: 'stop', model, node: l.node, replicaId: l.r.id, reason });
}

/**
 * The pass's steps, each a function of the input and what the steps before it found: what is where
 * (seenOf), failed and removed replicas stopped (reap), what each model wants (plan-wants.ts), and
 * where its missing replicas go, or whom they evict (plan-place.ts).
 */
export function planPass(input: PlanInput): PlanOutput {
  const out: PlanDraft = { actions: [], failures: [], desired: {}, unplaceable: {}, drainStarted: [], waitingForRoom: [], short: {} };
  const seen = seenOf(input);
  reap(input, seen, out);
  const wants = wantsOf(input, seen, out);
  placeWants(input, seen, wants, out);
  return out;
}

/** Every replica the nodes show and every start in flight, by model (those being stopped apart: they only hold memory). */
export function seenOf(input: PlanInput): Seen {
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
  return { byModel, stoppingByModel, inflightByModel, inflightIds };
}

/** Failed replicas stopped (reachable nodes only) and counted unless a start reports them; replicas of models gone from the spec stopped. */
function reap(input: PlanInput, seen: Seen, out: PlanDraft): void {
  const { spec } = input;
  const { byModel, inflightIds } = seen;
  const stop = (model: string, l: Located, reason: StopReason): void => stopIn(out, model, l, reason);
  out.failures.push(...observedFailures(input));
  for (const [model, list] of byModel) {
    for (const l of list) if (l.r.state === 'failed' && l.reachable && !inflightIds.has(l.r.id)) stop(model, l, 'failed');
  }

  // Replicas of models that left the desired state.
  for (const [model, list] of byModel) {
    if (spec.models[model]) continue;
    for (const l of list) if (l.reachable && l.r.state !== 'failed') stop(model, l, 'removed');
  }
}
