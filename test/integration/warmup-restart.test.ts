/**
 * #38 item 2: a new replica joins warm. Through a real `llmgw serve` (an sshd node, real llama-server
 * replicas of a tiny GGUF, the official `openai` client; router auth off, so every answer carries
 * llama-server's own `timings`, read as a trusted key would):
 * - 12 conversations of 4 turns with a ~2k-token shared system prompt; after 3 turns, `ctl restart`
 *   of the model (surge: the new replica is warmed with the router's hottest prefixes before it
 *   takes traffic, the old one serving meanwhile); the 12 next requests (each conversation's 4th
 *   turn) take ≥ 80 % of the steady state's share of prompt tokens from the cache (cache_n /
 *   (cache_n + prompt_n), llama-server's own counts), and the first of them most of its prompt; the
 *   warm-up's cost in tokens and seconds is printed, from /metrics and its event (the same run with
 *   the warm-up off: bench/RESULTS.md; its first request is evaluated whole);
 * - 6 conversations with a system prompt of their own each (no prefix shared): after the restart
 *   each one's next turn takes most of its prompt from the cache (the warm-up carried them all);
 * - a warm-up whose timeout is tiny (1 ms) still leaves the replica serving, with WARMUP_TIMED_OUT
 *   in the events.
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
  // one slot with room for a conversation, a host-RAM prompt cache for the 12 of them, and a warm-up that replays them all
  files['profiles/tiny.yaml'] = files['profiles/tiny.yaml']!.replace('ctx_size: 256', 'ctx_size: 8192').replace('cache_ram: 16MiB', 'cache_ram: 256MiB') + 'warmup: { prefixes: 16, max_tokens: 65536, timeout: 60s }\n';
  files['profiles/hurried.yaml'] = files['profiles/tiny.yaml']!.replace('warmup: { prefixes: 16, max_tokens: 65536, timeout: 60s }', 'warmup: { timeout: 1ms }');
  // the harness's tiny models are trained for 2,048 tokens: this one for 8,192, so a conversation fits beside its system prompt
  modelDir = mkdtempSync(join(tmpdir(), 'llmgw-warmup-'));
  const long = await writeTinyModel(join(modelDir, 'long.gguf'), { seed: 3, contextLength: 8192 });
  files['models/good.yaml'] = modelYaml(long, ['replicas: 1']);
  // and once more, for conversations that share no system prompt (a table of hot prefixes of its own)
  files['models/own.yaml'] = modelYaml(long, ['replicas: 1']);
  files['models/hurried.yaml'] = modelYaml(fleet.models.good2, ['replicas: 1']).replace('profile: tiny', 'profile: hurried');
  await fleet.push(files, 'fleet: a model warmed up before it takes traffic, one whose warm-up times out');
  serve = await spawnServe({ name: 'warmup', fleet });
  await until('models ready', 120_000, async () => (await serve.admin<ModelsJson>('/models')).models.filter((m) => m.phase === 'ready').length === 3, { diag });
});

after(async () => {
  await serve?.sigkill();
  await fleet?.cleanup();
  if (modelDir) rmSync(modelDir, { recursive: true, force: true });
});

/** A text of `n` words, different for each `seed`: the tiny model's tokenizer makes about a token of each character. */
function words(seed: string, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(`${seed}${(i * 7919) % 1000}`);
  return out.join(' ');
}

type Msg = { role: 'system' | 'user' | 'assistant'; content: string };
interface Figures { cache: number; prompt: number }

async function metricsOf(): Promise<ReturnType<typeof parseExposition>> {
  return parseExposition(await (await fetch(`http://127.0.0.1:${serve.adminPort}/metrics`)).text());
}

/** A restart of the model's replica, surge-first; resolves once the old one is gone. */
async function restart(model: string): Promise<void> {
  const r = await serve.admin<{ ids?: string[] }>('/restart?wait=true&timeout=120', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model }) });
  assert.ok(r, 'the restart answered');
}

