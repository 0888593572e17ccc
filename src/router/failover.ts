/**
 * What the router does when an attempt on a replica fails (pure): the failure vocabulary of an
 * attempt, whether the request goes on elsewhere, and how a stream cut after its first byte ends in
 * the API's own shape.
 *
 * Before the first byte reaches the client nothing is lost by trying again, so:
 *   - a refused or timed-out connection (the request never reached the replica) tries each ready
 *     replica of the model once;
 *   - a connection reset before any response is first retried once on the same replica (most often a
 *     keep-alive connection it had just closed; its prompt cache stays of use), then moves on;
 *   - a connection reset after the request reached the replica (a replica killed or gone while
 *     working on it) and llama-server's 503 (still loading the model) move the request once to another
 *     ready replica. A 503 with no other replica to go to is passed to the client as the replica said.
 * After the first byte, nothing is retried: a stream ends with an error event (OpenAI's
 * `data: {"error":…}` on /v1/chat/completions and /v1/completions, Anthropic's `event: error` on
 * /v1/messages), any other body is cut (the client sees the connection close before the end).
 */
import { anthropicType, sseEvent, type RenderedError, type RouterReasonCode } from './errors.js';

/** How an attempt failed. See classifyUpstreamError (proxy.ts) for the mapping from undici's errors. */
export type UpstreamFailure =
  | 'connect'
  | 'connect_timeout'
  | 'reset'
  | 'first_byte_timeout'
  | 'stall_timeout'
  | 'auth'
  /** The replica answered 503 (llama-server while it loads the model). */
  | 'unavailable'
  | 'error';

export interface FailureFacts {
  readonly failure: UpstreamFailure;
  /** A response byte went to the client already. */
  readonly clientGotByte: boolean;
  /** The replica had sent its response headers (it had the request and was answering). */
  readonly replicaResponded: boolean;
  /** The request was retried on the same replica already (after a reset). */
  readonly retriedSame: boolean;
  /** Times the request moved to another replica after reaching one (a reset, a 503). */
  readonly moves: number;
}

/** Where the request goes next: the same replica once more, another replica, or nowhere (it fails). */
export type Failover = 'same' | 'other' | 'none';

/** Moves to another replica after the request reached one (reset, 503). */
export const MAX_MOVES = 1;

export function failoverOf(f: FailureFacts): Failover {
  if (f.clientGotByte) return 'none';
  switch (f.failure) {
    case 'connect':
    case 'connect_timeout':
      return 'other';
    case 'reset':
      if (!f.replicaResponded && !f.retriedSame) return 'same';
      return f.moves < MAX_MOVES ? 'other' : 'none';
    case 'unavailable':
      return f.moves < MAX_MOVES ? 'other' : 'none';
    default:
      return 'none';
  }
}

/** True when trying elsewhere after this failure counts as a move (the request may have reached the replica). */
export function isMove(f: UpstreamFailure): boolean {
  return f === 'unavailable' || f === 'reset';
}

/** Failures that count toward taking a replica out of routing (breaker.ts): it is not serving. */
export function ejectable(f: UpstreamFailure): boolean {
  return f === 'connect' || f === 'connect_timeout' || f === 'reset' || f === 'unavailable';
}

/** The API a request path belongs to, for the shape of a mid-stream error. */
export type StreamApi = 'openai' | 'anthropic';

export function streamApiOf(path: string): StreamApi {
  return path === '/v1/messages' || path.startsWith('/v1/messages?') ? 'anthropic' : 'openai';
}

/** A rendered error as the last event of a stream in the API's own shape. */
export function streamErrorEvent(api: StreamApi, r: RenderedError): string {
  if (api === 'anthropic') {
    const message = (JSON.parse(r.body) as { error: { message: string } }).error.message;
    return `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: anthropicType(r.status), message } })}\n\n`;
  }
  return sseEvent(r);
}

// --- undici's errors in this vocabulary, and the catalogue code an attempt is counted as ---

const CONNECT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN', 'EADDRNOTAVAIL', 'ENOTFOUND', 'EAI_AGAIN']);
const RESET_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED', 'ECONNABORTED']);

/** What kind of upstream failure an undici error is. */
export function classifyUpstreamError(err: unknown): UpstreamFailure {
  if (err instanceof ReplicaUnavailable) return 'unavailable';
  let e = err as { code?: unknown; cause?: unknown } | null;
  for (let depth = 0; e && depth < 3; depth++) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (code === 'UND_ERR_CONNECT_TIMEOUT') return 'connect_timeout';
    if (code === 'UND_ERR_HEADERS_TIMEOUT') return 'first_byte_timeout';
    if (code === 'UND_ERR_BODY_TIMEOUT') return 'stall_timeout';
    if (CONNECT_CODES.has(code)) return 'connect';
    if (RESET_CODES.has(code)) return 'reset';
    e = e.cause as typeof e;
  }
  return 'error';
}

/** Failures before any response byte after which another replica is tried. */
export function isRetryableBeforeResponse(f: UpstreamFailure): boolean {
  return f === 'connect' || f === 'connect_timeout' || f === 'reset' || f === 'unavailable';
}

/** The abort of an attempt whose replica answered 503 while another replica may serve the request. */
export class ReplicaUnavailable extends Error {
  constructor(readonly status: number) {
    super(`the replica answered ${status} (not serving yet)`);
    this.name = 'ReplicaUnavailable';
  }
}

/**
 * The catalogue code of a failed attempt (what `llmgw_router_upstream_errors_total{reason}` counts):
 * the error the client gets if no other replica is tried. A failure before any response byte that is
 * retried on another replica is a connect failure; the finer kind stays in the log.
 */
export function upstreamReason(f: UpstreamFailure, responded: boolean): RouterReasonCode {
  if (f === 'auth') return 'UPSTREAM_AUTH';
  if (!responded && isRetryableBeforeResponse(f)) return 'UPSTREAM_CONNECT';
  if (f === 'first_byte_timeout') return 'UPSTREAM_FIRST_BYTE_TIMEOUT';
  if (f === 'stall_timeout') return 'UPSTREAM_STALLED';
  return 'UPSTREAM_FAILED';
}
