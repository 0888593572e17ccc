/**
 * The router's errors: catalogue reasons (src/errors/catalogue.ts, section "router") rendered in the
 * envelope of the API the request was made to, with the headers the official SDKs act on:
 * `x-should-retry` (both the openai and @anthropic-ai/sdk clients obey it before looking at the
 * status) and `Retry-After`.
 *
 * - OpenAI paths: `{error:{message,type,code,param}}`, mid-stream `data: {"error":…}`;
 * - Anthropic paths (/v1/messages, /v1/messages/count_tokens): `{"type":"error","error":{"type",
 *   "message"}}` with the Anthropic type of the status (anthropicType), mid-stream an
 *   `event: error` SSE event with the same body.
 */
import type { ServerResponse } from 'node:http';
import { LlmgwError, Reasons, type ReasonCode } from '../errors/catalogue.js';

export type RouterReasonCode =
  | 'MODEL_NOT_FOUND'
  | 'MODEL_FORBIDDEN'
  | 'MODEL_PARKED'
  | 'MODEL_UNPLACEABLE'
  | 'MODEL_LOADING'
  | 'MODEL_FAILING'
  | 'AUTH_MISSING'
  | 'AUTH_INVALID'
  | 'BAD_REQUEST'
  | 'BAD_JSON'
  | 'MODEL_MISSING'
  | 'BODY_TOO_LARGE'
  | 'ROUTE_NOT_FOUND'
  | 'CONCURRENCY_LIMIT'
  | 'KEY_RATE_LIMITED'
  | 'KEY_TOKENS_LIMITED'
  | 'KEY_CONCURRENCY_LIMITED'
  | 'KEY_LIMITS_UNCOUNTED'
  | 'MODEL_OVERLOADED'
  | 'UPSTREAM_CONNECT'
  | 'UPSTREAM_FIRST_BYTE_TIMEOUT'
  | 'UPSTREAM_STALLED'
  | 'UPSTREAM_FAILED'
  | 'UPSTREAM_AUTH'
  | 'ROUTER_SHUTTING_DOWN'
  | 'ROUTER_OVERLOADED'
  | 'REQUEST_TIMEOUT'
  | 'HEADERS_TOO_LARGE'
  | 'MALFORMED_HTTP'
  | 'NO_VALID_SPEC'
  | 'LEADER_UNAVAILABLE'
  | 'ETCD_UNAVAILABLE'
  | 'FOREIGN_HOST'
  | 'FOREIGN_ORIGIN'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'SLOT_PICK_REFUSED'
  | 'RESPONSE_NOT_REDACTABLE'
  | 'INTERNAL';

export interface RouterErrorDetail {
  /** Seconds for the Retry-After header. */
  readonly retryAfterSeconds?: number;
  /** The request field at fault (OpenAI `param`). */
  readonly param?: string;
  /** Overrides the reason's `retryable` in `x-should-retry` (a wait longer than a client should hold a request). */
  readonly shouldRetry?: boolean;
  readonly [k: string]: unknown;
}

/** An LlmgwError carrying a router reason. */
export class RouterError extends LlmgwError {
  readonly retryAfterSeconds: number | undefined;
  readonly param: string | null;
  readonly shouldRetry: boolean | undefined;
  constructor(code: RouterReasonCode, message: string, detail: RouterErrorDetail = {}, options?: { cause?: unknown }) {
    super(code as ReasonCode, message, { ...detail }, options);
    this.name = 'RouterError';
    this.retryAfterSeconds = detail.retryAfterSeconds;
    this.param = detail.param ?? null;
    this.shouldRetry = detail.shouldRetry;
  }
}

export interface Envelope {
  readonly error: { readonly message: string; readonly type: string; readonly code: string; readonly param: string | null };
}

function isRouterCode(code: string): code is RouterReasonCode {
  return Object.hasOwn(Reasons, code) && Reasons[code as ReasonCode].openai !== null;
}

/** The API whose envelope an answer is in. */
export type Api = 'openai' | 'anthropic';

/** The API of a request path: Anthropic's Messages API for /v1/messages and below, else OpenAI. */
export function apiOf(url: string | undefined): Api {
  return url !== undefined && url.startsWith('/v1/messages') && (url.length === 12 || url[12] === '/' || url[12] === '?') ? 'anthropic' : 'openai';
}

/** Anthropic's error `type` for an HTTP status (https://docs.anthropic.com/en/api/errors). */
export function anthropicType(status: number): string {
  switch (status) {
    case 400:
    case 408:
    case 431:
      return 'invalid_request_error';
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return status < 500 ? 'invalid_request_error' : 'api_error';
  }
}

