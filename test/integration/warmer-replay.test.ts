/**
 * The warm-up's replay (router/warmer.ts) against the real llama-server (a tiny GGUF, 2 slots, a
 * host-RAM prompt cache): what it leaves in the cache (the next request with a replayed prefix takes
 * it all from the cache), a prefix the engine refuses (400: past its context) skipped and the next one
 * still sent, and a replica that refuses the engine key or does not answer ending the warm-up with
 * WARMUP_REPLAY_FAILED.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { writeTinyModel } from '../../src/gguf/tiny-model.js';
import { HotEntry } from '../../src/router/hot-prefixes.js';
import { planWarmup, runWarmup } from '../../src/router/warmer.js';
import { startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { freePort } from '../harness/ports.js';

const KEY = 'warmer-replay-engine-key-7c1d';
const headers = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
let dir = '';
let srv: LlamaServer;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-warmer-'));
  const m = await writeTinyModel(join(dir, 'tiny.gguf'), { seed: 5 });
  srv = await startLlamaServer({ model: m.path, port: await freePort(), args: ['--ctx-size', '2048', '--parallel', '2', '--cache-ram', '64'], env: { LLAMA_API_KEY: KEY } });
});

after(async () => {
  await srv?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const words = (seed: string, n: number): string => Array.from({ length: n }, (_, i) => `${seed}${(i * 7919) % 1000}`).join(' ');
const chat = (system: string, user: string) => ({ model: 'm', stream: true, max_tokens: 50, messages: [{ role: 'system', content: system }, { role: 'user', content: user }] });
const entry = (key: number, body: object, path = '/v1/chat/completions'): HotEntry => new HotEntry(key, path, Buffer.from(JSON.stringify(body)), 0);

describe('the warm-up replay on the real engine', () => {
  it('leaves each replayed prompt in the cache; a refused prefix is skipped and the next one still sent', async () => {
    const a = chat(words('a', 120), 'first');
    const b = { model: 'm', prompt: words('b', 120), max_tokens: 20 };
    const tooLong = chat(words('z', 900), 'past the context');
    // hottest first: a, then the one the engine refuses, then b (sent first: the coldest)
    const replays = planWarmup([entry(1, a), entry(2, tooLong), entry(3, b, '/v1/completions')], { prefixes: 8, maxTokens: 1_000_000, timeoutMs: 60_000 }, 2, true);
    const r = await runWarmup(srv.url, headers, replays, 60_000);
    assert.equal(r.outcome, 'done', JSON.stringify(r));
    assert.equal(r.code, null);
    assert.equal(r.prefixes, 2);
    assert.equal(r.skipped, 1);
    assert.ok(r.tokens > 500, `the replica evaluated the two prompts: ${r.tokens} tokens`);
    for (const [path, body] of [['/v1/chat/completions', { ...a, stream: false }], ['/v1/completions', b]] as const) {
      const res = await fetch(`${srv.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
      const t = ((await res.json()) as { timings: { cache_n: number; prompt_n: number } }).timings;
      assert.ok(t.cache_n >= 0.9 * (t.cache_n + t.prompt_n), `${path}: the replayed prompt came from the cache: ${JSON.stringify(t)}`);
    }
  });

  it('a replica that refuses the engine key ends the warm-up with WARMUP_REPLAY_FAILED', async () => {
    const replays = planWarmup([entry(1, chat(words('k', 20), 'x')), entry(2, chat('s', 'y'))], { prefixes: 8, maxTokens: 1_000_000, timeoutMs: 60_000 }, 2, true);
    const r = await runWarmup(srv.url, { 'content-type': 'application/json', authorization: 'Bearer not-the-key' }, replays, 60_000);
    assert.equal(r.outcome, 'failed');
    assert.equal(r.code, 'WARMUP_REPLAY_FAILED');
    assert.match(r.message ?? '', /replay 1 of 2 \(\/v1\/chat\/completions\) was answered 401/);
    assert.deepEqual([r.prefixes, r.skipped], [0, 0]);
  });

  it('a replica that does not answer ends the warm-up with WARMUP_REPLAY_FAILED', async () => {
    const replays = planWarmup([entry(1, chat('s', 'x')), entry(2, chat('t', 'y'))], { prefixes: 8, maxTokens: 1_000_000, timeoutMs: 60_000 }, 2, true);
    const r = await runWarmup(`http://127.0.0.1:${await freePort()}`, headers, replays, 60_000);
    assert.equal(r.outcome, 'failed');
    assert.equal(r.code, 'WARMUP_REPLAY_FAILED');
    assert.match(r.message ?? '', /replay 1 of 2 \(\/v1\/chat\/completions\) got no answer/);
    assert.equal(r.prefixes, 0);
  });
});
