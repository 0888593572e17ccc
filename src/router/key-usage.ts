/**
 * Per-key usage and limits at the router: a request's exchange (its key, model, replica, tokens and
 * limits ticket; exchange.ts), followed to its response's close, where the ticket ends charged with
 * the tokens the replica reported (or, for a request that ended early, the tokens seen) and the
 * usage row is written; and a refused limit as the 429 the client gets.
 */
import { RouterError } from './errors.js';
import type { ExchangeUsage } from './exchange.js';
import { refusalMessage, type Refusal } from './limits.js';
import { CLIENT_CLOSED_STATUS, type EarlyEnd } from './proxy-context.js';
import { earlyUsageOf, NO_TOKENS, usageOf, type UsageSink } from './usage.js';

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

/**
 * Follows a request to its response's close: then its limits' hold ends (charged the tokens the
 * replica reported) and its usage is recorded, both read from the request's exchange (exchange.ts).
 */
export function track(x: ExchangeUsage, usage: UsageSink | null): void {
  const res = x.res;
  res.once('close', () => {
    const tokens = x.tokens;
    x.ticket?.end(tokens.prompt + tokens.cached + tokens.completion);
    usage?.record({
      time: Date.now(),
      key: x.keyName,
      model: x.model,
      replica: x.replica,
      status: res.writableFinished ? res.statusCode : CLIENT_CLOSED_STATUS,
      reason: x.reason,
      durationSeconds: (performance.now() - x.t0) / 1000,
      tokens,
      ...(x.early ? { endedEarly: true } : {}),
    });
  });
}

/**
 * The keys hook of the proxy (ProxyContext.onUsage): the replica that answered and the tokens it
 * reported; for a request that ended early, the tokens seen (earlyUsageOf), charged as any others.
 */
export function usageHook(x: ExchangeUsage, replica: string, tail: string | null, early?: EarlyEnd | null): void {
  x.replica = replica;
  if (early != null) {
    x.tokens = earlyUsageOf(early);
    x.early = true;
  } else if (tail !== null) x.tokens = usageOf(tail) ?? NO_TOKENS;
}
