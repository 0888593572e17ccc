/**
 * #38 item 3 on the real engine (llama-server, a tiny GGUF, 2 slots, a host-RAM prompt cache, every
 * replica with --slot-save-path): a new replica warmed through the warm-up port (router/warm-replica.ts)
 * from an old replica's slot files —
 * - where the files fit and hold the hot prefix, the restore is kept (via restore): the first
 *   replay takes its prompt from the cache and the replica evaluates a handful of tokens where a
 *   replay alone evaluates the whole prompt (both counted by llama-server's own timings);
 * - where the restore goes through but brings nothing the hot prefix uses (the donor never served it:
 *   what llama.cpp #26676 looks like from outside), it falls back to replay with SLOT_RESTORE_NO_GAIN,
 *   and the prefix is in the cache all the same;
 * - where the new replica's slot dir holds a damaged file under the name (garbage), the engine
 *   refuses the restore: SLOT_RESTORE_FAILED, and replay.
 * - where the old replica was started without a slot-save path (by an llmgw before slot files), it
 *   saves nothing: a plain replay, no reason code.
 * One old replica serves every case; each case starts its own new one (~0.1 s each).
 */
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { writeTinyModel } from '../../src/gguf/tiny-model.js';
import type { ProfileSpec } from '../../src/fleet-spec/types.js';
import { slotFileName } from '../../src/engine-api/slot-files.js';
import { mayRestoreSlots, slotIdentityOf } from '../../src/engine-api/slot-restore.js';
import { HotPrefixes } from '../../src/router/hot-prefixes.js';
import { replicaWarmup, type WarmCost } from '../../src/router/warm-replica.js';
import type { WarmupTarget } from '../../src/reconciler/warm-up.js';
import { startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { freePort } from '../harness/ports.js';

const KEY = 'slot-restore-engine-key-41ab';
const headers = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
const log = pino({ level: 'silent' });
let dir = '';
let modelPath = '';
let old: LlamaServer;
const started: LlamaServer[] = [];

const PROFILE = {
  name: 'tiny', file: 'profiles/tiny.yaml', engine: 'llama-cpp', engineVersion: 'test', ctxSize: 2048, threads: null, parallel: 2, batchSize: null,
  embeddings: false, extraArgs: [], memoryOverheadBytes: 0, cacheRamBytes: 64 * 1024 * 1024, startTimeoutMs: 60_000,
  warmup: { prefixes: 8, maxTokens: 65_536, timeoutMs: 60_000 },
} as const satisfies Partial<ProfileSpec>;

const server = async (slotDir: string): Promise<LlamaServer> => {
  mkdirSync(slotDir, { recursive: true });
  const s = await startLlamaServer({ model: modelPath, port: await freePort(), args: ['--ctx-size', '2048', '--parallel', '2', '--cache-ram', '64', '--slot-save-path', slotDir], env: { LLAMA_API_KEY: KEY } });
  started.push(s);
  return s;
};

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-slots-'));
  modelPath = (await writeTinyModel(join(dir, 'tiny.gguf'), { seed: 5 })).path;
  old = await server(join(dir, 'slots'));
});

