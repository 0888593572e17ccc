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
import { anthropicType, RouterError, sseEvent, type RenderedError, type RouterReasonCode } from './errors.js';

/** How an attempt failed. See classifyUpstreamError (below) for the mapping from undici's errors. */
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

/** What a failed attempt's message says. */
export interface FailureText {
  readonly model: string;
  /** The last error's own text (undici's, or the OS's). */
  readonly detail?: string;
  /** Replicas tried (UPSTREAM_CONNECT). */
  readonly tried?: number;
  /** The client had response bytes already (UPSTREAM_FAILED). */
  readonly midResponse?: boolean;
  /** The replica's HTTP status (UPSTREAM_AUTH). */
  readonly status?: number;
}

/** A catalogue code a failed attempt is counted and answered as, with its message. */
export interface FailureRow {
  readonly code: RouterReasonCode;
  readonly message: (t: FailureText) => string;
}

/** Before any response byte, a failure after which another replica is tried (isRetryableBeforeResponse). */
const CONNECT: FailureRow = { code: 'UPSTREAM_CONNECT', message: (t) => `No ready replica of model '${t.model}' accepted the request (${t.tried ?? 1} tried; last: ${t.detail ?? ''}).` };
const FAILED: FailureRow = { code: 'UPSTREAM_FAILED', message: (t) => `The connection to the replica of model '${t.model}' failed${t.midResponse === true ? ' mid-response' : ''}: ${t.detail ?? ''}` };

/**
 * The failure vocabulary in one table: each kind of failed attempt → the catalogue code it is counted
 * (`llmgw_router_upstream_errors_total{reason}`) and answered as, and the message the client gets,
 * once the replica had responded or the client had a byte. Before that, a kind that is tried on another
 * replica is counted as UPSTREAM_CONNECT (the finer kind stays in the log).
 */
const FAILURES: { readonly [K in UpstreamFailure]: FailureRow } = {
  connect: FAILED,
  connect_timeout: FAILED,
  reset: FAILED,
  unavailable: FAILED,
  error: FAILED,
  first_byte_timeout: { code: 'UPSTREAM_FIRST_BYTE_TIMEOUT', message: (t) => `The replica of model '${t.model}' sent no response within the first-byte timeout.` },
  stall_timeout: { code: 'UPSTREAM_STALLED', message: (t) => `The replica of model '${t.model}' stopped sending for longer than the stream idle timeout.` },
  auth: { code: 'UPSTREAM_AUTH', message: (t) => `The replica of model '${t.model}' refused llmgw's engine API key (HTTP ${t.status ?? 401}).` },
};

/** The row of a failed attempt; `responded`: the replica had responded or the client had a byte (nothing is tried elsewhere). */
export function failureRow(f: UpstreamFailure, responded: boolean): FailureRow {
  return !responded && isRetryableBeforeResponse(f) ? CONNECT : FAILURES[f];
}

/** The catalogue code of a failed attempt (what the client gets if no other replica is tried). */
export function upstreamReason(f: UpstreamFailure, responded: boolean): RouterReasonCode {
  return failureRow(f, responded).code;
}

/** The error a failed attempt ends the request with. */
export function upstreamError(f: UpstreamFailure, responded: boolean, t: FailureText): RouterError {
  const row = failureRow(f, responded);
  return new RouterError(row.code, row.message(t), { model: t.model });
}
