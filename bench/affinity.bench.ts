/**
 * Prefix affinity against least-busy, in one run, on three real llama-server replicas of a tiny model
 * (`--parallel 2`) behind the router: 30 conversations × 6 turns, each opening with its own long
 * document after a short shared system prompt, 6 requests in flight at a time; a conversation's next
 * turn joins the back of the line once its answer is in (many users taking turns). Every request streams; time to first token is measured at the
 * client, prompt tokens from the cache (`timings.cache_n`) and evaluated (`timings.prompt_n`) are read
 * from each response's last event and checked against the router's own counters.
 *
 * Each mode gets three freshly started replicas (empty caches) and the same conversations.
 *
 *   npm run bench:affinity
 *
 * Prints per mode: the share of follow-up prompt tokens served from the cache
 * (cache_n / (cache_n + prompt_n) summed over turns 2..6), prompt tokens evaluated (all turns and
 * follow-ups), p50 / p95 time to first token, affinity hits and moves; then affinity's follow-up
 * evaluation as a ratio of least-busy's, and the targets (≥ 90 % from cache; ≤ 1/3 of least-busy's
 * follow-up evaluation).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMetrics } from '../src/metrics/registry.js';
import { parseExposition, sampleValue } from '../src/metrics/parse.js';
import type { Routing } from '../src/fleet-spec/types.js';
import { affinityKey, Ring } from '../src/router/affinity.js';
import { buildRouter } from '../src/router/app.js';
import { writeTinyModel } from '../test/fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../test/harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../test/harness/llama-server.js';

const CONVERSATIONS = Number(process.env['BENCH_CONVERSATIONS'] ?? 30);
const TURNS = 6;
const IN_FLIGHT = 6;
const REPLICAS = 3;
const PARALLEL = 2;
/** Characters of each conversation's document (the tiny model's tokenizer: about 1.1 tokens each). */
const DOC_CHARS = Number(process.env['BENCH_DOC_CHARS'] ?? 2000);
const MAX_TOKENS = 4;
const CACHE_RAM_MIB = 256;
const KEY = 'bench-key';
const SYSTEM = 'You are a helpful assistant. Answer briefly.';

const WORDS = ['the', 'fleet', 'node', 'replica', 'model', 'server', 'token', 'ready', 'git', 'run', 'llama', 'world', 'is', 'of', 'and', 'to', 'in', 'a'];

/** A document of about DOC_CHARS characters, its own for each conversation (seeded). */
function documentFor(n: number): string {
  let x = (n + 1) * 2654435761;
  const rnd = (): number => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
  let s = `Document ${n}. `;
  while (s.length < DOC_CHARS) {
    const w = rnd() < 0.5 ? WORDS[Math.floor(rnd() * WORDS.length)]! : Math.floor(rnd() * 1e6).toString(36);
    s += w + (rnd() < 0.1 ? '. ' : ' ');
  }
  return s;
}

interface TurnResult {
  readonly turn: number;
  /** The conversation's own replica on the ring (what affinity would pick at no load). */
  readonly home: string;
  /** The replica of the conversation's previous turn ('' for the first). */
  readonly previous: string;
  readonly ttftMs: number;
  readonly promptN: number;
  readonly cacheN: number;
  readonly replica: string;
}

const RING = new Ring(Array.from({ length: REPLICAS }, (_, i) => `r${i + 1}`));

async function streamTurn(base: string, messages: { role: string; content: string }[], turn: number, previous: string): Promise<TurnResult & { content: string }> {
  const home = RING.ids[RING.home(affinityKey('/v1/chat/completions', { messages })!)]!;
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: 'chat', messages, max_tokens: MAX_TOKENS, stream: true }),
  });
  if (r.status !== 200) throw new Error(`turn ${turn}: ${r.status} ${await r.text()}`);
  const replica = r.headers.get('x-llmgw-replica') ?? '?';
  const decoder = new TextDecoder();
  let buf = '';
  let ttftMs = -1;
  let content = '';
  let timings: { prompt_n: number; cache_n: number } | null = null;
  for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!line.startsWith('data: {')) continue;
      const ev = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[]; timings?: { prompt_n: number; cache_n: number } };
      const piece = ev.choices?.[0]?.delta?.content;
      if (piece) {
        if (ttftMs < 0) ttftMs = performance.now() - t0;
        content += piece;
      }
      if (ev.timings) timings = ev.timings;
    }
  }
  if (timings === null) throw new Error(`turn ${turn}: no timings in the stream`);
  return { turn, home, previous, ttftMs, promptN: timings.prompt_n, cacheN: timings.cache_n, replica, content };
}

