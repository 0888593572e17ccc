/**
 * Whether two plain data values are equal (pure): primitives by ===, arrays item by item, plain
 * objects key by key (the same keys, any order; a key set to undefined is not the key absent). What
 * JSON would carry; no Maps, Dates or cycles.
 */
export function equalData(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!equalData(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const ra = a as Record<string, unknown>;
  const rb = b as Record<string, unknown>;
  const keys = Object.keys(ra);
  if (keys.length !== Object.keys(rb).length) return false;
  for (const k of keys) if (!Object.hasOwn(rb, k) || !equalData(ra[k], rb[k])) return false;
  return true;
}
