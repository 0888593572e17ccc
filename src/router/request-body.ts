/**
 * A proxied request's body as the router reads it, pure: a JSON object naming a model, without a
 * field the router refuses (`id_slot`: the router places requests on slots itself; redact.ts). Throws
 * the RouterError the client gets (BAD_JSON, BAD_REQUEST, MODEL_MISSING, SLOT_PICK_REFUSED).
 */
import { RouterError } from './errors.js';
import { picksSlot } from './redact.js';

export interface RequestBody {
  /** The parsed object (read for `model`, the affinity key and a canary step's split; not held). */
  readonly fields: Readonly<Record<string, unknown>>;
  /** The model name or alias it names. */
  readonly name: string;
}

export function readRequestBody(body: Buffer): RequestBody {
  if (body.length === 0) throw new RouterError('BAD_JSON', 'The request body is empty; send a JSON object naming a model.');
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (e) {
    throw new RouterError('BAD_JSON', `The request body is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new RouterError('BAD_REQUEST', 'The request body must be a JSON object.');
  }
  const fields = parsed as Record<string, unknown>;
  if (picksSlot(fields)) {
    throw new RouterError('SLOT_PICK_REFUSED', 'The router places requests on replicas and their slots itself: leave "id_slot" out of the request (or set it to -1).', { param: 'id_slot' });
  }
  const name = fields['model'];
  if (name === undefined || name === null || name === '') {
    throw new RouterError('MODEL_MISSING', 'The request body names no model: set "model" to a model name or alias.', { param: 'model' });
  }
  if (typeof name !== 'string') throw new RouterError('BAD_REQUEST', '"model" must be a string.', { param: 'model' });
  return { fields, name };
}
