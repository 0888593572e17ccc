/**
 * Two of the router's doors on the real stack: a real llama-server (tiny GGUF, the build the tests
 * run) behind the router, through a recording forwarder that notes every request reaching it, a fake
 * FleetView saying the replica is ready, and the official `openai` client.
 * - llama-server's `/v1/chat/completions/control` and `/v1/streams/lookup` (it serves both: asked
 *   directly, neither is a 404) are refused by the router with 404 ROUTE_NOT_FOUND and never reach
 *   the replica; the forwarded APIs (chat, completions, responses and its token count, models) work.
 * - an answer held whole for a key not trusted (to take its cache figures out) counts against
 *   maxBufferedBytes: past it the client gets 503 ROUTER_OVERLOADED, not a hang; a trusted key's
 *   answer (not held) passes the same bound, and every held byte is given back when the response closes.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { buildRouter, routerStats } from '../../src/router/app.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { freePort } from '../harness/ports.js';
import { until } from '../harness/wait.js';

const BUILD_TIMEOUT = 40 * 60_000;
const ENGINE_KEY = `engine-${randomBytes(12).toString('hex')}`;
const UNTRUSTED = 'doors-key-untrusted-6c1f0a';
const TRUSTED = 'doors-key-trusted-93be27';
const REFUSED = ['/v1/chat/completions/control', '/v1/streams/lookup'] as const;

/** A plain HTTP forwarder in front of the replica that records the method and path of every request reaching it. */
async function recordingForwarder(target: string): Promise<{ url: string; seen: string[]; server: Server }> {
  const seen: string[] = [];
  const t = new URL(target);
  const server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const up = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${port}`, seen, server };
}

/** The POSTs the replica has seen (the router's own GET /slots polls left out). */
const posts = (seen: readonly string[]): string[] => seen.filter((s) => s.startsWith('POST '));

describe('router doors with a real llama-server', { timeout: BUILD_TIMEOUT + 5 * 60_000 }, () => {
  let tmp = '';
  let llama: LlamaServer;
  let fwd: Awaited<ReturnType<typeof recordingForwarder>>;
  const apps: ReturnType<typeof buildRouter>[] = [];

  /** A router over the one replica, listening; its base URL. */
  async function router(maxBufferedBytes?: number): Promise<{ app: ReturnType<typeof buildRouter>; url: string }> {
    const fleet = new FakeFleetView(
      fakeSpec({
        models: { tiny: {} },
        keys: [
          { name: 'u', key: UNTRUSTED, models: ['*'] },
          { name: 't', key: TRUSTED, models: ['*'], trusted: true },
        ],
      }),
      ENGINE_KEY,
    );
    fleet.setReady('tiny', [replica('tiny', fwd.url, 'tiny-a')]);
    const app = buildRouter({ fleet, auth: { required: true }, slotsRefreshMs: 0, ...(maxBufferedBytes === undefined ? {} : { limits: { maxBufferedBytes } }) });
    apps.push(app);
    const port = await freePort();
    await app.listen({ port, host: '127.0.0.1' });
    return { app, url: `http://127.0.0.1:${port}` };
  }

  let open: Awaited<ReturnType<typeof router>>;

  before(async () => {
    const dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-doors-'));
    const model = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 11, contextLength: 1024 })).path;
    llama = await startLlamaServer({ dir, model, args: ['--ctx-size', '1024'], env: { LLAMA_API_KEY: ENGINE_KEY } });
    fwd = await recordingForwarder(llama.url);
    open = await router();
  });

  after(async () => {
    for (const a of apps) await a.close();
    await new Promise<void>((r) => (fwd ? fwd.server.close(() => r()) : r()));
    await llama?.stop();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  const post = (base: string, path: string, key: string, body: unknown): Promise<Response> =>
    fetch(`${base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const direct = { authorization: `Bearer ${ENGINE_KEY}`, 'content-type': 'application/json' };

  test('llama-server itself serves both routes (asked directly with the engine key, neither is a 404)', async (t) => {
    for (const path of REFUSED) {
      const r = await fetch(`${llama.url}${path}`, { method: 'POST', headers: direct, body: JSON.stringify({ id: 'chatcmpl-someone-else', action: 'reasoning_end' }) });
      const text = await r.text();
      t.diagnostic(`${path} on llama-server: ${r.status} ${text.slice(0, 160)}`);
      assert.notEqual(r.status, 404, `${path}: ${text}`);
    }
  });

  test('through the router, both are 404 ROUTE_NOT_FOUND for any key and never reach the replica (nor GET or DELETE /v1/stream)', async () => {
    const before = fwd.seen.length;
    for (const key of [UNTRUSTED, TRUSTED]) {
      for (const path of REFUSED) {
        for (const body of [{ model: 'tiny', id: 'chatcmpl-someone-else', action: 'reasoning_end' }, { model: 'tiny' }]) {
          const r = await post(open.url, path, key, body);
          const env = (await r.json()) as { error: { code: string; message: string } };
          assert.equal(r.status, 404, JSON.stringify(env));
          assert.equal(r.headers.get('x-llmgw-reason'), 'ROUTE_NOT_FOUND');
          assert.equal(env.error.code, 'unknown_url');
          assert.ok(env.error.message.includes(path), env.error.message);
        }
      }
    }
    // the rest of llama-server's resumable-stream API: no POST, so fastify's 404
    for (const method of ['GET', 'DELETE']) {
      const r = await fetch(`${open.url}/v1/stream?conv_id=someone-else`, { method, headers: { authorization: `Bearer ${UNTRUSTED}` } });
      assert.equal(r.status, 404, `${method} /v1/stream`);
      assert.equal(r.headers.get('x-llmgw-reason'), 'ROUTE_NOT_FOUND');
      await r.text();
    }
    assert.deepEqual(fwd.seen.slice(before), [], 'the replica saw none of them');
  });

  test('the forwarded APIs still work with the official openai client (chat, completions, responses, input tokens, models)', async () => {
    const before = fwd.seen.length;
    const client = new OpenAI({ apiKey: UNTRUSTED, baseURL: `${open.url}/v1`, maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hello doors' }], max_tokens: 3 });
    assert.equal(chat.object, 'chat.completion');
    assert.equal(chat.usage?.completion_tokens, 3);
    const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hello doors' }], max_tokens: 3, stream: true });
    let chunks = 0;
    for await (const c of stream) if (c.choices[0]?.delta.content !== undefined) chunks++;
    assert.ok(chunks >= 1, `${chunks} chunks`);
    const completion = await client.completions.create({ model: 'tiny', prompt: 'the doors are', max_tokens: 3 });
    assert.equal(completion.usage?.completion_tokens, 3);
    const resp = await client.responses.create({ model: 'tiny', input: 'hello doors', max_output_tokens: 3 });
    assert.equal(resp.object, 'response');
    assert.ok(resp.usage !== undefined && resp.usage.output_tokens > 0, JSON.stringify(resp.usage));
    const tokens = await client.responses.inputTokens.count({ model: 'tiny', input: 'hello doors' });
    assert.ok(tokens.input_tokens > 0, JSON.stringify(tokens));
    const models: string[] = [];
    for await (const m of client.models.list()) models.push(m.id);
    assert.deepEqual(models, ['tiny']);
    assert.deepEqual(posts(fwd.seen.slice(before)), ['POST /v1/chat/completions', 'POST /v1/chat/completions', 'POST /v1/completions', 'POST /v1/responses', 'POST /v1/responses/input_tokens']);
  });

  test('an answer held for a key not trusted counts against maxBufferedBytes: past it 503 ROUTER_OVERLOADED, a trusted key passes, every byte given back', async (t) => {
    const body = { model: 'tiny', prompt: 'the doors are', max_tokens: 4 };
    const bodyBytes = Buffer.byteLength(JSON.stringify(body));
    // the untrusted answer through a router with room: its size (the replica's, with the figures, is larger)
    const roomy = await post(open.url, '/v1/completions', UNTRUSTED, body);
    const answer = await roomy.text();
    assert.equal(roomy.status, 200, answer);
    await until('the open router holds nothing', 5_000, async () => routerStats(open.app).buffered === 0);
    // room for the body and 64 bytes more: the body is read, the held answer passes the bound
    const bound = bodyBytes + 64;
    assert.ok(Buffer.byteLength(answer) > 64, `the answer is ${Buffer.byteLength(answer)} bytes`);
    const tight = await router(bound);
    const before = posts(fwd.seen).length;
    const r = await post(tight.url, '/v1/completions', UNTRUSTED, body);
    const env = (await r.json()) as { error: { code: string; message: string } };
    t.diagnostic(`bound ${bound} bytes (body ${bodyBytes}); the untrusted answer is ${Buffer.byteLength(answer)} bytes redacted: ${r.status} ${env.error?.message}`);
    assert.equal(r.status, 503, JSON.stringify(env));
    assert.equal(r.headers.get('x-llmgw-reason'), 'ROUTER_OVERLOADED');
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(env.error.code, 'router_overloaded');
    assert.match(env.error.message, /prompt-cache figures/);
    assert.equal(posts(fwd.seen).length, before + 1, 'the request reached the replica: the answer was what passed the bound');
    await until('the tight router gave every held byte back', 5_000, async () => routerStats(tight.app).buffered === 0);
    // a trusted key's answer is passed as it comes: the same bound does not stop it
    const ok = await post(tight.url, '/v1/completions', TRUSTED, body);
    assert.equal(ok.status, 200, await ok.text());
    await until('nothing held after the trusted answer', 5_000, async () => routerStats(tight.app).buffered === 0);
  });
});
