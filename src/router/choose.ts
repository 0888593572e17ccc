/**
 * The replica choice among a model's ready replicas: least-busy (`pick`), or by prefix affinity
 * (`affine`: the key's last replica, a move weighed by its cost, else consistent hashing with
 * bounded load; affinity.ts, move.ts, ring.ts), over what the pool knows of each replica
 * (upstreams.ts: its load, "down" mark, breaker and timings).
 */
import type { ReplicaView } from '../reconciler/view.js';
import { chooseSticky, StickyKeys, type StickyEntry } from './affinity.js';
import { Ring, type ReplicaLoads } from './ring.js';
import { isDown, loadOf, type Upstream, type Upstreams } from './upstreams.js';

/** A model's ring, kept while its ready replicas stay the same. */
interface CachedRing {
  readonly ids: string[];
  readonly ring: Ring;
}

export class ReplicaChoice {
  /** The pool's map (upstreams.ts), read per request. */
  private readonly byEndpoint: Map<string, Upstream>;
  private rr = 0;
  private readonly rings = new Map<string, CachedRing>();
  /** Per model: where each affinity key was served last. */
  private readonly sticky = new Map<string, StickyKeys>();
  /** `choose`'s view of the replicas of the current call (one object, reused: no allocation per request). */
  private readonly loads = new (class implements ReplicaLoads {
    replicas: readonly ReplicaView[] = [];
    upstreams: Map<string, Upstream> = new Map();
    exclude: ReadonlySet<string> | null = null;
    now = 0;
    slotCount = Infinity;
    usable(i: number): boolean {
      const r = this.replicas[i]!;
      if (this.exclude !== null && this.exclude.has(r.endpoint)) return false;
      const u = this.upstreams.get(r.endpoint);
      return u === undefined || !isDown(u, this.now);
    }
    load(i: number): number {
      return loadOf(this.upstreams.get(this.replicas[i]!.endpoint));
    }
    slots(): number {
      return this.slotCount;
    }
    slotSeconds(i: number): number {
      return this.upstreams.get(this.replicas[i]!.endpoint)?.times.slotSeconds ?? 0;
    }
    secondsPerToken(i: number): number {
      return this.upstreams.get(this.replicas[i]!.endpoint)?.times.secondsPerToken ?? 0;
    }
  })();

  constructor(upstreams: Upstreams) {
    this.byEndpoint = upstreams.byEndpoint;
  }

  /**
   * The least-busy replica not in `exclude`; replicas marked down lose to any other. Ties rotate,
   * so equal replicas share the load. `now` is performance.now().
   */
  pick(replicas: readonly ReplicaView[], exclude: ReadonlySet<string> | null, now: number): ReplicaView | null {
    const n = replicas.length;
    if (n === 1) {
      const r = replicas[0]!;
      return exclude !== null && exclude.has(r.endpoint) ? null : r;
    }
    this.rr = (this.rr + 1) & 0x3fffffff;
    const start = this.rr % n;
    let best: ReplicaView | null = null;
    let bestScore = Infinity;
    for (let i = 0; i < n; i++) {
      const r = replicas[(start + i) % n]!;
      if (exclude !== null && exclude.has(r.endpoint)) continue;
      const u = this.byEndpoint.get(r.endpoint);
      const score = u === undefined ? 0 : u.inFlight + u.external + (u.breaker.open ? 2e9 : u.downUntil > now ? 1e9 : 0);
      if (score < bestScore) {
        best = r;
        bestScore = score;
        if (score === 0) break;
      }
    }
    return best;
  }

  /**
   * The replica for an affinity key among `replicas` (each with `slots` slots; Infinity when unknown),
   * skipping those in `exclude` and those marked down: where the key was served last, or by consistent
   * hashing with bounded load, a move off a busy replica weighed by its cost (affinity.ts, move.ts);
   * `home` says whether it stayed (an affinity hit). With `freeSlotOnly` (a request that waited in
   * the queue) only replicas with a free slot are considered, and the key's last replica where
   * waiting for its slot costs less than moving. Null when none is usable (the caller then falls back
   * to `pick`, which also tries replicas marked down).
   */
  affine(model: string, replicas: readonly ReplicaView[], key: number, slots: number, exclude: ReadonlySet<string> | null, now: number, freeSlotOnly = false): { replica: ReplicaView; home: boolean; entry: StickyEntry } | null {
    const ring = this.ringFor(model, replicas);
    const l = this.loads;
    l.replicas = replicas;
    l.upstreams = this.byEndpoint;
    l.exclude = exclude;
    l.now = now;
    l.slotCount = slots;
    let keys = this.sticky.get(model);
    if (keys === undefined) {
      keys = new StickyKeys();
      if (this.sticky.size > 10_000) this.sticky.clear();
      this.sticky.set(model, keys);
    }
    const seen = keys.get(key);
    let last = -1;
    if (seen !== undefined) for (let i = 0; i < replicas.length; i++) if (replicas[i]!.id === seen.id) last = i;
    const c = chooseSticky(ring, key, { last, shared: seen !== undefined && seen.active > 0, tokens: last >= 0 ? seen!.tokens : 0, freeSlotOnly: freeSlotOnly && slots !== Infinity }, l);
    l.replicas = [];
    l.exclude = null;
    if (c.index < 0) return null;
    const replica = replicas[c.index]!;
    const entry = keys.set(key, replica.id);
    entry.active++;
    return { replica, home: c.home, entry };
  }

  private ringFor(model: string, replicas: readonly ReplicaView[]): Ring {
    const cached = this.rings.get(model);
    if (cached !== undefined && cached.ids.length === replicas.length) {
      let same = true;
      for (let i = 0; i < replicas.length; i++) {
        if (cached.ids[i] !== replicas[i]!.id) {
          same = false;
          break;
        }
      }
      if (same) return cached.ring;
    }
    const ids = replicas.map((r) => r.id);
    const ring = new Ring(ids);
    if (this.rings.size > 10_000) this.rings.clear();
    this.rings.set(model, { ids, ring });
    return ring;
  }

  /** True when some replica not marked down has a free slot (`slots` each; always with unknown slots). */
  hasFreeSlot(replicas: readonly ReplicaView[], slots: number, now: number): boolean {
    if (slots === Infinity) return true;
    let anyUp = false;
    for (const r of replicas) {
      const u = this.byEndpoint.get(r.endpoint);
      if (u !== undefined && isDown(u, now)) continue;
      anyUp = true;
      if (loadOf(u) < slots) return true;
    }
    // every replica marked down: not "busy"; the request goes on and tries them
    return !anyUp;
  }
}
