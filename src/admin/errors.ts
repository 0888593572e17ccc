/**
 * The admin API's one error shape: `{ error: { code, message, hint, retryable } }` with the
 * catalogue reason's HTTP status. Anything that is not an LlmgwError is a 500 INTERNAL whose
 * message says nothing about the internals (the controller log has the stack).
 */
import { LlmgwError, Reasons } from '../errors/catalogue.js';
import type { ErrorJson } from '../wire/shape.js';

export interface RenderedError {
  readonly status: number;
  readonly body: ErrorJson;
  /** True for errors that were not LlmgwErrors (log them with their stack). */
  readonly internal: boolean;
}

const INTERNAL_MESSAGE = 'An unexpected error occurred in the controller; its log has the detail.';

/** Fastify's own request errors (bad JSON, schema validation, body too large, …) as ADMIN_BAD_REQUEST. */
export function fromFastifyError(err: unknown): LlmgwError | null {
  if (err instanceof LlmgwError) return err;
  if ((err as { code?: unknown } | null)?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return new LlmgwError('ADMIN_BODY_TOO_LARGE', err instanceof Error ? err.message : String(err));
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const msg = err instanceof Error ? err.message : String(err);
    return new LlmgwError('ADMIN_BAD_REQUEST', msg);
  }
  return null;
}

export function renderAdminError(err: unknown): RenderedError {
  const e = fromFastifyError(err);
  if (!e) {
    const r = Reasons.INTERNAL;
    return { status: r.http, internal: true, body: { error: { code: r.code, message: INTERNAL_MESSAGE, hint: r.hint, retryable: r.retryable } } };
  }
  const r = e.reason;
  return { status: r.http, internal: false, body: { error: { code: r.code, message: e.message, hint: r.hint, retryable: r.retryable } } };
}
