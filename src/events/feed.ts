/**
 * The shell around deriveEvents: listens to the controller's snapshots (the Reconciler's, or the
 * HA shell's, which on a standby are the leader's published ones), derives what changed and keeps
 * it in the ring.
 */
import type { FleetSnapshot } from '../reconciler/view.js';
import { deriveEvents } from './derive.js';
import { EventRing } from './ring.js';

export interface SnapshotSource {
  snapshot(): FleetSnapshot;
  onSnapshot?(listener: (s: FleetSnapshot) => void): () => void;
}

export class EventFeed {
  readonly ring: EventRing;
  private prev: FleetSnapshot;
  private readonly listeners = new Set<(s: FleetSnapshot) => void>();
  private readonly off: () => void;

  constructor(private readonly source: SnapshotSource, opts: { ringSize?: number; pollMs?: number } = {}) {
    this.ring = new EventRing(opts.ringSize);
    this.prev = source.snapshot();
    if (source.onSnapshot) this.off = source.onSnapshot((s) => this.take(s));
    else {
      // a backend without snapshot events (a test fake): looked at instead
      const t = setInterval(() => this.take(source.snapshot()), opts.pollMs ?? 500);
      t.unref();
      this.off = () => clearInterval(t);
    }
  }

  /** The snapshot the feed saw last. */
  get current(): FleetSnapshot {
    return this.prev;
  }

  onSnapshot(fn: (s: FleetSnapshot) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  stop(): void {
    this.off();
    this.listeners.clear();
  }

  private take(s: FleetSnapshot): void {
    if (s === this.prev) return;
    const prev = this.prev;
    this.prev = s;
    this.ring.push(deriveEvents(prev, s));
    for (const l of this.listeners) l(s);
  }
}
