/**
 * The keys hook (key-usage.ts usageHook) with the hot prefixes' share (hot-prefixes.ts): a keyed
 * request answered 200 whole is counted for its prefix, with the prompt tokens it took from the
 * replica's cache, read off the same tail the keys hook reads (llama-server's timings, else usage).
 * A request refused, failed or cut is not kept: only a prompt the engine took is replayed.
 */
import type { ServerResponse } from 'node:http';
import type { HotPrefixes } from './hot-prefixes.js';
import { usageHook } from './key-usage.js';
import type { EarlyEnd } from './proxy-context.js';
import { promptTokensOf } from './usage.js';

/** A keyed request on its way: what its prefix's entry keeps once it is answered. */
export interface HotRequest {
  readonly model: string;
  readonly key: number;
  readonly path: string;
  readonly body: Buffer;
}

export function hotUsage(hot: HotPrefixes, of: WeakMap<ServerResponse, HotRequest>, res: ServerResponse, replica: string, tail: string | null, early?: EarlyEnd | null): void {
  usageHook(res, replica, tail, early);
  const r = of.get(res);
  if (r === undefined) return;
  of.delete(res);
  // a tail of a whole answer (proxy.ts keeps one for a 200, and for a canary arm's errors too)
  if (early != null || tail === null || res.statusCode !== 200) return;
  const e = hot.seen(r.model, r.key, r.path, r.body, Date.now());
  const p = promptTokensOf(tail);
  if (e !== null && p !== null) e.answered(p.cached, p.evaluated + p.cached);
}
