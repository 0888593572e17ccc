/**
 * The router's wait for a free slot: each model's queue of requests (a bounded FIFO, queue.ts) that
 * found every slot of its ready replicas busy. A request leaves it when a call of the model ends and
 * a slot is free (`drainQueue`), when a replica becomes ready after none was (`wakeOnReady`), when
 * its client goes away, at the queue timeout (429 model_overloaded, or 503 model_loading when no
 * replica was ready all along), or at shutdown (`refuseAll`). core.ts hands requests in and dispatches
 * those that leave for a slot.
 */
import { NO_REASON, type RouterMetrics } from '../metrics/ports.js';
import type { FleetView, ReplicaView } from '../reconciler/view.js';
import type { ReplicaChoice } from './choose.js';
import { RouterError } from './errors.js';
import type { Exchange } from './exchange.js';
import { CLIENT_CLOSED_STATUS, type ModelCounter, type ProxyContext } from './proxy-context.js';
import { WaitQueue, retryAfterSeconds, type QueueEntry } from './queue.js';
import { LOADING_RETRY_AFTER_SECONDS } from './resolve.js';

/** A request waiting in its model's queue. */
interface Queued {
  readonly x: Exchange;
  timer: NodeJS.Timeout | null;
  onClose: (() => void) | null;
}

/** What the queues need of the router (core.ts). */
export interface QueueHost {
  readonly ctx: ProxyContext;
  readonly fleet: FleetView;
  readonly metrics: RouterMetrics;
  /** Sends a request that left its queue to a replica with a free slot. */
  dispatch(x: Exchange, replicas: readonly ReplicaView[], fromQueue: boolean): void;
  /** Answers a request with an error envelope (and counts it). */
  fail(x: Exchange, e: unknown): void;
}

export class SlotQueues {
  /** Requests waiting in a model's queue for a free slot. */
  size = 0;
  /** True while a queue is being drained (a call ending inside the drain does not start another). */
  private draining = false;
  private readonly ctx: ProxyContext;
  private readonly fleet: FleetView;
  private readonly metrics: RouterMetrics;
  private readonly choice: ReplicaChoice;

  constructor(private readonly host: QueueHost) {
    this.ctx = host.ctx;
    this.fleet = host.fleet;
    this.metrics = host.metrics;
    this.choice = host.ctx.choice;
  }

  /** Queues a request for a free slot, or answers 429 model_overloaded when the queue is full. */
  enqueue(x: Exchange, counter: ModelCounter, replicas: number): void {
    const q = (counter.queue ??= new WaitQueue<unknown>()) as WaitQueue<Queued>;
    const limits = x.spec!.queue;
    const item: Queued = { x, timer: null, onClose: null };
    const entry = q.push(item, performance.now(), limits.max);
    if (entry === null) {
      const retry = retryAfterSeconds(q.length, x.slots * replicas, counter.serviceSeconds || 1, limits.timeoutMs / 1000);
      const slots = x.slots * replicas;
      this.host.fail(x, new RouterError(
        'MODEL_OVERLOADED',
        limits.max === 0
          ? `Model '${x.model}' is overloaded: all ${slots} slots of its ${replicas} ready replicas are busy and it has no queue (queue.max 0); retry after ${retry} s.`
          : `Model '${x.model}' is overloaded: all ${slots} slots of its ${replicas} ready replicas are busy and its queue is full (${q.length} of ${limits.max} waiting, the oldest for ${this.waitedText(q)}); retry after ${retry} s.`,
        { model: x.model, retryAfterSeconds: retry },
      ));
      return;
    }
    this.size++;
    this.metrics.inFlight(x.model, 1);
    this.metrics.queueDepth(x.model, q.length);
    item.onClose = () => {
      if (x.res.writableFinished || !q.remove(entry)) return;
      this.leaveQueue(item, entry, q);
      x.res.destroy();
      this.metrics.request(x.model, CLIENT_CLOSED_STATUS, (performance.now() - x.t0) / 1000, NO_REASON);
    };
    x.res.once('close', item.onClose);
    item.timer = setTimeout(() => {
      if (!q.remove(entry)) return;
      const waited = this.leaveQueue(item, entry, q);
      const retry = retryAfterSeconds(q.length, x.slots * replicas, counter.serviceSeconds || 1, limits.timeoutMs / 1000);
      this.host.fail(x, this.fleet.readyReplicas(x.model).length === 0
        ? new RouterError(
          'MODEL_LOADING',
          `Model '${x.model}' has had no ready replica (its replicas being replaced or restarted) for as long as the request waited in its queue: ${waited.toFixed(1)} s, the queue timeout; retry after ${LOADING_RETRY_AFTER_SECONDS} s.`,
          { model: x.model, retryAfterSeconds: LOADING_RETRY_AFTER_SECONDS },
        )
        : new RouterError(
          'MODEL_OVERLOADED',
          `Model '${x.model}' is overloaded: the request waited ${waited.toFixed(1)} s in its queue (the queue timeout; ${q.length} still waiting) without a free slot on its ready replicas; retry after ${retry} s.`,
          { model: x.model, retryAfterSeconds: retry },
        ));
    }, limits.timeoutMs);
  }

