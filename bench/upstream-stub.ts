/**
 * A fast OpenAI-shaped upstream for the router benchmark: a plain node:http server.
 *
 *   POST /v1/chat/completions {"stream": false}  → a ~300-byte chat.completion JSON
 *   POST /v1/chat/completions {"stream": true}   → SSE: 3 chunks and [DONE], at once
 *   … {"stream": true, "hold": true}             → SSE: one chunk at once, then a comment line every
 *                                                   5 s until the client goes away (open-stream test)
 *
 * The body is only scanned for `"stream":true` / `"hold":true` (no JSON.parse), so the stub costs as
 * little CPU as possible.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

const JSON_BODY = Buffer.from(
  JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion',
    created: 1700000000,
    model: 'bench-model',
    choices: [{ index: 0, message: { role: 'assistant', content: 'The fleet is ready.' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 },
  }),
);
const chunk = (content: string, finish: string | null): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: 1700000000, model: 'bench-model', choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
const SSE_FIRST = Buffer.from(chunk('The', null));
const SSE_REST = Buffer.from(chunk(' fleet', null) + chunk(' is ready.', 'stop') + 'data: [DONE]\n\n');
const JSON_HEADERS = { 'content-type': 'application/json', 'content-length': String(JSON_BODY.length) };
const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };

export interface UpstreamStub {
  server: Server;
  port: number;
  url: string;
  /** Held SSE streams open now. */
  openStreams: () => number;
  /** Connections accepted so far, and open now. */
  connections: () => { accepted: number; open: number };
  /**
   * Closes every connection with no request in progress, including those that never sent one
   * (node's server.closeIdleConnections() leaves those open).
   */
  closeIdle: () => void;
}

export function startUpstreamStub(port = 0): Promise<UpstreamStub> {
  let open = 0;
  let accepted = 0;
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('latin1');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      if (!body.includes('"stream":true')) {
        res.writeHead(200, JSON_HEADERS);
        res.end(JSON_BODY);
        return;
      }
      res.writeHead(200, SSE_HEADERS);
      if (!body.includes('"hold":true')) {
        res.write(SSE_FIRST);
        res.end(SSE_REST);
        return;
      }
      open++;
      res.write(SSE_FIRST);
      const t = setInterval(() => res.write(': keep-alive\n\n'), 5000);
      res.on('close', () => {
        clearInterval(t);
        open--;
      });
    });
  });
  server.on('connection', (socket: Socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.keepAliveTimeout = 60_000;
  server.maxRequestsPerSocket = 0;
  return new Promise((resolve) => {
    server.listen(port, '127.0.0.1', () => {
      const p = (server.address() as AddressInfo).port;
      resolve({
        server,
        port: p,
        url: `http://127.0.0.1:${p}`,
        openStreams: () => open,
        connections: () => ({ accepted, open: sockets.size }),
        closeIdle: () => {
          // a socket's current response, as node's own closeIdleConnections() checks it
          for (const s of sockets) {
            const res = (s as Socket & { _httpMessage?: { writableFinished: boolean } | null })._httpMessage;
            if (!res || res.writableFinished) s.destroy();
          }
        },
      });
    });
  });
}
