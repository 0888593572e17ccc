/**
 * The slot-file calls of llama-server (#38 item 3; what they answer: engine-api/slot-files.ts): save
 * a replica's slots, restore them into another's. The file name goes in the JSON body (quoted by
 * JSON.stringify), never in the URL; the slot index is an integer.
 */
import { LlmgwError } from '../errors/catalogue.js';
import { slotFileName } from '../engine-api/slot-files.js';

/** One slot saved: its index, its file, and the tokens it held. */
export interface SavedSlot {
  readonly slot: number;
  readonly file: string;
  readonly tokens: number;
}

/** A replica started without --slot-save-path (by an llmgw before #38 item 3) answers a slot action 501. */
export const SLOTS_NOT_SUPPORTED = 501;

async function slotAction(endpoint: string, headers: Record<string, string>, slot: number, action: 'save' | 'restore', file: string, signal: AbortSignal): Promise<Record<string, unknown> | typeof SLOTS_NOT_SUPPORTED> {
  const url = `${endpoint.replace(/\/+$/, '')}/slots/${slot}?action=${action}`;
  let status = 0;
  let text = '';
  try {
    const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ filename: file }), signal });
    status = res.status;
    text = await res.text();
  } catch (e) {
    throw new LlmgwError('SLOT_RESTORE_FAILED', `${action} of slot ${slot} at ${endpoint} got no answer: ${e instanceof Error ? e.message : String(e)}`);
  }
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    /* reported below */
  }
  if (status === SLOTS_NOT_SUPPORTED && action === 'save') return SLOTS_NOT_SUPPORTED;
  if (status !== 200 || typeof body !== 'object' || body === null) {
    const msg = (body as { error?: { message?: unknown } } | null)?.error?.message;
    throw new LlmgwError('SLOT_RESTORE_FAILED', `${action} of slot ${slot} (${file}) at ${endpoint} was answered ${status}: ${typeof msg === 'string' ? msg : text.slice(0, 200)}`);
  }
  return body as Record<string, unknown>;
}

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);

/**
 * Saves slots 0..slots-1 of the replica at `endpoint`, one after another; throws SLOT_RESTORE_FAILED at
 * the first refused. A replica started without a slot-save path (before an upgrade): no slots, no error.
 */
export async function saveSlots(endpoint: string, headers: Record<string, string>, slots: number, signal: AbortSignal): Promise<SavedSlot[]> {
  const out: SavedSlot[] = [];
  for (let slot = 0; slot < slots; slot++) {
    const file = slotFileName(slot);
    const r = await slotAction(endpoint, headers, slot, 'save', file, signal);
    if (r === SLOTS_NOT_SUPPORTED) return [];
    out.push({ slot, file, tokens: count(r['n_saved']) });
  }
  return out;
}

/** Restores the saved slots that held tokens into the same slots of the replica at `endpoint`: the tokens restored; throws SLOT_RESTORE_FAILED at the first refused. */
export async function restoreSlots(endpoint: string, headers: Record<string, string>, saved: readonly SavedSlot[], signal: AbortSignal): Promise<number> {
  let tokens = 0;
  for (const s of saved) {
    if (s.tokens <= 0) continue;
    const r = await slotAction(endpoint, headers, s.slot, 'restore', s.file, signal);
    if (r !== SLOTS_NOT_SUPPORTED) tokens += count(r['n_restored']);
  }
  return tokens;
}
