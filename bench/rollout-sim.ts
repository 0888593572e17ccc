/**
 * A canary step's detection, simulated (#34): a seeded stream of chat requests against a stable and a
 * new revision, run through the real pieces of llmgw, in simulated time. Only the traffic and the
 * revisions' answers are made up; everything that decides is the project's own code:
 *
 * - each conversation's prefix is `affinityKey` of its system prompt and first user message
 *   (router/affinity.ts), and the arm is the router's sticky split: `canaryOf` the model's view,
 *   `drawOf(key name, prefix, canary digest)` and `armOfDraw(draw, share)` (router/canary.ts);
 * - a request's end becomes a sample through `armSampleOf` (router/canary.ts: outcomeOf, tpotOf) from a
 *   llama-server-shaped answer tail and `laterTurnOf` of the turn's body (a follow-up carries an
 *   answer), recorded with the view it arrived under into the router's `RouterRollouts`
 *   (router/rollout-figures.ts, window.ts ArmRecorder: a request that began before the step's window
 *   is left out of it);
 * - the controller's passes are `CanarySteps.judge` (reconciler/canary-steps.ts: stepJudged →
 *   verdict.ts judgeStep, outcome.ts stepOutcome, rollout-life.ts stepConcluded; a new step restarts the
 *   router's window), at the wake times `canaryDue` gives after each pass (each quarter of the step's
 *   interval, and its end), and optionally at a poll interval; the view the router reads after a pass
 *   is `rolloutView` (reconciler/summarize.ts). A pass takes no simulated time and its view reaches the
 *   router at once (one process: serve's router reads the controller's snapshot).
 *
 * The traffic: Poisson arrivals at a fixed rate; an arrival opens a new conversation (a few prompt
 * lengths, over several API keys) or continues an idle one, whose prompt is its whole history. A
 * conversation's follow-up finds its history in the cache of the arm it last went to (one replica per
 * arm, a cache that keeps everything), else it is evaluated in full. Latency: TTFT = base + prefill per
 * evaluated token + a little per cached token, TPOT = base + a little per context token, each times a
 * lognormal jitter, times the revision's factor. Errors are 5xx at the revision's error rate.
 *
 * Pure and deterministic: the same configuration gives the same figures on any machine (no clock,
 * no Math.random: every request has a prefix, so drawOf never falls back to it).
 */
import pino from 'pino';
import type { FleetSpec } from '../src/fleet-spec/types.js';
import { NO_REASON } from '../src/metrics/ports.js';
import { CanarySteps, canaryDue } from '../src/reconciler/canary-steps.js';
import { checksConcluded, type RolloutRecord } from '../src/reconciler/rollout-life.js';
import type { ControllerState, ModelRecord } from '../src/reconciler/state.js';
import { rolloutView } from '../src/reconciler/summarize.js';
import type { ModelView } from '../src/reconciler/view.js';
import type { Arm, CanarySpec, RolloutView } from '../src/rollout/types.js';
import { affinityKey } from '../src/router/affinity.js';
import { armOfDraw, armSampleOf, canaryOf, drawOf, laterTurnOf } from '../src/router/canary.js';
import { RouterRollouts } from '../src/router/rollout-figures.js';
import { prng } from '../src/gguf/tiny-model.js';

/** How a revision answers, relative to the traffic model's baseline. */
export interface Revision {
  /** Share of its requests that fail (5xx). */
  readonly errorRate: number;
  /** Its TTFT and time per output token, times the baseline's. */
  readonly ttftFactor: number;
  readonly tpotFactor: number;
}

export const BASELINE: Revision = Object.freeze({ errorRate: 0, ttftFactor: 1, tpotFactor: 1 });

