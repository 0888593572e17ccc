/** `llmgw ctl usage`'s table: one row per key × model. Pure. */
import type { UsageJson } from '../wire/usage.js';
import { table } from '../format/ctl-format.js';

function latency(s: number | null): string {
  if (s === null) return '-';
  return s < 1 ? `${Math.round(s * 1000)}ms` : `${s.toFixed(s < 10 ? 2 : 1)}s`;
}

export function renderUsage(u: UsageJson): string {
  const what = u.since === null ? 'since the router started' : `since ${u.since}`;
  if (u.rows.length === 0) return `no requests ${what}`;
  const rows = u.rows.map((r) => [r.key, r.model === '' ? '(none)' : r.model, String(r.requests), String(r.errors), String(r.promptTokens), String(r.cachedTokens), String(r.completionTokens), latency(r.p50LatencySeconds)]);
  return [`usage ${what}`, table(['KEY', 'MODEL', 'REQUESTS', 'ERRORS', 'PROMPT', 'CACHED', 'COMPLETION', 'P50'], rows)].join('\n');
}
