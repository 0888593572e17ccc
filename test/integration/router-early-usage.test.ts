/**
 * Every request is charged what it used (#37 item 3, N4): a stream the client aborts is charged the
 * tokens the router saw (one per stream event passed on, the prompt as its body's bytes ÷ 4), so
 * tokens_per_minute binds for aborted streams, and the usage book, the usage log and the key's
 * token counter record the partial counts with `ended_early`. The router on a real socket, a real
 * llama-server (tiny GGUF) behind it, a fake FleetView whose spec carries the key's limits.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Fastify from 'fastify';
import { Registry } from 'prom-client';
import { renderAdminError } from '../../src/admin/errors.js';
import { registerUsageRoute, type UsageJson } from '../../src/admin/routes/usage.js';
import { createKeyMetrics } from '../../src/metrics/keys.js';
import { buildRouter } from '../../src/router/app.js';
import { fanOut, UsageBook } from '../../src/router/usage-book.js';
import { UsageLog } from '../../src/router/usage-log.js';
import type { UsageRecord } from '../../src/router/usage.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { until } from '../harness/wait.js';

const BUILD_TIMEOUT = 40 * 60_000;
const ENGINE_KEY = `engine-${randomBytes(12).toString('hex')}`;
const KEY = 'key-aborter-0001';
// A user message of 600 characters, of words the tiny vocabulary holds whole (one token each): the
// request body is ~700 bytes, so an aborted stream's prompt is charged ~175 tokens; the replica's own
// count is about as many (~130 words and the chat template), so two streams that did run to their end
// (1000 tokens each) still leave room for the third.
const PROMPT = 'the fleet model is ok and the tiny test is good hello world '.repeat(10).slice(0, 600);

/** Streams a chat completion, reads `events` stream events and aborts; the events it read. */
async function streamAndAbort(origin: string, events: number): Promise<number> {
  const ac = new AbortController();
  const res = await fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-chat', messages: [{ role: 'user', content: PROMPT }], max_tokens: 1000, ignore_eos: true, stream: true }),
    signal: ac.signal,
  });
  if (res.status !== 200) return -res.status;
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let seen = 0;
  while (seen < events) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i: number;
    while (seen < events && (i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (ev.startsWith('data: {')) seen++;
    }
  }
  ac.abort();
  await reader.cancel().catch(() => undefined);
  return seen;
}

describe('an aborted stream is charged what it used: tokens_per_minute binds, usage records the partial counts', { timeout: BUILD_TIMEOUT + 10 * 60_000 }, () => {
  let tmp = '';
  let chat: LlamaServer;
  let app: ReturnType<typeof buildRouter>;
  let origin = '';
  let usageLog: UsageLog;
  const records: UsageRecord[] = [];
  const registry = new Registry();
  const keyMetrics = createKeyMetrics(registry);
  const book = new UsageBook();

  before(async () => {
    const dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-early-'));
    const modelPath = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 7, contextLength: 4096 })).path;
    chat = await startLlamaServer({ dir, model: modelPath, args: ['--ctx-size', '4096', '--parallel', '1'], env: { LLAMA_API_KEY: ENGINE_KEY } });
    const fleet = new FakeFleetView(
      fakeSpec({
        models: { 'tiny-chat': {} },
        keys: [{ name: 'aborter', key: KEY, models: ['*'], limits: { requestsPerMinute: null, tokensPerMinute: 3000, concurrency: null } }],
      }),
      ENGINE_KEY,
    );
    fleet.setReady('tiny-chat', [replica('tiny-chat', chat.url, 'chat-a')]);
    usageLog = new UsageLog({ path: join(tmp, 'usage.log'), flushMs: 50 });
    // the limits' clock held still: on a loaded machine the three streams can take longer than the
    // 60 s window, and the first one's charge would leave it before the fourth request is asked
    const t0 = Date.now();
    app = buildRouter({
      fleet,
      clock: () => t0,
      auth: { required: true },
      limits: { bodyBytes: 64 * 1024 },
      usage: fanOut([{ record: (r) => void records.push(r) }, keyMetrics, book, usageLog]),
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await app?.close();
    usageLog?.close();
    await chat?.stop();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  test('tpm 3,000: 3 streams of max_tokens 1000 with ignore_eos aborted at 900 events; the 4th gets 429 KEY_TOKENS_LIMITED, the key counted ≥ 2,700 tokens', async () => {
    for (let i = 0; i < 3; i++) {
      assert.equal(await streamAndAbort(origin, 900), 900, `stream ${i + 1} read to 900 events (records so far: ${JSON.stringify(records)})`);
      await until(`the usage record of stream ${i + 1}`, 30_000, () => records.length === i + 1);
    }
    // each aborted at 900 events: charged what the router saw (a stream whose last event the router
    // had passed on before the client left ended whole: charged what the replica reported)
    for (const r of records) {
      assert.equal(r.status, 499);
      if (r.endedEarly === true) assert.ok(r.tokens.completion >= 900 && r.tokens.completion < 1000 && r.tokens.prompt >= 150, JSON.stringify(r));
      else assert.equal(r.tokens.completion, 1000, JSON.stringify(r));
    }
    assert.ok(records.some((r) => r.endedEarly === true), `no stream ended early: ${JSON.stringify(records)}`);
    console.log(`router-early-usage: the three aborted streams: ${JSON.stringify(records.map((r) => ({ early: r.endedEarly === true, ...r.tokens })))}`);
    const fourth = await fetch(`${origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    });
    const body = await fourth.text();
    assert.equal(fourth.status, 429, `${body}\nthe three: ${JSON.stringify(records)}`);
    assert.equal(fourth.headers.get('x-llmgw-reason'), 'KEY_TOKENS_LIMITED');
    assert.match(body, /key_tokens_limit_exceeded/);

    // the key's token counter (llmgw_key_tokens_total) over its kinds
    const m = await registry.getSingleMetric('llmgw_key_tokens_total')!.get();
    const total = m.values.filter((v) => v.labels['key'] === 'aborter').reduce((n, v) => n + v.value, 0);
    const completion = m.values.filter((v) => v.labels['key'] === 'aborter' && v.labels['kind'] === 'completion').reduce((n, v) => n + v.value, 0);
    assert.ok(completion >= 2_700, `completion tokens counted: ${completion}`);
    assert.ok(total >= 3_000, `tokens counted: ${total}`);

    // GET /admin/v1/usage: the partial counts and how many requests ended early
    const admin = Fastify();
    admin.setErrorHandler((err, _req, reply) => {
      const r = renderAdminError(err);
      void reply.code(r.status).send(r.body);
    });
    await admin.register(async (api) => registerUsageRoute(api, book), { prefix: '/admin/v1' });
    const res = await admin.inject({ method: 'GET', url: '/admin/v1/usage?key=aborter&since=10m' });
    const u = res.json<UsageJson>();
    const row = u.rows.find((r) => r.model === 'tiny-chat')!;
    assert.equal(row.endedEarly, records.filter((r) => r.endedEarly === true).length);
    assert.ok(row.completionTokens >= 2_700, `${row.completionTokens}`);
    await admin.close();

    // the usage log: one line per request, the aborted ones with ended_early and their partial counts
    usageLog.flush();
    const lines = readFileSync(join(tmp, 'usage.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { ended_early: boolean; completion_tokens: number; status: number });
    assert.deepEqual(lines.map((l) => [l.status, l.ended_early]), [...records.slice(0, 3).map((r) => [499, r.endedEarly === true]), [429, false]]);
    assert.ok(lines.slice(0, 3).every((l) => l.completion_tokens >= 900));
  });
});
