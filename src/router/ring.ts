/**
 * The hash ring of a model's ready replicas, pure: the 32-bit hashing (FNV-1a, then murmur3's
 * finalizer), the ring of RING_POINTS points per replica id, and what a choice on it sees of each
 * replica (`ReplicaLoads`) and returns (`Choice`). The choice itself is in affinity.ts (bounded load,
 * the sticky keys) and move.ts (weighing a move); both import this, so neither imports the other's types.
 */

/** Points on the ring per replica. */
export const RING_POINTS = 160;

export const FNV_OFFSET = 0x811c9dc5;

/** FNV-1a over UTF-16 code units from `h`, at most `budget` of them; returns [hash, budget left]. */
export function fnv(h: number, s: string, budget: number): number {
  const n = s.length < budget ? s.length : budget;
  for (let i = 0; i < n; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h;
}

/** murmur3's finalizer: spreads FNV's low-entropy high bits over the ring. */
export function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** A string's 32-bit ring position. */
export function hashString(s: string): number {
  return mix(fnv(FNV_OFFSET, s, s.length));
}

/**
 * A hash ring over a list of replica ids: RING_POINTS points each, sorted. Positions depend only on
 * the ids, so the same replicas always make the same ring, in any order.
 */
export class Ring {
  /** Sorted ring positions. */
  readonly points: Uint32Array;
  /** The index (into `ids`) owning each point. */
  readonly owners: Uint16Array;
  constructor(readonly ids: readonly string[]) {
    if (ids.length > 0xffff) throw new Error('too many replicas for a ring');
    const n = ids.length * RING_POINTS;
    const pairs: [number, number][] = [];
    for (let i = 0; i < ids.length; i++) {
      for (let v = 0; v < RING_POINTS; v++) pairs.push([hashString(`${ids[i]}#${v}`), i]);
    }
    // ties (vanishingly rare) broken by id, so the order of `ids` never matters
    pairs.sort((a, b) => a[0] - b[0] || (ids[a[1]]! < ids[b[1]]! ? -1 : ids[a[1]]! > ids[b[1]]! ? 1 : 0));
    this.points = new Uint32Array(n);
    this.owners = new Uint16Array(n);
    for (let i = 0; i < n; i++) {
      this.points[i] = pairs[i]![0];
      this.owners[i] = pairs[i]![1];
    }
  }

  /** The first point at or after `key` (wrapping). */
  start(key: number): number {
    let lo = 0;
    let hi = this.points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.points[mid]! < key) lo = mid + 1;
      else hi = mid;
    }
    return lo === this.points.length ? 0 : lo;
  }

  /** The replica a key belongs to when every replica may take it. */
  home(key: number): number {
    return this.points.length === 0 ? -1 : this.owners[this.start(key)]!;
  }

  /**
   * Replica indices in ring order from `key`, each once (into `out`, which is returned). For tests
   * and for `choose`.
   */
  order(key: number, out: number[] = []): number[] {
    out.length = 0;
    const n = this.ids.length;
    if (n === 0) return out;
    const seen = new Uint8Array(n);
    const len = this.points.length;
    for (let i = this.start(key), steps = 0; steps < len && out.length < n; steps++, i = i + 1 === len ? 0 : i + 1) {
      const o = this.owners[i]!;
      if (seen[o] === 0) {
        seen[o] = 1;
        out.push(o);
      }
    }
    return out;
  }
}

/** What `choose` needs to know of each replica (by index into the ring's ids). */
export interface ReplicaLoads {
  /** False for a replica that may not take the request now (marked down, already tried). */
  usable(i: number): boolean;
  /** Requests in flight on it. */
  load(i: number): number;
  /** Its slots (parallel requests it runs at once); Infinity when unknown. */
  slots(i: number): number;
  /** Mean seconds a request holds one of its slots, from its responses' timings; 0 when not known. */
  slotSeconds(i: number): number;
  /** Seconds per prompt token it evaluates, from its responses' timings; 0 when not known. */
  secondsPerToken(i: number): number;
}

export interface Choice {
  /** Index into the ring's ids, or -1 when no replica is usable. */
  readonly index: number;
  /** True when it is the key's own replica among the usable ones (an affinity hit). */
  readonly home: boolean;
}
