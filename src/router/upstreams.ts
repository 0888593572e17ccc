/**
 * The upstream pool: one undici Pool (keep-alive) per replica endpoint with what the router knows of
 * it (its requests in flight, other routers' load from /slots, a short "down" mark after a failure,
 * its circuit breaker, its timings). The choice among a model's ready replicas is in choose.ts, the
 * call itself in proxy.ts.
 */
import { Pool } from '../util/undici-lean.js';
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

export class Upstreams {
  /** @internal the pools by endpoint (choose.ts reads it per request). */
  readonly byEndpoint = new Map<string, Upstream>();
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
