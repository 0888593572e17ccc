/**
 * What a pass looks at besides the nodes' observation (I/O, read-only): each model's memory need
 * (memory.ts: from the model file's header, read on a node or at its source) and which on-demand
 * replicas have requests in flight (their GET /slots).
 */
import type { ModelSpec, FleetSpec } from '../fleet-spec/types.js';
import { LlmgwError } from '../errors/catalogue.js';
import type { DownloadToken } from '../nodes/driver.js';
import type { DeviceNeed, MemoryEstimate, MemoryEstimator } from './memory.js';
import type { NodeFleet } from './node-fleet.js';
import type { ObservedNode } from './planner.js';
import type { ControllerState } from './state.js';
import type { InFlight } from './stops.js';
import { modelsInOrder } from './spec-order.js';
import { scales } from '../scale/range.js';

/** Each model's memory need (null: not known), why it is not known, and its device need (#24). */
export interface MemoryLook {
  readonly needs: Readonly<Record<string, number | null>>;
  readonly errors: Readonly<Record<string, string>>;
  /** devices (#24): device need of models whose profile offloads layers. */
  readonly devices: Readonly<Record<string, DeviceNeed>>;
}

/** The look last made for a spec: by which estimator, from which estimates (in the spec's model order). */
const lastLook = new WeakMap<FleetSpec, { readonly memory: MemoryEstimator; readonly estimates: readonly MemoryEstimate[]; readonly look: MemoryLook }>();

/**
 * Each model's estimate: those known without a read at once (most, once their headers were read:
 * no promise per model), the others read. When every estimate is the object the last look for this
 * spec was made from (unchanged: kept by the estimator), that look is answered again, not rebuilt.
 */
export async function estimateMemory(spec: FleetSpec, memory: MemoryEstimator, nodes: NodeFleet, downloadToken: (m: ModelSpec) => Promise<DownloadToken | undefined>): Promise<MemoryLook> {
  const models = modelsInOrder(spec);
  const estimates = new Array<MemoryEstimate>(models.length);
  const reads: Promise<void>[] = [];
  models.forEach((m, i) => {
    const profile = spec.profiles[m.profile]!;
    const known = memory.known(m, profile);
    if (known !== undefined) estimates[i] = known;
    else reads.push(memory.estimate(m, profile, () => nodes.rangeReaders(spec, m), async () => (await downloadToken(m))?.value ?? null).then((e) => void (estimates[i] = e)));
  });
  await Promise.all(reads);
  const last = lastLook.get(spec);
  if (last?.memory === memory && last.estimates.every((e, i) => e === estimates[i])) return last.look;
  const look = lookOf(models, estimates);
  lastLook.set(spec, { memory, estimates, look });
  return look;
}

function lookOf(models: readonly ModelSpec[], estimates: readonly MemoryEstimate[]): MemoryLook {
  const needs: Record<string, number | null> = {};
  const errors: Record<string, string> = {};
  const devices: Record<string, DeviceNeed> = {};
  models.forEach((m, i) => {
    const e = estimates[i]!;
    needs[m.name] = 'bytes' in e ? e.bytes : null;
    if ('bytes' in e && e.device) devices[m.name] = e.device; // devices (#24)
    if ('error' in e) errors[m.name] = e.error;
  });
  return { needs, errors, devices };
}

/**
 * What the replicas that may be stopped for idleness, room or scale-in have in flight (their /slots):
 * an on-demand replica with work is never stopped as idle or evicted whole; of a scaling model's
 * replicas, scale-in and an activation's room take those with fewest first (#42). Only ready replicas
 * not being stopped are asked; a replica whose /slots did not answer is left out (unknown).
 */
export async function replicasInFlight(spec: FleetSpec, observed: readonly ObservedNode[], stopping: readonly string[], inFlight: (endpoint: string) => Promise<InFlight>): Promise<ReadonlyMap<string, number>> {
  const stoppingIds = new Set(stopping);
  const asks = observed
    .flatMap((n) => (n.reachable ? n.replicas : []))
    .filter((r) => {
      const m = spec.models[r.model];
      return r.state === 'ready' && !stoppingIds.has(r.id) && m !== undefined && (m.scaling.mode === 'on_demand' || scales(m));
    });
  const out = new Map<string, number>();
  await Promise.all(
    asks.map(async (r) => {
      const n = await inFlight(r.endpoint);
      if (typeof n === 'number') out.set(r.id, n);
    }),
  );
  return out;
}

/** The replicas with requests in flight. */
export function busyOf(inFlight: ReadonlyMap<string, number>): ReadonlySet<string> {
  return new Set([...inFlight].flatMap(([id, n]) => (n > 0 ? [id] : [])));
}

/** The model's download token (token: names a secret), read when it is needed; undefined for none. */
export async function downloadTokenOf(m: ModelSpec, readSecret: ((name: string) => Promise<string>) | undefined): Promise<DownloadToken | undefined> {
  if (m.token === null) return undefined;
  if (!readSecret) throw new LlmgwError('SECRET_NOT_FOUND', `${m.file}: token: names secret '${m.token}', but this controller has no secrets dir`, { model: m.name, secret: m.token });
  return { secret: m.token, value: await readSecret(m.token) };
}

/**
 * The replicas a pass treats as stopping (pure): those whose stop ran when its look began, and those
 * whose stop runs now. A stop that ended during the look may have left its replica seen dead (its
 * process gone, its state not yet removed): without this the planner read that as a crash, stopped
 * the replica again as 'failed' and counted a failure toward parking (seen once in schedule-e2e).
 */
export function stoppingSince(atLook: ReadonlySet<string>, now: ReadonlySet<string>): ReadonlySet<string> {
  if (atLook.size === 0) return now;
  return new Set([...atLook, ...now]);
}
