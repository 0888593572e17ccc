/**
 * Placement (pure): which nodes get a model's new replicas, or why it fits nowhere.
 * Need per replica = the model's memory; node room = capacity − reserve − replicas already
 * there. Replicas of one model spread over nodes (most free room first); a node selector limits
 * the candidates; unreachable nodes are unknown and never chosen.
 */
import { formatBytes } from '../fleet-spec/units.js';

export interface PlacementNode {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** Memory the node offers to replicas; null when not known (unreachable, not observed). */
  readonly capacityBytes: number | null;
  /** Memory already taken by replicas that stay. */
  readonly usedBytes: number;
  readonly reachable: boolean;
}

export interface PlacementRequest {
  readonly model: string;
  /** New replicas wanted. */
  readonly count: number;
  /** Memory per replica; null when not known yet. */
  readonly memoryBytes: number | null;
  readonly nodeSelector: Readonly<Record<string, string>>;
  /** Nodes already running a replica of this model (spread away from them first). */
  readonly existingOn: readonly string[];
  /** Nodes not to use for now (they failed this model's start: a full disk, no free port). */
  readonly avoidNodes?: readonly string[];
}

export type UnplaceableCode = 'PLACEMENT_MEMORY_UNKNOWN' | 'PLACEMENT_NO_MATCHING_NODE' | 'PLACEMENT_NO_ROOM';

/** Why a model fits nowhere, as domain values (the reason text is derived from them). */
export interface Unplaceable {
  /** The catalogue sub-code of MODEL_UNPLACEABLE. */
  readonly code: UnplaceableCode;
  readonly reason: string;
  readonly needBytes: number | null;
  readonly largestFree: { readonly node: string; readonly bytes: number } | null;
  readonly checked: number;
  readonly excludedBySelector: number;
  readonly unknown: number;
  /** Nodes set aside for now because they failed this model's start. */
  readonly avoided: number;
}

export interface PlacementResult {
  readonly model: string;
  /** One node per placed replica (may repeat a node when the spread ran out of nodes). */
  readonly nodes: readonly string[];
  /** Set when fewer than `count` replicas could be placed. */
  readonly unplaceable: Unplaceable | null;
}

export interface PlacementInput {
  readonly nodes: readonly PlacementNode[];
  readonly requests: readonly PlacementRequest[];
  readonly reserveBytes: number;
}

/** True when a node's labels carry every key = value of a model's node_selector. */
export function selectorMatches(selector: Readonly<Record<string, string>>, labels: Readonly<Record<string, string>>): boolean {
  for (const [k, v] of Object.entries(selector)) if (labels[k] !== v) return false;
  return true;
}

/**
 * Places requests in order: larger needs first (they are the hardest to fit), then by name, so the
 * result does not depend on the order requests were given in.
 */
export function place(input: PlacementInput): PlacementResult[] {
  const free = new Map<string, number>();
  for (const n of input.nodes) {
    if (n.reachable && n.capacityBytes !== null) free.set(n.name, n.capacityBytes - input.reserveBytes - n.usedBytes);
  }
  const order = [...input.requests].sort(
    (a, b) => (b.memoryBytes ?? -1) - (a.memoryBytes ?? -1) || a.model.localeCompare(b.model),
  );
  const results = new Map<string, PlacementResult>();
  for (const req of order) results.set(req.model, placeOne(req, input.nodes, free));
  return input.requests.map((r) => results.get(r.model)!);
}

function placeOne(req: PlacementRequest, nodes: readonly PlacementNode[], free: Map<string, number>): PlacementResult {
  if (req.count <= 0) return { model: req.model, nodes: [], unplaceable: null };
  const matching = nodes.filter((n) => selectorMatches(req.nodeSelector, n.labels));
  const excludedBySelector = nodes.length - matching.length;
  const selected = matching.filter((n) => !req.avoidNodes?.includes(n.name));
  const avoided = matching.length - selected.length;
  const known = selected.filter((n) => free.has(n.name));
  const unknown = selected.length - known.length;
  const base = { checked: nodes.length, excludedBySelector, unknown, avoided };

  if (req.memoryBytes === null) {
    return {
      model: req.model,
      nodes: [],
      unplaceable: { ...base, code: 'PLACEMENT_MEMORY_UNKNOWN', needBytes: null, largestFree: null, reason: `memory need unknown: the model file has not been read yet and models/${req.model}.yaml sets no memory` },
    };
  }
  const need = req.memoryBytes;
  const placed: string[] = [];
  const hosting = new Map<string, number>();
  for (const n of req.existingOn) hosting.set(n, (hosting.get(n) ?? 0) + 1);
  for (let i = 0; i < req.count; i++) {
    // fewest replicas of this model first (spread), then most free room, then name
    let pick: PlacementNode | undefined;
    for (const n of known) {
      const f = free.get(n.name)!;
      if (f < need) continue;
      if (!pick) {
        pick = n;
        continue;
      }
      const dh = (hosting.get(n.name) ?? 0) - (hosting.get(pick.name) ?? 0);
      const df = f - free.get(pick.name)!;
      if (dh < 0 || (dh === 0 && (df > 0 || (df === 0 && n.name < pick.name)))) pick = n;
    }
    if (!pick) break;
    placed.push(pick.name);
    free.set(pick.name, free.get(pick.name)! - need);
    hosting.set(pick.name, (hosting.get(pick.name) ?? 0) + 1);
  }
  if (placed.length === req.count) return { model: req.model, nodes: placed, unplaceable: null };

  let largest: { node: string; bytes: number } | null = null;
  for (const n of known) {
    const f = Math.max(0, free.get(n.name)!);
    if (!largest || f > largest.bytes) largest = { node: n.name, bytes: f };
  }
  return { model: req.model, nodes: placed, unplaceable: { ...base, code: matching.length === 0 ? 'PLACEMENT_NO_MATCHING_NODE' : 'PLACEMENT_NO_ROOM', needBytes: need, largestFree: largest, reason: unplaceableReason(need, largest, placed.length, req.count, base) } };
}

export function unplaceableReason(
  need: number,
  largest: { node: string; bytes: number } | null,
  placedCount: number,
  wanted: number,
  counts: { checked: number; excludedBySelector: number; unknown: number; avoided?: number },
): string {
  const parts = [`needs ${formatBytes(need)}${wanted > 1 ? ' per replica' : ''}`];
  if (largest) parts.push(`largest free ${formatBytes(largest.bytes)} on ${largest.node}`);
  else parts.push('no node with known free memory');
  let checked = `${counts.checked} node${counts.checked === 1 ? '' : 's'} checked`;
  if (counts.excludedBySelector) checked += `, ${counts.excludedBySelector} excluded by selector`;
  if (counts.unknown) checked += `, ${counts.unknown} unknown (unreachable or not observed)`;
  if (counts.avoided) checked += `, ${counts.avoided} set aside for now (it failed this model's start: see the last error)`;
  parts.push(checked);
  if (placedCount > 0) parts.push(`placed ${placedCount} of ${wanted}`);
  return parts.join('; ');
}
