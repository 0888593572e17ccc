/**
 * The router's life as its requests see it: serving, then shutting down (`RouterLife`), and the
 * wait for the requests in progress to end (`Lifecycle`, owned by core.ts). The calls (proxy.ts) and
 * the slot queues read `shuttingDown` and say `left()` when a request stops being in progress; only
 * the core starts the shutdown and waits.
 */
import type { RouterError } from './errors.js';

/** What the parts of a request see of the router's life. */
export interface RouterLife {
  /** True once the router is shutting down: responses say `connection: close`, new requests get 503. */
  readonly shuttingDown: boolean;
  /** Aborted when the router shuts down (ends the waits for a model's activation or a ready replica). */
  readonly signal: AbortSignal;
  /** A request stopped being in progress: the router may be idle now. */
  left(): void;
}

export class Lifecycle implements RouterLife {
  /** Set by `stop()` only (a field, not a getter: read on every request and every response's head). */
  shuttingDown = false;
  private readonly shutdown = new AbortController();
  /** The drain's wait for idleness (null: nobody waits). */
  private waiter: (() => void) | null = null;

  /** `busy`: the requests in progress now. */
  constructor(private readonly busy: () => number) {}

  get signal(): AbortSignal {
    return this.shutdown.signal;
  }

  left(): void {
    if (this.waiter !== null && this.busy() === 0) this.waiter();
  }

  /** Starts the shutdown (once): the waits are cut with `why`. */
  stop(why: RouterError): void {
    this.shuttingDown = true;
    if (!this.shutdown.signal.aborted) this.shutdown.abort(why);
  }

  /** Resolves when nothing is in progress, or after `ms`. */
  whenIdle(ms: number): Promise<void> {
    if (this.busy() === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.waiter = null;
        resolve();
      }, ms);
      this.waiter = () => {
        clearTimeout(t);
        this.waiter = null;
        resolve();
      };
    });
  }
}
