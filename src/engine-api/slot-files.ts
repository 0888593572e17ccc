/**
 * llama-server's slot files (#38 item 3), on the real engine (llama.cpp tools/server, the build of
 * node-llama-cpp 3.21.1): a replica started with `--slot-save-path DIR` (DIR must exist: the engine
 * refuses to start otherwise) answers
 *   POST /slots/{id}?action=save    {"filename":"f"} → {"id_slot","filename","n_saved","n_written",…}
 *   POST /slots/{id}?action=restore {"filename":"f"} → {"id_slot","filename","n_restored","n_read",…}
 * with the file at DIR/f (the name may hold no path: the engine answers 400 "Invalid filename"; a
 * missing or damaged file or one that does not fit the slot: 400 "Unable to restore slot"); without
 * the flag both are refused. `n_saved` / `n_restored` count the slot's tokens (an empty slot: 0, a
 * 40-byte file). A save of a busy slot waits for it to finish. The engine key is needed, as for any
 * route; the router never forwards /slots (api-paths.ts), so only llmgw can write these files.
 *
 * The files of a model sit in one dir per model on the node (slotSaveDir), shared by its replicas
 * there, so a new replica reads what an old one saved; one name per slot index (slotFileName), so a
 * model's files on a node never take more than `parallel` slots' worth of disk (each save overwrites).
 */
import { createHash } from 'node:crypto';
import { LlmgwError } from '../errors/catalogue.js';

/** The slot-save dir of `model` under a node's data dir: slots/<16 hex of sha256(model)> (a model name is no path). */
export function slotSaveDir(dataDir: string, model: string): string {
  return `${dataDir.replace(/\/+$/, '')}/slots/${createHash('sha256').update(model).digest('hex').slice(0, 16)}`;
}

/** The file a slot is saved to: a plain name llama-server accepts (letters, digits, dot, dash; no path). */
export function slotFileName(slot: number): string {
  if (!Number.isSafeInteger(slot) || slot < 0 || slot > 4095) throw new LlmgwError('INTERNAL', `bad slot index ${slot}`);
  const f = `llmgw-slot-${slot}.bin`;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(f)) throw new LlmgwError('INTERNAL', `bad slot file name ${JSON.stringify(f)}`);
  return f;
}

/** One slot saved: its index, its file, and the tokens it held. */
export interface SavedSlot {
  readonly slot: number;
  readonly file: string;
  readonly tokens: number;
}

async function slotAction(endpoint: string, headers: Record<string, string>, slot: number, action: 'save' | 'restore', file: string, signal: AbortSignal): Promise<Record<string, unknown>> {
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
  if (status !== 200 || typeof body !== 'object' || body === null) {
    const msg = (body as { error?: { message?: unknown } } | null)?.error?.message;
    throw new LlmgwError('SLOT_RESTORE_FAILED', `${action} of slot ${slot} (${file}) at ${endpoint} was answered ${status}: ${typeof msg === 'string' ? msg : text.slice(0, 200)}`);
  }
  return body as Record<string, unknown>;
}

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : 0);

/** Saves slots 0..slots-1 of the replica at `endpoint`, one after another; throws SLOT_RESTORE_FAILED at the first refused. */
export async function saveSlots(endpoint: string, headers: Record<string, string>, slots: number, signal: AbortSignal): Promise<SavedSlot[]> {
  const out: SavedSlot[] = [];
  for (let slot = 0; slot < slots; slot++) {
    const file = slotFileName(slot);
    const r = await slotAction(endpoint, headers, slot, 'save', file, signal);
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
    tokens += count(r['n_restored']);
  }
  return tokens;
}
