/**
 * The router's side of a canary step (#34): which arm a request goes to, and what its end adds to
 * that arm's figures (rollout-figures.ts).
 *
 * The split, only while the model's view says phase 'canary':
 * - the canary arm is the ready replicas whose digest is the view's `canaryDigest`, the stable arm
 *   every other ready replica;
 * - a request's draw is a hash, into [0, 1), of its API key's name, its affinity key (the
 *   conversation's prefix, affinity.ts: read for the split even where the model routes least-busy)
 *   and the canary's digest; below `share` it goes to the canary arm. The same key and prefix always
 *   draw the same, so a conversation and its prompt cache stay on one side, and a step with a larger
 *   share keeps every conversation the smaller one sent to the canary. A request without a key
 *   (auth off) draws by its prefix alone. A request with no prefix (embeddings, a body without
 *   messages or prompt) has no cache to keep and draws at random, so a fleet with one key still
 *   sees the step's share on such requests;
 * - within the arm the usual choice (affinity, least busy) picks the replica; the canary arm's
 *   affinity ring and remembered keys are its own (the stable arm keeps the model's, so they survive
 *   the step);
 * - when the drawn arm has no ready replica, the other arm's serve, and the request counts on the arm
 *   of the replica it really went to. A failover tries the arm's other replicas first, then the other arm's.
 *
 * What a request's end counts (`armSampleOf`):
 * - 'error': the replica's 5xx, a failure the router answered for it (no answer, refused, reset,
 *   timeouts, a stream cut mid-way, the engine key refused), llama-server's 400 for a prompt larger
 *   than its context (the revision cannot serve what the client sent: a `ctx_size` too small), and an
 *   error event inside a 200 stream;
 * - 'client': the client's own 4xx, its abort, and a request cut by the router's own shutdown;
 * - 'ok': the rest, with TTFT (arrival → first byte of the answer, as the router's TTFT metric),
 *   time per output token (llama-server's `timings.predicted_per_token_ms`, else (end − first byte)
 *   / (completion tokens − 1)), and the prompt and cached tokens the router read off the answer's tail
 *   (usage.ts `promptTokensOf`), and whether the request is a later turn of a conversation
 *   (`laterTurnOf` its parsed body, read once when the split is made): a later turn that misses the
 *   cache counts in a TTFT bucket of its own (rollout/types.ts CacheState 'resumed').
 * - an attempt that failed before the first byte and sent the request to another replica counts as
 *   an error on the failed replica's arm (a replica that refuses connections is not hidden by the
 *   failover); a retry on the same replica of a keep-alive connection it had just closed does not.
 */
import { NO_REASON } from '../metrics/ports.js';
import type { FleetView, ModelView, ReplicaView } from '../reconciler/view.js';
import type { Arm, ArmSample, RolloutView } from '../rollout/types.js';
import { affinityKey } from './affinity.js';
import { CLIENT_CLOSED_STATUS } from './errors.js';
import { FNV_OFFSET, fnv, mix } from './ring.js';
import type { RouterRollouts } from './rollout-figures.js';
import { usageOf, type PromptTokens } from './usage.js';

/** The model's rollout when the router splits its traffic (phase 'canary'), else null. */
export function canaryOf(mv: ModelView | null): RolloutView | null {
  const r = mv?.rollout;
  return r !== undefined && r.phase === 'canary' ? r : null;
}

/** Characters of the key name and of the digest hashed into a draw. */
const DRAW_CHARS = 256;

/**
 * A request's draw in [0, 1): FNV-1a over its affinity key, its API key's name and the canary's
 * digest, then murmur3's finalizer (so the draw does not follow the key's place on the affinity
 * ring). Null prefix: Math.random().
 */
export function drawOf(keyName: string, prefix: number | null, canaryDigest: string): number {
  if (prefix === null) return Math.random();
  let h = Math.imul(FNV_OFFSET ^ prefix, 0x01000193);
  h = fnv(h, keyName, DRAW_CHARS);
  h = Math.imul(h ^ 0x1f, 0x01000193);
  h = fnv(h, canaryDigest, DRAW_CHARS);
  return mix(h) / 4_294_967_296;
}

