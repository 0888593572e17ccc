/**
 * A spec's models and nodes in name order (localeCompare), sorted once per spec: a spec's maps are
 * immutable for its revision, so every pass over an unchanged spec reuses the order (sorting 10,000
 * names with localeCompare took about 10 ms a pass, twice).
 */
import type { FleetSpec, ModelSpec, NodeSpec } from '../fleet-spec/types.js';

const byName = (a: { readonly name: string }, b: { readonly name: string }): number => a.name.localeCompare(b.name);

function sortedOnce<T extends { readonly name: string }>(cache: WeakMap<object, readonly T[]>, rec: Readonly<Record<string, T>>): readonly T[] {
  let out = cache.get(rec);
  if (out === undefined) cache.set(rec, (out = Object.values(rec).sort(byName)));
  return out;
}

const models = new WeakMap<object, readonly ModelSpec[]>();
const nodes = new WeakMap<object, readonly NodeSpec[]>();

/** The spec's models by name. */
export function modelsInOrder(spec: Pick<FleetSpec, 'models'>): readonly ModelSpec[] {
  return sortedOnce(models, spec.models);
}

/** The spec's nodes by name. */
export function nodesInOrder(spec: Pick<FleetSpec, 'nodes'>): readonly NodeSpec[] {
  return sortedOnce(nodes, spec.nodes);
}
