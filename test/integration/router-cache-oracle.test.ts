/**
 * #36 N8, no cache oracle between keys, through a real `llmgw serve` (an sshd node, one real
 * llama-server replica of a tiny GGUF, keys from access/keys.yaml in the fleet repo, router auth on)
 * with the official `openai` and `@anthropic-ai/sdk` clients:
 * - keys A and B on one replica: A sends a ~200-token prompt, then B its first ~100 tokens. B's
 *   answers (streamed with timings_per_token and return_progress, and not streamed; OpenAI and
 *   Anthropic routes) carry no timings, cache_n, cached_tokens, cache_read_input_tokens or
 *   prompt_progress, not one byte of them, while the router counted B's cache hit and A's own
 *   figures (llmgw_key_tokens_total and llmgw_router_prompt_tokens_total on /metrics);
 * - a key with `trusted: true` still sees them;
 * - `id_slot` gets 400 SLOT_PICK_REFUSED.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const KEYS = { a: 'oracle-key-a-5f0c2e7d91b4a6', b: 'oracle-key-b-83d1f6a2c0e957', t: 'oracle-key-t-1a9e4c7b2d60f8' } as const;
const sha = (k: string): string => createHash('sha256').update(k).digest('hex');
/** What a key not trusted never sees (and a trusted one does). */
const FIGURES = /cache_n|cached_tokens|cache_read_input_tokens|"timings"|prompt_progress|tokens_cached|__verbose/;

let fleet: TestFleet;
let serve: ServeProc;
const diag = (): string => serve?.out().slice(-4000) ?? '';

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  for (const f of Object.keys(files)) if (f.startsWith('models/') && f !== 'models/good.yaml') delete files[f];
  files['fleet.yaml'] = `${files['fleet.yaml']!.trimEnd()}\nmetrics_per_key: true\n`;
  // one slot, room for a 200-token prompt in the chat template
  files['profiles/tiny.yaml'] = files['profiles/tiny.yaml']!.replace('ctx_size: 256', 'ctx_size: 1024');
  files['access/keys.yaml'] = [
    'keys:',
    `  - { name: a, sha256: ${sha(KEYS.a)} }`,
    `  - { name: b, sha256: ${sha(KEYS.b)}, isolate_cache: false }`,
    `  - { name: t, sha256: ${sha(KEYS.t)}, trusted: true }`,
    '',
  ].join('\n');
  await fleet.push(files, 'fleet: one model, three keys');
  serve = await spawnServe({ name: 'oracle', fleet, routerAuth: true });
  await until('good ready', 120_000, async () => (await serve.admin<{ models: { name: string; phase: string }[] }>('/models')).models.find((m) => m.name === 'good')?.phase === 'ready', { diag });
});

after(async () => {
  await serve?.sigkill();
  await fleet?.cleanup();
});

/** A text of `n` words, different for each `seed`: the tiny model's tokenizer makes about a token of each character. */
function words(seed: string, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(`${seed}${(i * 7919) % 1000}`);
  return out.join(' ');
}

