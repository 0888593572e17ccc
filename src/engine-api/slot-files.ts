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
 * The calls themselves: reconciler/slot-calls.ts.
 */
import { createHash } from 'node:crypto';

/** The slot-save dir of `model` under a node's data dir: slots/<16 hex of sha256(model)> (a model name is no path). */
export function slotSaveDir(dataDir: string, model: string): string {
  return `${dataDir.replace(/\/+$/, '')}/slots/${createHash('sha256').update(model).digest('hex').slice(0, 16)}`;
}

/** The file a slot is saved to: a plain name llama-server accepts (letters, digits, dot, dash; no path). */
export function slotFileName(slot: number): string {
  return `llmgw-slot-${Number.isSafeInteger(slot) && slot >= 0 ? slot : 0}.bin`;
}
