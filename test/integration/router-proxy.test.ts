/**
 * The router's proxying over real loopback sockets, against stub upstreams (plain node:http servers
 * standing in for replicas): least-busy selection, retry on connect failure, the three timeouts,
 * client aborts, backpressure, the concurrency limit, upstream auth failures, graceful shutdown.
 * (The same against real llama-server replicas and the official openai client: router-openai.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { Agent, createServer, request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { findSamples, parseExposition } from '../../src/metrics/parse.js';
import { createRouterMetrics } from '../../src/metrics/router.js';
import { buildRouter, routerStats, type RouterLimits } from '../../src/router/app.js';
import { freePort } from '../harness/ports.js';
import { until } from '../harness/wait.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { defaultStubHandler, sseChunk, startStubUpstream, type StubUpstream } from '../harness/stub-upstream.js';
import type { FakeModelInit } from '../harness/fake-fleet-view.js';

const KEY = 'Bearer k';

interface Setup {
  app: ReturnType<typeof buildRouter>;
  fleet: FakeFleetView;
  url: string;
  port: number;
  /** The router's non-zero request counters of `model` as "code reason=… n", and its upstream errors as "reason n", from a scrape. */
  counted(model: string): Promise<{ requests: string[]; upstreamErrors: string[] }>;
}

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => undefined);
});

async function stub(...args: Parameters<typeof startStubUpstream>): Promise<StubUpstream> {
  const s = await startStubUpstream(...args);
  cleanups.push(() => s.close());
  return s;
}

async function router(models: Record<string, FakeModelInit>, limits: Partial<RouterLimits> = {}): Promise<Setup> {
  // trusted: these tests are about the bytes as the replica sends them (a key not trusted gets them
  // through router/redact.ts: a non-streamed body held whole, so a stalled one gets an envelope, not a cut)
  const fleet = new FakeFleetView(fakeSpec({ models, keys: [{ name: 'k', key: 'k', models: ['*'], trusted: true }, { name: 'u', key: 'u', models: ['*'] }] }));
  const registry = new Registry();
  // the stubs are not llama-server: no GET /slots polls among the requests they record
  const app = buildRouter({ fleet, auth: { required: true }, limits, metrics: createRouterMetrics(registry), slotsRefreshMs: 0 });
  await app.listen({ port: 0, host: '127.0.0.1' });
  cleanups.push(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  const counted = async (model: string) => {
    const s = parseExposition(await registry.metrics());
    const nonZero = (name: string) => findSamples(s, name, { model }).filter((x) => x.value > 0);
    return {
      requests: nonZero('llmgw_router_requests_total').map((x) => `${x.labels['code']} reason=${x.labels['reason']} ${x.value}`).sort(),
      upstreamErrors: nonZero('llmgw_router_upstream_errors_total').map((x) => `${x.labels['reason']} ${x.value}`).sort(),
    };
  };
  return { app, fleet, url: `http://127.0.0.1:${port}`, port, counted };
}

interface Res {
  status: number;
  headers: IncomingMessage['headers'];
  body: string;
  /** ms after the request was sent, per received chunk. */
  chunkTimes: number[];
}

function post(url: string, body: unknown, opts: { path?: string; onResponse?: (res: IncomingMessage) => void; agent?: Agent; key?: string } = {}): Promise<Res> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const payload = JSON.stringify(body);
    const req = httpRequest(`${url}${opts.path ?? '/v1/chat/completions'}`, { method: 'POST', headers: { authorization: opts.key ?? KEY, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }, agent: opts.agent ?? false }, (res) => {
      opts.onResponse?.(res);
      const parts: Buffer[] = [];
      const chunkTimes: number[] = [];
      res.on('data', (d: Buffer) => {
        parts.push(d);
        chunkTimes.push(performance.now() - t0);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts).toString('utf8'), chunkTimes }));
      res.on('error', reject);
      res.on('aborted', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts).toString('utf8') + '<<aborted>>', chunkTimes }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const chat = (model: string, stream = false) => ({ model, stream, messages: [{ role: 'user', content: 'hi' }] });