describe('a new replica joins warm', () => {
  const openai = (): OpenAI => new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${serve.routerPort}/v1`, maxRetries: 0, timeout: 120_000 });
  const ask = async (model: string, messages: Msg[]): Promise<{ text: string; f: Figures }> => {
    const r = await openai().chat.completions.create({ model, messages, max_tokens: 4, temperature: 0 });
    const t = (r as unknown as { timings?: { cache_n?: number; prompt_n?: number } }).timings;
    assert.ok(t && typeof t.cache_n === 'number' && typeof t.prompt_n === 'number', `llama-server's timings in the answer: ${JSON.stringify(r)}`);
    return { text: r.choices[0]?.message.content ?? '', f: { cache: t.cache_n, prompt: t.prompt_n } };
  };
  const share = (fs: readonly Figures[]): number => fs.reduce((a, f) => a + f.cache, 0) / fs.reduce((a, f) => a + f.cache + f.prompt, 0);

  /** `n` conversations of 3 turns on `model`, `ctl restart` of it, then each one's 4th turn: the follow-ups' figures before and after. */
  const acrossRestart = async (model: string, shared = true, n = 12): Promise<{ steady: Figures[]; next: Figures[]; old: string[]; fresh: string }> => {
    // ~2,000 tokens, the same for every conversation (or, `shared` false, ~1,000 of its own each)
    const system = (c: number): string => (shared ? words('sys', 290) : words(`s${c}x`, 150));
    const convs: Msg[][] = Array.from({ length: n }, (_, c) => [{ role: 'system', content: system(c) }, { role: 'user', content: `conversation ${c}: ${words(`c${c}q`, 8)}` }]);
    const steady: Figures[] = [];
    for (let turn = 0; turn < 3; turn++) {
      for (let c = 0; c < convs.length; c++) {
        const { text, f } = await ask(model, convs[c]!);
        if (turn > 0) steady.push(f);
        convs[c]!.push({ role: 'assistant', content: text }, { role: 'user', content: `turn ${turn + 1}: ${words(`c${c}t${turn}`, 6)}` });
      }
    }
    const before = (await serve.admin<ModelsJson>('/models')).models.find((m) => m.name === model)!.replicas.map((r) => r.id);
    // passes (each with a look at the node) run back to back while the restart and its warm-up run
    // (a retry of a model that is not parked answers after the pass that handled it)
    let restarting = true;
    const passes = (async () => {
      let n = 0;
      for (; restarting; n++) await serve.admin(`/models/${model}/retry`, { method: 'POST' });
      return n;
    })();
    await restart(model).finally(() => (restarting = false));
    assert.ok((await passes) > 0);
    await until(`${model}: the old replica gone, a new one ready`, 120_000, async () => {
      const m = (await serve.admin<ModelsJson>('/models')).models.find((x) => x.name === model)!;
      return m.phase === 'ready' && m.replicas.length === 1 && !before.includes(m.replicas[0]!.id);
    }, { diag });
    const fresh = (await serve.admin<ModelsJson>('/models')).models.find((x) => x.name === model)!.replicas[0]!.id;
    const next: Figures[] = [];
    for (let c = 0; c < convs.length; c++) next.push((await ask(model, convs[c]!)).f);
    return { steady, next, old: before, fresh };
  };

  it('12 conversations with a 2k-token system prompt: after `ctl restart` the next 12 requests take ≥ 80 % of the steady share from the cache', async () => {
    const { steady, next, old, fresh } = await acrossRestart('good');
    const s = share(steady);
    const n = share(next);
    const m = await metricsOf();
    const tokens = sampleValue(m, 'llmgw_replica_warmup_tokens_total', { model: 'good' }) ?? 0;
    const prefixes = sampleValue(m, 'llmgw_replica_warmup_prefixes_total', { model: 'good' }) ?? 0;
    const seconds = sampleValue(m, 'llmgw_replica_warmup_seconds_sum', { model: 'good', outcome: 'done' }) ?? 0;
    const events = (await serve.admin<EventsJson>('/events?model=good')).events.filter((e) => e.kind === 'replica-warmed');
    const first = (f: Figures): string => `${f.cache}/${f.cache + f.prompt}`;
    console.log(`warm-up after ctl restart: steady follow-up cache share ${(s * 100).toFixed(1)} %, the next 12 requests ${(n * 100).toFixed(1)} % (ratio ${(n / s).toFixed(3)}; first request ${first(next[0]!)} tokens from cache); the warm-up replayed ${prefixes} prefixes, ${tokens} prompt tokens evaluated, ${seconds.toFixed(2)} s; event: ${events.at(-1)?.message}`);
    assert.ok(n >= 0.8 * s, `follow-up cache share after the restart ${n.toFixed(3)} ≥ 0.8 × steady ${s.toFixed(3)}`);
    // a cold replica would evaluate the first request's whole prompt: the warm-up's work
    assert.ok(next[0]!.cache >= 0.8 * (next[0]!.cache + next[0]!.prompt), `the first request after the restart took most of its prompt from the cache: ${JSON.stringify(next[0])}`);
    assert.equal(prefixes, 12, 'every conversation was replayed');
    assert.ok(tokens > 0 && seconds > 0, `the warm-up's cost is counted: ${tokens} tokens, ${seconds} s`);
    assert.equal(events.length, 1, JSON.stringify(events));
    assert.equal(events[0]!.code, null);
    // offered to routers in the snapshot its warm-up ended in, not before; the old replica stopped after that
    const all = (await serve.admin<EventsJson>('/events?model=good')).events;
    const ready = all.find((e) => e.kind === 'replica-ready' && e.replica === fresh);
    assert.equal(events[0]!.replica, fresh);
    assert.equal(events[0]!.seq, (ready?.seq ?? -1) + 1, JSON.stringify(all));
    const stopped = all.find((e) => e.kind === 'replica-stopped' && e.replica === old[0]);
    assert.ok(stopped !== undefined && stopped.seq > events[0]!.seq, JSON.stringify(all));
    assert.match(events[0]!.message, /warmed up before taking traffic \(12 prefixes, \d+ prompt tokens, [\d.]+ s\)/);
  });

  it('6 conversations with a system prompt of their own each: the warm-up carries every one through the prompt cache', async () => {
    // without a warm-up each one's next turn is evaluated whole (its prompt shares nothing with another's)
    const { steady, next } = await acrossRestart('own', false, 6);
    const [s, n] = [share(steady), share(next)];
    console.log(`own system prompts: steady ${(s * 100).toFixed(1)} %, the next 6 requests ${(n * 100).toFixed(1)} % (ratio ${(n / s).toFixed(3)}; from cache: ${next.map((f) => `${f.cache}/${f.cache + f.prompt}`).join(', ')})`);
    assert.ok(n >= 0.8 * s, `follow-up cache share after the restart ${n.toFixed(3)} ≥ 0.8 × steady ${s.toFixed(3)}`);
    for (const f of next) assert.ok(f.cache >= 0.8 * (f.cache + f.prompt), `each conversation's next turn took most of its prompt from the cache: ${JSON.stringify(next)}`);
  });

  it('a warm-up that times out leaves the replica serving, with WARMUP_TIMED_OUT in the events', async () => {
    const messages: Msg[] = [{ role: 'system', content: words('hs', 100) }, { role: 'user', content: 'hello' }];
    await ask('hurried', messages);
    const before = (await serve.admin<ModelsJson>('/models')).models.find((m) => m.name === 'hurried')!.replicas.map((r) => r.id);
    await restart('hurried');
    await until('hurried: a new replica ready', 120_000, async () => {
      const m = (await serve.admin<ModelsJson>('/models')).models.find((x) => x.name === 'hurried')!;
      return m.phase === 'ready' && m.replicas.length === 1 && !before.includes(m.replicas[0]!.id);
    }, { diag });
    const answer = await ask('hurried', messages);
    assert.ok(answer.f.prompt + answer.f.cache > 0, 'the new replica serves');
    const events = (await serve.admin<EventsJson>('/events?model=hurried')).events.filter((e) => e.kind === 'replica-warmed');
    assert.equal(events.length, 1, JSON.stringify(events));
    assert.equal(events[0]!.code, 'WARMUP_TIMED_OUT');
    assert.match(events[0]!.message, /took traffic before its warm-up finished .*timeout of 1 ms/);
    const m = await metricsOf();
    assert.equal(sampleValue(m, 'llmgw_replica_warmup_seconds_count', { model: 'hurried', outcome: 'timeout' }), 1);
  });
});
