/**
 * The canary's verdict on one step (#34): both arms' figures over the same window, compared with each
 * other. Pure: (CanarySpec, CanaryWindow) → StepVerdict. It knows no clock; the controller asks it when
 * the step's interval is over (a fail seen earlier may end the step early: more requests do not undo
 * a fail the way they can a pass).
 *
 * The rules, in the order they are applied (the first that says something decides):
 * 1. **Sample size.** Each arm needs at least `minRequests` requests (ok + error; the client's own
 *    4xx and aborts are not counted), or the step is **inconclusive** — never a pass, however good
 *    the figures. (ROLLOUT_INCONCLUSIVE: "12 of 30 requests on the canary (stable: 380 of 30)".)
 * 2. **Errors.** The canary's error rate minus the stable revision's over `maxErrorRateIncrease`
 *    fails the step ('error_rate'). Errors come first: a canary that fails requests has no latency
 *    worth comparing.
 * 3. **TTFT, like with like.** For each TtftBucket (prompt band × cache state: hit, a first turn's
 *    miss, a later turn's miss — 'resumed') in which *both* arms have at least
 *    `bucketMinimum(minRequests)` samples, the canary's p95 over the stable's; the bucket with the
 *    highest ratio is the one compared, and over `maxTtftRatio` fails ('ttft'). A bucket only one arm
 *    has is not compared: a cold canary must not fail for its cold cache. That is why a later turn's
 *    miss has a bucket of its own: a step that moves a conversation under way to the canary makes its
 *    next turn evaluate the whole history there, near the top of its band, while the stable arm's
 *    follow-ups hit its cache and its misses are new conversations' first prompts, anywhere in the
 *    band — compared in one bucket, a revision no slower failed on the longer prompts alone
 *    (bench/RESULTS.md, Canary detection). No comparable bucket: TTFT does not fail the step, and the
 *    figures' ttftP95Ms are null (describeFigures says why).
 * 4. **TPOT.** The canary's time-per-output-token p95 over the stable's, when both arms have at least
 *    `bucketMinimum(minRequests)` samples (requests of 2+ tokens); over `maxTpotRatio` fails ('tpot').
 *
 * Boundaries: a figure exactly at its threshold passes (≤). Error rates and ratios are compared with
 * a 1e-9 tolerance so that 5% − 3% at a 2% limit passes despite floating point. Latency ratios read both p95s
 * no lower than 1 ms (RATIO_FLOOR_MS, the counts' first bound: finer is below their resolution), so a
 * stable p95 of 0 ms has no division by zero, and two sub-millisecond arms compare as 1×.
 */
import { Reasons, type ReasonRef } from '../errors/catalogue.js';
import { LATENCY_BOUNDS_MS, percentile, totalOf } from './latency.js';
import type { ArmFigures, ArmWindow, CacheState, CanarySpec, CanaryWindow, LatencyCounts, PromptBand, StepVerdict, TtftBucket } from './types.js';

/** The latency percentile compared. */
export const COMPARED_PERCENTILE = 0.95;
/** Latencies below this (ms) count as this in a ratio: the first bound of the counts, their resolution. */
export const RATIO_FLOOR_MS = LATENCY_BOUNDS_MS[0]!;
/** Tolerances of the comparisons (floating point): a figure at its limit passes. */
const RATE_EPSILON = 1e-9;
const RATIO_EPSILON = 1e-9;

/**
 * The fewest samples whose p95 is not simply their largest: the 0.95·n-th of n samples is below the
 * n-th only from n = 1 / (1 − 0.95) = 20 on.
 */
export const P95_SAMPLES = 20;

/**
 * Samples each arm needs in a TTFT bucket (and in TPOT) for it to be compared: a quarter of the step's
 * `minRequests`, at least P95_SAMPLES. A bucket is a slice of the step's requests, so asking it for
 * the whole `minRequests` would leave most buckets out. Fewer than 20 would compare a handful's
 * slowest request with the other arm's p95: the verdict takes the worst of up to twelve buckets at
 * every pass, so one slow request in a small bucket failed a good revision (bench/RESULTS.md, Canary
 * detection: with at least 8, 3 of 20 identical revisions were rolled back so; with 20, none).
 */