export interface SimConfig {
  readonly seed: number;
  readonly canary: CanarySpec;
  /** Requests per second (the mean of the Poisson arrivals). */
  readonly ratePerS: number;
  readonly stable: Revision;
  readonly candidate: Revision;
  /** Give up (outcome 'none') after this long in the canary (default: 3 × steps × interval). */
  readonly horizonMs?: number;
  /** A pass every pollMs too (poll_interval), the first pollFirstMs (default pollMs) after the first step began; absent: canaryDue's wakes only. */
  readonly pollMs?: number;
  readonly pollFirstMs?: number;
  /** Count the arrivals before this time as well (for a comparison over another window). */
  readonly countArrivalsUntilMs?: number;
  /** Share of arrivals that open a new conversation (default 0.3: about 3 turns each). */
  readonly newConversationShare?: number;
  /**
   * Traffic on the stable revision alone before the first step (default 5 min): the conversations
   * under way when the canary begins, whose follow-ups meet the canary's cold cache.
   */
  readonly warmupMs?: number;
}

export interface SimResult {
  /** How the canary ended: rolled back, promoted, held, or 'none' (still in a step at the horizon). */
  readonly outcome: 'rolled_back' | 'promoted' | 'held' | 'none';
  /** When (ms after the first step began), null for 'none'. */
  readonly concludedAtMs: number | null;
  /** The step it ended at (an index into canary.steps). */
  readonly step: number;
  /** The record's verdict (rolled back, held). */
  readonly reason: string | null;
  /** When each step began (ms after the first began). */
  readonly stepStartsMs: readonly number[];
  /** When each step's window first held min_requests on both arms (ms after the first step began; null: never). */
  readonly minRequestsAtMs: readonly (number | null)[];
  /** When the last request the new revision took ended (it drains), null if none. */
  readonly lastCandidateEndMs: number | null;
  /** Requests the router sent until the canary ended, in all and to the new revision. */
  readonly requests: number;
  readonly candidateRequests: number;
  /** Of those, the requests that failed, on each revision (what clients saw). */
  readonly candidateFailed: number;
  readonly stableFailed: number;
  /** The controller's passes until the canary ended. */
  readonly passes: number;
  /** Arrivals before countArrivalsUntilMs (0 without it). */
  readonly arrivalsUntil: number;
}

/** mulberry32: a small seeded PRNG, uniform in [0, 1) (the tiny model's). */
export { prng };

/** The traffic's shape (fixed: the bench varies the rate and the revisions, not these). */
export const TRAFFIC = Object.freeze({
  /** A new conversation's first prompt (tokens, ± firstPromptSpread) and how often: bands p0, p512 and p2k. */
  firstPromptSpread: 0.25,
  firstPrompts: [
    [200, 0.5],
    [1000, 0.35],
    [3000, 0.15],
  ] as const,
  /** A follow-up adds 20–120 tokens of user message to the history. */
  followUpTokens: [20, 120] as const,
  /** Answers of 16–256 tokens. */
  outputTokens: [16, 256] as const,
  /** API key names the conversations are spread over. */
  keys: 12,
  /** Idle conversations kept to continue (the oldest is dropped beyond this), and the history that ends one. */
  idleKept: 64,
  maxContext: 6000,
  /** TTFT = base + prefill × evaluated + attention × cached (ms, ms per token), jitter σ (lognormal). */
  ttft: { baseMs: 25, prefillMsPerToken: 0.35, cachedMsPerToken: 0.01, sigma: 0.2 },
  /** TPOT = base + per context token (ms), jitter σ. */
  tpot: { baseMs: 15, perContextToken: 0.002, sigma: 0.1 },
  /** A failed request ends after about this long. */
  errorMs: 30,
});

/** The simulated epoch of the first step's start. */
const T0 = Date.UTC(2026, 11, 1);
const MODEL = 'chat';
const STABLE_DIGEST = 'a'.repeat(64);
const CANDIDATE_DIGEST = 'b'.repeat(64);
const SILENT = pino({ level: 'silent' });

