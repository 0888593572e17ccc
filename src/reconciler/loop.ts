/**
 * The single-flight loop: triggers (poll timer, webhook, admin, router demand, a start that
 * finished, a due time) only request a pass; passes never overlap, and requests made during a pass
 * coalesce into one next pass. Timers are the loop's only clock-driven I/O.
 */
/**
 * The trigger of a demand whose fresh placement is a start and nothing else (pass.ts freshPlacement):
 * the pass it asks for decides on the last look (Reconciler.startNow, #38). Coalesced with others
 * (asked for while a pass runs), it is a whole pass like any.
 */
export const DEMAND_START = 'demand-start';

/**
 * The trigger of the RPC groups' watch (#40): while the record holds a group, a look at the nodes
 * every GROUP_WATCH_MS (without a sync of the fleet repo), so a dead worker is seen within 10 s
 * whatever the poll interval; a head's /health does not say it (group-health.ts).
 */
export const GROUP_WATCH = 'group-watch';
export const GROUP_WATCH_MS = 4_000;

export interface LoopTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(t: unknown): void;
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(t: unknown): void;
}

export const nodeTimers: LoopTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (t) => clearTimeout(t as NodeJS.Timeout),
  setInterval: (fn, ms) => setInterval(fn, ms).unref(),
  clearInterval: (t) => clearInterval(t as NodeJS.Timeout),
};

/** setTimeout's longest delay (about 24.8 days); a later due time gets a pass then, which re-arms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export class PassLoop {
  private running: Promise<void> | null = null;
  private next: { promise: Promise<void>; resolve: () => void } | null = null;
  private poll: { ms: number; timer: unknown } | null = null;
  private wake: { at: number; timer: unknown } | null = null;
  private watch: unknown = null;
  private stopped = false;

  constructor(
    private readonly pass: (trigger: string) => Promise<void>,
    private readonly clock: () => number,
    private readonly timers: LoopTimers = nodeTimers,
  ) {}

  get isStopped(): boolean {
    return this.stopped;
  }

  /** Asks for a pass. Resolves when a pass that began after this call has finished. */
  request(trigger: string): Promise<void> {
    if (trigger === 'start') this.stopped = false;
    else if (this.stopped) return Promise.resolve();
    if (!this.running) {
      this.running = this.run(trigger);
      return this.running;
    }
    if (!this.next) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.next = { promise, resolve };
    }
    return this.next.promise;
  }

  private async run(trigger: string): Promise<void> {
    try {
      await this.pass(trigger);
    } finally {
      const next = this.next;
      this.next = null;
      this.running = null;
      if (next && !this.stopped) {
        this.running = this.run('coalesced');
        void this.running.then(next.resolve, next.resolve);
      } else next?.resolve();
    }
  }

  /** A pass every `ms` (re-armed only when the interval changes). */
  pollEvery(ms: number): void {
    if (this.stopped || ms <= 0 || this.poll?.ms === ms) return;
    if (this.poll) this.timers.clearInterval(this.poll.timer);
    this.poll = { ms, timer: this.timers.setInterval(() => void this.request('poll'), ms) };
  }

  /** The groups' watch on (a GROUP_WATCH pass every GROUP_WATCH_MS) or off. */
  watchGroups(on: boolean): void {
    if (this.stopped || on === (this.watch !== null)) return;
    if (on) this.watch = this.timers.setInterval(() => void this.request(GROUP_WATCH), GROUP_WATCH_MS);
    else {
      this.timers.clearInterval(this.watch);
      this.watch = null;
    }
  }

  /**
   * A pass at `at` (epoch ms), unless one is due sooner already. A time that has passed already (it
   * came due while the pass that found it was running) gets a pass at once.
   */
  wakeAt(at: number | null): void {
    const now = this.clock();
    if (this.stopped || at === null) return;
    if (this.wake && this.wake.at <= at) return;
    if (this.wake) this.timers.clearTimeout(this.wake.timer);
    this.wake = {
      at,
      timer: this.timers.setTimeout(() => {
        this.wake = null;
        void this.request('wake');
      }, Math.min(MAX_TIMER_MS, Math.max(0, at - now) + 5)),
    };
  }

  /** Stops the timers; resolves when the pass running now has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.poll) this.timers.clearInterval(this.poll.timer);
    if (this.wake) this.timers.clearTimeout(this.wake.timer);
    if (this.watch !== null) this.timers.clearInterval(this.watch);
    this.watch = null;
    this.poll = null;
    this.wake = null;
    await this.running?.catch(() => undefined);
  }
}