export function bucketMinimum(minRequests: number): number {
  return Math.max(P95_SAMPLES, Math.ceil(minRequests / 4));
}

/** canary / stable, each read no lower than RATIO_FLOOR_MS. */
export function latencyRatio(canaryMs: number, stableMs: number): number {
  return Math.max(canaryMs, RATIO_FLOOR_MS) / Math.max(stableMs, RATIO_FLOOR_MS);
}

const errorRate = (a: ArmWindow): number => (a.requests > 0 ? a.errors / a.requests : 0);

const BAND_WORDS: Readonly<Record<PromptBand, string>> = {
  p0: 'prompts 0–511 tokens',
  p512: 'prompts 512–2047 tokens',
  p2k: 'prompts 2048–8191 tokens',
  p8k: 'prompts 8192+ tokens',
};

const CACHE_WORDS: Readonly<Record<CacheState, string>> = {
  hit: 'cache hit',
  miss: 'cache miss',
  resumed: 'cache miss of a later turn',
};

/** A bucket as a human reads it: "prompts 0–511 tokens, cache miss"; "…, cache miss of a later turn". */
export function bucketWords(bucket: TtftBucket): string {
  const [band, cache] = bucket.split(':') as [PromptBand, CacheState];
  return `${BAND_WORDS[band]}, ${CACHE_WORDS[cache]}`;
}

/** A fraction as a percentage: "31%", "2.5%", "0%" (at most one decimal, none when ≥ 10%). */
export function percent(f: number): string {
  const p = f * 100;
  const digits = Math.abs(p) >= 10 || Number.isInteger(p) ? 0 : 1;
  return `${Number(p.toFixed(digits))}%`;
}

/**
 * A ratio: "2.4×", "1.52×" (at most two decimals). Given the limit it failed, enough decimals to
 * read above it ("1.503×" at a limit of 1.5, not "1.5×").
 */
export function times(r: number, over?: number): string {
  let digits = 2;
  while (over !== undefined && digits < 6 && Number(r.toFixed(digits)) <= over) digits++;
  return `${Number(r.toFixed(digits))}×`;
}

const roundMs = (ms: number): number => Number(ms.toFixed(ms < 10 ? 1 : 0));

/** Two latencies, rounded: "812 vs 338 ms" (one decimal below 10 ms). */
export function vsMillis(canaryMs: number, stableMs: number): string {
  return `${roundMs(canaryMs)} vs ${roundMs(stableMs)} ms`;
}

interface Comparison {
  readonly canaryMs: number;
  readonly stableMs: number;
  readonly ratio: number;
}

function compare(canary: LatencyCounts | undefined, stable: LatencyCounts | undefined, min: number): Comparison | null {
  if (totalOf(canary) < min || totalOf(stable) < min) return null;
  const canaryMs = percentile(canary, COMPARED_PERCENTILE)!;
  const stableMs = percentile(stable, COMPARED_PERCENTILE)!;
  return { canaryMs, stableMs, ratio: latencyRatio(canaryMs, stableMs) };
}

/** The TTFT bucket the step compares: the comparable one with the highest ratio (ties: the first in key order), or null. */
export function worstTtftBucket(w: CanaryWindow, min: number): { bucket: TtftBucket; cmp: Comparison } | null {
  let worst: { bucket: TtftBucket; cmp: Comparison } | null = null;
  const buckets = (Object.keys(w.canary.ttft) as TtftBucket[]).sort();
  for (const bucket of buckets) {
    const cmp = compare(w.canary.ttft[bucket], w.stable.ttft[bucket], min);
    if (cmp !== null && (worst === null || cmp.ratio > worst.cmp.ratio)) worst = { bucket, cmp };
  }
  return worst;
}

function figures(a: ArmWindow, ttftP95Ms: number | null, tpotP95Ms: number | null): ArmFigures {
  return { requests: a.requests, errors: a.errors, errorRate: errorRate(a), ttftP95Ms, tpotP95Ms };
}

const ref = (code: 'ROLLOUT_ROLLED_BACK' | 'ROLLOUT_INCONCLUSIVE', message: string): ReasonRef => ({ code: Reasons[code].code, message });

