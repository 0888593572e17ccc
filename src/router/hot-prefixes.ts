/**
 * The router's hot prefixes (pure): per model, the affinity keys it served (affinity.ts; the
 * isolated key where the API key has `isolate_cache: true`, so one key's prefixes never share an
 * entry with another's) with the last request of each in the form it can be replayed — its path and
 * its body's bytes as the client sent them (the messages, tools and template options that make the
 * prompt; for a conversation, its latest turn, which holds every earlier one) — ranked for a new
 * replica's warm-up (warmer.ts).
 *
 * The rank: each request adds 1 to its entry's heat, and its answer adds the prompt tokens it took
 * from the cache ÷ SAVED_TOKENS_PER_POINT (a prefix that saves thousands of tokens ranks above one
 * just as frequent that saves none); the heat halves every HALF_LIFE_MS without traffic (recency).
 *
 * Bounds, per model: HOT_ENTRIES entries and HOT_BYTES bytes of bodies (a body over
 * HOT_ENTRY_BYTES is not kept); over either, the lowest-ranked entry goes. Over all models,
 * HOT_TOTAL_BYTES: the model holding the most bytes gives up its lowest-ranked entry first (a fleet of
 * a thousand busy models keeps 64 KiB of each). Models no longer in the spec are dropped (`retain`). A request costs a map lookup, and a copy of its body only when the
 * entry's body changes length (a conversation's next turn).
 */

/** Entries kept per model. */
export const HOT_ENTRIES = 64;
/** Bytes of request bodies kept per model. */
export const HOT_BYTES = 4 * 1024 * 1024;
/** Bytes of request bodies kept over every model. */
export const HOT_TOTAL_BYTES = 64 * 1024 * 1024;
/** A request body larger than this is not kept (it would crowd out the rest). */
export const HOT_ENTRY_BYTES = 1024 * 1024;
/** The heat of an entry without traffic halves in this time. */
export const HALF_LIFE_MS = 10 * 60_000;
/** Prompt tokens taken from the cache that weigh as much as one request. */
export const SAVED_TOKENS_PER_POINT = 1024;

/** One hot prefix: what replays it, and its rank's inputs. */
export class HotEntry {
  /** Heat at `at` (decays from there). */
  heat = 0;
  /** Prompt tokens of the last answered request (evaluated + from cache); 0: not known. */
  tokens = 0;
  constructor(
    readonly key: number,
    public path: string,
    public body: Buffer,
    /** Epoch ms of the last request. */
    public at: number,
  ) {}

  /** The answer to a request of this prefix: `cached` of its `prompt` tokens came from the replica's cache. */
  answered(cached: number, prompt: number): void {
    this.heat += Math.max(0, cached) / SAVED_TOKENS_PER_POINT;
    if (prompt > 0) this.tokens = prompt;
  }
}

/** The heat of `e` at `now`. */
export function rankOf(e: HotEntry, now: number, halfLifeMs = HALF_LIFE_MS): number {
  const age = Math.max(0, now - e.at);
  return e.heat * Math.pow(2, -age / halfLifeMs);
}

export interface HotBounds {
  readonly entries: number;
  readonly bytes: number;
  readonly totalBytes: number;
  readonly entryBytes: number;
  readonly halfLifeMs: number;
}

export const HOT_BOUNDS: HotBounds = { entries: HOT_ENTRIES, bytes: HOT_BYTES, totalBytes: HOT_TOTAL_BYTES, entryBytes: HOT_ENTRY_BYTES, halfLifeMs: HALF_LIFE_MS };

class ModelTable {
  readonly m = new Map<number, HotEntry>();
  bytes = 0;
}

export class HotPrefixes {
  private readonly models = new Map<string, ModelTable>();
  /** Bytes of bodies over every model. */
  private total = 0;

  constructor(private readonly bounds: HotBounds = HOT_BOUNDS) {}

  /**
   * A request of `model` with affinity key `key` was sent (`now` epoch ms): its entry, counted and
   * holding this body; null when the body is too large to keep.
   */
  seen(model: string, key: number, path: string, body: Buffer, now: number): HotEntry | null {
    const b = this.bounds;
    if (body.length > b.entryBytes || body.length === 0) return null;
    let t = this.models.get(model);
    if (t === undefined) {
      t = new ModelTable();
      this.models.set(model, t);
    }
    let e = t.m.get(key);
    if (e === undefined) {
      e = new HotEntry(key, path, Buffer.from(body), now);
      t.m.set(key, e);
      t.bytes += body.length;
      this.total += body.length;
    } else {
      e.heat = rankOf(e, now, b.halfLifeMs);
      e.at = Math.max(e.at, now);
      e.path = path;
      if (e.body.length !== body.length) {
        t.bytes += body.length - e.body.length;
        this.total += body.length - e.body.length;
        e.body = Buffer.from(body);
      }
    }
    e.heat += 1;
    while (t.m.size > b.entries || t.bytes > b.bytes) if (!this.evict(t, now, e)) break;
    while (this.total > b.totalBytes) if (!this.evict(this.largest(), now, e)) break;
    return t.m.get(key) === e ? e : null;
  }

  /** Drops the lowest-ranked entry of `t` (`keep` last); false when it has none. */
  private evict(t: ModelTable | null, now: number, keep: HotEntry): boolean {
    const low = t === null ? null : lowest(t, now, this.bounds.halfLifeMs, keep);
    if (t === null || low === null) return false;
    t.m.delete(low.key);
    t.bytes -= low.body.length;
    this.total -= low.body.length;
    return true;
  }

  /** The table holding the most bytes. */
  private largest(): ModelTable | null {
    let big: ModelTable | null = null;
    for (const t of this.models.values()) if (big === null || t.bytes > big.bytes) big = t;
    return big;
  }

  /** The model's entries, hottest first, at most `n`. */
  hottest(model: string, n: number, now: number): HotEntry[] {
    const t = this.models.get(model);
    if (t === undefined || n <= 0) return [];
    const hl = this.bounds.halfLifeMs;
    return [...t.m.values()]
      .map((e) => ({ e, r: rankOf(e, now, hl) }))
      .sort((x, y) => y.r - x.r || y.e.at - x.e.at)
      .slice(0, n)
      .map((x) => x.e);
  }

  /** Entries and bytes kept for a model (for tests and status). */
  size(model: string): { entries: number; bytes: number } {
    const t = this.models.get(model);
    return { entries: t?.m.size ?? 0, bytes: t?.bytes ?? 0 };
  }

  /** Bytes kept over every model. */
  get totalBytes(): number {
    return this.total;
  }

  /** Drops the tables of models not in `models`. */
  retain(models: ReadonlySet<string>): void {
    for (const [name, t] of this.models) {
      if (models.has(name)) continue;
      this.total -= t.bytes;
      this.models.delete(name);
    }
  }
}

/** The lowest-ranked entry of a table but `keep` (the one just counted goes last); null when the table is empty. */
function lowest(t: ModelTable, now: number, halfLifeMs: number, keep: HotEntry): HotEntry | null {
  let low: HotEntry | null = null;
  let lowRank = Infinity;
  for (const e of t.m.values()) {
    if (e === keep) continue;
    const r = rankOf(e, now, halfLifeMs);
    if (r < lowRank || (r === lowRank && low !== null && e.at < low.at)) {
      low = e;
      lowRank = r;
    }
  }
  // only `keep` is left and it alone is over a bound: it goes
  return low ?? (t.m.size > 0 ? keep : null);
}
