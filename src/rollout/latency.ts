/**
 * Latency as counts over fixed bounds, so figures from several routers add up by index and a
 * percentile is read from the counts (types.ts: LatencyCounts). Pure.
 */
import type { CacheState, LatencyCounts, PromptBand, TtftBucket } from './types.js';

/**
 * Upper bounds (ms) of the buckets: 1 ms to ~10 min, each ~19 % above the last (~1 % error at the
 * middle of a bucket when a percentile is read). A value above the last bound counts in an overflow
 * bucket at index LATENCY_BOUNDS_MS.length.
 */
export const LATENCY_BOUNDS_MS: readonly number[] = (() => {
  const out: number[] = [];
  for (let b = 1; b <= 600_000; b *= 1.19) out.push(Math.round(b * 1000) / 1000);
  return Object.freeze(out);
})();

/** The index of the bucket that counts `ms`. */
export function latencyIndex(ms: number): number {
  if (!(ms > LATENCY_BOUNDS_MS[0]!)) return 0;
  let lo = 0;
  let hi = LATENCY_BOUNDS_MS.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (LATENCY_BOUNDS_MS[mid]! < ms) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export const emptyCounts = (): number[] => new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);

/** counts + one value (a new array). */
export function withLatency(counts: LatencyCounts | undefined, ms: number): number[] {
  const out = counts === undefined ? emptyCounts() : [...counts];
  out[latencyIndex(ms)]! += 1;
  return out;
}

/** a + b by index (a new array). */
export function addCounts(a: LatencyCounts | undefined, b: LatencyCounts | undefined): number[] {
  const out = emptyCounts();
  for (let i = 0; i < out.length; i++) out[i] = (a?.[i] ?? 0) + (b?.[i] ?? 0);
  return out;
}

export const totalOf = (counts: LatencyCounts | undefined): number => (counts === undefined ? 0 : counts.reduce((s, n) => s + n, 0));

/**
 * The p-th percentile (0 < p ≤ 1) read from the counts: the bound of the bucket holding it,
 * interpolated within the bucket; null when there are no counts.
 */
export function percentile(counts: LatencyCounts | undefined, p: number): number | null {
  const n = totalOf(counts);
  if (counts === undefined || n === 0) return null;
  const rank = p * n;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i]!;
    if (c === 0) continue;
    if (seen + c >= rank) {
      const lower = i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1]!;
      const upper = i < LATENCY_BOUNDS_MS.length ? LATENCY_BOUNDS_MS[i]! : lower;
      return lower + (upper - lower) * ((rank - seen) / c);
    }
    seen += c;
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1]!;
}

/** The prompt-length band of a request (unknown: p0). */
export function bandOf(promptTokens: number | null): PromptBand {
  if (promptTokens === null || promptTokens < 512) return 'p0';
  if (promptTokens < 2048) return 'p512';
  if (promptTokens < 8192) return 'p2k';
  return 'p8k';
}

/**
 * A request's TTFT bucket: its band, and a hit when at least half its prompt came from the cache;
 * otherwise 'resumed' for a later turn of a conversation (types.ts CacheState), else a 'miss'.
 */
export function ttftBucketOf(promptTokens: number | null, cachedTokens: number | null, laterTurn: boolean): TtftBucket {
  const hit = promptTokens !== null && promptTokens > 0 && cachedTokens !== null && cachedTokens * 2 >= promptTokens;
  return `${bandOf(promptTokens)}:${hit ? 'hit' : laterTurn ? 'resumed' : 'miss'}`;
}

export const PROMPT_BANDS: readonly PromptBand[] = Object.freeze(['p0', 'p512', 'p2k', 'p8k']);
export const CACHE_STATES: readonly CacheState[] = Object.freeze(['hit', 'miss', 'resumed']);
/** Every TTFT bucket (what a window read off the wire may hold). */
export const TTFT_BUCKETS: ReadonlySet<string> = new Set(PROMPT_BANDS.flatMap((b) => CACHE_STATES.map((c) => `${b}:${c}`)));
