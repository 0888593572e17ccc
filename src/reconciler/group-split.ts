/**
 * An RPC group's layers at its start (pure, #40): the head keeps the model's first layers and the
 * workers take the last ones, each host a count in proportion to its share of the memory placement
 * gave it (the shares in the record), as llama.cpp offloads from the end: `-ngl` (the workers'
 * layers and the output layer, which counts as the first of them) and `-ts` (their split among the
 * workers, in --rpc order). Every worker takes one layer at least; with the layers unknown, every
 * layer goes to the workers.
 */
import type { GroupMember } from './replica-life.js';

export interface GroupLayerSplit {
  /** -ngl for the head. */
  readonly gpuLayers: number | 'all';
  /** Each worker's layers, in the group's order (null: the layers are not known). */
  readonly split: readonly number[] | null;
  /** The head's own layers (null: not known). */
  readonly headLayers: number | null;
}

export function groupLayerSplit(group: readonly GroupMember[], layers: number | null): GroupLayerSplit {
  const workers = group.filter((h) => h.role === 'worker');
  if (layers === null || layers < group.length || workers.length === 0) return { gpuLayers: 'all', split: null, headLayers: null };
  const total = group.reduce((s, h) => s + h.bytes, 0);
  if (total <= 0) return { gpuLayers: 'all', split: null, headLayers: null };
  // largest remainders: each host's exact share, rounded down, the layers left to the largest fractions
  const exact = group.map((h) => (layers * h.bytes) / total);
  const counts = exact.map((x) => Math.floor(x));
  const order = exact.map((x, i) => ({ i, f: x - Math.floor(x) })).sort((a, b) => b.f - a.f || a.i - b.i);
  for (let left = layers - counts.reduce((s, c) => s + c, 0), k = 0; left > 0; left--, k++) counts[order[k % order.length]!.i]!++;
  // a worker holds one layer at least (taken from the host with the most)
  for (let i = 1; i < counts.length; i++) {
    while (counts[i]! < 1) {
      const most = counts.indexOf(Math.max(...counts));
      counts[most]!--;
      counts[i]!++;
    }
  }
  const split = counts.slice(1);
  const offloaded = split.reduce((s, c) => s + c, 0);
  return { gpuLayers: offloaded >= layers ? 'all' : offloaded + 1, split, headLayers: counts[0]! };
}
