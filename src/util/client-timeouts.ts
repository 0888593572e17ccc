/**
 * How long a client may take to send a request to the router or the admin API: node's server-side
 * `headersTimeout` (request line and headers) and `requestTimeout` (the whole request, body included;
 * a response being streamed is not limited by it). A client past either gets 408 and its connection
 * is closed, so a slow sender (slowloris, a dripping body) holds a socket for seconds, not minutes.
 */
export interface ClientTimeouts {
  readonly headersMs: number;
  readonly requestMs: number;
}

export const DEFAULT_CLIENT_TIMEOUTS: ClientTimeouts = Object.freeze({ headersMs: 10_000, requestMs: 30_000 });

/** Options for http(s).createServer: the timeouts, checked often enough to act within a second of them. */
export function clientTimeoutOptions(t: ClientTimeouts): { headersTimeout: number; requestTimeout: number; connectionsCheckingInterval: number } {
  const requestTimeout = Math.max(1, t.requestMs);
  const headersTimeout = Math.max(1, Math.min(t.headersMs, requestTimeout));
  return { headersTimeout, requestTimeout, connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(headersTimeout / 4))) };
}

/** The timeouts on a server someone else created (the check interval is fixed at creation). */
export function applyClientTimeouts(server: { headersTimeout: number; requestTimeout: number }, t: ClientTimeouts): void {
  const o = clientTimeoutOptions(t);
  server.requestTimeout = o.requestTimeout;
  server.headersTimeout = o.headersTimeout;
}
