/**
 * Per-key limits of access/keys.yaml, enforced at the router before a request reaches a replica.
 * Pure but for the state it keeps: the clock is injected (`now()` in milliseconds), so the table tests
 * in test/unit/router-limits.test.ts drive it through time by hand.
 *
 * Each limited scope (a key over all its models, and a key on one model) keeps
 * - a sliding 60 s log of admitted requests (requests_per_minute: a request is admitted while fewer
 *   than the limit were admitted in the last 60 s);
 * - a sliding 60 s log of tokens charged (tokens_per_minute: a request is admitted while fewer than
 *   the limit were charged in the last 60 s; it is charged what the replica reported when it ends,
 *   so one that ran over is charged in full and holds the next ones back);
 * - the requests in progress (concurrency).
 * A refused request changes nothing. Retry-After is the time until the window admits one more (for
 * concurrency, which frees when some request ends, 1 s).
 *
 * Limits are passed with every call (from the spec the request was admitted under), so a new
 * revision of access/keys.yaml takes effect at the next request; counts are kept by key name and
 * model, so they carry over a revision.
 */
import type { KeyLimits } from '../fleet-spec/types.js';

export const WINDOW_MS = 60_000;

export type LimitCode = 'KEY_RATE_LIMITED' | 'KEY_TOKENS_LIMITED' | 'KEY_CONCURRENCY_LIMITED';

/** Amounts charged at times, summed over the last WINDOW_MS. */
export class SlidingWindow {
  private times: number[] = [];
  private amounts: number[] = [];
  private head = 0;
  private sum = 0;

  /** The total charged in (now - WINDOW_MS, now]. */
  total(now: number): number {
    this.evict(now);
    return this.sum;
  }

  /**
   * Charges `amount` at `now`. Charges in the same millisecond share one entry: the totals, the
   * evictions and waitMs (which answers with an entry's time) are the same as with an entry each,
   * and a key at thousands of requests a second keeps at most 60,000 entries per window instead of
   * one per request (the arrays' growth and the GC work that came with them were most of the limit
   * check's cost through the real router, bench:router).
   */
  add(now: number, amount: number): void {
    if (amount <= 0) return;
    const last = this.times.length - 1;
    if (last >= this.head && this.times[last] === now) this.amounts[last]! += amount;
    else {
      this.times.push(now);
      this.amounts.push(amount);
    }
    this.sum += amount;
  }

  /** Milliseconds until the total is at most `limit - need` (0 when it is now). */
  waitMs(now: number, limit: number, need: number): number {
    this.evict(now);
    let s = this.sum;
    if (s + need <= limit) return 0;
    for (let i = this.head; i < this.times.length; i++) {
      s -= this.amounts[i]!;
      if (s + need <= limit) return this.times[i]! + WINDOW_MS - now;
    }
    return WINDOW_MS;
  }

  private evict(now: number): void {
    const from = now - WINDOW_MS;
    const t = this.times;
    let h = this.head;
    while (h < t.length && t[h]! <= from) this.sum -= this.amounts[h++]!;
    if (h === t.length) {
      this.times = [];
      this.amounts = [];
      this.head = 0;
      this.sum = 0;
      return;
    }
    if (h > 1024 && h * 2 > t.length) {
      this.times = t.slice(h);
      this.amounts = this.amounts.slice(h);
      h = 0;
    }
    this.head = h;
  }
}

/** One limited scope's counts. */
export class ScopeState {
  readonly requests = new SlidingWindow();
  readonly tokens = new SlidingWindow();
  active = 0;

  /** True when it holds nothing at `now` (nothing in progress, both windows empty). */
  idle(now: number): boolean {
    return this.active === 0 && this.requests.total(now) === 0 && this.tokens.total(now) === 0;
  }
}

export interface Refusal {
  readonly code: LimitCode;
  readonly retryAfterSeconds: number;
  /** Which limit, for the message: "key 'team-a'" or "key 'team-a' on model 'm'". */
  readonly scope: string;
  /** The limit this router enforces (its share when several routers share it). */
  readonly limit: number;
  /** The limit in access/keys.yaml, and the routers sharing it (1: this one alone). */
  readonly declared: number;
  readonly routers: number;
}

/** A router's share of a limit shared by `routers` routers (at least 1). */
export function shareOf(limit: number, routers: number): number {
  return routers <= 1 ? limit : Math.max(1, Math.ceil(limit / routers));
}

/** An admitted request's hold on its scopes; `end(tokens)` releases it once (later calls do nothing). */
export class Ticket {
  private done = false;
  constructor(
    private readonly limiter: KeyLimiter,
    private readonly a: ScopeState | null,
    private readonly b: ScopeState | null,
  ) {}

  end(tokens: number): void {
    if (this.done) return;
    this.done = true;
    const now = this.limiter.now();
    if (this.a !== null) {
      this.a.active--;
      this.a.tokens.add(now, tokens);
    }
    if (this.b !== null) {
      this.b.active--;
      this.b.tokens.add(now, tokens);
    }
  }
}

