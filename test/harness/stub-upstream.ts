/**
 * A stub upstream: a fake replica on a loopback port that answers chat completions (JSON, or SSE
 * with `stream: true`) and records each request, for router tests that need no real llama-server.
 * A test swaps `handler` to make it fail, hang or answer slowly.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface StubRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

export type StubHandler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

export interface StubUpstream {
  readonly url: string;
  readonly port: number;
  readonly server: Server;
  /** Every request received, in order. */
  readonly requests: StubRequest[];
  /** Requests whose client (the router) closed the connection before the response ended. */
  readonly clientAborts: string[];
  /** Replace to change the behaviour; `defaultStubHandler` by default. */
  handler: StubHandler;
  close(): Promise<void>;
}

export function chatCompletionJson(model: string, content = 'hello from the stub'): string {
  return JSON.stringify({
    id: 'chatcmpl-stub',
    object: 'chat.completion',
    created: 1700000000,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 },
  });
}

export function sseChunk(model: string, content: string, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: 'chatcmpl-stub', object: 'chat.completion.chunk', created: 1700000000, model, choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
}

/**
 * Answers chat completions (JSON, or SSE with `stream: true`: `chunks` chunks `intervalMs` apart),
 * embeddings, and echoes anything else as JSON. Header `x-stub-*` in the request are not needed.
 */
export function defaultStubHandler(opts: { chunks?: number; intervalMs?: number } = {}): StubHandler {
  const chunks = opts.chunks ?? 3;
  const intervalMs = opts.intervalMs ?? 5;
  return (req, res, body) => {
    let parsed: { model?: string; stream?: boolean } = {};
    try {
      parsed = JSON.parse(body) as typeof parsed;
    } catch {
      /* echo */
    }
    const model = parsed.model ?? 'stub';
    if (parsed.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      let i = 0;
      const tick = (): void => {
        if (res.destroyed) return;
        if (i < chunks) {
          res.write(sseChunk(model, `t${i}`, i === chunks - 1 ? 'length' : null));
          i++;
          setTimeout(tick, intervalMs);
        } else {
          res.end('data: [DONE]\n\n');
        }
      };
      tick();
      return;
    }
    let out: string;
    if (req.url?.startsWith('/v1/embeddings')) {
      out = JSON.stringify({ object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2, 0.3] }], model, usage: { prompt_tokens: 2, total_tokens: 2 } });
    } else if (req.url?.startsWith('/v1/chat/completions') || req.url?.startsWith('/v1/completions')) {
      out = chatCompletionJson(model);
    } else {
      out = JSON.stringify({ echo: req.url, model });
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  };
}

export async function startStubUpstream(handler: StubHandler = defaultStubHandler()): Promise<StubUpstream> {
  const requests: StubRequest[] = [];
  const clientAborts: string[] = [];
  const sockets = new Set<import('node:net').Socket>();
  const stub: StubUpstream = {
    url: '',
    port: 0,
    server: createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on('data', (d: Buffer) => parts.push(d));
      req.on('end', () => {
        const body = Buffer.concat(parts).toString('utf8');
        requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
        res.on('close', () => {
          if (!res.writableFinished) clientAborts.push(req.url ?? '');
        });
        stub.handler(req, res, body);
      });
    }),
    requests,
    clientAborts,
    handler,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        stub.server.close(() => resolve());
      }),
  };
  stub.server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => stub.server.listen(0, '127.0.0.1', resolve));
  const port = (stub.server.address() as AddressInfo).port;
  Object.assign(stub, { port, url: `http://127.0.0.1:${port}` });
  return stub;
}
