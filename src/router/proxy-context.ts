/**
 * What every call of one router shares (`ProxyContext`): the pool and the replica choice, the calls
 * in flight (`ActiveCalls`), the in-flight counter and wait queue of each model (`ModelCounter`), the
 * breaker's port, the metrics, the router's life and the keys hook. proxy.ts holds the call itself, core.ts builds the
 * context.
 */
import type { RouterMetrics } from '../metrics/ports.js';
import type { ReplicaView } from '../reconciler/view.js';
import type { ByteBudget } from './byte-budget.js';
import type { ReplicaChoice } from './choose.js';
import type { Exchange } from './exchange.js';
import type { UpstreamFailure } from './failover.js';
import type { RouterLife } from './lifecycle.js';
import type { WaitQueue } from './queue.js';
import type { Upstream, Upstreams } from './upstreams.js';

/** A call as ActiveCalls links and aborts it (a ProxyCall). */
export interface ActiveCall {
  prev: ActiveCall | null;
  next: ActiveCall | null;
  abort(reason: Error): void;
}

/**
 * The calls in flight, as an intrusive doubly-linked list: O(1) add/remove with no hashing and no
 * table churn (a Set of short-lived objects measurably costs GC time at saturation).
 */
export class ActiveCalls {
  size = 0;
  /** @internal */
  head: ActiveCall | null = null;

  add(c: ActiveCall): void {
    c.prev = null;
    c.next = this.head;
    if (this.head) this.head.prev = c;
    this.head = c;
    this.size++;
  }

  delete(c: ActiveCall): void {
    if (c.prev) c.prev.next = c.next;
    else if (this.head === c) this.head = c.next;
    else return; // not in the list
    if (c.next) c.next.prev = c.prev;
    c.prev = null;
    c.next = null;
    this.size--;
  }

  toArray(): ActiveCall[] {
    const out: ActiveCall[] = [];
    for (let c = this.head; c; c = c.next) out.push(c);
    return out;
  }
}

/** In-flight proxied requests of one model; one mutable counter per model, looked up once per request. */
export interface ModelCounter {
  n: number;
  /** Moving average of a request's time on a replica (dispatch to end), in seconds; 0 before the first. */
  serviceSeconds: number;
  /** Requests waiting for a free slot (slot-queues.ts), created on first use. */
  queue: WaitQueue<unknown> | null;
  /** True while the queue waits for a replica to become ready (none was; slot-queues.ts wakeOnReady). */
  waking: boolean;
}

/** Weight of the latest request in `serviceSeconds`. */
export const SERVICE_EWMA = 0.2;

/** Shared by every ProxyCall of one router; set once, by core.ts. */
export interface ProxyContext {
  readonly upstreams: Upstreams;
  /** The replica choice (least-busy, affinity) over `upstreams`. */
  readonly choice: ReplicaChoice;
  readonly metrics: RouterMetrics;
  /** Calls in flight (graceful shutdown waits for them, then aborts the rest). */
  readonly active: ActiveCalls;
  /** In-flight proxied requests per model (for max_concurrency). */
  readonly modelInFlight: Map<string, ModelCounter>;
  /** The router's life (lifecycle.ts): shutting down or not; told when a call ends. */
  readonly life: RouterLife;
  /** Called when a call of the model ends (its slot is free): the queue's turn. */
  readonly release: (model: string, counter: ModelCounter) => void;
  /** The model's ready replicas now (FleetView.readyReplicas), for a retry elsewhere. */
  readonly readyReplicas: (model: string) => readonly ReplicaView[];
  /** What attempts say about each replica's health (the circuit breaker, eject.ts). */
  readonly health: ReplicaHealth;
  readonly log: { warn(obj: object, msg: string): void };
  /** The bytes held over all requests (bodies, answers held to redact them) against maxBufferedBytes. */
  readonly buffers: ByteBudget;
  /**
   * keys hook (usage and per-key limits, key-usage.ts): called once per call as it ends, with the
   * replica that answered and the last bytes of a 200 response (null: none kept), where the
   * replica reported its token usage; `early` when the call ended before its response did (the
   * client went away, the stream was cut): what was seen of it (usage.ts earlyUsageOf).
   */
  readonly onUsage?: ((x: Exchange, replica: string, tail: string | null, early?: EarlyEnd | null) => void) | null;
}

/** The breaker's port: an attempt that failed in a way that says the replica is not serving, or a response from it. */
/** A call that ended before its response did: what the router saw of it. */
export interface EarlyEnd {
  /** The last bytes of the response streamed so far (null: none). */
  readonly tail: string | null;
  /** Stream events (`data: {…}`) passed to the client: about one per token generated. */
  readonly events: number;
  /** The request body's bytes (the prompt's size when the replica did not say its tokens). */
  readonly bodyBytes: number;
}

export interface ReplicaHealth {
  failed(u: Upstream, failure: UpstreamFailure): void;
  responded(u: Upstream): void;
}

export { CLIENT_CLOSED_STATUS } from './errors.js';

/** The in-flight counter of a model (created on first use; one per model name, never removed). */
export function modelCounter(ctx: ProxyContext, model: string): ModelCounter {
  let c = ctx.modelInFlight.get(model);
  if (!c) {
    c = { n: 0, serviceSeconds: 0, queue: null, waking: false };
    ctx.modelInFlight.set(model, c);
  }
  return c;
}
