/**
 * Every router's figures of a canary step, for the HA leader (#34). Each instance's router keeps what
 * it saw of each arm (router/rollout-figures.ts RouterRollouts); clients may reach any of them, so the
 * leader must judge a step on all of them, not on its own router's alone.
 *
 * - Every instance publishes its windows of the steps its view shows (`live`) under
 *   `<prefix>/rollout-windows/<id>`, on a lease of its own (kept alive by etcd3: a killed instance's
 *   key goes within the lease TTL), once per `refreshMs` when they changed; with none the key is
 *   removed. The value is small and bounded (rollout/published-windows.ts).
 * - The leader reads the others' keys once per `refreshMs` (only while it leads) and checks each
 *   value: a malformed one is skipped with a warning (once per value), never counted. A router whose
 *   key is gone (or no longer well-formed) keeps the windows of the step being judged as last read
 *   well-formed: what it saw happened, and a router killed mid-step does not take its errors along.
 * - The leader's RolloutFigures (`figures()`) answers `window` with its own router's window plus every
 *   other router's of the same revision and the same `since` (a window of an older step or begun
 *   elsewhere is not counted); `restart` restarts its own router's window, and the standbys' routers
 *   follow the view's new `since` on their own (RouterRollouts.record).
 * What the leader judges on lags the routers by at most two refresh periods (one to publish, one to
 * read): fewer requests, never figures of another step.
 *
 * Shell: the refresh waits on the injected ShellTime's timers; this file reads no clock.
 */
import type { Etcd3, Lease } from 'etcd3';
import { decodeWindows, encodeWindows, keptWindows, summedWindow, type ModelWindow } from '../rollout/published-windows.js';
import type { CanaryWindow, RolloutFigures } from '../rollout/types.js';
import type { ShellTime } from './shell-time.js';

export interface RolloutBoardLog {
  warn(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

export interface RolloutBoardOptions {
  readonly client: Etcd3;
  readonly prefix: string;
  /** This instance's id (its key; its own key is not read back). */
  readonly id: string;
  readonly ttlSeconds: number;
  readonly refreshMs: number;
  readonly time: ShellTime;
  /** This instance's router's figures. */
  readonly local: RolloutFigures;
  /** Whether this instance's view shows the window's step (only those are published). */
  readonly live?: (model: string, w: ModelWindow) => boolean;
  readonly log?: RolloutBoardLog;
}

export class RolloutBoard {
  private lease: Lease | null = null;
  /** What is under this instance's key now (null: no key). */
  private published: string | null = null;
  /** The other routers' windows as last read, by instance id. */
  private others = new Map<string, ReadonlyMap<string, ModelWindow>>();
  /** Keys whose malformed value was warned about (key → that value). */
  private readonly warned = new Map<string, string>();
  private leading = false;
  private timer: unknown = null;
  private stopped = false;
  private refreshing: Promise<void> | null = null;

  constructor(private readonly o: RolloutBoardOptions) {}

  private get dir(): string {
    return `${this.o.prefix}/rollout-windows/`;
  }

  /** The leader's figures: every router's windows of the step added up; restarts go to this router's. */
  figures(): RolloutFigures {
    const local = this.o.local;
    return {
      window: (model: string, canaryDigest: string): CanaryWindow | null => {
        const sum = summedWindow(local.window(model, canaryDigest), canaryDigest, [...this.others.values()].map((w) => w.get(model)));
        if (sum !== null && sum.routers > 1) this.o.log?.debug({ model, digest: canaryDigest, routers: sum.routers }, 'rollout: the step judged on several routers\' figures');
        return sum?.window ?? null;
      },
      restart: (model, canaryDigest, since) => local.restart(model, canaryDigest, since),
      all: () => local.all(),
    };
  }

  /** This instance leads (it reads the others' windows from now on, the first time at once) or no longer does. */
  setLeading(leading: boolean): void {
    this.leading = leading;
    if (!leading) this.others = new Map();
    else if (!this.stopped) void this.refresh();
  }

  start(): void {
    const tick = (): void => {
      void this.refresh().finally(() => {
        if (!this.stopped) this.timer = this.o.time.timers.setTimeout(tick, this.o.refreshMs);
      });
    };
    tick();
  }

  /** Publishes this router's windows (when they changed) and, while leading, reads the others'. One at a time. */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        await this.publish();
        if (this.leading) await this.read();
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  private async publish(): Promise<void> {
    const live = this.o.live;
    const { value, dropped } = encodeWindows(this.o.local.all(), live ? (m, w) => live(m, w) : undefined);
    if (dropped.length > 0) this.o.log?.warn({ dropped }, 'rollout figures: too many canary windows to publish at once; the oldest are left out');
    try {
      if (value === null) {
        if (this.published !== null) await this.o.client.delete().key(this.key());
        this.published = null;
        return;
      }
      if (value === this.published && this.lease !== null) return;
      if (this.lease === null) {
        const lease = this.o.client.lease(this.o.ttlSeconds);
        lease.on('lost', () => {
          if (this.lease !== lease) return;
          this.lease = null;
          this.published = null;
        });
        this.lease = lease;
      }
      await this.lease.put(this.key()).value(value);
      this.published = value;
    } catch (err) {
      // a lease that may never have held the key is let go; the next try takes a fresh one
      const lease = this.lease;
      this.lease = null;
      this.published = null;
      void lease?.revoke().catch(() => undefined);
      this.o.log?.warn({ err }, 'rollout figures: could not publish this router\'s canary windows to etcd; the leader judges without them until the next try');
    }
  }

  private async read(): Promise<void> {
    let kvs: Record<string, string>;
    try {
      kvs = await this.o.client.getAll().prefix(this.dir).strings();
    } catch (err) {
      this.o.log?.warn({ err }, 'rollout figures: the other routers\' canary windows are not readable in etcd; the last read stands');
      return;
    }
    if (!this.leading) return;
    const read = new Map<string, ReadonlyMap<string, ModelWindow>>();
    for (const [key, raw] of Object.entries(kvs)) {
      const router = key.slice(this.dir.length);
      if (router === this.o.id) continue;
      const d = decodeWindows(raw);
      if (d.ok) {
        read.set(router, d.windows);
        this.warned.delete(key);
      } else if (this.warned.get(key) !== raw) {
        this.warned.set(key, raw);
        this.o.log?.warn({ key, problem: d.problem }, 'rollout figures: a router\'s canary windows in etcd are malformed; they are not counted');
      }
    }
    for (const key of [...this.warned.keys()]) if (!(key in kvs)) this.warned.delete(key);
    this.others = keptWindows(this.others, read, this.o.local.all());
  }

  private key(): string {
    return `${this.dir}${this.o.id}`;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) this.o.time.timers.clearTimeout(this.timer);
    await this.refreshing?.catch(() => undefined);
    const lease = this.lease;
    this.lease = null;
    await lease?.revoke().catch(() => undefined);
  }
}
