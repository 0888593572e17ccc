/**
 * The real llama-server (node-llama-cpp 3.21.1's llama.cpp) against tiny GGUF models written by
 * test/fixtures/gguf.ts. The first run may build llama-server (~10-15 min on 2 cores).
 */
import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import {
  LLAMA_SERVER_FAILURES,
  LlamaServerStartError,
  freePort,
  llamaServerDir,
  startLlamaServer,
  type LlamaServer,
  type StartLlamaServerOptions,
} from '../harness/llama-server.js';

const BUILD_TIMEOUT = 40 * 60_000;
const TEST_TIMEOUT = 120_000;

describe('llama-server with tiny GGUF models', { timeout: BUILD_TIMEOUT + 10 * TEST_TIMEOUT }, () => {
  let tmp = '';
  let dir = '';
  let good: TinyModelFile;
  let kev: TinyModelFile;
  const servers: LlamaServer[] = [];
  const blockers: Server[] = [];

  async function start(opts: StartLlamaServerOptions): Promise<LlamaServer> {
    const s = await startLlamaServer({ dir, ...opts });
    servers.push(s);
    return s;
  }

  /** Starts a server that must fail; returns the error. */
  async function startFailingOnce(opts: StartLlamaServerOptions): Promise<LlamaServerStartError> {
    try {
      const s = await start(opts);
      await s.stop();
    } catch (e) {
      assert.ok(e instanceof LlamaServerStartError, String(e));
      return e;
    }
    assert.fail('llama-server started but should not have');
  }

  /**
   * Starts a server that must fail (exit code 1 before healthy, every time) until its output shows all
   * of `patterns`. llama-server logs through an asynchronous thread that is not drained at exit, so
   * on a busy machine the last lines, or on a fast failure everything, can be missing (seen ~1 in 10
   * runs). The messages themselves are what this test pins down, hence a few attempts.
   */
  async function startFailing(opts: StartLlamaServerOptions, ...patterns: RegExp[]): Promise<LlamaServerStartError> {
    let last: LlamaServerStartError | undefined;
    for (let i = 0; i < 8; i++) {
      last = await startFailingOnce(opts);
      assert.equal(last.code, 1, last.message);
      assert.equal(last.signal, null);
      if (patterns.every((p) => p.test(last!.log))) return last;
    }
    assert.fail(`output never showed ${patterns.join(', ')}; last:\n${last?.log}`);
  }

  async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text };
  }

  before(async () => {
    dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-llama-'));
    good = await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 1 });
    kev = await writeTinyModel(join(tmp, 'kev.gguf'), { seed: 1, architecture: 'kev' });
  }, { timeout: BUILD_TIMEOUT });

  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    await Promise.all(blockers.map((b) => new Promise((r) => b.close(r))));
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  test('a tiny model starts, turns healthy and serves chat and text completions', { timeout: TEST_TIMEOUT }, async () => {
    const t0 = Date.now();
    const srv = await start({ model: good.path });
    const startupMs = Date.now() - t0;
    assert.ok(startupMs < 30_000, `startup took ${startupMs} ms`);
    const health = await fetch(`${srv.url}/health`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { status: 'ok' });

    const chat = await post(`${srv.url}/v1/chat/completions`, {
      model: 'tiny',
      messages: [{ role: 'user', content: 'Hello, tiny llama!' }],
      max_tokens: 8,
    });
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.json.object, 'chat.completion');
    const choice = chat.json.choices[0];
    assert.equal(choice.message.role, 'assistant');
    assert.equal(typeof choice.message.content, 'string');
    assert.ok(choice.message.content.length > 0, chat.text);
    assert.equal(choice.finish_reason, 'length'); // the model never emits </s>: always runs to max_tokens
    assert.equal(chat.json.usage.completion_tokens, 8);
    assert.ok(chat.json.usage.prompt_tokens > 0);

    const completion = await post(`${srv.url}/v1/completions`, { model: 'tiny', prompt: 'The fleet is', max_tokens: 8 });
    assert.equal(completion.status, 200, completion.text);
    assert.equal(completion.json.object, 'text_completion');
    assert.ok(completion.json.choices[0].text.length > 0, completion.text);
    assert.equal(completion.json.usage.completion_tokens, 8);

    // streaming works too (what the router passes through)
    const stream = await fetch(`${srv.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true }),
    });
    assert.equal(stream.status, 200);
    assert.match(stream.headers.get('content-type') ?? '', /text\/event-stream/);
    const sse = await stream.text();
    assert.match(sse, /^data: /m);
    assert.match(sse, /data: \[DONE\]/);

    const models = await fetch(`${srv.url}/v1/models`);
    assert.equal(models.status, 200);
    const list = (await models.json()) as { data: { id: string }[] };
    assert.ok(list.data.length >= 1);

    await srv.stop();
    assert.ok(srv.proc.exitCode !== null || srv.proc.signalCode !== null);
  });

  test('same model and seed with greedy sampling gives the same text', { timeout: TEST_TIMEOUT }, async () => {
    const srv = await start({ model: good.path });
    const body = { prompt: 'hello world', max_tokens: 6, temperature: 0, cache_prompt: false };
    const a = await post(`${srv.url}/v1/completions`, body);
    const b = await post(`${srv.url}/v1/completions`, body);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.choices[0].text, b.json.choices[0].text);
    await srv.stop();
  });

  test('embeddings: --embeddings needs --pooling (the llama architecture has no pooling by default)', { timeout: TEST_TIMEOUT }, async () => {
    const plain = await start({ model: good.path, args: ['--embeddings'] });
    const noPool = await post(`${plain.url}/v1/embeddings`, { input: 'hello fleet' });
    await plain.stop();
    assert.equal(noPool.status, 400, noPool.text);
    assert.match(noPool.text, /[Pp]ooling type 'none' is not OAI compatible/);

    const srv = await start({ model: good.path, args: ['--embeddings', '--pooling', 'mean'] });
    const res = await post(`${srv.url}/v1/embeddings`, { model: 'tiny', input: ['hello fleet', 'another'] });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.object, 'list');
    assert.equal(res.json.data.length, 2);
    const v = res.json.data[0].embedding as number[];
    assert.equal(v.length, 128); // n_embd
    assert.ok(v.every((x) => Number.isFinite(x)));
    assert.ok(v.some((x) => x !== 0));
    await srv.stop();
  });

  test('an unknown architecture exits before healthy with "unknown model architecture"', { timeout: TEST_TIMEOUT }, async () => {
    const t0 = Date.now();
    const err = await startFailing(
      { model: kev.path },
      /E llama_model_load: error loading model: unknown model architecture: 'kev'/,
      LLAMA_SERVER_FAILURES.modelLoadingExit,
    );
    assert.ok(Date.now() - t0 < 30_000);
    assert.equal(LLAMA_SERVER_FAILURES.unknownArchitecture.exec(err.log)?.[1], 'kev');
    assert.match(err.message, /exited before it was healthy \(code 1/);
    assert.match(err.message, /unknown model architecture: 'kev'/); // the log tail is in the message
  });

  test('a missing model file exits before healthy', { timeout: TEST_TIMEOUT }, async () => {
    const missing = join(tmp, 'does-not-exist.gguf');
    const err = await startFailing(
      { model: missing },
      LLAMA_SERVER_FAILURES.modelFileMissing,
      LLAMA_SERVER_FAILURES.modelLoadingExit,
    );
    const m = LLAMA_SERVER_FAILURES.modelFileMissing.exec(err.log);
    assert.equal(m?.[1], missing);
    assert.equal(m?.[2], 'No such file or directory');
    assert.match(err.log, new RegExp(`failed to load model, '${missing.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}'`));
  });

  test('a port in use exits before healthy with "couldn\'t bind"', { timeout: TEST_TIMEOUT }, async () => {
    const port = await freePort();
    const blocker = createServer();
    blockers.push(blocker);
    await new Promise<void>((r) => blocker.listen(port, '127.0.0.1', r));
    const err = await startFailing(
      { model: good.path, port },
      LLAMA_SERVER_FAILURES.portInUse,
      LLAMA_SERVER_FAILURES.httpServerExit,
    );
    assert.match(err.log, new RegExp(`E srv +start: couldn't bind HTTP server socket, hostname: 127\\.0\\.0\\.1, port: ${port}`));
    assert.equal(LLAMA_SERVER_FAILURES.portInUse.exec(err.log)?.[2], String(port));
    assert.doesNotMatch(err.log, /load_model/); // the socket is bound before the model is loaded
  });

  test('out of memory (KV cache over an address-space limit) exits before healthy', { timeout: TEST_TIMEOUT }, async () => {
    const err = await startFailing(
      {
        model: good.path,
        args: ['--ctx-size', '1000000', '--fit', 'off'], // a ~2 GB KV cache
        wrap: ['bash', '-c', 'ulimit -v 1500000 && exec "$@"', 'llama-server'],
      },
      /insufficient memory \(attempted to allocate [\d.]+ MB\)/,
      /failed to allocate buffer for kv cache/,
      LLAMA_SERVER_FAILURES.contextFailed,
      LLAMA_SERVER_FAILURES.modelLoadingExit,
    );
    assert.match(err.log, LLAMA_SERVER_FAILURES.outOfMemory);
  });

  test('an API key from the environment only (LLAMA_API_KEY) is enforced', { timeout: TEST_TIMEOUT }, async () => {
    const key = 'sk-test-from-env';
    const srv = await start({ model: good.path, env: { LLAMA_API_KEY: key } });
    assert.ok(!srv.proc.spawnargs.some((a) => a.includes(key)), 'key must not be on the command line');
    const body = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

    const none = await post(`${srv.url}/v1/chat/completions`, body);
    assert.equal(none.status, 401, none.text);
    assert.deepEqual(none.json, { error: { message: 'Invalid API Key', type: 'authentication_error', code: 401 } });
    const wrong = await post(`${srv.url}/v1/chat/completions`, body, { authorization: 'Bearer nope' });
    assert.equal(wrong.status, 401);
    const ok = await post(`${srv.url}/v1/chat/completions`, body, { authorization: `Bearer ${key}` });
    assert.equal(ok.status, 200, ok.text);
    // /health stays public (the harness and node drivers probe it without the key)
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
    await srv.stop();
  });

  test('the harness reports a start timeout and kills the process', { timeout: TEST_TIMEOUT }, async () => {
    await assert.rejects(
      startLlamaServer({ dir, model: good.path, timeoutMs: 1 }),
      (e: unknown) => e instanceof LlamaServerStartError && /not healthy within 1 ms/.test(e.message),
    );
  });
});