/** The arm a draw picks at a share. */
export const armOfDraw = (draw: number, share: number): Arm => (draw < share ? 'canary' : 'stable');

/** A replica's arm under a rollout. */
export const armOfReplica = (r: ReplicaView, rollout: RolloutView): Arm => (r.digest === rollout.canaryDigest ? 'canary' : 'stable');

/**
 * The replicas of arm `arm` among `replicas`; all of them (the other arm) when it has none. Returns
 * `replicas` itself when every replica is on that arm.
 */
export function armReplicas(replicas: readonly ReplicaView[], rollout: RolloutView, arm: Arm): readonly ReplicaView[] {
  const canary = arm === 'canary';
  let n = 0;
  for (const r of replicas) if ((r.digest === rollout.canaryDigest) === canary) n++;
  if (n === 0 || n === replicas.length) return replicas;
  return replicas.filter((r) => (r.digest === rollout.canaryDigest) === canary);
}

/** llama-server's answer to a prompt larger than its context (HTTP 400). */
const CONTEXT_EXCEEDED = /exceed_context_size_error|exceeds the available context size/;
/** An error event inside a stream (llama-server's `data: {"error":…}`, or `event: error` on /v1/messages). */
const STREAM_ERROR = /data: \{"error"|event: error/;

/** How a request ended: 'ok', the revision's 'error', or the 'client''s own doing (not counted). */
export function outcomeOf(status: number, reason: string, tail: string | null): ArmSample['outcome'] {
  if (status === CLIENT_CLOSED_STATUS || reason === 'ROUTER_SHUTTING_DOWN') return 'client';
  if (reason !== NO_REASON || status >= 500) return 'error';
  if (status >= 400) return tail !== null && CONTEXT_EXCEEDED.test(tail) ? 'error' : 'client';
  if (tail !== null && STREAM_ERROR.test(tail)) return 'error';
  return 'ok';
}

const PER_TOKEN = /"predicted_per_token_ms"\s*:\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)/;
const PREDICTED_N = /"predicted_n"\s*:\s*(\d+)/;

/**
 * Time per output token after the first (ms), from the answer's tail: llama-server's
 * `timings.predicted_per_token_ms` (with at least 2 tokens predicted), else `genMs` (first byte to
 * end) over the completion tokens − 1 the answer reports; null with fewer than 2 tokens or none known.
 */
export function tpotOf(tail: string | null, genMs: number): number | null {
  if (tail === null) return null;
  const t = tail.lastIndexOf('"timings"');
  if (t >= 0) {
    const end = tail.indexOf('}', t);
    const timings = tail.slice(t, end < 0 ? undefined : end);
    const per = PER_TOKEN.exec(timings);
    const n = PREDICTED_N.exec(timings);
    if (per !== null && (n === null || Number(n[1]) >= 2)) return Number(per[1]);
    if (n !== null) return null;
  }
  const completion = usageOf(tail)?.completion ?? 0;
  return completion >= 2 ? genMs / (completion - 1) : null;
}

/**
 * True when a request body is a later turn of a conversation: its `messages` (chat completions,
 * Anthropic's /v1/messages) hold an `assistant` message followed by a message of another role (the
 * next user turn, a tool's result). Its prompt repeats the conversation so far, so a miss on it
 * evaluates the whole history. A first turn (no answer yet, or only an assistant prefill at the end),
 * a completion's `prompt` and a body without messages are not. A few-shot prompt written as earlier
 * turns reads as a later turn: it then counts with them on both arms alike.
 */
export function laterTurnOf(body: Readonly<Record<string, unknown>>): boolean {
  const messages = body['messages'];
  if (!Array.isArray(messages)) return false;
  let input = false;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m: unknown = messages[i];
    const role = typeof m === 'object' && m !== null ? (m as { role?: unknown }).role : undefined;
    if (role !== 'assistant') input = true;
    else if (input) return true;
  }
  return false;
}