/** Judges one canary step; see the file's comment for the rules and their order. */
export function judgeStep(spec: CanarySpec, w: CanaryWindow): StepVerdict {
  const min = bucketMinimum(spec.minRequests);
  const ttft = worstTtftBucket(w, min);
  const tpot = compare(w.canary.tpot, w.stable.tpot, min);
  const stable = figures(w.stable, ttft?.cmp.stableMs ?? null, tpot?.stableMs ?? null);
  const canary = figures(w.canary, ttft?.cmp.canaryMs ?? null, tpot?.canaryMs ?? null);
  const bucket = ttft === null ? {} : { bucket: ttft.bucket };

  if (w.canary.requests < spec.minRequests || w.stable.requests < spec.minRequests) {
    const message = `${w.canary.requests} of ${spec.minRequests} requests on the canary (stable: ${w.stable.requests} of ${spec.minRequests})`;
    return { kind: 'inconclusive', reason: ref('ROLLOUT_INCONCLUSIVE', message), stable, canary, ...bucket };
  }
  if (canary.errorRate - stable.errorRate > spec.maxErrorRateIncrease + RATE_EPSILON) {
    const message =
      `error rate ${percent(canary.errorRate)} vs ${percent(stable.errorRate)} on the stable revision over ${w.canary.requests} / ${w.stable.requests} requests` +
      ` (at most ${percent(spec.maxErrorRateIncrease)} more)`;
    return { kind: 'fail', on: 'error_rate', reason: ref('ROLLOUT_ROLLED_BACK', message), stable, canary, ...bucket };
  }
  if (ttft !== null && ttft.cmp.ratio > spec.maxTtftRatio + RATIO_EPSILON) {
    const { canaryMs, stableMs, ratio } = ttft.cmp;
    const message = `TTFT p95 ${times(ratio, spec.maxTtftRatio)} the stable revision's (${vsMillis(canaryMs, stableMs)}, ${bucketWords(ttft.bucket)}; at most ${times(spec.maxTtftRatio)})`;
    return { kind: 'fail', on: 'ttft', reason: ref('ROLLOUT_ROLLED_BACK', message), stable, canary, bucket: ttft.bucket };
  }
  if (tpot !== null && tpot.ratio > spec.maxTpotRatio + RATIO_EPSILON) {
    const message = `time per output token p95 ${times(tpot.ratio, spec.maxTpotRatio)} the stable revision's (${vsMillis(tpot.canaryMs, tpot.stableMs)}; at most ${times(spec.maxTpotRatio)})`;
    return { kind: 'fail', on: 'tpot', reason: ref('ROLLOUT_ROLLED_BACK', message), stable, canary, ...bucket };
  }
  return { kind: 'pass', stable, canary, ...bucket };
}

/**
 * Both arms' figures in one line, for events, `ctl rollout` and the status page, saying what was not
 * compared and why: "error rate 0% vs 0% over 42 / 380 requests; TTFT p95 1.1× (370 vs 338 ms,
 * prompts 0–511 tokens, cache miss); TPOT p95 not compared (fewer than 20 requests of 2+ tokens on an arm)".
 */
export function describeFigures(spec: CanarySpec, v: StepVerdict): string {
  const min = bucketMinimum(spec.minRequests);
  const { stable: s, canary: c } = v;
  const parts = [`error rate ${percent(c.errorRate)} vs ${percent(s.errorRate)} over ${c.requests} / ${s.requests} requests`];
  if (c.ttftP95Ms !== null && s.ttftP95Ms !== null && v.bucket !== undefined) {
    parts.push(`TTFT p95 ${times(latencyRatio(c.ttftP95Ms, s.ttftP95Ms))} (${vsMillis(c.ttftP95Ms, s.ttftP95Ms)}, ${bucketWords(v.bucket)})`);
  } else {
    parts.push(`TTFT not compared (no prompt band and cache state with ${min}+ samples on both arms)`);
  }
  if (c.tpotP95Ms !== null && s.tpotP95Ms !== null) {
    parts.push(`TPOT p95 ${times(latencyRatio(c.tpotP95Ms, s.tpotP95Ms))} (${vsMillis(c.tpotP95Ms, s.tpotP95Ms)})`);
  } else {
    parts.push(`TPOT not compared (fewer than ${min} requests of 2+ tokens on an arm)`);
  }
  return parts.join('; ');
}
