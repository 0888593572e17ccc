/**
 * The router's bound on the bytes it holds (RouterLimits.maxBufferedBytes), pure: the request bodies
 * of the requests in progress (core.ts) and what the redactor holds of an answer to a key not trusted
 * (redact.ts: a whole non-streamed body up to REDACT_HOLD_BYTES, a stream's unfinished line), so
 * many requests in flight cannot hold in-flight × 8 MiB between them. Past the bound the request that
 * would pass it ends with 503 ROUTER_OVERLOADED (a body before it is proxied; an answer held whole,
 * before its first byte reaches the client; a stream with its API's error event).
 */

/** Bytes held over all requests in progress, against one bound. */
export class ByteBudget {
  /** Bytes counted now (it may pass `max` by the take that was refused, until that request lets go). */
  held = 0;
  constructor(readonly max: number) {}

  /** Counts `n` more bytes; false when the total is now over the bound (they stay counted until given back). */
  take(n: number): boolean {
    this.held += n;
    return this.held <= this.max;
  }

  /** Gives back `n` bytes counted before. */
  give(n: number): void {
    this.held -= n;
  }
}

/**
 * What one response's redactor holds, kept counted in a ByteBudget: `hold(now)` after each chunk (the
 * difference is taken or given back), `release()` when the response closes (what was held may still
 * sit in the socket's buffer until then).
 */
export class HeldBytes {
  private counted = 0;
  constructor(private readonly budget: ByteBudget) {}

  /** The redactor holds `now` bytes; false when taking the difference passes the bound. */
  hold(now: number): boolean {
    const d = now - this.counted;
    this.counted = now;
    if (d >= 0) return d === 0 || this.budget.take(d);
    this.budget.give(-d);
    return true;
  }

  /** Gives back everything counted (idempotent; bound, so it may be passed as a listener). */
  readonly release = (): void => {
    this.budget.give(this.counted);
    this.counted = 0;
  };
}