/** What a call knows at its end. */
export interface CallEnd {
  readonly status: number;
  /** The catalogue code the router ended it with, NO_REASON for the replica's own answer. */
  readonly reason: string;
  /** The answer's last bytes (null: none kept). */
  readonly tail: string | null;
  /** Prompt tokens read off the tail (usage.ts promptTokensOf). */
  readonly tokens: PromptTokens | null;
  /** performance.now() at arrival, at the first byte (0: none), and now. */
  readonly t0: number;
  readonly firstByteAt: number;
  readonly now: number;
}

/** The sample a call's end adds to arm `arm`; `laterTurn`: the request's `laterTurnOf`. */
export function armSampleOf(arm: Arm, e: CallEnd, laterTurn: boolean): ArmSample {
  const outcome = outcomeOf(e.status, e.reason, e.tail);
  const got = e.firstByteAt > 0;
  return {
    arm,
    outcome,
    ttftMs: got ? e.firstByteAt - e.t0 : null,
    tpotMs: got && outcome === 'ok' ? tpotOf(e.tail, e.now - e.firstByteAt) : null,
    promptTokens: e.tokens === null ? null : e.tokens.evaluated + e.tokens.cached,
    cachedTokens: e.tokens === null ? null : e.tokens.cached,
    laterTurn,
  };
}

const FAILED_ATTEMPT: { readonly [A in Arm]: ArmSample } = {
  stable: Object.freeze({ arm: 'stable', outcome: 'error', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null, laterTurn: false }),
  canary: Object.freeze({ arm: 'canary', outcome: 'error', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null, laterTurn: false }),
};

/** One request's split: its rollout, its draw, and where its figures go. Made only in phase 'canary'. */
export class Split {
  /** The arm its draw picked. */
  readonly arm: Arm;
  private canaryScope: string | null = null;

  constructor(
    readonly model: string,
    readonly rollout: RolloutView,
    readonly draw: number,
    /** The request is a later turn of a conversation (laterTurnOf its body). */
    readonly laterTurn: boolean,
    private readonly figures: RouterRollouts,
    private readonly clock: () => number,
  ) {
    this.arm = armOfDraw(draw, rollout.share);
  }

  /** The replicas the request may go to among the model's ready ones (its arm's, else the other's). */
  replicas(ready: readonly ReplicaView[]): readonly ReplicaView[] {
    return armReplicas(ready, this.rollout, this.arm);
  }

  /** The affinity scope (ring and remembered keys) of an arm's replicas: the model's for stable, the canary's own. */
  scope(arm: readonly ReplicaView[]): string {
    if (arm.length === 0 || armOfReplica(arm[0]!, this.rollout) === 'stable') return this.model;
    return (this.canaryScope ??= `${this.model}\u0000canary`);
  }

  /** An attempt on `r` failed before the first byte and the request went on to another replica. */
  failedAttempt(r: ReplicaView, t0: number): void {
    this.figures.record(this.model, this.rollout, FAILED_ATTEMPT[armOfReplica(r, this.rollout)], this.startedAt(t0));
  }

  /** The request ended on `r`. */
  ended(r: ReplicaView, e: CallEnd): void {
    this.figures.record(this.model, this.rollout, armSampleOf(armOfReplica(r, this.rollout), e, this.laterTurn), this.startedAt(e.t0));
  }

  private startedAt(t0: number): number {
    return this.clock() - (performance.now() - t0);
  }
}

/** Makes a request's Split when its model is in a canary step. */
export class CanarySplitter {
  constructor(
    private readonly fleet: FleetView,
    readonly figures: RouterRollouts,
    private readonly clock: () => number,
  ) {}

  /**
   * The split of a request for `model` (null outside phase 'canary'): `key` is its affinity key
   * where the model routes by affinity; otherwise its prefix is read from the parsed body `fields`,
   * as is whether it is a later turn of a conversation (laterTurnOf).
   */
  of(model: string, keyName: string, key: number | null, path: string, fields: Readonly<Record<string, unknown>>): Split | null {
    const rollout = canaryOf(this.fleet.model(model));
    if (rollout === null) return null;
    const prefix = key ?? affinityKey(path, fields);
    return new Split(model, rollout, drawOf(keyName, prefix, rollout.canaryDigest), laterTurnOf(fields), this.figures, this.clock);
  }
}
