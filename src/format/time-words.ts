/** Durations and times in words, relative to a reference time (pure): what `llmgw ctl` and the status page print. */

/** "45s", "1m30s", "2h5m", "3d4h". */
export function shortDuration(ms: number): string {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ''}`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60) ? `${Math.floor((s % 3600) / 60)}m` : ''}`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600) ? `${Math.floor((s % 86_400) / 3600)}h` : ''}`;
}

/** "5m ago" / "in 40s" relative to `at` (both ISO); "-" for null. */
export function relative(iso: string | null, at: string): string {
  if (iso === null) return '-';
  const d = Date.parse(at) - Date.parse(iso);
  if (!Number.isFinite(d)) return iso;
  if (Math.abs(d) < 1000) return 'just now';
  return d > 0 ? `${shortDuration(d)} ago` : `in ${shortDuration(d)}`;
}
