/**
 * #38 item 3, an on-demand model activated again on the same node, through a real `llmgw serve` (an
 * sshd node, real llama-server replicas of a tiny GGUF, the official `openai` client; router auth off,
 * so every answer carries llama-server's own `timings`): a conversation with a ~2k-token system
 * prompt; the replica is stopped as idle (its slots saved to the model's slot dir on the node before
 * it leaves); the next request activates the model again, and the new replica restores those files
 * before it takes traffic — the `replica-warmed` event says so, `llmgw_replica_warmup_total{via="restore"}`
 * counts it, and the request takes most of its prompt from the cache.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { writeTinyModel } from '../../src/gguf/tiny-model.js';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let serve: ServeProc;
let modelDir = '';
const diag = (): string => serve?.out().slice(-4000) ?? '';

interface ModelsJson { models: { name: string; phase: string; replicas: { id: string; phase: string }[] }[] }
interface EventsJson { events: { seq: number; kind: string; model: string | null; replica: string | null; code: string | null; message: string }[] }

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  for (const f of Object.keys(files)) if (f.startsWith('models/')) delete files[f];
  files['profiles/tiny.yaml'] = files['profiles/tiny.yaml']!.replace('ctx_size: 256', 'ctx_size: 8192').replace('cache_ram: 16MiB', 'cache_ram: 256MiB') + 'warmup: { prefixes: 16, max_tokens: 65536, timeout: 60s }\n';
  modelDir = mkdtempSync(join(tmpdir(), 'llmgw-slot-reactivation-'));
  const long = await writeTinyModel(join(modelDir, 'long.gguf'), { seed: 3, contextLength: 8192 });
  files['models/od.yaml'] = modelYaml(long, ['on_demand: { idle_timeout: 2s }']);
  await fleet.push(files, 'fleet: an on-demand model whose replica warms up before it takes traffic');
  serve = await spawnServe({ name: 'slot-reactivation', fleet });
  await until('the model known', 60_000, async () => (await serve.admin<ModelsJson>('/models')).models.some((m) => m.name === 'od'), { diag });
});

after(async () => {
  await serve?.sigkill();
  await fleet?.cleanup();
  if (modelDir) rmSync(modelDir, { recursive: true, force: true });
});

const words = (seed: string, n: number): string => Array.from({ length: n }, (_, i) => `${seed}${(i * 7919) % 1000}`).join(' ');
type Msg = { role: 'system' | 'user' | 'assistant'; content: string };

describe('an on-demand model activated again restores its slot files', () => {
  const openai = new OpenAI({ apiKey: 'none', baseURL: 'http://127.0.0.1:1/v1', maxRetries: 0, timeout: 120_000 });
  const ask = async (messages: Msg[]): Promise<{ text: string; cache: number; prompt: number }> => {
    const r = await openai.withOptions({ baseURL: `http://127.0.0.1:${serve.routerPort}/v1` }).chat.completions.create({ model: 'od', messages, max_tokens: 4, temperature: 0 });
    const t = (r as unknown as { timings?: { cache_n?: number; prompt_n?: number } }).timings;
    assert.ok(t && typeof t.cache_n === 'number' && typeof t.prompt_n === 'number', `llama-server's timings in the answer: ${JSON.stringify(r)}`);
    return { text: r.choices[0]?.message.content ?? '', cache: t.cache_n, prompt: t.prompt_n };
  };
  const replicas = async (): Promise<string[]> => (await serve.admin<ModelsJson>('/models')).models.find((m) => m.name === 'od')?.replicas.map((r) => r.id) ?? [];

  it('the replica stopped as idle leaves its slots; the next one restores them and the next turn comes from the cache', async () => {
    const conv: Msg[] = [{ role: 'system', content: words('sys', 290) }, { role: 'user', content: `question: ${words('q', 8)}` }];
    for (let turn = 0; turn < 2; turn++) {
      const { text } = await ask(conv);
      conv.push({ role: 'assistant', content: text }, { role: 'user', content: `turn ${turn + 1}: ${words(`t${turn}`, 6)}` });
    }
    const first = await replicas();
    assert.equal(first.length, 1);
    // passes back to back until the idle stop (a retry answers after the pass that handled it)
    await until('the replica stopped as idle', 60_000, async () => {
      await serve.admin('/models/od/retry', { method: 'POST' });
      return (await replicas()).length === 0;
    }, { diag });
    assert.match(serve.out(), /slots saved before the replica leaves/);
    const next = await ask(conv);
    const fresh = await replicas();
    assert.equal(fresh.length, 1);
    assert.notEqual(fresh[0], first[0]);
    const events = (await serve.admin<EventsJson>('/events?model=od')).events.filter((e) => e.kind === 'replica-warmed');
    const m = parseExposition(await (await fetch(`http://127.0.0.1:${serve.adminPort}/metrics`)).text());
    console.log(`on-demand re-activation: the next turn took ${next.cache}/${next.cache + next.prompt} prompt tokens from the cache; event: ${events.at(-1)?.message}`);
    assert.equal(events.length, 1, JSON.stringify(events));
    assert.equal(events[0]!.replica, fresh[0]);
    assert.equal(events[0]!.code, null);
    assert.match(events[0]!.message, /warmed up before taking traffic \(\d+ prefixes, \d+ prompt tokens, [\d.]+ s\), from the old replica's slot files \(\d+ tokens restored\)/);
    assert.equal(sampleValue(m, 'llmgw_replica_warmup_total', { model: 'od', via: 'restore' }), 1);
    assert.ok((sampleValue(m, 'llmgw_replica_warmup_restored_tokens_total', { model: 'od' }) ?? 0) > 1000);
    assert.ok(next.cache >= 0.8 * (next.cache + next.prompt), `the next turn took most of its prompt from the cache: ${JSON.stringify(next)}`);
  });
});
