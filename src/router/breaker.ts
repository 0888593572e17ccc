/**
 * The circuit breaker of one replica endpoint (pure): a replica whose attempts fail before a
 * response byte (refused or reset connection, 503 while loading, gone) EJECT_AFTER times in a row
 * leaves routing — it loses to every other replica of its model, and a request goes to it only
 * when no other is left — until an observation shows it healthy: a probe of its GET /health answering
 * 200 (eject.ts asks every PROBE_INTERVAL_MS), or a response from it. Any response byte from it
 * resets the count.
 *
 * The shell (eject.ts) applies these transitions to the `Upstream` and reports them
 * (llmgw_router_ejected_replicas, llmgw_router_replica_ejections_total, a warning log).
 */

/** Failures in a row after which a replica leaves routing. */
export const EJECT_AFTER = 3;

export interface Breaker {
  /** Failures in a row since the last response. */
  readonly failures: number;
  /** True while the replica is out of routing. */
  readonly open: boolean;
}

export const CLOSED: Breaker = Object.freeze({ failures: 0, open: false });

export type BreakerEvent =
  /** An attempt failed in a way that says the replica is not serving (see ejectable in failover.ts). */
  | 'failure'
  /** The replica sent a response byte. */
  | 'response'
  /** A probe of its health endpoint answered 200. */
  | 'healthy'
  /** A probe failed (refused, timed out, not 200). */
  | 'unhealthy';

/** The breaker after an event. */
export function nextBreaker(b: Breaker, e: BreakerEvent, threshold = EJECT_AFTER): Breaker {
  switch (e) {
    case 'failure': {
      const failures = b.failures + 1;
      return { failures, open: b.open || failures >= threshold };
    }
    case 'response':
    case 'healthy':
      return b.failures === 0 && !b.open ? b : CLOSED;
    case 'unhealthy':
      return b;
  }
}
