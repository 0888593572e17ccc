/**
 * The router's own per-request JavaScript, without sockets (not a test; prints figures).
 *
 *   npx tsc -p . && node dist/bench/router-core.bench.js
 *
 * bench/router.bench.ts measures whole proxies over loopback, where the kernel, node's http and
 * undici dominate and the machine's noise is large. This one drives RouterCore.handle with in-memory
 * requests and responses and an upstream that answers synchronously, so what is left is llmgw's code:
 * admission (the key, verified once per connection: all requests here share one, as a keep-alive
 * client's do), body collection, JSON parse of the body, model and replica lookups,
 * ProxyCall, header filtering and metrics. The baseline, measured in the same run with the same fakes,
 * is what the bare passthrough of router.bench.ts does per request (collect the body, dispatch,
 * copy two headers, write, end). Best of interleaved rounds, CPU time per request.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Registry } from 'prom-client';
import type { Dispatcher } from 'undici';
import { createRouterMetrics } from '../src/metrics/router.js';
import { RouterCore } from '../src/router/core.js';
import { BENCH_ALIAS, BENCH_CLIENT_KEY, NEVER_REACHED, StaticFleetView } from './bench-child.js';

const N = Number(process.env['BENCH_N'] ?? 200_000);
const ROUNDS = 5;

const rawHeaders = ['Content-Type', 'application/json', 'Content-Length', '100', 'Date', 'Mon, 30 Nov 2026 08:00:00 GMT', 'Keep-Alive', 'timeout=5'].map((s) =>
  Buffer.from(s, 'latin1'),
);
const chunk = Buffer.alloc(100, 'x');
const body = Buffer.from(JSON.stringify({ model: BENCH_ALIAS, messages: [{ role: 'user', content: 'Say something about the fleet.' }], max_tokens: 16 }));

/** An upstream that answers every request at once with rawHeaders and one chunk. */
function answer(h: Dispatcher.DispatchHandler): void {
  h.onConnect?.(() => undefined);
  h.onHeaders?.(200, rawHeaders, () => undefined, 'OK');
  h.onData?.(chunk);
  h.onComplete?.(null);
}

class FakeRes extends EventEmitter {
  headersSent = false;
  destroyed = false;
  writableFinished = false;
  writableEnded = false;
  writeHead(): this {
    this.headersSent = true;
    return this;
  }
  write(): boolean {
    return true;
  }
  end(): this {
    this.writableFinished = this.writableEnded = true;
    this.emit('close');
    return this;
  }
  cork(): void {}
  uncork(): void {}
  destroy(): this {
    this.destroyed = true;
    return this;
  }
}

/** One keep-alive client connection, as in the socket benchmark (its key is verified once). */
const CONNECTION = {};

class FakeReq extends EventEmitter {
  socket = CONNECTION;
  method = 'POST';
  url = '/v1/chat/completions';
  headers = { 'content-type': 'application/json', authorization: `Bearer ${BENCH_CLIENT_KEY}`, 'content-length': String(body.length) };
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** The bare passthrough's work (bench-child.ts), on the same fakes. */
const bare: Handler = (req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (d: Buffer) => parts.push(d));
  req.on('end', () => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (req.headers.authorization) headers['authorization'] = req.headers.authorization;
    const b = Buffer.concat(parts);
    answer({
      onConnect: () => undefined,
      onHeaders: (statusCode, raw) => {
        const out: Record<string, string> = {};
        for (let i = 0; i + 1 < raw.length; i += 2) {
          const name = raw[i]!.toString('latin1').toLowerCase();
          if (name === 'content-type' || name === 'content-length') out[name] = raw[i + 1]!.toString('latin1');
        }
        res.writeHead(statusCode, out);
        return true;
      },
      onData: (c) => res.write(c),
      onComplete: () => void res.end(),
      onError: () => undefined,
    });
    void b;
  });
};

function routerHandler(limited = false): Handler {
  const core = new RouterCore({
    fleet: new StaticFleetView('http://127.0.0.1:9', 'bench-engine-key', limited ? NEVER_REACHED : undefined),
    metrics: createRouterMetrics(new Registry()),
    limits: { bodyBytes: 8 << 20, connectTimeoutMs: 1000, firstByteTimeoutMs: 1000, streamIdleTimeoutMs: 1000, maxInFlight: 1 << 20, maxBufferedBytes: 1 << 40 },
    authRequired: true,
  });
  // every upstream answers synchronously instead of over a socket
  const get = core.upstreams.get.bind(core.upstreams);
  core.upstreams.get = (endpoint) => {
    const u = get(endpoint);
    (u.pool as unknown as { dispatch: (o: unknown, h: Dispatcher.DispatchHandler) => boolean }).dispatch = (_o, h) => (answer(h), true);
    return u;
  };
  return (req, res) => core.handle(req, res);
}

function run(h: Handler, n: number): number {
  const t0 = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const req = new FakeReq();
    const res = new FakeRes();
    h(req as unknown as IncomingMessage, res as unknown as ServerResponse);
    req.emit('data', body);
    req.emit('end');
    if (!res.writableFinished) throw new Error('the response did not end');
  }
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / n;
}

const targets: [string, Handler][] = [
  ['bare passthrough work', bare],
  ['llmgw RouterCore', routerHandler()],
  ['llmgw, key with limits', routerHandler(true)],
];
for (const [, h] of targets) run(h, 50_000); // warm up
const best = new Map<string, number>();
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, h] of r % 2 === 0 ? targets : [...targets].reverse()) best.set(name, Math.min(best.get(name) ?? Infinity, run(h, N)));
}
console.log(`router core, in memory (${N} requests × ${ROUNDS} interleaved rounds, best; CPU per request)`);
for (const [name] of targets) console.log(`  ${name.padEnd(24)} ${best.get(name)!.toFixed(2)} µs`);
const b = best.get('bare passthrough work')!;
const r = best.get('llmgw RouterCore')!;
console.log(`  llmgw adds ${(r - b).toFixed(2)} µs per request in its own code (auth, parse, routing, metrics, header filtering)`);
const l = best.get('llmgw, key with limits')!;
console.log(`  the limit check (key and key × model: rpm, tpm, concurrency) adds ${(l - r).toFixed(2)} µs per request: ${(((l - r) / r) * 100).toFixed(1)} % of the router's own code`);
