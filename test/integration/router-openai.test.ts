/**
 * The router end to end: the official `openai` npm client (default settings, including its retries)
 * against the router on a real socket, with real llama-server replicas (tiny GGUF) behind it — two
 * replicas of a chat model, one with embeddings — and a fake FleetView (test/harness/fake-fleet-view.ts)
 * saying which replicas are ready and what state the other models are in.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import type { RouterMetrics } from '../../src/metrics/ports.js';
import { buildRouter, routerStats } from '../../src/router/app.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { until } from '../harness/wait.js';

const BUILD_TIMEOUT = 40 * 60_000;
const ENGINE_KEY = `engine-${randomBytes(12).toString('hex')}`;
const CLIENT_KEY = 'client-key-all-models';
const EMBED_ONLY_KEY = 'client-key-embed-only';
const onDemand = { mode: 'on_demand', idleTimeoutMs: 600_000, maxReplicas: 1 } as const;

/**
 * A plain HTTP forwarder in front of a replica that counts the POSTs reaching it (the router's own
 * GET /slots polls pass uncounted).
 */
async function countingProxy(target: string): Promise<{ url: string; count: () => number; server: Server }> {
  let n = 0;
  const t = new URL(target);
  const server = createServer((req, res) => {
    if (req.method === 'POST') n++;
    const up = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, count: () => n, server };
}

function recordingMetrics() {
  const calls = { request: [] as [string, number, string][], ttft: [] as [string, number][], upstreamError: [] as [string, string][], inFlight: new Map<string, number>() };
  const m: RouterMetrics = {
    request: (model, code, _s, reason) => void calls.request.push([model, code, reason]),
    timeToFirstToken: (model, s) => void calls.ttft.push([model, s]),
    upstreamError: (model, reason) => void calls.upstreamError.push([model, reason]),
    inFlight: (model, d) => void calls.inFlight.set(model, (calls.inFlight.get(model) ?? 0) + d),
    queueDepth: () => undefined,
    queueWait: () => undefined,
    promptTokens: () => undefined,
    affinity: () => undefined,
    replicaEjected: () => undefined,
  };
  return { m, calls };
}

describe('router with the openai client and real llama-server replicas', { timeout: BUILD_TIMEOUT + 10 * 60_000 }, () => {
  let tmp = '';
  let dir = '';
  let modelPath = '';
  const servers: LlamaServer[] = [];
  let chatA: LlamaServer;
  let chatB: LlamaServer;
  let embed: LlamaServer;
  let counted: Awaited<ReturnType<typeof countingProxy>>;
  let fleet: FakeFleetView;
  let app: ReturnType<typeof buildRouter>;
  /** The on-demand model's start: ready once a request waits for it (and when). */
  let lazyReady: Promise<void> = Promise.resolve();
  let lazyReadyAt: number | null = null;
  let baseURL = '';
  let routerRequests = 0;
  const metrics = recordingMetrics();
  let client: OpenAI;

  async function llama(args: string[] = []): Promise<LlamaServer> {
    // a context long enough for a generation that is still running when the client aborts
    const s = await startLlamaServer({ dir, model: modelPath, args: ['--metrics', '--slots', '--ctx-size', '8192', ...args], env: { LLAMA_API_KEY: ENGINE_KEY } });
    servers.push(s);
    return s;
  }

  before(async () => {
    dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-router-'));
    modelPath = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 7, contextLength: 8192 })).path;
    [chatA, chatB, embed] = await Promise.all([llama(), llama(), llama(['--embeddings', '--pooling', 'mean'])]);
    counted = await countingProxy(chatA.url);

    fleet = new FakeFleetView(
      fakeSpec({
        models: {
          'tiny-chat': { aliases: ['gpt-tiny'] },
          'tiny-embed': {},
          counted: {},
          victim: { routing: 'least_busy' }, // the same prompt each time: affinity would keep it on one replica
          broken: {},
          huge: { scaling: onDemand },
          lazy: { scaling: onDemand },
        },
        keys: [
          { name: 'all', key: CLIENT_KEY, models: ['*'] },
          { name: 'embed-only', key: EMBED_ONLY_KEY, models: ['tiny-embed'] },
        ],
        settings: { activationWindowMs: 30_000 },
      }),
      ENGINE_KEY,
    );
    fleet.setReady('tiny-chat', [replica('tiny-chat', chatA.url, 'chat-a'), replica('tiny-chat', chatB.url, 'chat-b')]);
    fleet.setReady('tiny-embed', [replica('tiny-embed', embed.url, 'embed-a')]);
    fleet.setReady('counted', [replica('counted', counted.url, 'counted-a')]);
    fleet.setParked('broken', { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" });
    fleet.setUnplaceable('huge', 'needs 14.2 GiB; largest free is 11.8 GiB on cpu-02; 3 nodes checked');
    fleet.setPhase('lazy', 'idle');
    fleet.demandDelayMs = 300; // a placement pass takes a moment
    fleet.onDemand = (model) => {
      if (model === 'huge') return { kind: 'unplaceable', code: 'PLACEMENT_NO_ROOM', reason: 'needs 14.2 GiB; largest free is 11.8 GiB on cpu-02; 3 nodes checked' };
      if (model === 'lazy') {
        // ready once the request is seen waiting for it (no guessed delay)
        lazyReady = until('the request waiting for lazy to be ready', 10_000, () => fleet.waiting('lazy') > 0).then(() => {
          lazyReadyAt = performance.now();
          fleet.setReady('lazy', [replica('lazy', chatB.url, 'lazy-a')]);
        });
        return { kind: 'starting' };
      }
      return { kind: 'starting' };
    };

    app = buildRouter({ fleet, metrics: metrics.m, auth: { required: true }, limits: { bodyBytes: 64 * 1024 } });
    // every HTTP request the router's server receives (proxied POSTs never reach fastify's hooks)
    app.server.prependListener('request', () => routerRequests++);
    await app.listen({ port: 0, host: '127.0.0.1' });
    baseURL = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1`;
    client = new OpenAI({ apiKey: CLIENT_KEY, baseURL }); // default retries (2) and timeouts
  });

  after(async () => {
    await app?.close();
    await new Promise<void>((r) => (counted ? counted.server.close(() => r()) : r()));
    await Promise.all(servers.map((s) => s.stop()));
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  const messages = [{ role: 'user' as const, content: 'hello fleet' }];

  test('chat completion (not streaming), through an alias', async () => {
    const r = await client.chat.completions.create({ model: 'gpt-tiny', messages, max_tokens: 4 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0]?.finish_reason, 'length');
    assert.equal(r.usage?.completion_tokens, 4);
    assert.equal(typeof r.choices[0]?.message.content, 'string');
  });

  test('chat completion streaming', async () => {
    // (chunk-by-chunk timing with a controlled upstream: router-proxy.test.ts; the tiny model is too fast to time)
    const stream = await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 16, stream: true });
    let chunks = 0;
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'length');
    assert.ok(text.length > 0);
    assert.ok(chunks >= 16, `${chunks} chunks`);
    assert.ok(metrics.calls.ttft.some(([m]) => m === 'tiny-chat'), 'time to first token recorded');
  });

  test('completions, plain and streaming', async () => {
    const r = await client.completions.create({ model: 'tiny-chat', prompt: 'the fleet is', max_tokens: 5 });
    assert.equal(r.choices[0]?.finish_reason, 'length');
    assert.equal(r.usage?.completion_tokens, 5);
    const s = await client.completions.create({ model: 'tiny-chat', prompt: 'the fleet is', max_tokens: 5, stream: true });
    let n = 0;
    for await (const c of s) if (c.choices[0]?.text) n++;
    assert.ok(n >= 1);
  });

  test('embeddings (a replica with --embeddings --pooling mean)', async () => {
    const r = await client.embeddings.create({ model: 'tiny-embed', input: ['hello fleet', 'another'] });
    assert.equal(r.data.length, 2);
    assert.equal(r.data[0]?.embedding.length, 128);
    assert.ok(r.data[0]!.embedding.every((x) => Number.isFinite(x)));
  });

  test('models list: the models the key may use, with their phase', async () => {
    const all: { id: string; llmgw?: { phase: string } }[] = [];
    for await (const m of client.models.list()) all.push(m as never);
    const ids = all.map((m) => m.id);
    assert.deepEqual(ids, ['broken', 'counted', 'huge', 'lazy', 'tiny-chat', 'tiny-embed', 'victim']);
    assert.equal(all.find((m) => m.id === 'tiny-chat')?.llmgw?.phase, 'ready');
    assert.equal(all.find((m) => m.id === 'broken')?.llmgw?.phase, 'parked');
    const limited = new OpenAI({ apiKey: EMBED_ONLY_KEY, baseURL });
    const only: string[] = [];
    for await (const m of limited.models.list()) only.push(m.id);
    assert.deepEqual(only, ['tiny-embed']);
  });

  test('parked model: the client raises at once with the parked reason; the router saw exactly one request', async () => {
    const before = routerRequests;
    const t = performance.now();
    const err = await client.chat.completions.create({ model: 'broken', messages, max_tokens: 2 }).then(
      () => assert.fail('no error'),
      (e: unknown) => e,
    );
    const ms = performance.now() - t;
    assert.ok(err instanceof OpenAI.APIError, String(err));
    assert.equal(err.status, 503);
    assert.equal(err.code, 'model_parked');
    assert.match(err.message, /unknown model architecture: 'kev'/);
    assert.match(err.message, /llmgw ctl retry broken/);
    assert.equal(routerRequests - before, 1, 'the SDK retried');
    assert.deepEqual(metrics.calls.request.at(-1), ['broken', 503, 'MODEL_PARKED'], 'the refusal is counted with its reason');
    assert.ok(ms < 2000, `${ms} ms`);
  });

  test('unplaceable model: raises after the fresh placement attempt, far sooner than the activation window; one request', async () => {
    const before = routerRequests;
    const demands = fleet.calls.demand.length;
    const t = performance.now();
    const err = await client.chat.completions.create({ model: 'huge', messages, max_tokens: 2 }).then(
      () => assert.fail('no error'),
      (e: unknown) => e,
    );
    const ms = performance.now() - t;
    assert.ok(err instanceof OpenAI.APIError, String(err));
    assert.equal(err.status, 503);
    assert.equal(err.code, 'model_unplaceable');
    assert.match(err.message, /needs 14\.2 GiB/);
    assert.equal(routerRequests - before, 1, 'the SDK retried');
    assert.deepEqual(metrics.calls.request.at(-1), ['huge', 503, 'MODEL_UNPLACEABLE']);
    assert.equal(fleet.calls.demand.length - demands, 1, 'one fresh placement attempt');
    assert.ok(ms >= 290 && ms < 2000, `${ms} ms (window is 30 s)`);
  });

  test('on-demand model: the request activates it and is answered once a replica is ready', async () => {
    const r = await client.chat.completions.create({ model: 'lazy', messages, max_tokens: 3 });
    const answeredAt = performance.now();
    await lazyReady;
    assert.equal(r.usage?.completion_tokens, 3);
    assert.ok(lazyReadyAt !== null && answeredAt >= lazyReadyAt, 'answered before the model was ready?');
    assert.ok(fleet.calls.demand.includes('lazy'));
  });

  test('malformed JSON, missing model, oversized body, wrong key, forbidden model: right status and envelope; none reaches a replica', async () => {
    // positive control: a valid request does reach the counted replica
    const c0 = counted.count();
    await client.chat.completions.create({ model: 'counted', messages, max_tokens: 1 });
    assert.equal(counted.count(), c0 + 1);

    const raw = async (body: string, key = CLIENT_KEY) => {
      const res = await fetch(`${baseURL}/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
      return { status: res.status, json: (await res.json()) as { error: { code: string; type: string; message: string; param: string | null } } };
    };
    const c1 = counted.count();
    const bad = await raw('{"model":"counted","messages":[');
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_json');
    const noModel = await raw(JSON.stringify({ messages }));
    assert.equal(noModel.status, 400);
    assert.equal(noModel.json.error.code, 'missing_model');
    assert.equal(noModel.json.error.param, 'model');
    const big = await raw(JSON.stringify({ model: 'counted', messages: [{ role: 'user', content: 'x'.repeat(100 * 1024) }] }));
    assert.equal(big.status, 413);
    assert.equal(big.json.error.code, 'request_too_large');
    const wrongKey = await new OpenAI({ apiKey: 'not-a-key', baseURL }).chat.completions.create({ model: 'counted', messages }).then(
      () => assert.fail('no error'),
      (e: unknown) => e,
    );
    assert.ok(wrongKey instanceof OpenAI.AuthenticationError);
    assert.equal(wrongKey.code, 'invalid_api_key');
    const forbidden = await new OpenAI({ apiKey: EMBED_ONLY_KEY, baseURL }).chat.completions.create({ model: 'counted', messages }).then(
      () => assert.fail('no error'),
      (e: unknown) => e,
    );
    assert.ok(forbidden instanceof OpenAI.PermissionDeniedError);
    assert.equal(forbidden.code, 'model_not_allowed');
    const unknown = await client.chat.completions.create({ model: 'gpt-5', messages }).then(
      () => assert.fail('no error'),
      (e: unknown) => e,
    );
    assert.ok(unknown instanceof OpenAI.NotFoundError);
    assert.equal(unknown.code, 'model_not_found');
    for (const r of [bad, noModel, big]) assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(counted.count(), c1, 'a rejected request reached the replica');
  });

  test('the engine API key goes upstream and never comes back; the client key is not the engine key', async () => {
    for (const [path, body] of [
      ['/chat/completions', { model: 'tiny-chat', messages, max_tokens: 2 }],
      ['/chat/completions', { model: 'tiny-chat', messages, max_tokens: 2, stream: true }],
      ['/embeddings', { model: 'tiny-embed', input: 'x' }],
      ['/completions', { model: 'tiny-chat', prompt: 'x', max_tokens: 2, n_probs: -5 }],
    ] as const) {
      const res = await fetch(`${baseURL}${path}`, { method: 'POST', headers: { authorization: `Bearer ${CLIENT_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const text = await res.text();
      assert.ok(res.status < 500, `${path}: ${res.status} ${text}`);
      assert.ok(!text.includes(ENGINE_KEY));
      assert.ok(![...res.headers.values()].some((v) => v.includes(ENGINE_KEY)));
    }
  });

  test('a client abort mid-stream cancels the generation at the replica', async () => {
    const ac = new AbortController();
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'tiny-chat', messages, max_tokens: 6000, stream: true }, { signal: ac.signal })
      .withResponse();
    const servedBy = response.headers.get('x-llmgw-replica');
    const srv = servedBy === 'chat-a' ? chatA : servedBy === 'chat-b' ? chatB : assert.fail(`replica ${servedBy}`);
    const cancelsBefore = (srv.log().match(/cancel task/g) ?? []).length;
    let n = 0;
    // (the SDK ends the iteration quietly on its own abort)
    for await (const _ of stream) {
      if (++n === 3) ac.abort();
    }
    assert.ok(n < 100, `${n} chunks after the abort`);
    // the replica logs the cancelled task and frees its slot long before 6000 tokens would be done
    let slots: { is_processing: boolean }[] = [];
    await until('the cancellation at the replica, its slots free', 5000, async () => {
      const cancels = (srv.log().match(/cancel task/g) ?? []).length;
      slots = (await (await fetch(`${srv.url}/slots`, { headers: { authorization: `Bearer ${ENGINE_KEY}` } })).json()) as typeof slots;
      return cancels > cancelsBefore && slots.every((s) => !s.is_processing);
    }, { diag: () => `slots: ${JSON.stringify(slots.map((s) => s.is_processing))}\n${srv.log().slice(-2000)}` });
    const released = [...srv.log().matchAll(/stop processing: n_tokens = (\d+)/g)].at(-1);
    assert.ok(released && Number(released[1]) < 3000, `released at ${released?.[1]} tokens`);
    assert.equal(routerStats(app).inFlight(srv.url), 0);
  });

  test('killing a replica between requests: the next request goes to another ready replica', async () => {
    const victim = await llama();
    fleet.setReady('victim', [replica('victim', victim.url, 'victim-1'), replica('victim', chatB.url, 'survivor')]);
    // both replicas used (keep-alive connections to each in the router's pools)
    const seen = new Set<string>();
    for (let i = 0; i < 6 && seen.size < 2; i++) {
      const { response } = await client.chat.completions.create({ model: 'victim', messages, max_tokens: 1 }).withResponse();
      seen.add(response.headers.get('x-llmgw-replica') ?? '');
    }
    assert.deepEqual([...seen].sort(), ['survivor', 'victim-1']);
    victim.proc.kill('SIGKILL');
    await victim.exited;
    // the fake view still lists the dead replica; the router must not send the client an error
    const noRetries = new OpenAI({ apiKey: CLIENT_KEY, baseURL, maxRetries: 0 });
    for (let i = 0; i < 4; i++) {
      const { data, response } = await noRetries.chat.completions.create({ model: 'victim', messages, max_tokens: 2 }).withResponse();
      assert.equal(response.headers.get('x-llmgw-replica'), 'survivor');
      assert.equal(data.usage?.completion_tokens, 2);
    }
    // the failed attempts are counted as what the client would have got had no replica been left
    assert.ok(metrics.calls.upstreamError.some(([m, r]) => m === 'victim' && r === 'UPSTREAM_CONNECT'), JSON.stringify(metrics.calls.upstreamError));
    assert.deepEqual(metrics.calls.request.filter(([m]) => m === 'victim').at(-1), ['victim', 200, ''], 'answered by the survivor, no reason');
  });
});