interface ModeResult {
  readonly mode: Routing;
  readonly turns: TurnResult[];
  readonly wallMs: number;
  readonly metricEvaluated: number;
  readonly metricCached: number;
  readonly hits: number;
  readonly moves: number;
}

async function runMode(mode: Routing, dir: string, model: string): Promise<ModeResult> {
  const servers: LlamaServer[] = await Promise.all(
    Array.from({ length: REPLICAS }, () =>
      startLlamaServer({ dir, model, args: ['--threads', '1', '--threads-batch', '1', '--ctx-size', String(4096 * PARALLEL), '--parallel', String(PARALLEL), '--cache-ram', String(CACHE_RAM_MIB)] }),
    ),
  );
  const metrics = createMetrics({ defaultMetrics: false });
  const fleet = new FakeFleetView(fakeSpec({ models: { chat: { parallel: PARALLEL, routing: mode } }, keys: [{ name: 'bench', key: KEY, models: ['*'] }] }));
  fleet.setReady('chat', servers.map((s, i) => replica('chat', s.url, `r${i + 1}`)));
  const app = buildRouter({ fleet, metrics: metrics.router, auth: { required: true }, ...(process.env['BENCH_NO_SLOTS'] ? { slotsRefreshMs: 0 } : {}) });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const turns: TurnResult[] = [];
  const t0 = performance.now();
  try {
    // the conversations take turns: after its answer a conversation's next turn joins the back of the
    // line, as many users each thinking between turns would
    const line = Array.from({ length: CONVERSATIONS }, (_, c) => ({
      turn: 1,
      previous: '',
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: `${documentFor(c)}\nWhat is this document about?` },
      ],
    }));
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        for (let conv = line.shift(); conv !== undefined; conv = line.shift()) {
          const { content, ...res } = await streamTurn(base, conv.messages, conv.turn, conv.previous);
          turns.push(res);
          conv.messages.push({ role: 'assistant', content }, { role: 'user', content: `Tell me more about point ${conv.turn}.` });
          conv.previous = res.replica;
          if (++conv.turn <= TURNS) line.push(conv);
        }
      }),
    );
  } finally {
    await app.close();
    await Promise.all(servers.map((s) => s.stop()));
  }
  const wallMs = performance.now() - t0;
  const s = parseExposition((await metrics.scrape()).body);
  const v = (name: string, labels: Record<string, string>) => sampleValue(s, name, labels) ?? 0;
  return {
    mode,
    turns,
    wallMs,
    metricEvaluated: v('llmgw_router_prompt_tokens_total', { model: 'chat', source: 'evaluated' }),
    metricCached: v('llmgw_router_prompt_tokens_total', { model: 'chat', source: 'cache' }),
    hits: v('llmgw_router_affinity_total', { model: 'chat', result: 'hit' }),
    moves: v('llmgw_router_affinity_total', { model: 'chat', result: 'moved' }),
  };
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

interface Summary {
  readonly share: number;
  readonly followEvaluated: number;
  readonly totalEvaluated: number;
  readonly p50: number;
  readonly p95: number;
  readonly p50Follow: number;
  readonly p95Follow: number;
}

function summarize(r: ModeResult): Summary {
  const follow = r.turns.filter((t) => t.turn > 1);
  const cache = follow.reduce((a, t) => a + t.cacheN, 0);
  const evaluated = follow.reduce((a, t) => a + t.promptN, 0);
  return {
    share: cache / (cache + evaluated),
    followEvaluated: evaluated,
    totalEvaluated: r.turns.reduce((a, t) => a + t.promptN, 0),
    p50: quantile(r.turns.map((t) => t.ttftMs), 0.5),
    p95: quantile(r.turns.map((t) => t.ttftMs), 0.95),
    p50Follow: quantile(follow.map((t) => t.ttftMs), 0.5),
    p95Follow: quantile(follow.map((t) => t.ttftMs), 0.95),
  };
}

