/**
 * How long a client may take to send a request to the router or the admin API: node's server-side
 * `headersTimeout` (request line and headers) and `requestTimeout` (the whole request, body included;
 * a response being streamed is not limited by it). A client past either gets 408 and its connection
 * is closed, so a slow sender (slowloris, a dripping body) holds a socket for seconds, not minutes.
 */
import { STATUS_CODES } from 'node:http';

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

/** What a server says to a client that broke HTTP or took too long, before any request exists. */
export type ClientErrorKind = 'REQUEST_TIMEOUT' | 'HEADERS_TOO_LARGE' | 'MALFORMED_HTTP';

export interface RawAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/**
 * A fastify clientErrorHandler answering in the server's own error envelope (`render`), with the
 * catalogue code, then closing the connection (as node and fastify's default do).
 */
export function clientErrorHandler(render: (kind: ClientErrorKind, message: string) => RawAnswer): (err: Error & { code?: string }, socket: import('node:stream').Duplex) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const kind: ClientErrorKind = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' || err.code === 'ERR_HTTP_HEADERS_TIMEOUT' ? 'REQUEST_TIMEOUT' : err.code === 'HPE_HEADER_OVERFLOW' ? 'HEADERS_TOO_LARGE' : 'MALFORMED_HTTP';
    const message = kind === 'REQUEST_TIMEOUT' ? 'The request was not received in time; the connection is closed.' : kind === 'HEADERS_TOO_LARGE' ? 'The request headers are too large.' : `The request is not valid HTTP/1.1${err.code ? ` (${err.code})` : ''}.`;
    const a = render(kind, message);
    // a response already under way on this socket cannot get a second status line
    const busy = (socket as unknown as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
    if (socket.writable && !busy) {
      const head = [`HTTP/1.1 ${a.status} ${STATUS_CODES[a.status] ?? ''}`, ...Object.entries(a.headers).map(([k, v]) => `${k}: ${v}`), `content-length: ${Buffer.byteLength(a.body)}`, 'connection: close'];
      socket.end(`${head.join('\r\n')}\r\n\r\n${a.body}`);
      setTimeout(() => socket.destroy(), 1000).unref();
    } else socket.destroy(err);
  };
}
