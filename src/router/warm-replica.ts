/**
 * The reconciler's warm-up port (reconciler/warm-up.ts) over this instance's router: the model's
 * hottest prefixes from its table (hot-prefixes.ts), planned and replayed by warmer.ts within the
 * profile's `warmup` bounds, the cost counted and logged (with WARMUP_TIMED_OUT or
 * WARMUP_REPLAY_FAILED when it ended early). A model whose prefixes this router has not seen (a first
 * start, traffic only through other routers) gets no replay.
 *
 * Where the target names a replica on the same node whose slot files fit it (#38 item 3: the
 * decision of engine-api/slot-restore.ts), its slots are saved and restored into the new one first,
 * and the replays (the hottest first) check that the restore helped (slot-warmup.ts); the replica is
 * said to be warmed by restore or by replay. The slot files of a model on a node have one name per
 * slot, so two warm-ups of the same model on the same node take turns.
 */
import type { WarmupSpec } from '../fleet-spec/types.js';
import { normalizeWarmup } from '../fleet-spec/normalize.js';
import type { ReplicaWarmup } from '../reconciler/warm-up.js';
import type { WarmupView } from '../reconciler/view.js';
import { HOT_ENTRIES, type HotPrefixes } from './hot-prefixes.js';
import { warmWithSlots } from './slot-warmup.js';
import { planWarmup, runWarmup, type WarmupResult } from './warmer.js';

/** The warm-up of a profile without one (a hand-built spec): the defaults. */
const DEFAULT_WARMUP: WarmupSpec = normalizeWarmup({});

/** A warm-up's cost with how the replica was warmed (restore | replay) and the tokens restored from slot files. */
export type WarmCost = WarmupResult & { readonly via: 'restore' | 'replay'; readonly restored: number };

const NOTHING: WarmupResult = { prefixes: 0, tokens: 0, cached: 0, skipped: 0, seconds: 0, outcome: 'done', code: null, message: null };

/**
 * `engineApiKey`: the key the controller starts replicas with, read at each warm-up (under HA it is
 * the cluster's, from etcd, not this instance's state dir: a warm-up with another key is refused 401).
 */
export function replicaWarmup(hot: HotPrefixes, engineApiKey: string | (() => string), onCost: (model: string, r: WarmCost) => void, clock: () => number = Date.now): ReplicaWarmup {
  const keyOf = typeof engineApiKey === 'string' ? () => engineApiKey : engineApiKey;
  /** The last slot warm-up of each node|model: the next one waits for it. */
  const turns = new Map<string, Promise<unknown>>();
  return async (t, signal, log) => {
    const engineKey = keyOf();
    const headers: Record<string, string> = engineKey ? { 'content-type': 'application/json', authorization: `Bearer ${engineKey}` } : { 'content-type': 'application/json' };
    const w = t.profile.warmup ?? DEFAULT_WARMUP;
    if (w.prefixes <= 0 || w.maxTokens <= 0 || w.timeoutMs <= 0) return null;
    const entries = hot.hottest(t.model, HOT_ENTRIES, clock());
    const slots = t.slots;
    if (slots !== undefined && !slots.decision.restore) log.info({ donor: slots.donor, field: slots.decision.field, reason: slots.decision.why }, 'slot files of the old replica do not fit the new one');
    if (slots !== undefined && slots.decision.restore) {
      // unpinned (llama-server picks the slot whose tokens match best: a restored one), the hottest first; with no prompt cache, one a slot
      const cacheRam = t.profile.cacheRamBytes > 0;
      const replays = planWarmup(entries, cacheRam ? w : { ...w, prefixes: Math.min(w.prefixes, t.profile.parallel) }, t.profile.parallel, true).reverse();
      const key = `${t.node}|${t.model}`;
      const before = turns.get(key) ?? Promise.resolve();
      const run = before.then(() => warmWithSlots(slots.endpoint, t.endpoint, headers, t.profile.parallel, replays, w.timeoutMs, signal, slots.saved));
      turns.set(key, run.catch(() => undefined));
      const s = await run;
      if (turns.get(key) === run) turns.delete(key);
      const r = s.replay ?? { ...NOTHING, seconds: s.seconds };
      const cost: WarmCost = { ...r, seconds: s.seconds, code: s.verdict.code, message: s.verdict.message, via: s.verdict.via, restored: s.verdict.via === 'restore' ? s.restore.restored : 0 };
      onCost(t.model, cost);
      const fields = { via: s.verdict.via, donor: slots.donor, saved: s.restore.saved, restored: s.restore.restored, prefixes: r.prefixes, of: replays.length, tokens: r.tokens, cached: r.cached, seconds: Math.round(s.seconds * 1000) / 1000, outcome: r.outcome, ...(s.verdict.unverified ? { unverified: true } : {}) };
      if (s.verdict.code === null) log.info(fields, s.verdict.via === 'restore' ? 'replica warmed up from the old replica\'s slot files: it takes traffic now' : 'replica warmed up: it takes traffic now');
      else log.warn({ ...fields, code: s.verdict.code, reason: s.verdict.message }, s.verdict.via === 'replay' && s.restore.code !== null ? 'slot restore failed: the replica was warmed by replay and takes traffic now' : 'replica warm-up: the restore did not help or the warm-up ended early; it takes traffic now');
      return viewOf(cost);
    }
    const replays = planWarmup(entries, w, t.profile.parallel, t.profile.cacheRamBytes > 0);
    if (replays.length === 0) return null;
    const r = await runWarmup(t.endpoint, headers, replays, w.timeoutMs, signal);
    onCost(t.model, { ...r, via: 'replay', restored: 0 });
    const fields = { prefixes: r.prefixes, of: replays.length, skipped: r.skipped, tokens: r.tokens, cached: r.cached, seconds: Math.round(r.seconds * 1000) / 1000, outcome: r.outcome };
    if (r.code === null) log.info(fields, 'replica warmed up: it takes traffic now');
    else log.warn({ ...fields, code: r.code, reason: r.message }, 'replica warm-up ended early: it takes traffic now');
    return { prefixes: r.prefixes, tokens: r.tokens, seconds: r.seconds, code: r.code, message: r.message, via: 'replay' };
  };
}

function viewOf(c: WarmCost): WarmupView {
  return { prefixes: c.prefixes, tokens: c.tokens, seconds: c.seconds, code: c.code, message: c.message, via: c.via, ...(c.restored > 0 ? { restored: c.restored } : {}) };
}