describe('router proxy (stub upstreams, real sockets)', { timeout: 60_000 }, () => {

  test('SSE passes through chunk by chunk (the first chunk arrives long before the last)', async () => {
    const s = await stub();
    s.handler = defaultStubHandler({ chunks: 6, intervalMs: 100 });
    const { fleet, url } = await router({ m: {} });
    fleet.setReady('m', [replica('m', s.url)]);
    const r = await post(url, chat('m', true));
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /^text\/event-stream/);
    assert.equal((r.body.match(/^data: /gm) ?? []).length, 7);
    assert.ok(r.chunkTimes.length >= 5, `chunks: ${r.chunkTimes.length}`);
    assert.ok(r.chunkTimes.at(-1)! - r.chunkTimes[0]! > 400, `spread ${r.chunkTimes.map(Math.round).join(',')}`);
  });

  test('least-busy replica: concurrent long requests spread, a quick one goes to the idle replica', async () => {
    const a = await stub();
    const b = await stub();
    a.handler = defaultStubHandler({ chunks: 10, intervalMs: 50 });
    b.handler = defaultStubHandler({ chunks: 10, intervalMs: 50 });
    const { fleet, url, app } = await router({ m: { routing: 'least_busy' } });
    fleet.setReady('m', [replica('m', a.url, 'ra'), replica('m', b.url, 'rb')]);
    const long = [post(url, chat('m', true)), post(url, chat('m', true)), post(url, chat('m', true)), post(url, chat('m', true))];
    await until('four requests upstream', 5_000, () => a.requests.length + b.requests.length === 4);
    assert.equal(a.requests.length, 2);
    assert.equal(b.requests.length, 2);
    assert.equal(routerStats(app).inFlight(a.url), 2);
    // make b busier: one more long stream lands on the less busy of the two (tie → either), then a quick one goes to the other
    const third = post(url, chat('m', true));
    await until('the fifth request upstream', 5_000, () => a.requests.length + b.requests.length === 5);
    const busier = [a, b].find((x) => x.requests.length === 3);
    assert.ok(busier, 'the third stream went nowhere');
    const other = busier === a ? b : a;
    const quick = await post(url, chat('m'));
    assert.equal(quick.status, 200);
    assert.equal(other.requests.length, 3, 'the quick request went to the less busy replica');
    for (const r of await Promise.all([...long, third])) assert.equal(r.status, 200);
    assert.equal(routerStats(app).active, 0);
  });

  test('connect failure before any byte → retried on another replica; all dead → 502 upstream_connect_failed', async () => {
    const live = await stub();
    const deadPort = await freePort();
    const dead = `http://127.0.0.1:${deadPort}`;
    // least-busy rotates onto the dead replica (affinity might keep this one prompt on the live one)
    const { fleet, url, counted } = await router({ m: { routing: 'least_busy' }, gone: {} });
    fleet.setReady('m', [replica('m', dead, 'dead'), replica('m', live.url, 'live')]);
    for (let i = 0; i < 4; i++) {
      const r = await post(url, chat('m'));
      assert.equal(r.status, 200, r.body);
      assert.equal(r.headers['x-llmgw-replica'], 'live');
    }
    assert.equal(live.requests.length, 4);
    fleet.setReady('gone', [replica('gone', dead, 'd1'), replica('gone', `http://127.0.0.1:${await freePort()}`, 'd2')]);
    const r = await post(url, chat('gone'));
    assert.equal(r.status, 502);
    const e = JSON.parse(r.body).error;
    assert.equal(e.code, 'upstream_connect_failed');
    assert.match(e.message, /2 tried/);
    assert.equal(r.headers['x-should-retry'], 'true');
    // metrics: the failed attempts by catalogue code; the answers by status and the code the router answered with
    const m = await counted('m');
    assert.deepEqual(m.requests, ['200 reason= 4']);
    assert.match(m.upstreamErrors.join(), /^UPSTREAM_CONNECT [1-4]$/, 'the dead replica is avoided after its first failure');
    assert.deepEqual(await counted('gone'), { requests: ['502 reason=UPSTREAM_CONNECT 1'], upstreamErrors: ['UPSTREAM_CONNECT 2'] });
  });

  test('first-byte timeout → 504 upstream_first_byte_timeout', async () => {
    const s = await stub(() => undefined /* never answers */);
    const { fleet, url, counted } = await router({ m: {} }, { firstByteTimeoutMs: 300 });
    fleet.setReady('m', [replica('m', s.url)]);
    const t = performance.now();
    const r = await post(url, chat('m'));
    assert.ok(performance.now() - t < 3000);
    assert.equal(r.status, 504);
    assert.equal(JSON.parse(r.body).error.code, 'upstream_first_byte_timeout');
    assert.deepEqual(await counted('m'), { requests: ['504 reason=UPSTREAM_FIRST_BYTE_TIMEOUT 1'], upstreamErrors: ['UPSTREAM_FIRST_BYTE_TIMEOUT 1'] });
  });

  test('a stalled SSE stream ends with an upstream_stalled error event; a stalled JSON body is cut', async () => {
    const s = await stub((req, res) => {
      if (req.url === '/v1/chat/completions') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(sseChunk('m', 'first'));
      } else {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': 1000 });
        res.write('{"partial":');
      }
      // …and then nothing
    });
    const { fleet, url, counted } = await router({ m: {} }, { streamIdleTimeoutMs: 300 });
    fleet.setReady('m', [replica('m', s.url)]);
    const r = await post(url, chat('m', true));
    assert.equal(r.status, 200);
    const events = r.body.split('\n\n').filter(Boolean);
    assert.match(events[0]!, /first/);
    assert.equal(JSON.parse(events.at(-1)!.slice(6)).error.code, 'upstream_stalled');
    // the status went out as 200; the reason says how the router ended the stream
    assert.deepEqual(await counted('m'), { requests: ['200 reason=UPSTREAM_STALLED 1'], upstreamErrors: ['UPSTREAM_STALLED 1'] });
    const j = await post(url, chat('m'), { path: '/v1/completions' }).catch((e: Error) => ({ status: -1, body: e.message, headers: {}, chunkTimes: [] }));
    assert.ok(j.status === -1 || j.body.endsWith('<<aborted>>'), `not cut: ${j.body}`);
    // a key not trusted: the body was held to take the cache figures out, so nothing went out yet and
    // the client gets the stall as an envelope
    const u = await post(url, chat('m'), { path: '/v1/completions', key: 'Bearer u' });
    assert.equal(u.status, 504);
    assert.equal(JSON.parse(u.body).error.code, 'upstream_stalled');
  });

  test('a client that goes away mid-stream aborts the upstream request', async () => {
    const s = await stub();
    s.handler = defaultStubHandler({ chunks: 200, intervalMs: 20 });
    const { fleet, url, app } = await router({ m: {} });
    fleet.setReady('m', [replica('m', s.url)]);
    await new Promise<void>((resolve, reject) => {
      const payload = JSON.stringify(chat('m', true));
      const req = httpRequest(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: KEY, 'content-type': 'application/json' } }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.on('error', () => undefined);
      req.end(payload);
      setTimeout(() => reject(new Error('no data')), 5000);
    });
    await until('the upstream request aborted', 2000, () => s.clientAborts.length > 0);
    assert.deepEqual(s.clientAborts, ['/v1/chat/completions']);
    assert.equal(routerStats(app).active, 0);
    assert.equal(routerStats(app).inFlight(s.url), 0);
  });

  test('backpressure: a client that does not read holds the upstream back', async () => {
    let written = 0;
    let finished = false;
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const s = await stub((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const total = 64 * 1024 * 1024;
      const pump = (): void => {
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        finished = true;
        res.end();
      };
      pump();
    });
    const { fleet, url } = await router({ m: {} });
    fleet.setReady('m', [replica('m', s.url)]);
    let received = 0;
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: KEY, 'content-type': 'application/json' } }, (res) => {
        res.pause();
        setTimeout(() => {
          // the client read nothing for 1 s: the upstream must have been paused well short of the 64 MiB
          try {
            assert.ok(!finished, 'upstream wrote everything although the client read nothing');
            assert.ok(written < 24 * 1024 * 1024, `upstream wrote ${written} bytes into a paused client`);
          } catch (e) {
            reject(e);
            return;
          }
          res.on('data', (d: Buffer) => (received += d.length));
          res.on('end', resolve);
          res.resume();
        }, 1000);
      });
      req.on('error', reject);
      req.end(JSON.stringify(chat('m', true)));
    });
    assert.equal(received, 64 * 1024 * 1024);
  });

  test('per-model concurrency limit → 429 concurrency_limit_exceeded, then served again', async () => {
    const s = await stub();
    s.handler = defaultStubHandler({ chunks: 5, intervalMs: 60 });
    const { fleet, url, counted } = await router({ m: { maxConcurrency: 1 } });
    fleet.setReady('m', [replica('m', s.url)]);
    const first = post(url, chat('m', true));
    await until('the first request upstream', 5_000, () => s.requests.length === 1);
    const second = await post(url, chat('m'));
    assert.equal(second.status, 429);
    assert.equal(JSON.parse(second.body).error.code, 'concurrency_limit_exceeded');
    assert.equal(JSON.parse(second.body).error.type, 'rate_limit_error');
    assert.equal(second.headers['retry-after'], '1');
    assert.equal((await first).status, 200);
    assert.equal((await post(url, chat('m'))).status, 200);
    assert.equal(s.requests.length, 2);
    assert.deepEqual((await counted('m')).requests, ['200 reason= 2', '429 reason=CONCURRENCY_LIMIT 1']);
  });

  test('a replica refusing the engine key → 502 upstream_auth_failed, not the replica\'s 401', async () => {
    const s = await stub((_req, res) => {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}');
    });
    const { fleet, url, counted } = await router({ m: {} });
    fleet.setReady('m', [replica('m', s.url)]);
    const r = await post(url, chat('m'));
    assert.equal(r.status, 502);
    assert.equal(JSON.parse(r.body).error.code, 'upstream_auth_failed');
    assert.deepEqual(await counted('m'), { requests: ['502 reason=UPSTREAM_AUTH 1'], upstreamErrors: ['UPSTREAM_AUTH 1'] });
  });

  test('upstream errors other than auth pass through with their status and body', async () => {
    const s = await stub((_req, res) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end('{"error":{"code":400,"message":"bad param","type":"invalid_request_error"}}');
    });
    const { fleet, url, counted } = await router({ m: {} });
    fleet.setReady('m', [replica('m', s.url)]);
    const r = await post(url, chat('m'));
    assert.equal(r.status, 400);
    assert.match(r.body, /bad param/);
    assert.deepEqual(await counted('m'), { requests: ['400 reason= 1'], upstreamErrors: [] }, 'the replica\'s own answer: no reason');
  });

  test('graceful shutdown: no new connections, in-flight streams finish within the grace', async () => {
    const s = await stub();
    s.handler = defaultStubHandler({ chunks: 8, intervalMs: 60 });
    const { fleet, url, app } = await router({ m: {} }, { shutdownGraceMs: 5000 });
    fleet.setReady('m', [replica('m', s.url)]);
    const keepAlive = new Agent({ keepAlive: true });
    cleanups.push(async () => keepAlive.destroy());
    const inflight = post(url, chat('m', true), { agent: keepAlive });
    await until('the stream upstream', 5_000, () => s.requests.length === 1);
    const t = performance.now();
    const closing = app.close();
    await until('the server to stop listening', 5_000, () => !app.server.listening);
    await assert.rejects(post(url, chat('m')), /ECONNREFUSED|ECONNRESET|socket hang up/);
    const r = await inflight;
    assert.equal(r.status, 200);
    assert.match(r.body, /\[DONE\]/);
    await closing; // the keep-alive connection is closed once its stream ended (not after the keep-alive timeout)
    assert.ok(performance.now() - t < 3000);
  });

  test('graceful shutdown: past the grace, in-flight streams are aborted with router_shutting_down', async () => {
    const s = await stub();
    s.handler = defaultStubHandler({ chunks: 500, intervalMs: 20 });
    const { fleet, url, app } = await router({ m: {} }, { shutdownGraceMs: 300 });
    fleet.setReady('m', [replica('m', s.url)]);
    let firstChunk!: () => void;
    const streaming = new Promise<void>((r) => (firstChunk = r));
    const inflight = post(url, chat('m', true), { onResponse: (res) => res.once('data', () => firstChunk()) });
    await streaming; // the headers and a chunk reached the client: the stream can only end with an error event
    const t = performance.now();
    await app.close();
    const ms = performance.now() - t;
    assert.ok(ms >= 280 && ms < 3000, `${ms} ms`);
    const r = await inflight;
    const last = r.body.split('\n\n').filter(Boolean).at(-1)!;
    assert.equal(JSON.parse(last.slice(6)).error.code, 'router_shutting_down');
    await until('the upstream request aborted', 2000, () => s.clientAborts.length > 0);
    assert.equal(s.clientAborts.length, 1, 'upstream not aborted');
  });

  test('a client that goes away while its model is activating: the wait ends, nothing is proxied', async () => {
    const s = await stub();
    const { fleet, url, app, counted } = await router({ lazy: { scaling: { mode: 'on_demand', idleTimeoutMs: 60_000, maxReplicas: 1 } } });
    fleet.setPhase('lazy', 'idle');
    const req = httpRequest(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: KEY, 'content-type': 'application/json' } });
    req.on('error', () => undefined);
    req.end(JSON.stringify(chat('lazy')));
    await until('the request waiting for its model', 2000, () => fleet.calls.waitReady.length > 0);
    assert.deepEqual(fleet.calls.waitReady, ['lazy']);
    req.destroy();
    // the router is done with the request once it has counted it as a client that went away (499)
    await until('the request counted as 499', 2000, async () => (await counted('lazy')).requests.includes('499 reason= 1'));
    assert.equal(fleet.waiting('lazy'), 0, 'the wait for the model ended');
    fleet.setReady('lazy', [replica('lazy', s.url)]);
    assert.equal(s.requests.length, 0, 'proxied for a client that left');
    assert.equal(routerStats(app).active, 0);
  });

  test('shutdown while a model is activating: the waiting request gets 503 router_shutting_down at once', async () => {
    const { fleet, url, app } = await router({ lazy: { scaling: { mode: 'on_demand', idleTimeoutMs: 60_000, maxReplicas: 1 } } }, { shutdownGraceMs: 10_000 });
    fleet.setPhase('lazy', 'idle');
    const waiting = post(url, chat('lazy'));
    await until('the request waiting for its model', 2000, () => fleet.calls.waitReady.length > 0);
    const t = performance.now();
    await app.close();
    const r = await waiting;
    assert.ok(performance.now() - t < 2000);
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.body).error.code, 'router_shutting_down');
    assert.equal(r.headers['connection'], 'close');
  });

  test('serverFactory (for TLS) is used for the listening server', async () => {
    const s = await stub();
    let made = 0;
    const fleet = new FakeFleetView(fakeSpec({ models: { m: {} }, keys: [{ name: 'k', key: 'k', models: ['*'] }] }));
    fleet.setReady('m', [replica('m', s.url)]);
    const app = buildRouter({
      fleet,
      auth: { required: true },
      serverFactory: (handler) => {
        made++;
        return createServer(handler);
      },
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => app.close());
    const r = await post(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, chat('m'));
    assert.equal(r.status, 200);
    assert.equal(made, 1);
  });

  test('a replica answering 503 (llama-server loading) → the request goes once to another replica; with no other, the 503 passes through', async () => {
    const loading = await stub((_req, res) => {
      const body = JSON.stringify({ error: { code: 503, message: 'Loading model', type: 'unavailable_error' } });
      res.writeHead(503, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    const live = await stub();
    const { fleet, url, counted } = await router({ m: { routing: 'least_busy' }, solo: {} });
    fleet.setReady('m', [replica('m', loading.url, 'loading'), replica('m', live.url, 'live')]);
    for (let i = 0; i < 4; i++) {
      const r = await post(url, chat('m', i % 2 === 1));
      assert.equal(r.status, 200, r.body);
      assert.equal(r.headers['x-llmgw-replica'], 'live');
    }
    assert.ok(loading.requests.length >= 1, 'the loading replica was tried');
    assert.deepEqual((await counted('m')).requests, ['200 reason= 4']);
    fleet.setReady('solo', [replica('solo', loading.url, 'loading-solo')]);
    const r = await post(url, chat('solo'));
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.body).error.message, 'Loading model', 'the replica\'s own answer');
  });

  test('a replica that dies after its response headers but before the first body byte → another replica; the client sees only the good answer', async () => {
    const dying = await stub((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      setTimeout(() => res.socket?.destroy(), 20);
    });
    const live = await stub(defaultStubHandler({ chunks: 3 }));
    const { fleet, url } = await router({ m: { routing: 'least_busy' } });
    fleet.setReady('m', [replica('m', dying.url, 'dying'), replica('m', live.url, 'live')]);
    for (let i = 0; i < 3; i++) {
      const r = await post(url, chat('m', true));
      assert.equal(r.status, 200);
      assert.equal(r.headers['x-llmgw-replica'], 'live');
      assert.ok(r.body.endsWith('data: [DONE]\n\n'), r.body);
      assert.doesNotMatch(r.body, /error/);
    }
    assert.ok(dying.requests.length >= 1);
  });

  test('a replica failing before the first byte 3 times in a row leaves routing (metric) until its /health answers 200', async () => {
    let healthy = false;
    const flaky = await stub((req, res, body) => {
      if (req.url === '/health') {
        res.writeHead(healthy ? 200 : 503, { 'content-type': 'application/json' });
        res.end(healthy ? '{"status":"ok"}' : '{"error":{"code":503,"message":"Loading model"}}');
        return;
      }
      if (!healthy) {
        req.socket.destroy(); // reset before any response
        return;
      }
      defaultStubHandler()(req, res, body);
    });
    const live = await stub();
    const registry = new Registry();
    const fleet = new FakeFleetView(fakeSpec({ models: { m: { routing: 'least_busy' } }, keys: [{ name: 'k', key: 'k', models: ['*'] }] }));
    const app = buildRouter({ fleet, auth: { required: true }, metrics: createRouterMetrics(registry), slotsRefreshMs: 0 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => app.close());
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const gauge = async (name: string) => findSamples(parseExposition(await registry.metrics()), name, { model: 'm' })[0]?.value ?? 0;
    fleet.setReady('m', [replica('m', flaky.url, 'flaky'), replica('m', live.url, 'live')]);
    const posts = () => flaky.requests.filter((r) => r.method === 'POST').length;
    // each failed request resets twice on the flaky replica (once more on a fresh connection), then goes to the live one
    while (posts() < 3) {
      const r = await post(url, chat('m'));
      assert.equal(r.status, 200, r.body);
      assert.equal(r.headers['x-llmgw-replica'], 'live');
      // past the short "down" mark (router/upstreams.ts DOWN_FOR_MS: 2 s of performance.now(), no injectable clock)
      if (posts() < 3) await new Promise((res) => setTimeout(res, 2100)); // deliberate: the router's 2 s down mark passes in real time
    }
    assert.equal(await gauge('llmgw_router_ejected_replicas'), 1);
    assert.equal(await gauge('llmgw_router_replica_ejections_total'), 1);
    // out of routing, also after the short "down" mark has passed
    await new Promise((res) => setTimeout(res, 2100)); // deliberate: the 2 s "down" mark (DOWN_FOR_MS, performance.now()) passes in real time
    const before = posts();
    for (let i = 0; i < 4; i++) assert.equal((await post(url, chat('m'))).headers['x-llmgw-replica'], 'live');
    assert.equal(posts(), before, 'no request went to the ejected replica');
    // its health check passes: back in routing
    healthy = true;
    await until('the replica back in routing', 5000, async () => (await gauge('llmgw_router_ejected_replicas')) === 0);
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) seen.add(String((await post(url, chat('m'))).headers['x-llmgw-replica']));
    assert.deepEqual([...seen].sort(), ['flaky', 'live']);
  });

  test('a stream cut after its first byte ends with an error event in its API\'s shape (OpenAI data: {error}, Anthropic event: error)', async () => {
    const cutting = await stub((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (req.url === '/v1/messages') res.write('event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":1,"output_tokens":0}}}\n\n');
      else res.write(sseChunk('m', 'first'));
      setTimeout(() => res.socket?.destroy(), 30);
    });
    const { fleet, url, counted } = await router({ m: {} });
    fleet.setReady('m', [replica('m', cutting.url)]);
    const oa = await post(url, chat('m', true));
    assert.equal(oa.status, 200);
    const oaLast = oa.body.split('\n\n').filter(Boolean).at(-1)!;
    assert.equal(JSON.parse(oaLast.slice('data: '.length)).error.code, 'upstream_error');
    const an = await post(url, { model: 'm', stream: true, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }, { path: '/v1/messages' });
    assert.equal(an.status, 200);
    const anLast = an.body.split('\n\n').filter(Boolean).at(-1)!;
    const [event, data] = anLast.split('\n');
    assert.equal(event, 'event: error');
    const parsed = JSON.parse(data!.slice('data: '.length));
    assert.equal(parsed.type, 'error');
    assert.equal(parsed.error.type, 'api_error');
    assert.match(parsed.error.message, /failed mid-response/);
    assert.deepEqual((await counted('m')).requests, ['200 reason=UPSTREAM_FAILED 2']);
  });

  test('activity lasts until a request ends: a long stream touches its model while in flight and at its end, also when the client goes away', async () => {
    const s = await stub(defaultStubHandler({ chunks: 8, intervalMs: 60 }));
    const fleet = new FakeFleetView(fakeSpec({ models: { m: {} }, keys: [{ name: 'k', key: 'k', models: ['*'] }] }));
    const app = buildRouter({ fleet, auth: { required: true }, slotsRefreshMs: 0, activityTouchMs: 100 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => app.close());
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    fleet.setReady('m', [replica('m', s.url)]);
    const r = await post(url, chat('m', true));
    assert.equal(r.status, 200);
    const during = fleet.calls.touch.length;
    // ~480 ms of stream: the start, a touch every 100 ms while in flight, and the end
    assert.ok(during >= 4, `${during} touches`);
    await new Promise((res) => setTimeout(res, 250)); // deliberate: a non-event (no touch with nothing in flight) over 2.5 touch periods
    assert.equal(fleet.calls.touch.length, during, 'no activity once nothing is in flight');
    // a client that goes away mid-stream: its end touches too
    const gone = new Promise<void>((resolve) => {
      const req = httpRequest(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: KEY, 'content-type': 'application/json' }, agent: false }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      req.end(JSON.stringify(chat('m', true)));
    });
    await gone;
    await until('the call ended', 5_000, () => routerStats(app).active === 0);
    assert.ok(fleet.calls.touch.length >= during + 2, 'touched at the start and at the end');
  });

  test('no room to surge: requests queued while the old replica leaves routing wait for the new one and go to it as soon as it is ready', async () => {
    const old = await stub(defaultStubHandler({ chunks: 6, intervalMs: 50 }));
    const fresh = await stub();
    const { app, fleet, url } = await router({ m: { parallel: 1, queue: { max: 8, timeoutMs: 10_000 } } });
    fleet.setReady('m', [replica('m', old.url, 'old')]);
    const streaming = post(url, chat('m', true));
    await until('the stream on the old replica', 5_000, () => old.requests.length === 1);
    // two more wait in the router's queue for the old replica's one slot
    const queued = [post(url, chat('m')), post(url, chat('m'))];
    await until('two requests in the queue', 5_000, () => routerStats(app).queued('m') === 2);
    // the old replica is drained: out of routing, its stream runs to its end, nothing is ready
    fleet.setReady('m', [], 'starting');
    assert.equal((await streaming).headers['x-llmgw-replica'], 'old');
    // …and a request that arrives in the gap waits too
    const inGap = post(url, chat('m'));
    // (the queue itself waits for a ready replica once: the two queued requests count 1 waiter)
    const waiting = (): string => `queued ${routerStats(app).queued('m')}, waiting for a ready replica ${fleet.waiting('m')}`;
    assert.equal(waiting(), 'queued 2, waiting for a ready replica 1');
    await until('the request in the gap waiting for a ready replica beside the queue', 5_000, () => waiting() === 'queued 2, waiting for a ready replica 2', { diag: waiting });
    assert.equal(old.requests.length, 1, 'nothing more went to the old replica');
    const readyAt = performance.now();
    fleet.setReady('m', [replica('m', fresh.url, 'new')]);
    const answers = await Promise.all([...queued, inGap]);
    const waited = performance.now() - readyAt;
    assert.deepEqual(answers.map((a) => `${a.status} ${a.headers['x-llmgw-replica']}`), ['200 new', '200 new', '200 new']);
    assert.ok(waited < 1000, `answered ${waited.toFixed(0)} ms after the new replica was ready`);
  });

  test('a surge replica that becomes ready while every slot of the old one is busy takes the queued requests at once', async () => {
    const old = await stub(defaultStubHandler({ chunks: 30, intervalMs: 100 }));
    const fresh = await stub();
    const { app, fleet, url } = await router({ m: { parallel: 1, queue: { max: 8, timeoutMs: 10_000 } } });
    fleet.setReady('m', [replica('m', old.url, 'old')]);
    const streaming = post(url, chat('m', true));
    await until('the stream on the old replica', 5_000, () => old.requests.length === 1);
    const queued = post(url, chat('m'));
    await until('the request in the queue', 5_000, () => routerStats(app).queued('m') === 1);
    const readyAt = performance.now();
    fleet.setReady('m', [replica('m', old.url, 'old'), replica('m', fresh.url, 'new')]);
    const r = await queued;
    const waited = performance.now() - readyAt;
    assert.equal(r.headers['x-llmgw-replica'], 'new');
    assert.ok(waited < 1000, `answered ${waited.toFixed(0)} ms after the new replica was ready (the old stream ends ~3 s in)`);
    await streaming;
  });

  test('past the queue timeout with no ready replica: 503 model_loading with the reason and Retry-After', async () => {
    const old = await stub(defaultStubHandler({ chunks: 4, intervalMs: 50 }));
    const { app, fleet, url, counted } = await router({ m: { parallel: 1, queue: { max: 8, timeoutMs: 600 } } });
    fleet.setReady('m', [replica('m', old.url, 'old')]);
    const streaming = post(url, chat('m', true));
    await until('the stream on the old replica', 5_000, () => old.requests.length === 1);
    const queued = post(url, chat('m'));
    await until('the request in the queue', 5_000, () => routerStats(app).queued('m') === 1);
    fleet.setReady('m', [], 'starting');
    await streaming;
    const r = await queued;
    assert.equal(r.status, 503);
    assert.equal(r.headers['retry-after'], '5');
    const e = JSON.parse(r.body).error;
    assert.equal(e.code, 'model_loading');
    assert.match(e.message, /no ready replica .*queue timeout/);
    assert.ok((await counted('m')).requests.includes('503 reason=MODEL_LOADING 1'));
  });

  test('a request whose only replica dies before its first byte goes to a replica that became ready meanwhile', async () => {
    const dying = await stub((req) => void setTimeout(() => req.socket.destroy(), 150));
    const fresh = await stub();
    const { fleet, url } = await router({ m: {} });
    fleet.setReady('m', [replica('m', dying.url, 'dying')]);
    const answer = post(url, chat('m'));
    await until('the request on the dying replica', 5_000, () => dying.requests.length === 1);
    fleet.setReady('m', [replica('m', dying.url, 'dying'), replica('m', fresh.url, 'fresh')]);
    const r = await answer;
    assert.equal(r.status, 200, r.body);
    assert.equal(r.headers['x-llmgw-replica'], 'fresh');
  });
});
