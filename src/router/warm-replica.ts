/**
 * The reconciler's warm-up port (reconciler/warm-up.ts) over this instance's router: the model's
 * hottest prefixes from its table (hot-prefixes.ts), planned and replayed by warmer.ts within the
 * profile's `warmup` bounds, the cost counted and logged (with WARMUP_TIMED_OUT or
 * WARMUP_REPLAY_FAILED when it ended early). A model whose prefixes this router has not seen (a first
 * start, traffic only through other routers) gets no warm-up.
 */
import type { WarmupSpec } from '../fleet-spec/types.js';
import { normalizeWarmup } from '../fleet-spec/normalize.js';
import type { ReplicaWarmup } from '../reconciler/warm-up.js';
import { HOT_ENTRIES, type HotPrefixes } from './hot-prefixes.js';
import { planWarmup, runWarmup, type WarmupResult } from './warmer.js';

/** The warm-up of a profile without one (a hand-built spec): the defaults. */
const DEFAULT_WARMUP: WarmupSpec = normalizeWarmup({});

export function replicaWarmup(hot: HotPrefixes, engineApiKey: string, onCost: (model: string, r: WarmupResult) => void, clock: () => number = Date.now): ReplicaWarmup {
  const headers: Record<string, string> = engineApiKey ? { 'content-type': 'application/json', authorization: `Bearer ${engineApiKey}` } : { 'content-type': 'application/json' };
  return async (t, signal, log) => {
    const w = t.profile.warmup ?? DEFAULT_WARMUP;
    if (w.prefixes <= 0 || w.maxTokens <= 0 || w.timeoutMs <= 0) return null;
    const replays = planWarmup(hot.hottest(t.model, HOT_ENTRIES, clock()), w, t.profile.parallel, t.profile.cacheRamBytes > 0);
    if (replays.length === 0) return null;
    const r = await runWarmup(t.endpoint, headers, replays, w.timeoutMs, signal);
    onCost(t.model, r);
    const fields = { prefixes: r.prefixes, of: replays.length, skipped: r.skipped, tokens: r.tokens, cached: r.cached, seconds: Math.round(r.seconds * 1000) / 1000, outcome: r.outcome };
    if (r.code === null) log.info(fields, 'replica warmed up: it takes traffic now');
    else log.warn({ ...fields, code: r.code, reason: r.message }, 'replica warm-up ended early: it takes traffic now');
    return { prefixes: r.prefixes, tokens: r.tokens, seconds: r.seconds, code: r.code, message: r.message };
  };
}
