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
 * With several routers (instances on etcd) each enforces its share of every limit (shareOf: floored,
 * the remainder to the lowest ranks, so the shares sum to the limit); a router that has not counted
 * the others yet refuses limited keys (KEY_LIMITS_UNCOUNTED) rather than take the whole limit.
 *
 * Limits are passed with every call (from the spec the request was admitted under), so a new
 * revision of access/keys.yaml takes effect at the next request; counts are kept by key name and
 * model, so they carry over a revision.
 */
import type { KeyLimits } from '../fleet-spec/types.js';

export const WINDOW_MS = 60_000;

export type LimitCode = 'KEY_RATE_LIMITED' | 'KEY_TOKENS_LIMITED' | 'KEY_CONCURRENCY_LIMITED' | 'KEY_LIMITS_UNCOUNTED';

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

/**
 * This router's place among the routers sharing the limits (instances on etcd, ha/router-shares.ts):
 * how many there are and its rank among their ids (0: the lowest).
 */
export interface RouterSlot {
  readonly routers: number;
  readonly rank: number;
}

/**
 * What a KeyLimiter is told of the routers sharing its limits: a slot, a count (rank 0 of that
 * many), or null: not counted yet (a router whose etcd did not answer since it started), so it
 * cannot know its share and refuses limited keys (KEY_LIMITS_UNCOUNTED) rather than take the whole.
 */
export type RouterCount = RouterSlot | number | null;

/**
 * A router's share of a limit shared by `routers` routers: the limit ÷ routers floored, and one more
 * for each of the `limit mod routers` lowest ranks, so the shares sum to the limit (concurrency 1 over
 * 3 routers: 1, 0, 0). A share may be 0: that router refuses the scope and the others serve it.
 */
export function shareOf(limit: number, routers: number, rank = 0): number {
  if (routers <= 1) return limit;
  const r = Math.min(Math.max(0, rank), routers - 1);
  return Math.floor(limit / routers) + (r < limit % routers ? 1 : 0);
}

const slotOf = (c: RouterSlot | number): RouterSlot => (typeof c === 'number' ? { routers: Math.max(1, c), rank: 0 } : c);

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
 * With several routers sharing the limits (instances on etcd), this one enforces its share of each
 * (shareOf, by its rank).
 */
export function check(s: ScopeState, l: KeyLimits, now: number, key: string, model: string | null, slot: RouterSlot = { routers: 1, rank: 0 }): Refusal | null {
  const { routers, rank } = slot;
  const share = (limit: number): number => shareOf(limit, routers, rank);
  if (l.concurrency !== null) {
    const c = share(l.concurrency);
    if (s.active >= c) return { code: 'KEY_CONCURRENCY_LIMITED', retryAfterSeconds: 1, scope: scopeName(key, model), limit: c, declared: l.concurrency, routers };
  }
  if (l.requestsPerMinute !== null) {
    const r = share(l.requestsPerMinute);
    const w = s.requests.waitMs(now, r, 1);
    if (w > 0) return { code: 'KEY_RATE_LIMITED', retryAfterSeconds: Math.max(1, Math.ceil(w / 1000)), scope: scopeName(key, model), limit: r, declared: l.requestsPerMinute, routers };
  }
  if (l.tokensPerMinute !== null) {
    const t = share(l.tokensPerMinute);
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
   * `routers`: the routers sharing the limits (the live instances on etcd, ha/router-shares.ts) and
   * this one's rank; each enforces its share. 1 (alone) by default; null: not counted yet.
   */
  constructor(
    readonly now: () => number,
    private readonly routers: () => RouterCount = () => 1,
  ) {}

  /**
   * Admits a request of key `key` on `model` under the key's own limits and the key × model limits
   * (the caller combines those with the model's caps, see `tighter`), or says which limit refuses it.
   */
  admit(key: string, model: string, keyLimits: KeyLimits | null, modelLimits: KeyLimits | null): Ticket | Refusal {
    const now = this.now();
    const count = keyLimits !== null || modelLimits !== null ? this.routers() : 1;
    if (count === null) {
      // not counted yet: its share unknown, the router takes none rather than the whole
      return { code: 'KEY_LIMITS_UNCOUNTED', retryAfterSeconds: 1, scope: scopeName(key, keyLimits !== null ? null : model), limit: 0, declared: 0, routers: 0 };
    }
    const routers = slotOf(count);
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
  KEY_LIMITS_UNCOUNTED: '',
};

/** The message of a refusal (names the key, never its value). */
export function refusalMessage(r: Refusal): string {
  if (r.code === 'KEY_LIMITS_UNCOUNTED') {
    return `The API key has limits (${r.scope}, access/keys.yaml) that this router shares with the other instances, and it has not counted them yet (etcd has not answered since it started), so it does not know its share; retry, or through another instance.`;
  }
  const shared = r.routers > 1 ? `, this router's share of ${r.declared} over ${r.routers} routers` : '';
  return r.code === 'KEY_CONCURRENCY_LIMITED'
    ? `The API key's limit is reached: ${r.scope} allows ${r.limit} ${WHAT[r.code]} (access/keys.yaml${shared}); retry when one ends.`
    : `The API key's limit is reached: ${r.scope} allows ${r.limit} ${WHAT[r.code]} (access/keys.yaml${shared}); retry after ${r.retryAfterSeconds} s.`;
}
