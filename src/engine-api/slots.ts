/** llama-server's `GET /slots` answer: what its slots are doing (read by the router and the stop sequence's drain). Pure. */

/** Busy and total slots in a /slots answer (an array of slots with `is_processing`), or null when it is not one. */
export function readSlots(json: unknown): { busy: number; total: number } | null {
  if (!Array.isArray(json)) return null;
  let busy = 0;
  for (const s of json as unknown[]) if (typeof s === 'object' && s !== null && (s as { is_processing?: unknown }).is_processing === true) busy++;
  return { busy, total: json.length };
}