interface Conversation {
  readonly key: string;
  readonly prefix: number;
  /** Its first turn's body (system prompt and first user message). */
  readonly opening: readonly { readonly role: string; readonly content: string }[];
  /** Tokens of its history (the next prompt's, before the new user message). */
  context: number;
  /** The arm its last turn went to (whose cache holds its history). */
  lastArm: Arm | null;
}

interface InFlight {
  readonly endAt: number;
  readonly conv: Conversation;
  readonly arm: Arm;
  /** The canary view it arrived under (null: before the canary, not recorded). */
  readonly view: RolloutView | null;
  readonly arrivedAt: number;
  /** The request is a later turn (router/canary.ts laterTurnOf of its body). */
  readonly laterTurn: boolean;
  readonly ok: boolean;
  readonly firstByteAt: number;
  readonly evaluated: number;
  readonly cached: number;
  readonly output: number;
  readonly tpotMs: number;
}

const uniformInt = (r: () => number, [lo, hi]: readonly [number, number]): number => lo + Math.floor(r() * (hi - lo + 1));

/** exp(σ·N(0,1)), Box–Muller. */
function lognormal(r: () => number, sigma: number): number {
  const u = 1 - r();
  const v = r();
  return Math.exp(sigma * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v));
}

/** llama-server's last bytes of a finished answer: its usage and timings, as the router keeps them. */
function answerTail(f: InFlight): string {
  const timings = `"timings":{"cache_n":${f.cached},"prompt_n":${f.evaluated},"predicted_n":${f.output},"predicted_per_token_ms":${f.tpotMs}}`;
  return `{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":${f.evaluated + f.cached},"completion_tokens":${f.output}},${timings}}`;
}

/** A controller record and spec holding just what the canary's steps read. */
function worldOf(canary: CanarySpec, rollout: RolloutRecord): { state: ControllerState; spec: FleetSpec } {
  const model = { health: {}, rollout } as unknown as ModelRecord;
  const state = { models: { [MODEL]: model }, replicas: {} } as unknown as ControllerState;
  const spec = { models: { [MODEL]: { name: MODEL, digest: CANDIDATE_DIGEST, rollout: { checks: [], canary } } } } as unknown as FleetSpec;
  return { state, spec };
}

