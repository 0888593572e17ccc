/**
 * Whether the fleet after a merge has room for a scaling model's max (#42): its replicas after the
 * merge plus as many more as fit in the room left on the nodes it may run on. Where fewer fit, the
 * model still serves (its extra replicas are short, never unplaceable): the plan says so, as a warning.
 */
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { formatBytes } from '../fleet-spec/units.js';
import { scales } from '../scale/range.js';
import type { Simulation } from './simulate.js';

/** The most replicas the model may run at any time (its range's max over its schedule). */
export function maxReplicasOf(m: ModelSpec): number {
  const s = m.scaling;
  if (s.mode === 'on_demand') return s.maxReplicas;
  return Math.max(s.max ?? s.replicas, ...(s.schedule?.entries ?? []).map((e) => e.max ?? e.replicas));
}

/** The sentence when the fleet has room for fewer than the model's max; null when it has room (or it does not scale, or its need is unknown). */
export function roomForMax(m: ModelSpec, head: FleetSpec, sim: Simulation, need: number | null): string | null {
  if (!scales(m) || need === null || need <= 0) return null;
  const max = maxReplicasOf(m);
  const o = sim.models[m.name];
  const have = o ? Math.max(0, o.before.length - o.stops.length) + o.starts.length : 0;
  const threads = head.profiles[m.profile]?.threads ?? null;
  let more = 0;
  let byMemory = 0;
  for (const n of sim.nodes) {
    const ns = head.nodes[n.name];
    const labels = ns?.labels ?? {};
    if (!n.reachable || n.roomBytes === null || !Object.entries(m.nodeSelector).every(([k, v]) => labels[k] === v)) continue;
    const memoryMore = Math.floor(Math.max(0, n.roomBytes - n.usedAfter) / need);
    byMemory += memoryMore;
    more += Math.min(memoryMore, coresMore(threads, ns?.capacity.cpus ?? null, o ? onNode(o, n.name) : 0));
  }
  const fit = have + more;
  if (fit >= max) return null;
  // the cores rule held it below what the memory allows: say so (docs/scaling.md)
  const each = have + byMemory > fit ? `${formatBytes(need)} and ${threads === null ? 'every core' : `${threads} thread${threads === 1 ? '' : 's'}`} each, by the nodes' declared cpus` : `${formatBytes(need)} each`;
  return `warning: the fleet has room for ${fit} of its max ${max} replicas (${each}): under load it serves with those, short of the rest`;
}

/** The model's replicas on a node after the merge. */
function onNode(o: Simulation['models'][string], node: string): number {
  const count = (list: readonly string[]): number => list.filter((x) => x === node).length;
  return Math.max(0, count(o.before) - o.stops.filter((s) => s.node === node).length) + count(o.starts);
}

/** More replicas a node's declared cores take beside `have` (the cores rule, placement.ts coresAllow); unknown cores: no bound. */
function coresMore(threads: number | null, cores: number | null, have: number): number {
  if (cores === null || !(cores > 0)) return Infinity;
  const t = threads !== null && threads > 0 ? threads : cores;
  return Math.max(0, Math.floor(cores / t) - have);
}
