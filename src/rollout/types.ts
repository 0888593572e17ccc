/**
 * The rollout's shared vocabulary (#34): what a model's `rollout:` block says once loaded, what the
 * router measures of each arm during a canary step, and what the verdict says. Domain values only
 * (ms, fractions 0..1, counts); the wire shapes derive from these at the edge.
 *
 * Who fills what:
 * - fleet-spec/ loads `rollout:` (a model's, else fleet.yaml's) into `RolloutSpec` (ModelSpec.rollout);
 * - rollout/check.ts runs a `RolloutCheck` against one replica and says `CheckResult`;
 * - rollout/window.ts records what the router saw of each arm (`ArmSample` in, `ArmWindow` out; windows
 *   from several routers add up with `mergeWindows`);
 * - rollout/verdict.ts judges a step: (CanarySpec, CanaryWindow) → StepVerdict, pure;
 * - the reconciler keeps the rollout's phase in the state record and publishes `RolloutView` on the
 *   model's view, which the router reads to split traffic.
 */
import type { ReasonRef } from '../errors/catalogue.js';

/** What a check expects of the answer. Every field present must hold. */
export interface CheckExpect {
  /** HTTP status (default 200). */
  readonly status: number;
  /** A regular expression (JavaScript syntax) the answer's text must match. */
  readonly matches: string | null;
  /** A substring the answer's text must contain. */
  readonly contains: string | null;
  /** A regular expression the answer's text must not match. */
  readonly notMatches: string | null;
  /** A JSON schema the answer's text, parsed as JSON, must satisfy. */
  readonly jsonSchema: Readonly<Record<string, unknown>> | null;
  /** The first token must come within this (ms), measured from the request's start. */
  readonly maxTtftMs: number | null;
}

/** One check: a request kept in the fleet repo and what its answer must be. */
export interface RolloutCheck {
  readonly name: string;
  /** The repo file it was written in (a model file, fleet.yaml or checks/<name>.yaml). */
  readonly file: string;
  /** The OpenAI path the request goes to (default /v1/chat/completions). */
  readonly path: string;
  /** The request body without `model`; the runner adds temperature 0 and a fixed seed unless set. */
  readonly request: Readonly<Record<string, unknown>>;
  readonly expect: CheckExpect;
  /** Bound on the whole request (default 30 s). */
  readonly timeoutMs: number;
}

export type OnInconclusive = 'hold' | 'rollback';

export interface CanarySpec {
  /** Share of the model's requests on the new revision at each step, increasing, each in (0, 1]. */
  readonly steps: readonly number[];
  /** Time at each step (ms). */
  readonly intervalMs: number;
  /** Requests per arm and step below which the step is inconclusive. */
  readonly minRequests: number;
  /** Canary error rate minus stable error rate, as a fraction (0.02 = 2 points). */
  readonly maxErrorRateIncrease: number;
  /** Canary TTFT p95 over stable TTFT p95, like with like. */
  readonly maxTtftRatio: number;
  /** Canary time-per-output-token p95 over stable's. */
  readonly maxTpotRatio: number;
  readonly onInconclusive: OnInconclusive;
}

/** A model's rollout, fleet.yaml's default filled in; null on ModelSpec: today's surge rollout. */
export interface RolloutSpec {
  readonly checks: readonly RolloutCheck[];
  /** null: checks only, then the new revision takes all traffic. */
  readonly canary: CanarySpec | null;
}

// ------------------------------------------------------------------ checks

export type CheckResult =
  | { readonly ok: true; readonly name: string; readonly ttftMs: number | null; readonly durationMs: number }
  | {
      readonly ok: false;
      readonly name: string;
      /** What the check expected, in words ("status 200 and text matching /4/"). */
      readonly expected: string;
      /** What came back, capped (≤ 512 characters). */
      readonly got: string;
      readonly reason: ReasonRef;
    };

// ------------------------------------------------------------------ the canary's figures

export type Arm = 'stable' | 'canary';

/**
 * A request's prompt-length band and its cache state: TTFT is compared only between like buckets, so
 * a cold canary does not fail for its cold cache.
 * Bands (prompt tokens): 0–511, 512–2047, 2048–8191, 8192+.
 */
export type PromptBand = 'p0' | 'p512' | 'p2k' | 'p8k';
/**
 * - 'hit': at least half the prompt came from the replica's cache;
 * - 'miss': mostly evaluated, and a first turn (or a request without turns: completions, a body
 *   without messages);
 * - 'resumed': mostly evaluated, and a later turn of a conversation (its body carries an earlier
 *   answer): its whole history was evaluated again, as when a step moves a conversation under way to
 *   the canary's cold cache. Such a prompt sits at the top of its band where a first turn's sits
 *   anywhere in it, so the two are not compared with each other.
 */
export type CacheState = 'hit' | 'miss' | 'resumed';
export type TtftBucket = `${PromptBand}:${CacheState}`;