/** Runs one canary, from its first step's start to its end (or the horizon). */
export function simulateCanary(cfg: SimConfig): SimResult {
  const canary = cfg.canary;
  const horizon = T0 + (cfg.horizonMs ?? 3 * canary.steps.length * canary.intervalMs);
  const arrivalsRng = prng(cfg.seed);
  const trafficRng = prng(cfg.seed ^ 0x5bd1e995);
  const answerRng = prng(cfg.seed ^ 0x27d4eb2f);
  const newShare = cfg.newConversationShare ?? 0.3;
  const warmup = cfg.warmupMs ?? 5 * 60_000;

  // The controller: the new revision is in its checks (the router sends it nothing) until T0, when they
  // pass and the first step begins (rollout-runner.ts: checksConcluded, then begin).
  const checking: RolloutRecord = { digest: CANDIDATE_DIGEST, stable: STABLE_DIGEST, phase: 'checking', since: T0 - warmup };
  let { state } = worldOf(canary, checking);
  const { spec } = worldOf(canary, checking);
  const figures = new RouterRollouts();
  const steps = new CanarySteps(figures);
  let view = rolloutView(checking, canary);
  let checksPassAt: number | null = T0;
  let wake: number | null = null;
  let nextPoll = cfg.pollMs ? T0 + (cfg.pollFirstMs ?? cfg.pollMs) : Infinity;

  // The arrivals (their times only: which conversation and how it is answered come as they are routed).
  const mean = 1000 / cfg.ratePerS;
  let nextArrival = T0 - warmup - Math.log(1 - arrivalsRng()) * mean;
  const countUntil = cfg.countArrivalsUntilMs === undefined ? -Infinity : T0 + cfg.countArrivalsUntilMs;
  let arrivalsUntil = 0;

  const idle: Conversation[] = [];
  let conversations = 0;
  const inFlight: InFlight[] = [];
  const stepStarts = [0];
  const minReached: (number | null)[] = [null];
  let passes = 0;
  let requests = 0;
  let candidateRequests = 0;
  let candidateFailed = 0;
  let stableFailed = 0;
  let lastCandidateEnd: number | null = null;
  let concluded: { outcome: SimResult['outcome']; at: number; step: number; reason: string | null } | null = null;

  const openConversation = (): Conversation => {
    conversations++;
    const key = `key-${uniformInt(trafficRng, [1, TRAFFIC.keys])}`;
    let pick = trafficRng();
    let tokens: number = TRAFFIC.firstPrompts[0][0];
    for (const [n, w] of TRAFFIC.firstPrompts) {
      if (pick < w) {
        tokens = n;
        break;
      }
      pick -= w;
    }
    tokens = Math.round(tokens * (1 + TRAFFIC.firstPromptSpread * (2 * trafficRng() - 1)));
    const opening = [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: `seed ${cfg.seed}, conversation ${conversations}` }];
    return { key, prefix: affinityKey('/v1/chat/completions', { messages: opening })!, opening, context: tokens, lastArm: null };
  };

  const arrive = (at: number): void => {
    // Outside phase 'canary' (the checks, before T0) the router sends everything to the stable revision and records nothing.
    const v = canaryOf({ rollout: view } as unknown as ModelView);
    const fresh = idle.length === 0 || trafficRng() < newShare;
    const conv = fresh ? openConversation() : idle.splice(Math.floor(trafficRng() * idle.length), 1)[0]!;
    const prompt = conv.context + (fresh ? 0 : uniformInt(trafficRng, TRAFFIC.followUpTokens));
    // the body's turns as the router reads them (the opening, then the last answer and the new message)
    const laterTurn = laterTurnOf({ messages: fresh ? conv.opening : [...conv.opening, { role: 'assistant', content: '…' }, { role: 'user', content: '…' }] });
    const arm = v === null ? 'stable' : armOfDraw(drawOf(conv.key, conv.prefix, v.canaryDigest), v.share);
    const rev = arm === 'canary' ? cfg.candidate : cfg.stable;
    const cached = conv.lastArm === arm ? conv.context : 0;
    const evaluated = prompt - cached;
    const output = uniformInt(trafficRng, TRAFFIC.outputTokens);
    const ok = answerRng() >= rev.errorRate;
    const { ttft: T, tpot: P } = TRAFFIC;
    const ttftMs = (T.baseMs + T.prefillMsPerToken * evaluated + T.cachedMsPerToken * cached) * rev.ttftFactor * lognormal(answerRng, T.sigma);
    const tpotMs = (P.baseMs + P.perContextToken * prompt) * rev.tpotFactor * lognormal(answerRng, P.sigma);
    const endAt = ok ? at + ttftMs + (output - 1) * tpotMs : at + TRAFFIC.errorMs * lognormal(answerRng, T.sigma);
    const f: InFlight = { endAt, conv, arm, view: v, arrivedAt: at, laterTurn, ok, firstByteAt: ok ? at + ttftMs : 0, evaluated, cached, output, tpotMs };
    const i = inFlight.findIndex((g) => g.endAt > endAt);
    inFlight.splice(i < 0 ? inFlight.length : i, 0, f);
    conv.context = prompt;
    if (v === null) return;
    requests++;
    if (arm === 'canary') candidateRequests++;
  };

  const end = (f: InFlight): void => {
    const sample = armSampleOf(f.arm, {
      status: f.ok ? 200 : 500,
      reason: NO_REASON,
      tail: f.ok ? answerTail(f) : null,
      tokens: f.ok ? { evaluated: f.evaluated, cached: f.cached } : null,
      t0: f.arrivedAt,
      firstByteAt: f.firstByteAt,
      now: f.endAt,
    }, f.laterTurn);
    if (f.view !== null) {
      figures.record(MODEL, f.view, sample, f.arrivedAt);
      const k = minReached.length - 1;
      if (concluded === null && minReached[k] === null) {
        const w = figures.window(MODEL, CANDIDATE_DIGEST);
        if (w !== null && w.canary.requests >= canary.minRequests && w.stable.requests >= canary.minRequests) minReached[k] = f.endAt - T0;
      }
    }
    if (f.arm === 'canary') lastCandidateEnd = f.endAt;
    if (!f.ok && f.view !== null) {
      if (f.arm === 'canary') candidateFailed++;
      else stableFailed++;
    }
    const conv = f.conv;
    conv.lastArm = f.arm;
    if (f.ok) conv.context += f.output;
    if (conv.context <= TRAFFIC.maxContext) {
      idle.push(conv);
      if (idle.length > TRAFFIC.idleKept) idle.shift();
    }
  };

  const checksPass = (at: number): void => {
    checksPassAt = null;
    const first = checksConcluded(state.models[MODEL]!.rollout, CANDIDATE_DIGEST, null, at, true)!;
    state = worldOf(canary, first).state;
    steps.begin(MODEL, first.digest, first.since);
    view = rolloutView(first, canary);
    wake = canaryDue(state, spec, at);
  };

  const pass = (at: number): void => {
    passes++;
    state = steps.judge(state, spec, at, SILENT);
    const r = state.models[MODEL]!.rollout!;
    if (r.phase !== 'canary') {
      concluded = { outcome: r.phase === 'promoted' ? 'promoted' : r.phase === 'held' ? 'held' : 'rolled_back', at, step: r.step ?? canary.steps.length - 1, reason: r.verdict?.message ?? null };
      return;
    }
    if (r.since !== view.since) {
      stepStarts.push(r.since - T0);
      minReached.push(null);
    }
    view = rolloutView(r, canary);
    wake = canaryDue(state, spec, at);
  };

  for (;;) {
    const endAt = inFlight[0]?.endAt ?? Infinity;
    if (concluded !== null) {
      // The canary is over: the router sends nothing more to it; what it took drains.
      if (endAt === Infinity) break;
      end(inFlight.shift()!);
      continue;
    }
    const passAt = Math.min(wake ?? Infinity, nextPoll);
    const t = Math.min(endAt, checksPassAt ?? Infinity, passAt, nextArrival);
    if (t > horizon) break;
    if (endAt === t) end(inFlight.shift()!);
    else if (checksPassAt === t) checksPass(t);
    else if (passAt === t) {
      if (nextPoll === t) nextPoll += cfg.pollMs!;
      pass(t);
    } else {
      arrive(t);
      if (t >= T0 && t < countUntil) arrivalsUntil++;
      nextArrival = t - Math.log(1 - arrivalsRng()) * mean;
    }
  }
  // Arrivals after the canary ended still count for the comparison window (they would have come).
  for (let t = nextArrival; t < countUntil; t -= Math.log(1 - arrivalsRng()) * mean) arrivalsUntil++;

  const c = concluded as { outcome: SimResult['outcome']; at: number; step: number; reason: string | null } | null;
  return {
    outcome: c?.outcome ?? 'none',
    concludedAtMs: c === null ? null : c.at - T0,
    step: c?.step ?? (state.models[MODEL]!.rollout!.step ?? 0),
    reason: c?.reason ?? null,
    stepStartsMs: stepStarts,
    minRequestsAtMs: minReached,
    lastCandidateEndMs: lastCandidateEnd === null ? null : lastCandidateEnd - T0,
    requests,
    candidateRequests,
    candidateFailed,
    stableFailed,
    passes,
    arrivalsUntil,
  };
}
