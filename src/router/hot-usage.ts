/**
 * The keys hook (key-usage.ts usageHook) with the hot prefixes' share (hot-prefixes.ts): a keyed
 * request's answer tells its prefix's entry the prompt tokens it took from the replica's cache, read
 * off the same tail the keys hook reads (llama-server's timings, else usage).
 */
import type { ServerResponse } from 'node:http';
import type { HotEntry } from './hot-prefixes.js';
import { usageHook } from './key-usage.js';
import type { EarlyEnd } from './proxy-context.js';
import { promptTokensOf } from './usage.js';

export function hotUsage(of: WeakMap<ServerResponse, HotEntry>, res: ServerResponse, replica: string, tail: string | null, early?: EarlyEnd | null): void {
  usageHook(res, replica, tail, early);
  const e = of.get(res);
  if (e === undefined) return;
  of.delete(res);
  if (early != null || tail === null) return;
  const p = promptTokensOf(tail);
  if (p !== null) e.answered(p.cached, p.evaluated + p.cached);
}
