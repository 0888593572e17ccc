/**
 * The published revision each router routes from, for drains (reconciler/routing-acks.ts): every
 * instance writes `<prefix>/routed/<id>` = `{"revision": N}` — the revision of the published save
 * its router now routes from (the head's mod revision, published-channel.ts) — on a lease of its
 * own (kept alive by etcd3: a SIGKILLed instance's key goes within the lease TTL), each time it
 * applies a save; the latest wins, one write at a time, and a failed write is tried again every
 * `retryMs`. The leader reads every router's key, and the live routers' keys of the limits
 * (`<prefix>/routers/<id>`, router-shares.ts), at most once per `maxAgeMs` however many drains ask:
 * a router registered there without a revision (starting, its write failing, an older llmgw) is
 * listed with none, and a drain waits for it.
 *
 * Shell: the retry waits on, and the read's age comes from, the injected ShellTime; this file reads
 * no clock and sets no timer of its own.
 */
import type { Etcd3, Lease } from 'etcd3';
import type { RouterApplied } from '../reconciler/routing-acks.js';
import type { ShellTime } from './shell-time.js';

export interface RouterRevisionsLog {
  warn(obj: object, msg: string): void;
}

export interface RouterRevisionsOptions {
  readonly client: Etcd3;
  readonly prefix: string;
  /** This instance's id (its key; left out of what others() lists). */
  readonly id: string;
  readonly ttlSeconds: number;
  /** How soon a failed write is tried again. */
  readonly retryMs: number;
  /** A read of the routers this recent answers again. */
  readonly maxAgeMs: number;
  readonly time: ShellTime;
  readonly log?: RouterRevisionsLog;
}

/**
 * The other routers as etcd lists them (pure): every id with a `routed/` key or a `routers/` key but
 * `own`, each with the revision its `routed/` value states (null: none, or not one this version
 * reads), in id order.
 */
export function routersApplied(prefix: string, own: string, routed: Readonly<Record<string, string>>, registered: readonly string[]): RouterApplied[] {
  const out = new Map<string, number | null>();
  for (const key of registered) if (key.startsWith(`${prefix}/routers/`)) out.set(key.slice(`${prefix}/routers/`.length), null);
  for (const [key, value] of Object.entries(routed)) if (key.startsWith(`${prefix}/routed/`)) out.set(key.slice(`${prefix}/routed/`.length), revisionOf(value));
  out.delete(own);
  return [...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([id, applied]) => ({ id, applied }));
}

/** The revision a `routed/` value states, or null (pure). */
export function revisionOf(text: string): number | null {
  try {
    const v = JSON.parse(text) as { revision?: unknown } | null;
    return v !== null && typeof v === 'object' && Number.isSafeInteger(v.revision) && (v.revision as number) > 0 ? (v.revision as number) : null;
  } catch {
    return null;
  }
}

export class RouterRevisions {
  private lease: Lease | null = null;
  /** The revision to write (the latest applied) and the one etcd holds under this instance's key. */
  private want: number | null = null;
  private written: number | null = null;
  private writing: Promise<void> | null = null;
  private retry: unknown = null;
  private warned = false;
  private last: { readonly at: number; readonly read: Promise<RouterApplied[] | null> } | null = null;
  private stopped = false;

  constructor(private readonly o: RouterRevisionsOptions) {}

  private get key(): string {
    return `${this.o.prefix}/routed/${this.o.id}`;
  }

  /** This instance's router routes from the published save at `revision` now. */
  applied(revision: number): void {
    this.want = revision;
    if (!this.stopped) this.writing ??= this.writeLatest();
  }

  private async writeLatest(): Promise<void> {
    try {
      while (!this.stopped && this.want !== null && this.want !== this.written) {
        const revision = this.want;
        if (this.lease === null) {
          const lease = this.o.client.lease(this.o.ttlSeconds);
          lease.on('lost', () => {
            if (this.lease !== lease) return;
            this.lease = null;
            this.written = null; // the key went with the lease: written again
            if (!this.stopped) this.writing ??= this.writeLatest();
          });
          this.lease = lease;
        }
        try {
          await this.lease.put(this.key).value(JSON.stringify({ revision }));
          this.written = revision;
          this.warned = false;
        } catch (err) {
          const lease = this.lease;
          this.lease = null;
          void lease?.revoke().catch(() => undefined);
          if (!this.warned) this.o.log?.warn({ err }, 'router revisions: could not write the snapshot revision this router routes from to etcd; drains wait for this router until it lands (tried again)');
          this.warned = true;
          if (!this.stopped && this.retry === null) {
            this.retry = this.o.time.timers.setTimeout(() => {
              this.retry = null;
              if (!this.stopped) this.writing ??= this.writeLatest();
            }, this.o.retryMs);
          }
          return;
        }
      }
    } finally {
      this.writing = null;
    }
  }

  /** Every other live router and the revision it routes from; null when etcd cannot be read now. */
  others(): Promise<RouterApplied[] | null> {
    const now = this.o.time.now();
    if (this.last && now - this.last.at >= 0 && now - this.last.at < this.o.maxAgeMs) return this.last.read;
    const read = this.read();
    this.last = { at: now, read };
    return read;
  }

  private async read(): Promise<RouterApplied[] | null> {
    try {
      const [routed, registered] = await Promise.all([this.o.client.getAll().prefix(`${this.o.prefix}/routed/`).strings(), this.o.client.getAll().prefix(`${this.o.prefix}/routers/`).keys()]);
      return routersApplied(this.o.prefix, this.o.id, routed, registered);
    } catch {
      return null;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retry !== null) this.o.time.timers.clearTimeout(this.retry);
    this.retry = null;
    await this.writing?.catch(() => undefined);
    const lease = this.lease;
    this.lease = null;
    await lease?.revoke().catch(() => undefined);
  }
}
