/**
 * The shell of the replicas' circuit breakers (breaker.ts holds the transitions): applies what
 * attempts say to each `Upstream`, reports ejections (llmgw_router_ejected_replicas,
 * llmgw_router_replica_ejections_total and a warning naming the replica), and probes the ejected
 * replicas' GET /health (public on llama-server: 200 once the model is loaded) every
 * PROBE_INTERVAL_MS until one answers 200, which puts the replica back into routing.
 */
import type { RouterMetrics } from '../metrics/ports.js';
import { nextBreaker, type BreakerEvent } from './breaker.js';
import type { UpstreamFailure } from './failover.js';
import type { ReplicaHealth } from './proxy-context.js';
import type { Upstream, Upstreams } from './upstreams.js';

export const PROBE_INTERVAL_MS = 1000;
const PROBE_TIMEOUT_MS = 2000;

export class Ejections implements ReplicaHealth {
  private timer: NodeJS.Timeout | null = null;
  private readonly probing = new WeakSet<Upstream>();
  /** The model each ejected upstream was counted under (its metric is taken back under the same). */
  private readonly ejectedAs = new WeakMap<Upstream, string>();

  constructor(
    private readonly upstreams: Upstreams,
    private readonly metrics: RouterMetrics,
    private readonly log: { warn(obj: object, msg: string): void },
    /** The headers for a replica (the engine key). */
    private readonly headers: () => Record<string, string>,
  ) {}

  failed(u: Upstream, failure: UpstreamFailure): void {
    const before = u.breaker;
    this.apply(u, 'failure');
    if (!before.open && u.breaker.open) {
      this.log.warn({ model: u.model, replica: u.replicaId, endpoint: u.endpoint, failures: u.breaker.failures, last: failure }, 'replica failed repeatedly before the first byte: out of routing until its health check passes');
    }
  }

  responded(u: Upstream): void {
    if (u.breaker.failures !== 0 || u.breaker.open) this.apply(u, 'response');
  }

  /** An upstream whose pool was closed (unused for long): its ejection is no longer counted. */
  forget(u: Upstream): void {
    if (u.breaker.open) this.metrics.replicaEjected(this.ejectedAs.get(u) ?? u.model, false);
  }

  start(intervalMs = PROBE_INTERVAL_MS): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => void this.probe(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** One probe round over the ejected replicas; resolves when every answer is in. */
  async probe(): Promise<void> {
    const asks: Promise<void>[] = [];
    for (const u of this.upstreams.all()) if (u.breaker.open && !this.probing.has(u)) asks.push(this.ask(u));
    await Promise.all(asks);
  }

  private async ask(u: Upstream): Promise<void> {
    this.probing.add(u);
    let ok = false;
    try {
      const res = await u.pool.request({ path: `${u.prefix}/health`, method: 'GET', headers: this.headers(), headersTimeout: PROBE_TIMEOUT_MS, bodyTimeout: PROBE_TIMEOUT_MS });
      await res.body.dump();
      ok = res.statusCode === 200;
    } catch {
      // refused, reset or slow: still out
    } finally {
      this.probing.delete(u);
    }
    const wasOpen = u.breaker.open;
    this.apply(u, ok ? 'healthy' : 'unhealthy');
    if (wasOpen && !u.breaker.open) this.log.warn({ model: u.model, replica: u.replicaId, endpoint: u.endpoint }, 'replica passed its health check: back in routing');
  }

  private apply(u: Upstream, e: BreakerEvent): void {
    const before = u.breaker;
    u.breaker = nextBreaker(before, e);
    if (before.open === u.breaker.open) return;
    if (u.breaker.open) {
      this.ejectedAs.set(u, u.model);
      this.metrics.replicaEjected(u.model, true);
    } else {
      this.metrics.replicaEjected(this.ejectedAs.get(u) ?? u.model, false);
      u.downUntil = 0;
    }
  }
}
