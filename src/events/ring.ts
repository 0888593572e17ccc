/**
 * The controller's recent events: a bounded ring (the oldest fall off), numbered in order so a
 * stream client that reconnects asks for what came after the last one it saw (Last-Event-ID).
 */
import type { FleetEventDraft } from './derive.js';

export interface FleetEvent extends FleetEventDraft {
  /** 1, 2, 3, … in the order this instance saw them (restarts at 1 with the process). */
  readonly seq: number;
}

export const DEFAULT_RING_SIZE = 500;

export interface EventQuery {
  /** Only events about this model (canonical name). */
  readonly model?: string;
  /** Only events numbered above this. */
  readonly after?: number;
  /** At most this many (the newest). */
  readonly limit?: number;
}

export class EventRing {
  private readonly buf: FleetEvent[] = [];
  private seq = 0;
  private readonly listenerSet = new Set<(e: FleetEvent) => void>();

  constructor(readonly size: number = DEFAULT_RING_SIZE) {
    if (!Number.isInteger(size) || size < 1) throw new Error(`an event ring holds at least one event (got ${size})`);
  }

  /** Numbers and keeps the events (in the order given); listeners hear each. */
  push(drafts: readonly FleetEventDraft[]): FleetEvent[] {
    const added: FleetEvent[] = [];
    for (const d of drafts) {
      const e: FleetEvent = { ...d, seq: ++this.seq };
      this.buf.push(e);
      added.push(e);
    }
    if (this.buf.length > this.size) this.buf.splice(0, this.buf.length - this.size);
    for (const e of added) for (const l of this.listenerSet) l(e);
    return added;
  }

  /** Newest first. */
  list(q: EventQuery = {}): FleetEvent[] {
    const out: FleetEvent[] = [];
    const limit = q.limit ?? this.size;
    for (let i = this.buf.length - 1; i >= 0 && out.length < limit; i--) {
      const e = this.buf[i]!;
      if (q.after !== undefined && e.seq <= q.after) break;
      if (q.model !== undefined && e.model !== q.model) continue;
      out.push(e);
    }
    return out;
  }

  /** The number of the newest event (0 before any). */
  get last(): number {
    return this.seq;
  }

  /** The number of the oldest event still kept (last + 1 when empty). */
  get first(): number {
    return this.buf[0]?.seq ?? this.seq + 1;
  }

  /** Streams listening now. */
  get listeners(): number {
    return this.listenerSet.size;
  }

  subscribe(listener: (e: FleetEvent) => void): () => void {
    this.listenerSet.add(listener);
    return () => this.listenerSet.delete(listener);
  }
}
