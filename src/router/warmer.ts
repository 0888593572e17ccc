/**
 * A new replica's warm-up (issue #38 item 2): its model's hottest prefixes (hot-prefixes.ts) replayed
 * to its llama-server with the engine key, each with `max_tokens: 0` / `n_predict: 0` and
 * `cache_prompt: true`, so the prompt is evaluated into a slot (and, with cache_ram, the host-RAM
 * prompt cache) and nothing is generated. On the real engine (llama.cpp's tools/server, build of
 * node-llama-cpp 3.21.1) both `/v1/chat/completions` and `/v1/completions` with `max_tokens: 0` leave
 * the whole prompt cached: the next request with that prefix reports it all as `cache_n`
 * (server-context.cpp: a limit of 0 stops after the prompt, `n_gen > 0 && !has_budget()`, the one
 * sampled token not decoded). The replay is the client's own body (its messages, tools and template
 * options make the prompt), so the same chat template renders the same tokens.
 *
 * Bounded by the profile's `warmup`: at most `prefixes` replays, at most `maxTokens` prompt tokens
 * (a prefix's size estimated before it is sent from its last answer, else its bytes ÷ 4, and counted
 * from each answer's `timings`), and `timeoutMs` for the whole (the replay in flight is cut then).
 * A prefix the replica refuses (4xx) is skipped; a 5xx, a refused engine key (401, 403) or no answer
 * ends the warm-up (WARMUP_REPLAY_FAILED).
 * The hottest prefix is replayed last, so it is the one a slot still holds where the prompt cache is
 * off (cache_ram 0): there, at most `parallel` prefixes are replayed, each into its own slot (`id_slot`).
 */
import { HotEntry } from './hot-prefixes.js';
import { BODY_BYTES_PER_TOKEN, promptTokensOf } from './usage.js';

export interface WarmupBounds {
  readonly prefixes: number;
  readonly maxTokens: number;
  readonly timeoutMs: number;
}

/** What a warm-up did and cost. */
export interface WarmupResult {
  /** Prefixes replayed whole. */
  readonly prefixes: number;
  /** Prompt tokens the replica evaluated for them (its timings' prompt_n). */
  readonly tokens: number;
  /** Prompt tokens it already held (cache_n: prefixes sharing a start). */
  readonly cached: number;
  /** Prefixes the replica refused (4xx: e.g. longer than a new definition's context); the next ones were sent. */
  readonly skipped: number;
  readonly seconds: number;
  /** done (every planned prefix replayed, or none known), timeout, failed. */
  readonly outcome: 'done' | 'timeout' | 'failed';
  /** WARMUP_TIMED_OUT / WARMUP_REPLAY_FAILED, with what happened; null when done. */
  readonly code: string | null;
  readonly message: string | null;
}

/** One replay: where, what, and into which slot (null: llama-server picks). */
export interface Replay {
  readonly path: string;
  readonly body: Buffer;
  readonly slot: number | null;
}

/** A prefix's prompt tokens as known before it is sent. */
export const estimateTokens = (e: HotEntry): number => (e.tokens > 0 ? e.tokens : Math.ceil(e.body.length / BODY_BYTES_PER_TOKEN));

/**
 * The body that replays `body` (a client's request, JSON) as a warm-up: no tokens generated, not
 * streamed, its prompt cached; `slot` pins a slot. Null when it is not a JSON object.
 */
export function replayBody(body: Buffer, slot: number | null): Buffer | null {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return null;
  const o = { ...(v as Record<string, unknown>) };
  delete o['stream'];
  delete o['stream_options'];
  delete o['max_completion_tokens'];
  delete o['n'];
  o['max_tokens'] = 0;
  o['n_predict'] = 0;
  o['cache_prompt'] = true;
  if (slot !== null) o['id_slot'] = slot;
  else delete o['id_slot'];
  return Buffer.from(JSON.stringify(o));
}

/**
 * The replays of a warm-up (pure): from the hottest `entries` (hottest first), those that fit the
 * bounds — at most `prefixes`, and `maxTokens` by estimate (one too large is skipped, a smaller one
 * after it may still fit); with no prompt cache (`cacheRam` false), at most `slots`, one a slot. In
 * the order sent: the coldest first, the hottest last.
 */
export function planWarmup(entries: readonly HotEntry[], b: WarmupBounds, slots: number, cacheRam: boolean): Replay[] {
  const most = cacheRam ? b.prefixes : Math.min(b.prefixes, slots);
  const picked: HotEntry[] = [];
  let tokens = 0;
  for (const e of entries) {
    if (picked.length >= most) break;
    const t = estimateTokens(e);
    if (tokens + t > b.maxTokens) continue;
    tokens += t;
    picked.push(e);
  }
  const out: Replay[] = [];
  picked.reverse().forEach((e, i) => {
    const body = replayBody(e.body, cacheRam ? null : i);
    if (body !== null) out.push({ path: e.path, body, slot: cacheRam ? null : i });
  });
  return out;
}

/**
 * Sends the replays to `endpoint` one after another, within `timeoutMs` in all (`signal`: give up at
 * once, e.g. the controller stops). Never throws.
 */
export async function runWarmup(endpoint: string, headers: Record<string, string>, replays: readonly Replay[], timeoutMs: number, signal?: AbortSignal): Promise<WarmupResult> {
  const t0 = performance.now();
  const base = endpoint.replace(/\/+$/, '');
  const timeout = AbortSignal.timeout(Math.max(1, timeoutMs));
  const cut = signal ? AbortSignal.any([timeout, signal]) : timeout;
  let prefixes = 0;
  let tokens = 0;
  let cached = 0;
  let skipped = 0;
  const end = (outcome: WarmupResult['outcome'], code: string | null, message: string | null): WarmupResult => ({ prefixes, tokens, cached, skipped, seconds: (performance.now() - t0) / 1000, outcome, code, message });
  for (const r of replays) {
    let status = 0;
    let text = '';
    try {
      const res = await fetch(`${base}${r.path}`, { method: 'POST', headers, body: r.body, signal: cut });
      status = res.status;
      text = await res.text();
    } catch (e) {
      if (signal?.aborted) return end('failed', 'WARMUP_REPLAY_FAILED', `the controller is stopping; ${prefixes + skipped} of ${replays.length} prefixes replayed`);
      if (timeout.aborted) return end('timeout', 'WARMUP_TIMED_OUT', `the warm-up was cut at its timeout of ${timeoutMs} ms after ${prefixes + skipped} of ${replays.length} prefixes`);
      return end('failed', 'WARMUP_REPLAY_FAILED', `replay ${prefixes + skipped + 1} of ${replays.length} (${r.path}) got no answer: ${e instanceof Error ? e.message : String(e)}`);
    }
    // a prompt refused (400: past the context, 413, …) is skipped; a key refused (401, 403) is the replica's
    if (status >= 400 && status < 500 && status !== 401 && status !== 403) {
      skipped++;
      continue;
    }
    if (status !== 200) return end('failed', 'WARMUP_REPLAY_FAILED', `replay ${prefixes + skipped + 1} of ${replays.length} (${r.path}) was answered ${status}: ${text.slice(0, 200)}`);
    const p = promptTokensOf(text.length > 4096 ? text.slice(-4096) : text);
    if (p !== null) {
      tokens += p.evaluated;
      cached += p.cached;
    }
    prefixes++;
  }
  return end('done', null, null);
}
