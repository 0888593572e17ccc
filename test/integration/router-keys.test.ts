/**
 * Per-key limits, usage and each API's own envelope, end to end: the official `openai` and
 * `@anthropic-ai/sdk` clients (default settings, including their retries) against the router on a
 * real socket, with a real llama-server replica (tiny GGUF) behind it, and a fake FleetView
 * (test/harness/fake-fleet-view.ts) whose spec carries access/keys.yaml's limits.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import Fastify from 'fastify';
import { Registry } from 'prom-client';
import { renderAdminError } from '../../src/admin/errors.js';
import { registerUsageRoute, type UsageJson } from '../../src/admin/routes/usage.js';
import { renderUsage } from '../../src/cli/usage-format.js';
import { UsageBook, fanOut } from '../../src/router/usage-book.js';
import { createKeyMetrics } from '../../src/metrics/keys.js';
import { buildRouter } from '../../src/router/app.js';
import type { UsageRecord } from '../../src/router/usage.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { until } from '../harness/wait.js';

const BUILD_TIMEOUT = 40 * 60_000;
const ENGINE_KEY = `engine-${randomBytes(12).toString('hex')}`;
const KEYS = {
  plain: 'key-plain-0001',
  rpm: 'key-rpm-0002',
  tpm: 'key-tpm-0003',
  tpmStream: 'key-tpm-stream-0004',
  usage: 'key-usage-0005',
  capped: 'key-capped-0006',
} as const;

/** A fetch that counts the HTTP requests a client sends. */
function countingFetch(): { fetch: typeof fetch; count: () => number } {
  let n = 0;
  return {
    fetch: ((input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) => {
      n++;
      return fetch(input, init);
    }) as typeof fetch,
    count: () => n,
  };
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => assert.fail('expected the request to fail'),
    (e: unknown) => e,
  );
}

