/**
 * One arm's figures over a canary step's window (types.ts: ArmSample in, ArmWindow out), pure.
 *
 * What a sample adds:
 * - 'client' (the client's own 4xx or its abort): nothing — it says nothing of the revision;
 * - 'error': one request and one error; its latencies are not counted (an error's first byte is an
 *   error body or nothing, not the revision's speed);
 * - 'ok': one request, its TTFT in its bucket (prompt band × cache hit, miss or a later turn's miss,
 *   latency.ts ttftBucketOf) and its time per output token, each where known.
 *
 * `recorded` and `mergeWindows` return new windows (the verdict and the HA leader's sum work on
 * immutable values); the router records every request of a canary-phase model, so it keeps an
 * `ArmRecorder` instead (counts updated in place, no copy per request) and hands out `snapshot()`s.
 */
import { addCounts, emptyCounts, latencyIndex, ttftBucketOf } from './latency.js';
import type { ArmSample, ArmWindow, LatencyCounts, TtftBucket } from './types.js';

const NO_COUNTS: LatencyCounts = Object.freeze(emptyCounts());
const EMPTY: ArmWindow = Object.freeze({ requests: 0, errors: 0, ttft: Object.freeze({}), tpot: NO_COUNTS });

/** A window with nothing in it. */
export function emptyWindow(): ArmWindow {
  return EMPTY;
}

/** True when the sample counts at all (not the client's own doing). */
const counted = (s: ArmSample): boolean => s.outcome !== 'client';

/** `w` with one more sample (a new window; `w` is left as it is). */
export function recorded(w: ArmWindow, s: ArmSample): ArmWindow {
  if (!counted(s)) return w;
  if (s.outcome === 'error') return { requests: w.requests + 1, errors: w.errors + 1, ttft: w.ttft, tpot: w.tpot };
  let ttft = w.ttft;
  if (s.ttftMs !== null) {
    const bucket = ttftBucketOf(s.promptTokens, s.cachedTokens, s.laterTurn === true);
    ttft = { ...w.ttft, [bucket]: plusOne(w.ttft[bucket], s.ttftMs) };
  }
  return { requests: w.requests + 1, errors: w.errors, ttft, tpot: s.tpotMs === null ? w.tpot : plusOne(w.tpot, s.tpotMs) };
}

function plusOne(counts: LatencyCounts | undefined, ms: number): number[] {
  const out = counts === undefined ? emptyCounts() : [...counts];
  out[latencyIndex(ms)]! += 1;
  return out;
}

/** a + b: windows of the same arm from several routers (or several spans of time) added up. */
export function mergeWindows(a: ArmWindow, b: ArmWindow): ArmWindow {
  const ttft: Partial<Record<TtftBucket, LatencyCounts>> = {};
  for (const k of Object.keys(a.ttft) as TtftBucket[]) ttft[k] = addCounts(a.ttft[k], b.ttft[k]);
  for (const k of Object.keys(b.ttft) as TtftBucket[]) if (!(k in ttft)) ttft[k] = addCounts(undefined, b.ttft[k]);
  return { requests: a.requests + b.requests, errors: a.errors + b.errors, ttft, tpot: addCounts(a.tpot, b.tpot) };
}

/**
 * One arm's window, recorded in place (the router's side: a request adds to counts, nothing is
 * copied); `snapshot()` is an immutable ArmWindow of what it holds now.
 */
export class ArmRecorder {
  requests = 0;
  errors = 0;
  /** Counts per TTFT bucket, created on its first sample. */
  private readonly ttft = new Map<TtftBucket, number[]>();
  private tpot: number[] | null = null;

  add(s: ArmSample): void {
    if (!counted(s)) return;
    this.requests++;
    if (s.outcome === 'error') {
      this.errors++;
      return;
    }
    if (s.ttftMs !== null) {
      const bucket = ttftBucketOf(s.promptTokens, s.cachedTokens, s.laterTurn === true);
      let c = this.ttft.get(bucket);
      if (c === undefined) this.ttft.set(bucket, (c = emptyCounts()));
      c[latencyIndex(s.ttftMs)]! += 1;
    }
    if (s.tpotMs !== null) (this.tpot ??= emptyCounts())[latencyIndex(s.tpotMs)]! += 1;
  }

  snapshot(): ArmWindow {
    const ttft: Partial<Record<TtftBucket, LatencyCounts>> = {};
    for (const [k, c] of this.ttft) ttft[k] = Object.freeze([...c]);
    return Object.freeze({ requests: this.requests, errors: this.errors, ttft: Object.freeze(ttft), tpot: this.tpot === null ? NO_COUNTS : Object.freeze([...this.tpot]) });
  }
}