/** Each field the smaller of the two (null: no limit). */
export function tighter(a: KeyLimits | null | undefined, b: KeyLimits | null | undefined): KeyLimits | null {
  if (!a) return b ?? null;
  if (!b) return a;
  const min = (x: number | null, y: number | null): number | null => (x === null ? y : y === null ? x : Math.min(x, y));
  return { requestsPerMinute: min(a.requestsPerMinute, b.requestsPerMinute), tokensPerMinute: min(a.tokensPerMinute, b.tokensPerMinute), concurrency: min(a.concurrency, b.concurrency) };
}

/** The scope's name in a refusal's message. */
const scopeName = (key: string, model: string | null): string => (model === null ? `key '${key}'` : `key '${key}' on model '${model}'`);

/**
 * The first limit of `l` the scope (of `key`, on `model` or all its models when null) is at, or null.
 * With `routers` > 1 routers sharing the limits (several instances on etcd), this one enforces its
 * share of each (shareOf).
 */
export function check(s: ScopeState, l: KeyLimits, now: number, key: string, model: string | null, routers = 1): Refusal | null {
  if (l.concurrency !== null) {
    const c = shareOf(l.concurrency, routers);
    if (s.active >= c) return { code: 'KEY_CONCURRENCY_LIMITED', retryAfterSeconds: 1, scope: scopeName(key, model), limit: c, declared: l.concurrency, routers };
  }
  if (l.requestsPerMinute !== null) {
    const r = shareOf(l.requestsPerMinute, routers);
    const w = s.requests.waitMs(now, r, 1);
    if (w > 0) return { code: 'KEY_RATE_LIMITED', retryAfterSeconds: Math.max(1, Math.ceil(w / 1000)), scope: scopeName(key, model), limit: r, declared: l.requestsPerMinute, routers };
  }
  if (l.tokensPerMinute !== null) {
    const t = shareOf(l.tokensPerMinute, routers);
    const w = s.tokens.waitMs(now, t, 1);
    if (w > 0) return { code: 'KEY_TOKENS_LIMITED', retryAfterSeconds: Math.max(1, Math.ceil(w / 1000)), scope: scopeName(key, model), limit: t, declared: l.tokensPerMinute, routers };
  }
  return null;
}

interface KeyStates {
  readonly all: ScopeState;
  readonly byModel: Map<string, ScopeState>;
}

export class KeyLimiter {
  private readonly keys = new Map<string, KeyStates>();

  /**
   * `routers`: how many routers share the limits (the live instances on etcd, ha/router-shares.ts);
   * each enforces its share. 1 (alone) by default.
   */
  constructor(
    readonly now: () => number,
    private readonly routers: () => number = () => 1,
  ) {}

  /**
   * Admits a request of key `key` on `model` under the key's own limits and the key × model limits
   * (the caller combines those with the model's caps, see `tighter`), or says which limit refuses it.
   */
  admit(key: string, model: string, keyLimits: KeyLimits | null, modelLimits: KeyLimits | null): Ticket | Refusal {
    const now = this.now();
    const routers = this.routers();
    let ks = this.keys.get(key);
    if (ks === undefined) {
      ks = { all: new ScopeState(), byModel: new Map() };
      this.keys.set(key, ks);
    }
    let a: ScopeState | null = null;
    if (keyLimits !== null) {
      a = ks.all;
      const r = check(a, keyLimits, now, key, null, routers);
      if (r !== null) return r;
    }
    let b: ScopeState | null = null;
    if (modelLimits !== null) {
      b = ks.byModel.get(model) ?? null;
      if (b === null) {
        b = new ScopeState();
        ks.byModel.set(model, b);
      }
      const r = check(b, modelLimits, now, key, model, routers);
      if (r !== null) return r;
    }
    if (a !== null) {
      a.active++;
      a.requests.add(now, 1);
    }
    if (b !== null) {
      b.active++;
      b.requests.add(now, 1);
    }
    return new Ticket(this, a, b);
  }

  /** Drops the counts of scopes that hold nothing any more (keys gone from the spec, models no longer used). */
  sweep(): void {
    const now = this.now();
    for (const [key, ks] of this.keys) {
      for (const [model, s] of ks.byModel) if (s.idle(now)) ks.byModel.delete(model);
      if (ks.byModel.size === 0 && ks.all.idle(now)) this.keys.delete(key);
    }
  }

  /** Keys with counts kept (for tests). */
  get size(): number {
    return this.keys.size;
  }
}

const WHAT: Record<LimitCode, string> = {
  KEY_RATE_LIMITED: 'requests per minute',
  KEY_TOKENS_LIMITED: 'tokens per minute',
  KEY_CONCURRENCY_LIMITED: 'requests in progress',
};

/** The message of a refusal (names the key, never its value). */
export function refusalMessage(r: Refusal): string {
  const shared = r.routers > 1 ? `, this router's share of ${r.declared} over ${r.routers} routers` : '';
  return r.code === 'KEY_CONCURRENCY_LIMITED'
    ? `The API key's limit is reached: ${r.scope} allows ${r.limit} ${WHAT[r.code]} (access/keys.yaml${shared}); retry when one ends.`
    : `The API key's limit is reached: ${r.scope} allows ${r.limit} ${WHAT[r.code]} (access/keys.yaml${shared}); retry after ${r.retryAfterSeconds} s.`;
}
