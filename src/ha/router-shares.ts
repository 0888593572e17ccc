/**
 * How many routers share the per-key limits (src/router/limits.ts), for instances on etcd: each
 * instance keeps a key `<prefix>/routers/<id>` on a lease of its own (kept alive by etcd3, so a
 * SIGKILLed instance's key goes within the lease TTL) and counts the keys under `<prefix>/routers/`
 * every `refreshMs`. Each router then enforces its share of every limit (router/limits.ts shareOf:
 * the limit ÷ live routers floored, one more for each of the remainder's lowest ids, so the shares
 * sum to the limit): no etcd traffic per request, one read per refresh. Clients spread over the
 * routers (a load balancer, DNS) keep the whole fleet within the limit; a client pinned to one router
 * gets that router's share. Whenever etcd cannot be read the last count stands; until the first
 * count there is none (routers() is null) and limited keys are refused (KEY_LIMITS_UNCOUNTED): a
 * router started while etcd is unreachable never enforces the whole limit by itself.
 *
 * Shell: the refresh waits on, and the registration's time comes from, the injected ShellTime; this
 * file reads no clock and sets no timer of its own.
 */
import type { Etcd3, Lease } from 'etcd3';
import type { LoadReport } from '../scale/decide.js';
import type { ShellTime } from './shell-time.js';

/** This router's place among those sharing the limits (router/limits.ts RouterSlot): how many, its rank (0: the lowest id). */
export interface RouterSlot {
  readonly routers: number;
  readonly rank: number;
}

export interface RouterSharesLog {
  warn(obj: object, msg: string): void;
}

export class RouterShares {
  private slot: RouterSlot | null = null;
  /** This router's load report (#42), written beside its key each refresh; null: none. */
  private load: (() => LoadReport) | null = null;
  /** This router's report as loadReports() reads it (the leader's pass): a reader of its own. */
  private own: (() => LoadReport) | null = null;
  /** The other routers' load reports as the last refresh read them. */
  private others: readonly LoadReport[] = [];
  private lease: Lease | null = null;
  private timer: unknown = null;
  private stopped = false;

  constructor(
    private readonly client: Etcd3,
    private readonly prefix: string,
    private readonly id: string,
    private readonly ttlSeconds: number,
    private readonly refreshMs: number,
    private readonly time: ShellTime,
    private readonly log: RouterSharesLog | null = null,
  ) {}

  /**
   * Scaling (#42): each refresh writes this router's load report to `<prefix>/load/<id>` (on its
   * lease: gone with the instance) and reads every other router's; the leader scales on them all.
   * A report holds the peaks since its reader's last one (router/load-report.ts): `own`, the reader
   * loadReports() takes this router's report from, is another than the refresh's (`load`), so
   * neither takes the other's peaks.
   */
  reportLoad(load: () => LoadReport, own: () => LoadReport = load): void {
    this.load = load;
    this.own = own;
  }

  /** Every router's load: this one's now, the others' as the last refresh read them (each with the time it was taken). */
  loadReports(): LoadReport[] {
    return [...(this.own ? [this.own()] : []), ...this.others];
  }

  /** The live routers and this one's rank among their ids; null until the first count. */
  routers(): RouterSlot | null {
    return this.slot;
  }

  start(): void {
    const tick = (): void => {
      void this.refresh().finally(() => {
        if (!this.stopped) this.timer = this.time.timers.setTimeout(tick, this.refreshMs);
      });
    };
    tick();
  }

  /** Registers this router (again, if its lease was lost) and counts the live ones. */
  async refresh(): Promise<void> {
    try {
      if (this.lease === null) {
        const lease = this.client.lease(this.ttlSeconds);
        lease.on('lost', () => {
          if (this.lease === lease) this.lease = null;
        });
        await lease.put(`${this.prefix}/routers/${this.id}`).value(String(this.time.now()));
        this.lease = lease;
      }
      const keys = await this.client.getAll().prefix(`${this.prefix}/routers/`).keys();
      this.slot = slotAmong(keys, `${this.prefix}/routers/${this.id}`);
      if (this.load && this.lease) {
        await this.lease.put(`${this.prefix}/load/${this.id}`).value(JSON.stringify(this.load()));
        const all = await this.client.getAll().prefix(`${this.prefix}/load/`).strings();
        this.others = Object.entries(all).flatMap(([k, v]) => (k === `${this.prefix}/load/${this.id}` ? [] : reportOf(v)));
      }
    } catch (err) {
      this.log?.warn({ err, routers: this.slot?.routers ?? null }, this.slot ? 'router shares: etcd not readable; keeping the last count of routers' : 'router shares: etcd not readable and no count yet; limited keys are refused until one');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) this.time.timers.clearTimeout(this.timer);
    const lease = this.lease;
    this.lease = null;
    await lease?.revoke().catch(() => undefined);
  }
}

/**
 * This router's slot among the registered keys: how many, and its rank in their order (byte order of
 * the keys: the lowest id is rank 0). Its own key missing (a lease just lost) counts it last. Pure.
 */
export function slotAmong(keys: readonly string[], own: string): RouterSlot {
  const sorted = [...new Set(keys)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const rank = sorted.indexOf(own);
  return rank < 0 ? { routers: sorted.length + 1, rank: sorted.length } : { routers: sorted.length, rank };
}

/** A load report read from etcd, or none when it is not one (pure). */
export function reportOf(text: string): LoadReport[] {
  try {
    const v = JSON.parse(text) as Partial<LoadReport>;
    if (typeof v.router !== 'string' || typeof v.at !== 'number' || !Number.isFinite(v.at) || typeof v.models !== 'object' || v.models === null) return [];
    const models: Record<string, { busy: number; queued: number; waitMs?: number }> = {};
    for (const [m, l] of Object.entries(v.models)) {
      const busy = Number((l as { busy?: unknown }).busy);
      const queued = Number((l as { queued?: unknown }).queued);
      const waitMs = Number((l as { waitMs?: unknown }).waitMs);
      if (Number.isFinite(busy) && Number.isFinite(queued)) models[m] = { busy: Math.max(0, busy), queued: Math.max(0, queued), ...(Number.isFinite(waitMs) && waitMs > 0 ? { waitMs } : {}) };
    }
    return [{ router: v.router, at: v.at, models }];
  } catch {
    return [];
  }
}