describe('#36 N8: no cache oracle between keys (real serve, real llama-server)', () => {
  const openai = (key: string): OpenAI => new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${serve.routerPort}/v1`, maxRetries: 0 });
  const anthropic = (key: string): Anthropic => new Anthropic({ apiKey: key, baseURL: `http://127.0.0.1:${serve.routerPort}`, maxRetries: 0 });
  const scrape = async (): Promise<(name: string, labels: string) => number> => {
    const text = await (await fetch(`http://127.0.0.1:${serve.adminPort}/metrics`)).text();
    return (name, labels) => Number(new RegExp(`^${name}\\{${labels}\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
  };
  const keyTokens = async (key: string, kind: string): Promise<number> => (await scrape())('llmgw_key_tokens_total', `key="${key}",model="good",kind="${kind}"`);
  /** Sum of A's prompts as its answers gave them (prompt_tokens: the whole prompt, cached or not). */
  let aPrompt = 0;

  /**
   * A sends a ~200-token prompt (as a completion, or as a chat message: the later key's request then
   * shares the chat template's tokens too); the first ~100 of it is returned for the next key to send.
   */
  async function aSends(seed: string, api: 'completion' | 'chat'): Promise<string> {
    const prompt = words(seed, 24);
    const r = api === 'completion'
      ? await openai(KEYS.a).completions.create({ model: 'good', prompt, max_tokens: 2 })
      : await openai(KEYS.a).chat.completions.create({ model: 'good', messages: [{ role: 'user', content: prompt }], max_tokens: 2 });
    assert.ok(r.usage!.prompt_tokens >= 150 && r.usage!.prompt_tokens <= 400, `A's prompt: ${r.usage!.prompt_tokens} tokens`);
    assert.doesNotMatch(JSON.stringify(r), FIGURES, 'A is not trusted either');
    aPrompt += r.usage!.prompt_tokens;
    return prompt.slice(0, Math.floor(prompt.length / 2));
  }

  it('B sends the first half of A\'s prompt (completions, not streamed): no figure in its answer; the router counted its cache hit', async (t) => {
    const half = await aSends('alpha', 'completion');
    const cachedBefore = await keyTokens('b', 'cached');
    const raw = await openai(KEYS.b).completions.create({ model: 'good', prompt: half, max_tokens: 2 }).asResponse();
    assert.equal(raw.status, 200);
    const text = await raw.text();
    assert.doesNotMatch(text, FIGURES, text);
    const body = JSON.parse(text) as OpenAI.Completion;
    assert.ok(body.usage!.prompt_tokens >= 60, `B's prompt: ${body.usage!.prompt_tokens} tokens`);
    await until('B\'s request counted', 5_000, async () => (await keyTokens('b', 'cached')) > cachedBefore);
    const hit = (await keyTokens('b', 'cached')) - cachedBefore;
    t.diagnostic(`B's ${body.usage!.prompt_tokens} prompt tokens: ${hit} from A's cache (counted by the router, not told to B)`);
    assert.ok(hit >= body.usage!.prompt_tokens / 2, `the replica took ${hit} of B's ${body.usage!.prompt_tokens} prompt tokens from A's cache, and the router counted them`);
  });

  it('B streamed, with timings_per_token and return_progress (chat completions): no chunk carries a figure', async () => {
    const half = await aSends('bravo', 'chat');
    const cachedBefore = await keyTokens('b', 'cached');
    const params = { model: 'good', messages: [{ role: 'user' as const, content: half }], max_tokens: 4, stream: true as const, stream_options: { include_usage: true }, timings_per_token: true, return_progress: true };
    const raw = await openai(KEYS.b).chat.completions.create(params).asResponse();
    const text = await raw.text();
    assert.match(text, /^data: /m);
    assert.match(text, /"usage":\{/, 'the usage chunk is there');
    assert.doesNotMatch(text, FIGURES, text);
    // the same through the client's own stream parser
    let chunks = 0;
    for await (const c of await openai(KEYS.b).chat.completions.create(params)) {
      chunks++;
      assert.doesNotMatch(JSON.stringify(c), FIGURES);
    }
    assert.ok(chunks >= 2);
    await until('the router read B\'s cache figures', 5_000, async () => (await keyTokens('b', 'cached')) > cachedBefore);
  });

  it('B on the Anthropic route, not streamed and streamed: no cache_read_input_tokens; input_tokens counts the whole prompt', async (t) => {
    const half = await aSends('charlie', 'chat');
    const msg = { model: 'good', max_tokens: 3, messages: [{ role: 'user' as const, content: half }] };
    const [prompt0, cached0] = [await keyTokens('b', 'prompt'), await keyTokens('b', 'cached')];
    const raw = await anthropic(KEYS.b).messages.create(msg).asResponse();
    const text = await raw.text();
    assert.doesNotMatch(text, FIGURES, text);
    const m = JSON.parse(text) as Anthropic.Message;
    await until('B\'s request counted', 5_000, async () => (await keyTokens('b', 'prompt')) + (await keyTokens('b', 'cached')) > prompt0 + cached0);
    const [evaluated, cached] = [(await keyTokens('b', 'prompt')) - prompt0, (await keyTokens('b', 'cached')) - cached0];
    t.diagnostic(`B on /v1/messages: ${cached} prompt tokens from the cache, ${evaluated} evaluated; its answer says input_tokens ${m.usage.input_tokens}`);
    assert.ok(cached > 0, 'a cache hit the key was not told of');
    assert.equal(m.usage.input_tokens, evaluated + cached, 'input_tokens: the whole prompt');
    const stream = await anthropic(KEYS.b).messages.create({ ...msg, stream: true }).asResponse();
    const events = await stream.text();
    assert.match(events, /event: message_start/);
    assert.doesNotMatch(events, FIGURES, events);
  });

  it('A\'s own figures are counted on /metrics (per key and per model) though its answers carry none', async () => {
    const s = await scrape();
    const a = (kind: string): number => s('llmgw_key_tokens_total', `key="a",model="good",kind="${kind}"`);
    assert.equal(a('prompt') + a('cached'), aPrompt, 'evaluated + cached = the prompts A sent');
    assert.ok(s('llmgw_router_prompt_tokens_total', 'model="good",source="cache"') > 0);
  });

  it('a key with trusted: true still sees timings and cached_tokens', async () => {
    const half = await aSends('delta', 'completion');
    const r = (await openai(KEYS.t).completions.create({ model: 'good', prompt: half, max_tokens: 2 })) as OpenAI.Completion & { timings?: { cache_n: number; prompt_n: number } };
    assert.ok(r.timings !== undefined && r.timings.cache_n > 0, JSON.stringify(r));
    assert.ok((r.usage!.prompt_tokens_details?.cached_tokens ?? 0) > 0, JSON.stringify(r.usage));
    const text = await (await openai(KEYS.t).chat.completions.create({ model: 'good', messages: [{ role: 'user', content: half }], max_tokens: 2, stream: true }).asResponse()).text();
    assert.match(text, /"timings":\{/);
  });

  it('id_slot is refused with 400 SLOT_PICK_REFUSED, for a trusted key too; -1 passes', async () => {
    for (const key of [KEYS.b, KEYS.t]) {
      const err = await openai(key).completions.create({ model: 'good', prompt: 'x', max_tokens: 1, id_slot: 0 } as OpenAI.CompletionCreateParamsNonStreaming).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal(err.code, 'slot_pick_refused');
      assert.equal(err.headers?.get('x-llmgw-reason'), 'SLOT_PICK_REFUSED');
    }
    const ok = await openai(KEYS.b).completions.create({ model: 'good', prompt: 'x', max_tokens: 1, id_slot: -1 } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(ok.object, 'text_completion');
  });
});
