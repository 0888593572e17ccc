/**
 * A model's wait queue at the router: a bounded FIFO with O(1) push, shift and removal of any entry
 * (a client that goes away, a wait that times out). Pure: the timers and the answers are the caller's
 * (slot-queues.ts).
 */

export class QueueEntry<T> {
  /** @internal */
  prev: QueueEntry<T> | null = null;
  /** @internal */
  next: QueueEntry<T> | null = null;
  /** @internal */
  queued = false;
  constructor(
    readonly value: T,
    /** performance.now() when it joined the queue. */
    readonly since: number,
  ) {}
}

export class WaitQueue<T> {
  private head: QueueEntry<T> | null = null;
  private tail: QueueEntry<T> | null = null;
  private n = 0;

  get length(): number {
    return this.n;
  }

  /** Appends `value`, or returns null when `max` are already waiting. */
  push(value: T, since: number, max: number): QueueEntry<T> | null {
    if (this.n >= max) return null;
    const e = new QueueEntry(value, since);
    e.queued = true;
    e.prev = this.tail;
    if (this.tail) this.tail.next = e;
    else this.head = e;
    this.tail = e;
    this.n++;
    return e;
  }

  /** The oldest entry, without removing it. */
  peek(): QueueEntry<T> | null {
    return this.head;
  }

  /** Removes and returns the oldest entry. */
  shift(): QueueEntry<T> | null {
    const e = this.head;
    if (e) this.remove(e);
    return e;
  }

  /** Removes an entry wherever it is; false when it is no longer queued. */
  remove(e: QueueEntry<T>): boolean {
    if (!e.queued) return false;
    e.queued = false;
    if (e.prev) e.prev.next = e.next;
    else this.head = e.next;
    if (e.next) e.next.prev = e.prev;
    else this.tail = e.prev;
    e.prev = e.next = null;
    this.n--;
    return true;
  }

  /** The values in order (for tests and status). */
  values(): T[] {
    const out: T[] = [];
    for (let e = this.head; e; e = e.next) out.push(e.value);
    return out;
  }
}

/**
 * Seconds a refused client should wait before retrying: the time the requests ahead take to get a
 * slot at the observed service time, at least 1 s and at most `maxSeconds` (the queue timeout, and 60 s,
 * the longest Retry-After the OpenAI SDKs obey).
 */
export function retryAfterSeconds(waiting: number, slots: number, serviceSeconds: number, maxSeconds: number): number {
  const per = slots > 0 && Number.isFinite(slots) ? serviceSeconds / slots : serviceSeconds;
  const s = Math.ceil((waiting + 1) * per);
  return Math.max(1, Math.min(s, Math.max(1, Math.floor(maxSeconds)), 60));
}