/** One request the router finished on an arm. */
export interface ArmSample {
  readonly arm: Arm;
  /**
   * 'ok'; 'error': the replica's fault (5xx, an engine error, a stream cut mid-way, no answer);
   * 'client': the client's own 4xx or its abort — counted in neither the requests nor the errors.
   */
  readonly outcome: 'ok' | 'error' | 'client';
  /** Request start to first byte of the answer's content (ms); null when none came. */
  readonly ttftMs: number | null;
  /** Time per output token after the first (ms); null when fewer than 2 tokens. */
  readonly tpotMs: number | null;
  /** Prompt tokens the replica reported (null: unknown, counted in band p0). */
  readonly promptTokens: number | null;
  /** Prompt tokens served from the replica's cache (timings.cache_n / cached_tokens); null unknown (a miss). */
  readonly cachedTokens: number | null;
  /**
   * The request is a later turn of a conversation: its `messages` hold an `assistant` message followed
   * by another (router/canary.ts laterTurnOf). A miss on it counts as 'resumed', not 'miss'. Absent:
   * not one (a failed attempt, a sample made where the body is not known).
   */
  readonly laterTurn?: boolean;
}

/**
 * Latency as counts over fixed bounds (window.ts's LATENCY_BOUNDS_MS): windows from several routers
 * add up by index, and a percentile is read from the counts.
 */
export type LatencyCounts = readonly number[];

export interface ArmWindow {
  /** Requests counted (ok + error; client outcomes are not). */
  readonly requests: number;
  readonly errors: number;
  readonly ttft: Readonly<Partial<Record<TtftBucket, LatencyCounts>>>;
  readonly tpot: LatencyCounts;
}

/** Both arms over one step's window. */
export interface CanaryWindow {
  /** Epoch ms the window began (the step's start, or its restart after figures were lost). */
  readonly since: number;
  readonly stable: ArmWindow;
  readonly canary: ArmWindow;
}

/** What both arms showed, as the verdict and every surface print it. */
export interface ArmFigures {
  readonly requests: number;
  readonly errors: number;
  readonly errorRate: number;
  /** The TTFT p95 of the bucket the verdict compared (ms), or null. */
  readonly ttftP95Ms: number | null;
  readonly tpotP95Ms: number | null;
}

export type StepVerdict =
  | {
      readonly kind: 'pass';
      readonly stable: ArmFigures;
      readonly canary: ArmFigures;
      /** The TTFT bucket compared (the figures' ttftP95Ms), when one was. */
      readonly bucket?: TtftBucket;
    }
  | {
      readonly kind: 'fail';
      /** Which comparison failed. */
      readonly on: 'error_rate' | 'ttft' | 'tpot';
      /** e.g. "error rate 31% vs 0% on the stable revision over 42 / 380 requests". */
      readonly reason: ReasonRef;
      readonly stable: ArmFigures;
      readonly canary: ArmFigures;
      /** The TTFT bucket compared (the figures' ttftP95Ms), when one was: always when on = 'ttft'. */
      readonly bucket?: TtftBucket;
    }
  | {
      readonly kind: 'inconclusive';
      /** e.g. "12 of 30 requests on the canary". */
      readonly reason: ReasonRef;
      readonly stable: ArmFigures;
      readonly canary: ArmFigures;
      /** The TTFT bucket compared (the figures' ttftP95Ms), when one was. */
      readonly bucket?: TtftBucket;
    };

// ------------------------------------------------------------------ what the router reads

/**
 * The rollout as a model's view shows it. The router splits traffic only in phase 'canary': a
 * request goes to the canary arm (replicas whose digest is `canaryDigest`) when its sticky hash
 * (key and affinity prefix) falls below `share`; otherwise to the stable arm (every other replica).
 * In 'checking' the new replica is not in the model's ready replicas at all.
 */
export interface RolloutView {
  readonly phase: 'checking' | 'canary' | 'promoted' | 'rolled_back' | 'held';
  readonly stableDigest: string;
  readonly canaryDigest: string;
  /** Index into the canary's steps (canary phase). */
  readonly step: number;
  readonly share: number;
  /** Epoch ms the current step (or phase) began. */
  readonly since: number;
  /** Epoch ms the step ends (canary phase), or null. */
  readonly until: number | null;
  /** The last verdict's reason (rolled back, held, or an inconclusive step), or null. */
  readonly verdict: ReasonRef | null;
  /**
   * Canary phase: both arms' figures over the step's window so far, as the controller judged them at
   * its last pass (the live figures `ctl rollout MODEL` and the page show); absent before the first.
   */
  readonly figures?: { readonly stable: ArmFigures; readonly canary: ArmFigures; readonly verdict: StepVerdict['kind'] };
  /**
   * Before promotion: no replica of the stable revision is left (it crashed, or drained for room).
   * This controller cannot start it again (only the new definition is in the repo's head): until an
   * operator promotes the new revision or reverts the definition, the stable revision serves nothing.
   */
  readonly stableGone?: true;
}

/**
 * What the routers saw of each arm of a model's canary step, as the controller reads it: one
 * router's (router/rollout-figures.ts RouterRollouts), or every router's added up (HA).
 */
export interface RolloutFigures {
  /** Both arms' figures since the window began, or null when none are kept for that revision. */
  window(model: string, canaryDigest: string): CanaryWindow | null;
  /** A new window for the model's revision from `since` (epoch ms): the old figures are dropped. */
  restart(model: string, canaryDigest: string, since: number): void;
  /** Every model's window (plain data: the HA leader adds up every router's). */
  all(): Record<string, { readonly canaryDigest: string; readonly window: CanaryWindow }>;
}
