/**
 * The upstream pool and the replica choice: one undici Pool (keep-alive) per replica endpoint with
 * what the router knows of it (its requests in flight, other routers' load from /slots, a short "down"
 * mark after a failure, its circuit breaker), and the choice among a model's ready replicas —
 * least-busy, or by prefix affinity (affinity.ts, move.ts). The call itself is in proxy.ts.
 */
import { Pool } from 'undici';
import type { ReplicaView } from '../reconciler/view.js';
import { chooseSticky, Ring, StickyKeys, type ReplicaLoads, type StickyEntry } from './affinity.js';
import { CLOSED, type Breaker } from './breaker.js';
import { ReplicaTimes } from './move.js';

export interface UpstreamTimeouts {
  /** TCP connect to a replica. */
  readonly connectTimeoutMs: number;
  /** From sending the request to the response headers (for llama-server: to the first byte). */
  readonly firstByteTimeoutMs: number;
  /** Longest gap between two body chunks before a stream counts as stalled. */
  readonly streamIdleTimeoutMs: number;
}

/** How long a replica that refused a connection is avoided when another is available. */
export const DOWN_FOR_MS = 2000;
/** Pools unused for this long (and idle) are closed by the sweep. */
export const POOL_IDLE_CLOSE_MS = 5 * 60_000;

export class Upstream {
  /** Requests in flight to this replica (least-busy selection). */
  inFlight = 0;
  /** performance.now() until which the replica is avoided after a connect failure. */
  downUntil = 0;
  /** Its circuit breaker: open while it is out of routing (breaker.ts). */
  breaker: Breaker = CLOSED;
  /** The model and replica id last served here (for the ejection's metric and log). */
  model = '';
  replicaId = '';
  /** performance.now() of the last request. */
  lastUsed = 0;
  /**
   * Requests other routers have on this replica, as its GET /slots last said (busy slots beyond this
   * router's own in-flight requests, the smaller of the last two readings, so a reading that raced a
   * response's end does not count); 0 where /slots is not exposed. See slots.ts.
   */
  external = 0;
  /** Slots the replica reported in its last GET /slots (0: not known). */
  reportedSlots = 0;
  /** Its slot time and evaluation speed, from its responses' timings (for weighing a move, move.ts). */
  readonly times = new ReplicaTimes();
  readonly pool: Pool;
  /** Path prefix of the endpoint ('' for http://host:port). */
  readonly prefix: string;
  constructor(
    readonly endpoint: string,
    t: UpstreamTimeouts,
  ) {
    const u = new URL(endpoint);
    this.prefix = u.pathname === '/' ? '' : u.pathname.replace(/\/+$/, '');
    this.pool = new Pool(u.origin, {
      connect: { timeout: t.connectTimeoutMs },
      headersTimeout: t.firstByteTimeoutMs,
      bodyTimeout: t.streamIdleTimeoutMs,
    });
  }
}

/** True while a replica is avoided: marked down after a failure, or out of routing by its breaker. */
export function isDown(u: Upstream, now: number): boolean {
  return u.downUntil > now || u.breaker.open;
}

/** The load of a replica for choosing: this router's requests on it, plus other routers' as /slots said. */
export function loadOf(u: Upstream | undefined): number {
  return u === undefined ? 0 : u.inFlight + u.external;
}

/** A model's ring, kept while its ready replicas stay the same. */
interface CachedRing {
  readonly ids: string[];
  readonly ring: Ring;
}

export class Upstreams {
  private readonly byEndpoint = new Map<string, Upstream>();
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

  /** The endpoints with a pool (for the /slots refresh). */
  all(): IterableIterator<Upstream> {
    return this.byEndpoint.values();
  }
  constructor(private readonly timeouts: UpstreamTimeouts) {}

  get(endpoint: string): Upstream {
    let u = this.byEndpoint.get(endpoint);
    if (!u) {
      u = new Upstream(endpoint, this.timeouts);
      this.byEndpoint.set(endpoint, u);
    }
    return u;
  }

  /** Other routers' requests on an endpoint, as its /slots said (for tests and status). */
  external(endpoint: string): number {
    return this.byEndpoint.get(endpoint)?.external ?? 0;
  }

  /** In-flight requests per endpoint (for tests and status). */
  inFlight(endpoint: string): number {
    return this.byEndpoint.get(endpoint)?.inFlight ?? 0;
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

  /** Closes pools that are idle and unused for `idleMs` (`now` from performance.now()); returns those closed. */
  sweep(now: number, idleMs = POOL_IDLE_CLOSE_MS): Upstream[] {
    const closed: Upstream[] = [];
    for (const [endpoint, u] of this.byEndpoint) {
      if (u.inFlight === 0 && now - u.lastUsed > idleMs) {
        this.byEndpoint.delete(endpoint);
        closed.push(u);
        void u.pool.close().catch(() => undefined);
      }
    }
    return closed;
  }

  async close(): Promise<void> {
    const pools = [...this.byEndpoint.values()].map((u) => u.pool);
    this.byEndpoint.clear();
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
  }
}