  /** Bookkeeping of a request that left the queue (already removed from it); returns its wait in seconds. */
  private leaveQueue(item: Queued, entry: QueueEntry<Queued>, q: WaitQueue<Queued>): number {
    if (item.timer !== null) clearTimeout(item.timer);
    if (item.onClose !== null) item.x.res.removeListener('close', item.onClose);
    item.timer = item.onClose = null;
    this.size--;
    const waited = (performance.now() - entry.since) / 1000;
    this.metrics.queueWait(item.x.model, waited);
    this.metrics.queueDepth(item.x.model, q.length);
    this.metrics.inFlight(item.x.model, -1);
    this.ctx.life.left();
    return waited;
  }

  private waitedText(q: WaitQueue<Queued>): string {
    const head = q.peek();
    return head === null ? '0 s' : `${((performance.now() - head.since) / 1000).toFixed(1)} s`;
  }

  /** A call of the model ended: the oldest waiting requests go while a slot is free. */
  drainQueue(model: string, counter: ModelCounter): void {
    if (this.draining) return;
    const q = counter.queue as WaitQueue<Queued> | null;
    if (q === null || q.length === 0) return;
    this.draining = true;
    try {
      const replicas = this.fleet.readyReplicas(model);
      // none ready (a replica being replaced where there is no room for a second copy): the queue
      // waits for the new one, and goes as soon as it is ready
      if (replicas.length === 0) this.wakeOnReady(model, counter);
      while (replicas.length > 0) {
        const head = q.peek();
        if (head === null || !this.choice.hasFreeSlot(replicas, head.value.x.slots, performance.now())) break;
        q.shift();
        this.leaveQueue(head.value, head, q);
        this.host.dispatch(head.value.x, replicas, true);
      }
    } finally {
      this.draining = false;
    }
  }

  /**
   * Drains the model's queue once a replica of it is ready (FleetView.waitReady follows the
   * snapshots, so with no delay of the router's own); one wait per model at a time.
   */
  private wakeOnReady(model: string, counter: ModelCounter): void {
    if (counter.waking || this.ctx.life.shuttingDown) return;
    counter.waking = true;
    const timeoutMs = this.fleet.spec()?.models[model]?.queue.timeoutMs ?? 60_000;
    void this.fleet.waitReady(model, { timeoutMs, signal: this.ctx.life.signal }).then((ready) => {
      counter.waking = false;
      if (counter.queue === null || counter.queue.length === 0 || this.ctx.life.shuttingDown) return;
      if (ready.length > 0) this.drainQueue(model, counter);
      // parked, unplaceable or the timeout: the waiting requests time out on their own; look again in a while
      else setTimeout(() => this.drainQueue(model, counter), 1000).unref();
    });
  }

  /** Drains every model's queue that has a free slot (after the /slots refresh saw other routers' load drop). */
  drainQueues(): void {
    for (const [model, counter] of this.ctx.modelInFlight) if (counter.queue !== null && counter.queue.length > 0) this.drainQueue(model, counter);
  }

  /** Shutdown: the requests still waiting for a slot never started; they are answered now, to retry elsewhere. */
  refuseAll(): void {
  for (const counter of this.ctx.modelInFlight.values()) {
    const q = counter.queue as WaitQueue<Queued> | null;
    for (let e = q?.shift() ?? null; e !== null; e = q!.shift()) {
      this.leaveQueue(e.value, e, q!);
      this.host.fail(e.value.x, new RouterError('ROUTER_SHUTTING_DOWN', `The router is shutting down; the request was still waiting in model '${e.value.x.model}''s queue.`, { retryAfterSeconds: 1 }));
    }
  }
  }
}
