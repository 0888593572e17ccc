/**
 * The order a pass places its wants in (pure; the planner's): what models serve with first, extra
 * replicas of scaling models last (#42).
 *
 * 1. Always-on models' floors, together (their first replicas, or a fixed count).
 * 2. On-demand models' floors one by one, most recently asked for first, against the room left: a
 *    model that evicted another gets the room once the victim is gone, never the victim.
 * 3. Extra replicas (above a scaling model's floor) one by one against the room left, under the
 *    cores rule (placement.ts coresAllow): an extra never takes room an activation waits for, so the
 *    room an evicted extra gave up goes to the model that asked for it, not back to the extra.
 */
import { extraShortReason, place, type PlacementNode, type PlacementRequest, type PlacementResult, type Unplaceable } from './placement.js';

export interface OrderedWant {
  readonly onDemand: boolean;
  /** Epoch ms of its last request (on-demand order); 0: none. */
  readonly recency: number;
  /** What it serves with (count 0: nothing below its floor is missing). */
  readonly floor: PlacementRequest;
  /** Extra replicas it wants (scaling), null: none; placed only once its floor is. */
  readonly extra: PlacementRequest | null;
}

export interface OrderedResult {
  /** The floor's placement and the extras' nodes after it; `unplaceable` is the floor's. */
  readonly result: PlacementResult;
  /** Why the extras did not all fit (null: they did, or none were wanted). */
  readonly extraUnplaceable: Unplaceable | null;
}

export function placeInOrder(
  wants: readonly OrderedWant[],
  /** The nodes as this pass's placements so far leave them. */
  nodesNow: () => PlacementNode[],
  reserveBytes: number,
  /** Told of each placement, before the next is made (it takes its room). */
  took: (r: PlacementResult) => void,
): OrderedResult[] {
  const floors: PlacementResult[] = new Array<PlacementResult>(wants.length);
  const always = wants.flatMap((w, i) => (w.onDemand ? [] : [i]));
  const placedAlways = place({ nodes: nodesNow(), requests: always.map((i) => wants[i]!.floor), reserveBytes });
  for (const [k, i] of always.entries()) {
    floors[i] = placedAlways[k]!;
    took(placedAlways[k]!);
  }
  const byRecency = (a: number, b: number): number => wants[b]!.recency - wants[a]!.recency || a - b;
  for (const i of wants.flatMap((w, j) => (w.onDemand ? [j] : [])).sort(byRecency)) {
    const [r] = place({ nodes: nodesNow(), requests: [wants[i]!.floor], reserveBytes });
    floors[i] = r!;
    took(r!);
  }
  const out: OrderedResult[] = floors.map((r) => ({ result: r, extraUnplaceable: null }));
  // extras: always-on models' first, then on-demand ones by recency
  const extras = wants.flatMap((w, i) => (w.extra !== null && w.extra.count > 0 && floors[i]!.unplaceable === null ? [i] : []));
  extras.sort((a, b) => Number(wants[a]!.onDemand) - Number(wants[b]!.onDemand) || byRecency(a, b));
  for (const i of extras) {
    const floor = floors[i]!;
    const extra = wants[i]!.extra!;
    const [r] = place({ nodes: nodesNow(), requests: [{ ...extra, existingOn: [...extra.existingOn, ...floor.nodes] }], reserveBytes });
    took(r!);
    const devices = floor.devices || r!.devices ? { devices: [...(floor.devices ?? []), ...(r!.devices ?? [])] } : {};
    out[i] = { result: { model: floor.model, nodes: [...floor.nodes, ...r!.nodes], ...devices, unplaceable: null }, extraUnplaceable: r!.unplaceable && { ...r!.unplaceable, reason: extraShortReason(r!.unplaceable) } };
  }
  return out;
}