export interface AnthropicEnvelope {
  readonly type: 'error';
  readonly error: { readonly type: string; readonly message: string };
}

export interface RenderedError {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
  readonly code: RouterReasonCode;
  readonly api: Api;
}

/**
 * Any error → status, headers and the JSON envelope of `api`. Unknown errors become 500
 * internal_error (message kept generic).
 */
export function renderError(e: unknown, api: Api = 'openai'): RenderedError {
  let code: RouterReasonCode = 'INTERNAL';
  let message = 'Internal error in the llmgw router.';
  let param: string | null = null;
  let retryAfter: number | undefined;
  let shouldRetry: boolean | undefined;
  if (e instanceof LlmgwError && isRouterCode(e.code)) {
    code = e.code;
    message = e.message;
    if (e instanceof RouterError) {
      param = e.param;
      retryAfter = e.retryAfterSeconds;
      shouldRetry = e.shouldRetry;
    }
  }
  const reason = Reasons[code];
  const oa = reason.openai!;
  const headers: Record<string, string> = {
    'content-type': 'application/json; charset=utf-8',
    'x-should-retry': (shouldRetry ?? reason.retryable) ? 'true' : 'false',
    'x-llmgw-reason': code,
  };
  if (retryAfter !== undefined) headers['retry-after'] = String(Math.max(1, Math.ceil(retryAfter)));
  if (api === 'anthropic') {
    const env: AnthropicEnvelope = { type: 'error', error: { type: anthropicType(reason.http), message } };
    return { status: reason.http, headers, body: JSON.stringify(env), code, api };
  }
  const env: Envelope = { error: { message, type: oa.type, code: oa.code, param } };
  return { status: reason.http, headers, body: JSON.stringify(env), code, api };
}

/** An error in the envelope of the API the response's request was made to (its URL). */
export function renderFor(res: ServerResponse, e: unknown): RenderedError {
  return renderError(e, apiOf((res as { req?: { url?: string } }).req?.url));
}

/** Writes a rendered error to a raw response. Returns the status written, or 0 if it could not. */
export function writeRendered(res: ServerResponse, r: RenderedError, extraHeaders?: Record<string, string>): number {
  if (res.headersSent || res.destroyed) return 0;
  const headers = extraHeaders ? { ...r.headers, ...extraHeaders } : { ...r.headers };
  headers['content-length'] = String(Buffer.byteLength(r.body));
  res.writeHead(r.status, headers);
  res.end(r.body);
  return r.status;
}

/** A name or URL quoted in a message, cut at 200 characters. */
function quote(name: string): string {
  return name.length > 200 ? `${name.slice(0, 200)}…` : name;
}

/**
 * 404 model_not_found. GET /v1/models/:model answers it also for a model the key may not use (the list
 * hides those); a proxied request for one gets 403 model_not_allowed instead.
 */
export function modelNotFound(name: string): RouterError {
  return new RouterError('MODEL_NOT_FOUND', `The model '${quote(name)}' does not exist or you do not have access to it.`, { param: 'model' });
}

/** 404 unknown_url. */
export function routeNotFound(method: string, url: string): RouterError {
  return new RouterError('ROUTE_NOT_FOUND', `Unknown request URL: ${method} ${quote(url)}.`);
}

/** 502: an answer to a key not trusted that cannot be rid of its prompt-cache figures (redact.ts). */
export function notRedactable(why: string): RouterError {
  return new RouterError('RESPONSE_NOT_REDACTABLE', `The answer cannot be passed to this API key without its prompt-cache figures (${why}); the key is not marked trusted in access/keys.yaml.`);
}

/** 503: an answer held to redact it would take the bytes the router holds past maxBufferedBytes (byte-budget.ts). */
export function heldOverBound(max: number): RouterError {
  return new RouterError('ROUTER_OVERLOADED', `The router is overloaded (the requests in progress hold more than ${max} bytes, with this answer held to take its prompt-cache figures out); retry shortly.`, { retryAfterSeconds: 1 });
}

/** The same error as one SSE event (`data: {"error":…}`), which OpenAI SDKs raise as an APIError mid-stream. */
export function sseErrorEvent(e: unknown): string {
  return sseEvent(renderError(e));
}

/** A rendered error as one SSE event: Anthropic's `event: error`, or OpenAI's bare `data:` event. */
export function sseEvent(r: RenderedError): string {
  return r.api === 'anthropic' ? `event: error\ndata: ${r.body}\n\n` : `data: ${r.body}\n\n`;
}

/** Status recorded for a request whose client went away (as nginx does). */
export const CLIENT_CLOSED_STATUS = 499;