describe('router keys: limits, usage and envelopes with the official clients and a real llama-server', { timeout: BUILD_TIMEOUT + 10 * 60_000 }, () => {
  let tmp = '';
  let chat: LlamaServer;
  let embed: LlamaServer;
  let rerank: LlamaServer;
  let fleet: FakeFleetView;
  let app: ReturnType<typeof buildRouter>;
  let origin = '';
  const records: UsageRecord[] = [];
  const registry = new Registry();
  const keyMetrics = createKeyMetrics(registry);
  const book = new UsageBook();

  before(async () => {
    const dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-keys-'));
    const modelPath = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 7, contextLength: 4096 })).path;
    const rerankerPath = (await writeTinyModel(join(tmp, 'reranker.gguf'), { seed: 5, architecture: 'qwen3', reranker: true, contextLength: 1024 })).path;
    [chat, embed, rerank] = await Promise.all([
      startLlamaServer({ dir, model: modelPath, args: ['--ctx-size', '4096', '--parallel', '4'], env: { LLAMA_API_KEY: ENGINE_KEY } }),
      startLlamaServer({ dir, model: modelPath, args: ['--ctx-size', '1024', '--embeddings', '--pooling', 'mean'], env: { LLAMA_API_KEY: ENGINE_KEY } }),
      // what a profile with `reranking: true` starts (src/nodes/shell-driver.ts replicaArgv)
      startLlamaServer({ dir, model: rerankerPath, args: ['--ctx-size', '1024', '--reranking'], env: { LLAMA_API_KEY: ENGINE_KEY } }),
    ]);
    fleet = new FakeFleetView(
      fakeSpec({
        models: { 'tiny-chat': { aliases: ['claude-tiny'] }, broken: {}, other: {}, 'tiny-embed': {}, 'tiny-rerank': {} },
        keys: [
          { name: 'plain', key: KEYS.plain, models: ['*'] },
          { name: 'rpm', key: KEYS.rpm, models: ['*'], limits: { requestsPerMinute: 2, tokensPerMinute: null, concurrency: null } },
          { name: 'tpm', key: KEYS.tpm, models: ['*'], limits: { requestsPerMinute: null, tokensPerMinute: 20, concurrency: null } },
          { name: 'tpm-stream', key: KEYS.tpmStream, models: ['*'], modelLimits: { 'tiny-chat': { requestsPerMinute: null, tokensPerMinute: 20, concurrency: null } } },
          { name: 'usage', key: KEYS.usage, models: ['tiny-chat'] },
          { name: 'capped', key: KEYS.capped, models: ['*'] },
        ],
        // every key gets at most 1 request a minute on `other` (each its own count)
        modelLimits: { other: { requestsPerMinute: 1, tokensPerMinute: null, concurrency: null } },
      }),
      ENGINE_KEY,
    );
    fleet.setReady('tiny-chat', [replica('tiny-chat', chat.url, 'chat-a')]);
    fleet.setReady('other', [replica('other', chat.url, 'other-a')]);
    fleet.setReady('tiny-embed', [replica('tiny-embed', embed.url, 'embed-a')]);
    fleet.setReady('tiny-rerank', [replica('tiny-rerank', rerank.url, 'rerank-a')]);
    fleet.setParked('broken', { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" });
    app = buildRouter({
      fleet,
      auth: { required: true },
      limits: { bodyBytes: 64 * 1024 },
      usage: fanOut([{ record: (r) => void records.push(r) }, keyMetrics, book]),
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await app?.close();
    await Promise.all([chat?.stop(), embed?.stop(), rerank?.stop()]);
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  const openai = (key: string, f?: ReturnType<typeof countingFetch>): OpenAI => new OpenAI({ apiKey: key, baseURL: `${origin}/v1`, ...(f ? { fetch: f.fetch } : {}) });
  const anthropic = (key: string, f?: ReturnType<typeof countingFetch>): Anthropic => new Anthropic({ apiKey: key, baseURL: origin, ...(f ? { fetch: f.fetch } : {}) });
  const messages = [{ role: 'user' as const, content: 'hello fleet' }];

  test('requests_per_minute: the third request gets RateLimitError with Retry-After, in one HTTP request (the wait is past the retry budget)', async () => {
    const client = openai(KEYS.rpm);
    await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 2 });
    await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 2 });
    const f = countingFetch();
    const err = await rejection(openai(KEYS.rpm, f).chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 2 }));
    assert.ok(err instanceof OpenAI.RateLimitError, String(err));
    assert.equal(f.count(), 1, 'one HTTP request: x-should-retry: false');
    assert.equal(err.code, 'key_rate_limit_exceeded');
    const retryAfter = Number(err.headers?.get('retry-after'));
    assert.ok(retryAfter > 50 && retryAfter <= 60, `Retry-After ${retryAfter}`);
    assert.equal(err.headers?.get('x-llmgw-reason'), 'KEY_RATE_LIMITED');
    assert.match(err.message, /key 'rpm' allows 2 requests per minute/);
    // the same through the Anthropic SDK, in its envelope
    const fa = countingFetch();
    const aerr = await rejection(anthropic(KEYS.rpm, fa).messages.create({ model: 'claude-tiny', max_tokens: 2, messages }));
    assert.ok(aerr instanceof Anthropic.RateLimitError, String(aerr));
    assert.equal(fa.count(), 1);
    assert.deepEqual((aerr.error as { type: string; error: { type: string } }).error.type, 'rate_limit_error');
    assert.ok(Number(aerr.headers?.get('retry-after')) > 50);
  });

  test('a model\'s cap (access/keys.yaml models:) holds every key to it, each on its own count', async () => {
    await openai(KEYS.capped).chat.completions.create({ model: 'other', messages, max_tokens: 1 });
    const err = await rejection(openai(KEYS.capped).chat.completions.create({ model: 'other', messages, max_tokens: 1 }));
    assert.ok(err instanceof OpenAI.RateLimitError);
    assert.match((err as Error).message, /key 'capped' on model 'other' allows 1 requests per minute/);
    await openai(KEYS.plain).chat.completions.create({ model: 'other', messages, max_tokens: 1 }); // another key: its own count
  });

  test('a parked model through the Anthropic SDK: one request, Anthropic\'s envelope, the message names the parked reason', async () => {
    const f = countingFetch();
    const err = await rejection(anthropic(KEYS.plain, f).messages.create({ model: 'broken', max_tokens: 2, messages }));
    assert.ok(err instanceof Anthropic.APIError, String(err));
    assert.equal(f.count(), 1, 'x-should-retry: false stops the SDK\'s retries of a 503');
    assert.equal(err.status, 503);
    const body = err.error as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, 'overloaded_error');
    assert.match(body.error.message, /unknown model architecture: 'kev'/);
    assert.match(err.message, /parked/);
  });

  test('bad key and unknown model: OpenAI\'s envelope on OpenAI paths, Anthropic\'s on /v1/messages', async () => {
    const e1 = await rejection(openai('not-a-key').chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 1 }));
    assert.ok(e1 instanceof OpenAI.AuthenticationError);
    assert.equal(e1.code, 'invalid_api_key');
    const e2 = await rejection(openai(KEYS.plain).chat.completions.create({ model: 'nope', messages, max_tokens: 1 }));
    assert.ok(e2 instanceof OpenAI.NotFoundError);
    assert.equal(e2.code, 'model_not_found');
    const e3 = await rejection(anthropic('not-a-key').messages.create({ model: 'claude-tiny', max_tokens: 1, messages }));
    assert.ok(e3 instanceof Anthropic.AuthenticationError, String(e3));
    assert.deepEqual(e3.error, { type: 'error', error: { type: 'authentication_error', message: 'Incorrect API key provided.' } });
    const e4 = await rejection(anthropic(KEYS.plain).messages.create({ model: 'nope', max_tokens: 1, messages }));
    assert.ok(e4 instanceof Anthropic.NotFoundError, String(e4));
    assert.equal((e4.error as { error: { type: string } }).error.type, 'not_found_error');
    // body too large, on /v1/messages: invalid request in Anthropic's shape
    const big = await fetch(`${origin}/v1/messages`, { method: 'POST', headers: { 'x-api-key': KEYS.plain, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'claude-tiny', max_tokens: 1, messages: [{ role: 'user', content: 'x'.repeat(70_000) }] }) });
    assert.equal(big.status, 413);
    assert.equal(((await big.json()) as { type: string }).type, 'error');
  });

  test('a real /v1/messages generation through the router, with its usage counted', async () => {
    const before = records.length;
    const r = await anthropic(KEYS.plain).messages.create({ model: 'claude-tiny', max_tokens: 3, messages });
    assert.equal(r.type, 'message');
    await until('a usage record for the request', 5_000, () => records.length > before);
    const rec = records.at(-1)!;
    assert.equal(rec.model, 'tiny-chat');
    assert.equal(rec.status, 200);
    assert.equal(rec.tokens.completion, r.usage.output_tokens);
    // Anthropic's input_tokens leaves out the prompt tokens read from the cache, which a key not
    // trusted is not told of (router/redact.ts): its input_tokens is the whole prompt the router counted
    assert.equal(rec.tokens.prompt + rec.tokens.cached, r.usage.input_tokens);
    assert.equal(r.usage.cache_read_input_tokens, undefined);
  });

  test('more of llama-server\'s API routed and counted: /v1/responses (streamed), /v1/embeddings, /v1/rerank (a tiny reranker GGUF), /v1/messages/count_tokens', async () => {
    const client = openai(KEYS.plain);
    const mark = records.length;
    const stream = await client.responses.create({ model: 'tiny-chat', input: 'hello fleet', max_output_tokens: 6, stream: true });
    let done: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) if (ev.type === 'response.completed') done = ev.response;
    assert.ok(done?.usage, 'the stream ended with response.completed and its usage');
    await until('a usage record for the request', 5_000, () => records.length > mark);
    const r1 = records.at(-1)!;
    assert.deepEqual([r1.model, r1.status, r1.replica], ['tiny-chat', 200, 'chat-a']);
    assert.equal(r1.tokens.completion, done.usage.output_tokens);
    assert.equal(r1.tokens.prompt + r1.tokens.cached, done.usage.input_tokens);

    const e = await client.embeddings.create({ model: 'tiny-embed', input: ['one', 'two words'] });
    assert.equal(e.data.length, 2);
    await until('the usage record of the embedding', 5_000, () => records.at(-1)!.model === 'tiny-embed');
    assert.equal(records.at(-1)!.tokens.prompt + records.at(-1)!.tokens.cached, e.usage.prompt_tokens);

    const rr = await fetch(`${origin}/v1/rerank`, { method: 'POST', headers: { authorization: `Bearer ${KEYS.plain}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny-rerank', query: 'the fleet', documents: ['a fleet of ships', 'bananas', 'the fleet is ready'] }) });
    assert.equal(rr.status, 200);
    assert.equal(rr.headers.get('x-llmgw-replica'), 'rerank-a');
    const ranked = (await rr.json()) as { results: { index: number; relevance_score: number }[]; usage: { prompt_tokens: number } };
    assert.deepEqual(ranked.results.map((x) => x.index).sort(), [0, 1, 2]);
    await until('the usage record of the rerank', 5_000, () => records.at(-1)!.model === 'tiny-rerank');
    assert.equal(records.at(-1)!.tokens.prompt + records.at(-1)!.tokens.cached, ranked.usage.prompt_tokens);

    const n = await anthropic(KEYS.plain).messages.countTokens({ model: 'claude-tiny', messages });
    assert.ok(n.input_tokens > 0);
    await until('four more usage records', 5_000, () => records.length >= mark + 4);
    assert.deepEqual([records.at(-1)!.model, records.at(-1)!.status], ['tiny-chat', 200]);
  });

  test('tokens_per_minute charged from the real usage of a generation (not streamed): the next request is refused', async () => {
    const client = openai(KEYS.tpm);
    const r = await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 16 });
    const used = r.usage!.prompt_tokens + r.usage!.completion_tokens;
    assert.ok(used > 20, `the generation used ${used} tokens, over the limit of 20`);
    await until('a served usage record of key tpm', 5_000, () => records.some((x) => x.key === 'tpm' && x.status === 200));
    const err = await rejection(client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 1 }));
    assert.ok(err instanceof OpenAI.RateLimitError, String(err));
    assert.equal(err.code, 'key_tokens_limit_exceeded');
    assert.ok(Number(err.headers?.get('retry-after')) > 50);
    const rec = records.find((x) => x.key === 'tpm' && x.status === 200)!;
    assert.equal(rec.tokens.prompt + rec.tokens.cached + rec.tokens.completion, used, 'charged what the replica reported');
  });

  test('tokens_per_minute (key × model) charged from a stream\'s final event: a stream that ran over holds the next request back', async () => {
    const client = openai(KEYS.tpmStream);
    const stream = await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 24, stream: true, stream_options: { include_usage: true } });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) usage = c.usage ?? usage;
    assert.ok(usage, 'the stream reported its usage');
    await until('a served usage record of key tpm-stream', 5_000, () => records.some((x) => x.key === 'tpm-stream' && x.status === 200));
    const rec = records.find((x) => x.key === 'tpm-stream' && x.status === 200)!;
    assert.equal(rec.tokens.completion, usage.completion_tokens);
    assert.equal(rec.tokens.prompt + rec.tokens.cached, usage.prompt_tokens);
    const err = await rejection(client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 1, stream: true }));
    assert.ok(err instanceof OpenAI.RateLimitError, String(err));
    assert.match((err as Error).message, /key 'tpm-stream' on model 'tiny-chat' allows 20 tokens per minute/);
    // another model is not held back by the key × model limit
    await client.chat.completions.create({ model: 'other', messages, max_tokens: 1 });
  });

  test('usage metrics agree exactly with the requests sent', async () => {
    const client = openai(KEYS.usage);
    let prompt = 0;
    let completion = 0;
    for (let i = 0; i < 3; i++) {
      const r = await client.chat.completions.create({ model: 'tiny-chat', messages: [{ role: 'user', content: `count ${i}` }], max_tokens: 2 + i });
      prompt += r.usage!.prompt_tokens;
      completion += r.usage!.completion_tokens;
    }
    const s = await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 5, stream: true, stream_options: { include_usage: true } });
    for await (const c of s) {
      if (c.usage) {
        prompt += c.usage.prompt_tokens;
        completion += c.usage.completion_tokens;
      }
    }
    await rejection(client.chat.completions.create({ model: 'other', messages, max_tokens: 1 })); // 403: not the key's model
    await rejection(client.chat.completions.create({ model: 'missing', messages, max_tokens: 1 })); // 404
    await until('six usage records of key usage', 5_000, () => records.filter((x) => x.key === 'usage').length === 6);
    const text = await registry.metrics();
    const sample = (name: string, labels: string): number => {
      const m = new RegExp(`^${name}\\{${labels}\\} (\\d+)$`, 'm').exec(text);
      return m ? Number(m[1]) : 0;
    };
    assert.equal(sample('llmgw_key_requests_total', 'key="usage",model="tiny-chat",code="200"'), 4);
    assert.equal(sample('llmgw_key_requests_total', 'key="usage",model="other",code="403"'), 1);
    assert.equal(sample('llmgw_key_requests_total', 'key="usage",model="",code="404"'), 1);
    const tokens = (kind: string): number => sample('llmgw_key_tokens_total', `key="usage",model="tiny-chat",kind="${kind}"`);
    assert.equal(tokens('prompt') + tokens('cached'), prompt);
    assert.equal(tokens('completion'), completion);
    assert.ok(!text.includes(KEYS.usage), 'the key itself is never a label');

    // GET /admin/v1/usage (its route module on a bare fastify) says the same
    const admin = Fastify();
    admin.setErrorHandler((err, _req, reply) => {
      const r = renderAdminError(err);
      void reply.code(r.status).send(r.body);
    });
    await admin.register(async (api) => registerUsageRoute(api, book), { prefix: '/admin/v1' });
    const res = await admin.inject({ method: 'GET', url: '/admin/v1/usage?key=usage&since=10m' });
    assert.equal(res.statusCode, 200, res.body);
    const u = res.json<UsageJson>();
    assert.deepEqual(u.rows.map((r) => [r.key, r.model, r.requests, r.errors]), [['usage', '', 1, 1], ['usage', 'other', 1, 1], ['usage', 'tiny-chat', 4, 0]]);
    const chatRow = u.rows.find((r) => r.model === 'tiny-chat')!;
    assert.equal(chatRow.promptTokens + chatRow.cachedTokens, prompt);
    assert.equal(chatRow.completionTokens, completion);
    assert.ok(chatRow.p50LatencySeconds !== null && chatRow.p50LatencySeconds > 0 && chatRow.p50LatencySeconds < 30);
    const only = (await admin.inject({ method: 'GET', url: '/admin/v1/usage?key=usage&model=tiny-chat' })).json<UsageJson>();
    assert.equal(only.rows.length, 1);
    assert.equal((await admin.inject({ method: 'GET', url: '/admin/v1/usage?since=yesterday' })).statusCode, 400);
    const table = renderUsage(u);
    assert.match(table, /^usage since /);
    assert.match(table, new RegExp(`usage +tiny-chat +4 +0 +${chatRow.promptTokens} +${chatRow.cachedTokens} +${completion} `));
    await admin.close();
  });
});
