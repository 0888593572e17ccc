/** Sizes ("512MiB", "14GiB", "1.5GB", 1024) and durations ("30s", "5m", "1h30m", "250ms"). */

const SIZE_RE = /^([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$/;
const SIZE_UNITS: Record<string, number> = {
  B: 1,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  TB: 1e12,
  KiB: 2 ** 10,
  MiB: 2 ** 20,
  GiB: 2 ** 30,
  TiB: 2 ** 40,
};

/** Bytes from a size; integers are bytes. Returns null when the text is not a size. */
export function parseSize(v: string | number): number | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : null;
  const m = SIZE_RE.exec(v.trim());
  if (!m) return null;
  const n = Number(m[1]) * (SIZE_UNITS[m[2] ?? 'B'] ?? 1);
  return Number.isFinite(n) ? Math.round(n) : null;
}

const DURATION_RE = /^(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+$/;
const DURATION_PART_RE = /([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)/g;
const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Milliseconds from a duration; integers are seconds. Returns null when the text is not a duration. */
export function parseDuration(v: string | number): number | null {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? Math.round(v * 1000) : null;
  const s = v.trim();
  if (!DURATION_RE.test(s)) return null;
  let ms = 0;
  for (const m of s.matchAll(DURATION_PART_RE)) ms += Number(m[1]) * (DURATION_UNITS[m[2] ?? 's'] ?? 0);
  return Math.round(ms);
}

/** "14.2 GiB", "512 MiB", "900 B" — for messages. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  if (i === 0) return `${v} B`;
  const s = v >= 100 ? v.toFixed(0) : v.toFixed(1).replace(/\.0$/, '');
  return `${s} ${units[i]}`;
}

/** "5m", "1h30m", "10s", "250ms" — for messages. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  let s = Math.round(ms / 1000);
  const parts: string[] = [];
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (h) parts.push(`${h}h`);
  if (m) parts.push(`${m}m`);
  if (s || parts.length === 0) parts.push(`${s}s`);
  return parts.join('');
}