after(async () => {
  await Promise.all(started.map((s) => s.stop()));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const words = (seed: string, n: number): string => Array.from({ length: n }, (_, i) => `${seed}${(i * 7919) % 1000}`).join(' ');
const chat = (system: string, user: string) => ({ model: 'm', max_tokens: 4, messages: [{ role: 'system', content: system }, { role: 'user', content: user }] });

interface Timings { cache_n: number; prompt_n: number; prompt_ms: number }
const ask = async (url: string, body: object): Promise<Timings> => {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { timings: Timings }).timings;
};

/** The warm-up port with a table holding `bodies` (hottest last), the old replica as donor; what it said and counted. */
async function warm(neu: LlamaServer, bodies: object[], donor: LlamaServer = old): Promise<{ view: Awaited<ReturnType<ReturnType<typeof replicaWarmup>>>; cost: WarmCost }> {
  const hot = new HotPrefixes();
  bodies.forEach((b, i) => hot.seen('m', i + 1, '/v1/chat/completions', Buffer.from(JSON.stringify(b)), 1000 + i));
  let cost: WarmCost | null = null;
  const port = replicaWarmup(hot, KEY, (_m, c) => (cost = c), () => 2000);
  const id = slotIdentityOf('node-1', { engine: 'llama-cpp', version: 'test', install: { method: 'path', path: '/x' } }, { sha256: 'a'.repeat(64) }, PROFILE);
  const target: WarmupTarget = { model: 'm', node: 'node-1', replica: 'new', endpoint: neu.url, profile: PROFILE as unknown as ProfileSpec, slots: { donor: 'old', endpoint: donor.url, decision: mayRestoreSlots(id, id) } };
  const view = await port(target, new AbortController().signal, log);
  assert.ok(cost !== null, 'the cost was counted');
  return { view, cost };
}

const HOT = chat(words('s', 120), 'the question that made the slot');

describe('slot files on the real engine', () => {
  it('a restore that helps is kept: the first replay takes its prompt from the cache', async () => {
    const served = await ask(old.url, HOT);
    const neu = await server(join(dir, 'slots'));
    const { view, cost } = await warm(neu, [HOT]);
    assert.equal(view?.via, 'restore', JSON.stringify(view));
    assert.equal(view?.code, null);
    assert.ok((view?.restored ?? 0) >= served.prompt_n, `the slot's tokens were restored: ${JSON.stringify(view)}`);
    assert.equal(cost.via, 'restore');
    assert.equal(cost.prefixes, 1);
    assert.ok(cost.cached >= 0.9 * (cost.cached + cost.tokens), `the replay found the prompt in the cache: ${JSON.stringify(cost)}`);
    // against a replay alone into a fresh replica of the same prompt
    const bare = await server(join(dir, 'bare'));
    const cold = await ask(bare.url, { ...HOT, max_tokens: 0 });
    console.log(`# restore vs replay, ${served.prompt_n + served.cache_n}-token prefix: tokens evaluated before the first answer ${cost.tokens} (restore, ${cost.restored} restored) vs ${cold.prompt_n} (replay); ${cost.seconds.toFixed(3)} s (save, restore, check) vs ${(cold.prompt_ms / 1000).toFixed(3)} s of prompt evaluation`);
    assert.ok(cost.tokens * 10 < cold.prompt_n, `restore evaluated ${cost.tokens}, replay ${cold.prompt_n}`);
  });

  it('a restore that goes through and brings nothing the hot prefix uses falls back to replay with SLOT_RESTORE_NO_GAIN', async () => {
    const other = chat(words('q', 100), 'a prefix the old replica never served');
    const neu = await server(join(dir, 'slots'));
    const { view, cost } = await warm(neu, [other]);
    assert.equal(view?.via, 'replay', JSON.stringify(view));
    assert.equal(view?.code, 'SLOT_RESTORE_NO_GAIN');
    assert.match(view?.message ?? '', /restored \d+ tokens from slot files, but its first replay took \d+ of \d+ prompt tokens from the cache: warmed by replay/);
    assert.equal(cost.via, 'replay');
    assert.ok(cost.tokens > 200, `the replay evaluated the prefix: ${JSON.stringify(cost)}`);
    const t = await ask(neu.url, other);
    assert.ok(t.cache_n >= 0.9 * (t.cache_n + t.prompt_n), `the replayed prefix is in the cache: ${JSON.stringify(t)}`);
  });

  it('a damaged slot file is refused by the engine: SLOT_RESTORE_FAILED, and replay', async () => {
    await ask(old.url, HOT);
    const damaged = join(dir, 'damaged');
    mkdirSync(damaged, { recursive: true });
    for (const s of [0, 1]) writeFileSync(join(damaged, slotFileName(s)), Buffer.alloc(4096, 7));
    const neu = await server(damaged);
    const { view, cost } = await warm(neu, [HOT]);
    assert.equal(view?.via, 'replay', JSON.stringify(view));
    assert.equal(view?.code, 'SLOT_RESTORE_FAILED');
    assert.match(view?.message ?? '', /restore of slot \d \(llmgw-slot-\d\.bin\) at http:\/\/\S+ was answered 400: .*: warmed by replay/);
    assert.equal(cost.prefixes, 1);
    const t = await ask(neu.url, HOT);
    assert.ok(t.cache_n >= 0.9 * (t.cache_n + t.prompt_n), `the replayed prefix is in the cache: ${JSON.stringify(t)}`);
  });

  it('an old replica started without a slot-save path saves nothing: plain replay, no code', async () => {
    const legacy = await startLlamaServer({ model: modelPath, port: await freePort(), args: ['--ctx-size', '2048', '--parallel', '2', '--cache-ram', '64'], env: { LLAMA_API_KEY: KEY } });
    started.push(legacy);
    await ask(legacy.url, HOT);
    const neu = await server(join(dir, 'slots'));
    const { view, cost } = await warm(neu, [HOT], legacy);
    assert.deepEqual([view?.via, view?.code, view?.restored], ['replay', null, undefined], JSON.stringify(view));
    assert.equal(cost.prefixes, 1);
    assert.ok(cost.tokens > 300, `the replay evaluated the prefix: ${JSON.stringify(cost)}`);
  });
});