async function main(): Promise<void> {
  const dir = await llamaServerDir();
  const tmp = await mkdtemp(join(tmpdir(), 'llmgw-bench-affinity-'));
  try {
    const model = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 5, contextLength: 8192 })).path;
    console.log(`affinity bench: ${CONVERSATIONS} conversations × ${TURNS} turns, ${IN_FLIGHT} in flight, ${REPLICAS} llama-server replicas (--parallel ${PARALLEL}, --cache-ram ${CACHE_RAM_MIB}, 1 thread each), documents of ${DOC_CHARS} characters, ${MAX_TOKENS} tokens per answer, streamed`);
    const results: ModeResult[] = [];
    for (const mode of (process.env['BENCH_MODES'] ?? 'least_busy,affinity').split(',') as Routing[]) {
      const r = await runMode(mode, dir, model);
      results.push(r);
      const s = summarize(r);
      console.log(
        `${mode.padEnd(10)}  follow-ups from cache ${(s.share * 100).toFixed(1)}%  evaluated: follow-ups ${s.followEvaluated}, all ${s.totalEvaluated}  ` +
          `TTFT p50 ${s.p50.toFixed(0)} ms p95 ${s.p95.toFixed(0)} ms (follow-ups p50 ${s.p50Follow.toFixed(0)} p95 ${s.p95Follow.toFixed(0)})  ` +
          `affinity hits ${r.hits} moves ${r.moves}  wall ${(r.wallMs / 1000).toFixed(1)} s`,
      );
      const follow = r.turns.filter((t) => t.turn > 1);
      const mean = (ts: TurnResult[], f: (t: TurnResult) => number) => (ts.length === 0 ? 0 : ts.reduce((a, t) => a + f(t), 0) / ts.length).toFixed(0);
      const stay = follow.filter((t) => t.replica === t.previous);
      const moved = follow.filter((t) => t.replica !== t.previous);
      const back = moved.filter((t) => t.replica === t.home);
      if (mode === 'affinity') console.log(`            of those elsewhere, back on their own replica after a move: ${back.length} (evaluated ${mean(back, (t) => t.promptN)}, cached ${mean(back, (t) => t.cacheN)})`);
      console.log(`            follow-ups on the previous turn's replica ${stay.length} (evaluated ${mean(stay, (t) => t.promptN)}, cached ${mean(stay, (t) => t.cacheN)} on average), elsewhere ${moved.length} (evaluated ${mean(moved, (t) => t.promptN)}, cached ${mean(moved, (t) => t.cacheN)})`);
      const sumEval = r.turns.reduce((a, t) => a + t.promptN, 0);
      const sumCache = r.turns.reduce((a, t) => a + t.cacheN, 0);
      const same = sumEval === r.metricEvaluated && sumCache === r.metricCached;
      console.log(`            router's llmgw_router_prompt_tokens_total: evaluated ${r.metricEvaluated}, cache ${r.metricCached} (${same ? 'equal to' : 'DIFFERENT from'} the responses' timings: ${sumEval}, ${sumCache})`);
    }
    const lb = summarize(results[0]!);
    const af = summarize(results[1]!);
    const ratio = af.followEvaluated / lb.followEvaluated;
    console.log(`affinity / least-busy: follow-up tokens evaluated ${ratio.toFixed(3)}, all tokens evaluated ${(af.totalEvaluated / lb.totalEvaluated).toFixed(3)}, TTFT p50 ${(af.p50 / lb.p50).toFixed(2)} p95 ${(af.p95 / lb.p95).toFixed(2)}`);
    const shareOk = af.share >= 0.9;
    const ratioOk = ratio <= 1 / 3;
    console.log(`target: affinity serves >= 90% of follow-up prompt tokens from cache: ${shareOk ? 'met' : 'MISSED'} (${(af.share * 100).toFixed(1)}%)`);
    console.log(`target: affinity evaluates <= 1/3 of least-busy's follow-up prompt tokens: ${ratioOk ? 'met' : 'MISSED'} (${ratio.toFixed(3)})`);
    if (!shareOk || !ratioOk) process.exitCode = 1;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

await main();
