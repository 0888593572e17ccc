/**
 * The keys hook (key-usage.ts usageHook) with the hot prefixes' share (hot-prefixes.ts): a keyed
 * request answered 200 whole is counted for its prefix, with the prompt tokens it took from the
 * replica's cache, read off the same tail the keys hook reads (llama-server's timings, else usage).
 * A request refused, failed or cut is not kept: only a prompt the engine took is replayed.
 */
import type { Exchange } from './exchange.js';
import type { HotPrefixes } from './hot-prefixes.js';
import { usageHook } from './key-usage.js';
import type { EarlyEnd } from './proxy-context.js';
import { promptTokensOf } from './usage.js';

export function hotUsage(hot: HotPrefixes, x: Exchange, replica: string, tail: string | null, early?: EarlyEnd | null): void {
  usageHook(x, replica, tail, early);
  const key = x.key;
  // a tail of a whole answer (proxy.ts keeps one for a 200, and for a canary arm's errors too)
  if (key === null || early != null || tail === null || x.res.statusCode !== 200) return;
  const e = hot.seen(x.model, key, x.path, x.body, Date.now());
  const p = promptTokensOf(tail);
  if (e !== null && p !== null) e.answered(p.cached, p.evaluated + p.cached);
}
