/**
 * Per-key usage and limits at the router: a request's record (its key, model, replica, tokens and
 * limits ticket), followed to its response's close, where the ticket ends charged with the tokens the
 * replica reported (or, for a request that ended early, the tokens seen) and the usage row is
 * written; and a refused limit as the 429 the client gets.
 */
import type { ServerResponse } from 'node:http';
import { RouterError } from './errors.js';
import { refusalMessage, type Refusal, type Ticket } from './limits.js';
import { CLIENT_CLOSED_STATUS, type EarlyEnd } from './proxy-context.js';
import { earlyUsageOf, NO_TOKENS, usageOf, type TokenUsage, type UsageSink } from './usage.js';

/**
 * A limit refused with a longer wait than this is answered `x-should-retry: false`: an SDK at its
 * default retries would hold the request (the openai client honours Retry-After up to 60 s) only to
 * be refused again or to time out; the caller sees the 429 and its Retry-After at once.
 */
export const KEY_RETRY_WITHIN_S = 10;

/** A refused limit as the 429 the client gets. */
export function limitError(r: Refusal, model: string): RouterError {
  return new RouterError(r.code, refusalMessage(r), { model, retryAfterSeconds: r.retryAfterSeconds, shouldRetry: r.retryAfterSeconds <= KEY_RETRY_WITHIN_S });
}

/** A request's key, model, replica and tokens, recorded when its response closes (usage, limits). */
export interface Tracked {
  readonly key: string;
  model: string;
  replica: string;
  reason: string;
  tokens: TokenUsage;
  /** The request ended before its response did; `tokens` are what was seen (earlyUsageOf). */
  early: boolean;
  ticket: Ticket | null;
}

const TRACKED = Symbol('llmgw.usage');
type TrackedResponse = ServerResponse & { [TRACKED]?: Tracked };

/** The record of a request `track` follows (undefined: not followed). */
export function trackedOf(res: ServerResponse): Tracked | undefined {
  return (res as TrackedResponse)[TRACKED];
}

/**
 * Follows a request of key `key` to its response's close: then its limits' hold ends (charged the
 * tokens the replica reported) and its usage is recorded.
 */
export function track(res: ServerResponse, key: string, t0: number, usage: UsageSink | null): void {
  const t: Tracked = { key, model: '', replica: '', reason: '', tokens: NO_TOKENS, early: false, ticket: null };
  (res as TrackedResponse)[TRACKED] = t;
  res.once('close', () => {
    const tokens = t.tokens;
    t.ticket?.end(tokens.prompt + tokens.cached + tokens.completion);
    usage?.record({
      time: Date.now(),
      key: t.key,
      model: t.model,
      replica: t.replica,
      status: res.writableFinished ? res.statusCode : CLIENT_CLOSED_STATUS,
      reason: t.reason,
      durationSeconds: (performance.now() - t0) / 1000,
      tokens,
      ...(t.early ? { endedEarly: true } : {}),
    });
  });
}

/**
 * The keys hook of the proxy (ProxyContext.onUsage): the replica that answered and the tokens it
 * reported; for a request that ended early, the tokens seen (earlyUsageOf), charged as any others.
 */
export function usageHook(res: ServerResponse, replica: string, tail: string | null, early?: EarlyEnd | null): void {
  const t = trackedOf(res);
  if (t === undefined) return;
  t.replica = replica;
  if (early != null) {
    t.tokens = earlyUsageOf(early);
    t.early = true;
  } else if (tail !== null) t.tokens = usageOf(tail) ?? NO_TOKENS;
}
