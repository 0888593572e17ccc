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

/** Whether two records have the same keys with the same values (===): a shallow compare. */
export function sameEntries<T>(a: Readonly<Record<string, T>>, b: Readonly<Record<string, T>>): boolean {
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) {
    const v = a[k];
    if (v !== b[k] || (v === undefined && !Object.hasOwn(b, k))) return false;
  }
  return true;
}
