/**
 * How many routers share the per-key limits (src/router/limits.ts), for instances on etcd: each
 * instance keeps a key `<prefix>/routers/<id>` on a lease of its own (kept alive by etcd3, so a
 * SIGKILLed instance's key goes within the lease TTL) and counts the keys under `<prefix>/routers/`
 * every `refreshMs`. Each router then enforces its share (limit / live routers, rounded up) of every
 * limit: no etcd traffic per request, one read per refresh. Clients spread over the routers (a load
 * balancer, DNS) keep the whole fleet within the limit; a client pinned to one router gets that
 * router's share. Until the first count, and whenever etcd cannot be read, the last count stands
 * (at first 1: each router enforces the whole limit).
 *
 * Shell: the refresh waits on, and the registration's time comes from, the injected ShellTime; this
 * file reads no clock and sets no timer of its own.
 */
import type { Etcd3, Lease } from 'etcd3';
import type { ShellTime } from './shell-time.js';

export interface RouterSharesLog {
  warn(obj: object, msg: string): void;
}

export class RouterShares {
  private n = 1;
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

  /** The live routers (at least 1). */
  routers(): number {
    return this.n;
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
      this.n = Math.max(1, keys.length);
    } catch (err) {
      this.log?.warn({ err, routers: this.n }, 'router shares: etcd not readable; keeping the last count of routers');
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
