/**
 * A model's rollout on the status page (pure, #34): what the card shows of it, in words. In a canary
 * step, both arms side by side (requests, errors, error rate, TTFT p95, TPOT p95), the step ("step 1
 * of 2, 10%") and when it ends (the page counts down to `until`); held or rolled back, the verdict
 * with its hint. Built from the wire's RolloutJson (what the admin API and the status branch carry)
 * and the canary the model's spec declares (how many steps, what a step is judged on).
 */
import type { CanarySpec } from '../rollout/types.js';
import type { ArmFiguresJson, ReasonJson, RolloutJson } from '../wire/shape.js';

/** One arm's figures as the page prints them. */
export interface PageArm {
  readonly requests: string;
  readonly errors: string;
  readonly errorRate: string;
  readonly ttftP95: string;
  readonly tpotP95: string;
}

export interface PageRollout {
  readonly phase: RolloutJson['phase'];
  /** The phase in words for the tag: "checking", "canary", "held", "rolled back", "promoted". */
  readonly label: string;
  /** What is happening, with both revisions (short digests). */
  readonly summary: string;
  /** ISO: when the phase (canary: the step's window) began. */
  readonly since: string;
  /** Canary: "step 1 of 2, 10%"; else null. */
  readonly step: string | null;
  /** Canary: ISO end of the step (the page counts down to it); else null. */
  readonly until: string | null;
  /** Canary: what a step is judged on, from the spec ("at least 30 requests an arm, …"); null when the spec does not say. */
  readonly judgedOn: string | null;
  /** Canary, once judged: both arms, their short digests, and the verdict so far in words. */
  readonly arms: {
    readonly stable: PageArm & { readonly revision: string };
    readonly canary: PageArm & { readonly revision: string };
    readonly verdict: 'pass' | 'fail' | 'inconclusive';
    readonly verdictText: string;
  } | null;
  /** Why it is held or rolled back (or why a step is inconclusive so far); the hint only when held or rolled back. */
  readonly verdict: { readonly code: string; readonly message: string; readonly hint: string | null } | null;
}

const short = (digest: string): string => digest.slice(0, 12);

/** 0.1 → "10%", 0.125 → "12.5%", 1/42 → "2.4%", a small non-zero → "<0.1%". */
export function percent(fraction: number): string {
  if (!Number.isFinite(fraction)) return '-';
  const p = fraction * 100;
  if (p > 0 && p < 0.1) return '<0.1%';
  const rounded = Math.round(p * 10) / 10;
  return `${Number.isInteger(rounded) ? rounded.toFixed(0) : rounded.toFixed(1)}%`;
}

/** A latency: "338 ms", "4.2 ms", "2.4 s"; "-" when the arm has none. */
export function latency(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '-';
  if (ms >= 1000) return `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s`;
  if (ms < 10) return `${(Math.round(ms * 10) / 10).toString()} ms`;
  return `${Math.round(ms)} ms`;
}

const count = (n: number): string => n.toLocaleString('en');

export function pageArm(f: ArmFiguresJson): PageArm {
  return { requests: count(f.requests), errors: count(f.errors), errorRate: percent(f.errorRate), ttftP95: latency(f.ttftP95Ms), tpotP95: latency(f.tpotP95Ms) };
}

/** "step 1 of 2" (steps from the spec; without it "step 1"). */
const stepOf = (step: number, steps: number | null): string => `step ${step + 1}${steps !== null ? ` of ${steps}` : ''}`;

/** "step 1 of 2, 10%" (steps from the spec; without it "step 1, 10%"). */
export function stepText(step: number, share: number, steps: number | null): string {
  return `${stepOf(step, steps)}, ${percent(share)}`;
}

/** What a step is judged on, in words. */
export function judgedOnText(c: CanarySpec): string {
  const increase = Math.round(c.maxErrorRateIncrease * 1000) / 10;
  return `at least ${count(c.minRequests)} requests an arm; the canary's error rate at most ${increase} point${increase === 1 ? '' : 's'} above the stable one's, its TTFT p95 at most ${c.maxTtftRatio}× and its TPOT p95 at most ${c.maxTpotRatio}× the stable one's`;
}

const VERDICT_SO_FAR: Readonly<Record<'pass' | 'fail' | 'inconclusive', string>> = {
  pass: 'passes so far',
  fail: 'fails: it is being rolled back',
  inconclusive: 'too few requests to judge so far',
};

const LABEL: Readonly<Record<RolloutJson['phase'], string>> = { checking: 'checking', canary: 'canary', held: 'held', rolled_back: 'rolled back', promoted: 'promoted' };

function summary(r: RolloutJson, steps: number | null): string {
  const rev = `revision ${short(r.digest)}`;
  const stable = short(r.stableDigest);
  switch (r.phase) {
    case 'checking':
      return `${rev} runs its checks and takes no request; ${stable} serves meanwhile`;
    case 'canary':
      return `${rev} takes ${r.share === null ? 'a share' : percent(r.share)} of the requests${r.step === null ? '' : ` (${stepOf(r.step, steps)})`}; ${stable} serves the rest`;
    case 'held':
      return `${rev} is held back; ${stable} serves`;
    case 'rolled_back':
      return `${rev} was rolled back; ${stable} serves`;
    case 'promoted':
      return `${rev} proved itself and replaces ${stable}`;
  }
}

function verdictOf(r: RolloutJson): PageRollout['verdict'] {
  const v: ReasonJson | null = r.verdict;
  if (v === null) return null;
  const final = r.phase === 'held' || r.phase === 'rolled_back';
  return { code: v.code, message: v.message, hint: final && v.hint ? v.hint : null };
}

/** The card's rollout. `canary`: the canary the model's spec declares for this revision, or null. */
export function pageRollout(r: RolloutJson, canary: CanarySpec | null): PageRollout {
  const steps = canary ? canary.steps.length : null;
  return {
    phase: r.phase,
    label: LABEL[r.phase],
    summary: summary(r, steps),
    since: r.since,
    step: r.phase === 'canary' && r.step !== null && r.share !== null ? stepText(r.step, r.share, steps) : null,
    until: r.phase === 'canary' ? r.until : null,
    judgedOn: r.phase === 'canary' && canary ? judgedOnText(canary) : null,
    arms:
      r.phase === 'canary' && r.arms
        ? {
            stable: { ...pageArm(r.arms.stable), revision: short(r.stableDigest) },
            canary: { ...pageArm(r.arms.canary), revision: short(r.digest) },
            verdict: r.arms.verdict,
            verdictText: VERDICT_SO_FAR[r.arms.verdict],
          }
        : null,
    verdict: verdictOf(r),
  };
}
