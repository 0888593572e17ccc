/**
 * JSON with object keys sorted, so that the same content always serializes to the same text
 * (spreads and deletes in pure transitions reorder keys): what the etcd stores compare to decide
 * whether anything changed and a write is due.
 */
export function canonicalJson(v: unknown): string {
  return JSON.stringify(sortKeys(v));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v === null || typeof v !== 'object') return v;
  if (typeof (v as { toJSON?: unknown }).toJSON === 'function') return sortKeys((v as { toJSON: () => unknown }).toJSON());
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v).sort()) {
    const x = (v as Record<string, unknown>)[k];
    if (x !== undefined && typeof x !== 'function') out[k] = sortKeys(x);
  }
  return out;
}
