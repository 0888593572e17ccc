/**
 * The boundary where isomorphic-git and network errors become catalogue errors. The core
 * matches codes; messages here are scrubbed of tokens and URL credentials, and the library
 * error is not attached as `cause` (it may carry request details).
 */
import { LlmgwError, isLlmgwError } from '../errors/catalogue.js';
import { scrub } from './auth.js';

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ECONNABORTED',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
]);

interface ErrLike {
  code?: unknown;
  message?: unknown;
  data?: { statusCode?: unknown; what?: unknown; reason?: unknown };
  errors?: unknown;
}

function networkCode(e: ErrLike): string | null {
  if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) return e.code;
  if (Array.isArray(e.errors)) {
    for (const inner of e.errors as ErrLike[]) {
      const c = networkCode(inner ?? {});
      if (c) return c;
    }
  }
  if (typeof e.message === 'string' && /request timed out|socket hang up/i.test(e.message)) return 'ETIMEDOUT';
  return null;
}

export interface GitErrorContext {
  /** What was being done, e.g. "fetch main from https://git.example/fleet.git". */
  readonly op: string;
  /** Secrets to scrub from messages (the token, URL passwords). */
  readonly secrets: readonly (string | null | undefined)[];
}

/** Translate any error thrown by isomorphic-git / the network into an LlmgwError (GIT_* codes). */
export function toGitError(err: unknown, ctx: GitErrorContext): LlmgwError {
  if (isLlmgwError(err)) return err;
  const e = (err ?? {}) as ErrLike;
  const raw = typeof e.message === 'string' ? e.message : String(err);
  const msg = scrub(raw, ctx.secrets);
  const op = scrub(ctx.op, ctx.secrets);
  const net = networkCode(e);
  if (net) return new LlmgwError('GIT_UNREACHABLE', `${op}: ${net} (${msg})`, { errno: net });
  if (e.code === 'HttpError') {
    const status = Number(e.data?.statusCode);
    if (status === 401 || status === 403) {
      return new LlmgwError('GIT_AUTH_FAILED', `${op}: the git server refused the credentials (HTTP ${status})`, { status });
    }
    if (status === 404) {
      return new LlmgwError('GIT_UNREACHABLE', `${op}: no git repository at that URL (HTTP 404); check the URL and the token's access`, { status });
    }
    if (status >= 500 || status === 408 || status === 429) {
      return new LlmgwError('GIT_UNREACHABLE', `${op}: the git server answered HTTP ${status}`, { status });
    }
    return new LlmgwError('GIT_FAILED', `${op}: HTTP ${status} (${msg})`, { status });
  }
  if (e.code === 'NotFoundError') {
    const what = scrub(String(e.data?.what ?? ''), ctx.secrets);
    return new LlmgwError('GIT_REF_NOT_FOUND', `${op}: ${what || 'not found'} does not exist`, { what });
  }
  if (e.code === 'AmbiguousError') {
    return new LlmgwError('GIT_REF_NOT_FOUND', `${op}: ${msg}`, { ambiguous: true });
  }
  if (e.code === 'PushRejectedError' || e.code === 'GitPushError') {
    return new LlmgwError('GIT_PUSH_REJECTED', `${op}: ${msg}`);
  }
  return new LlmgwError('GIT_FAILED', `${op}: ${msg}`, { libraryCode: typeof e.code === 'string' ? e.code : null });
}
