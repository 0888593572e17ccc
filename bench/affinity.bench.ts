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
 * follow-up evaluation). For affinity it also says why each follow-up went where it went, from the
 * decisions the router made (the bench wraps `ReplicaChoice.affine` to record the loads, timings and token
 * count it saw): stayed with a free slot, stayed and waited while another replica had one, moved by
 * the weighed cost (with the estimates), by the load bound (costs not known), from the router's queue
 * or off a replica marked down; with each group's evaluated tokens, slot time and time to first token.
 * `BENCH_MODES=affinity` runs one mode only (no ratio).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMetrics } from '../src/metrics/registry.js';
import { parseExposition, sampleValue } from '../src/metrics/parse.js';
import type { Routing } from '../src/fleet-spec/types.js';
import { affinityKey } from '../src/router/affinity.js';
import { Ring } from '../src/router/ring.js';
import { buildRouter } from '../src/router/app.js';
import { ReplicaChoice } from '../src/router/choose.js';
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
  /** Milliseconds the request held its slot, as llama-server's timings said (prompt_ms + predicted_ms). */
  readonly slotMs: number;
  readonly replica: string;
  /** The router's affinity decision for this turn (the last one, after any retry). */
  readonly decision: Decision | null;
}

/** One affinity decision as the router made it: the loads it saw and where it sent the request. */
interface Decision {
  readonly last: string;
  /** Per replica id: this router's in-flight requests and the outside load /slots reported. */
  readonly loads: Record<string, { inFlight: number; external: number; down: boolean; slotSeconds: number; secondsPerToken: number }>;
  /** The prompt tokens the router knew the key's last replica to hold (0: not known). */
  readonly tokens: number;
  /** Requests of the key in flight when it was made (more than 0: a shared prefix, not one conversation). */
  readonly active: number;
  readonly fromQueue: boolean;
  readonly chosen: string;
  readonly home: boolean;
}

/** Decisions by affinity key, in order (a conversation has one turn in flight at a time). */
const decisions = new Map<number, Decision[]>();
{
  // wrap the router's choice to see why a follow-up moved (bench only: the product code is untouched)
  const proto = ReplicaChoice.prototype as unknown as { affine: (...a: unknown[]) => { replica: { id: string }; home: boolean } | null };
  const original = proto.affine;
  proto.affine = function (this: unknown, ...a: unknown[]) {
    const [model, replicas, key, , , now, fromQueue] = a as [string, { id: string; endpoint: string }[], number, number, unknown, number, boolean | undefined];
    const self = this as { sticky: Map<string, { get(k: number): { id: string; tokens: number; active: number } | undefined }>; byEndpoint: Map<string, { inFlight: number; external: number; downUntil: number; times: { slotSeconds: number; secondsPerToken: number } }> };
    const seen = self.sticky.get(model)?.get(key);
    const last = seen?.id ?? '';
    const loads: Decision['loads'] = {};
    for (const r of replicas) {
      const u = self.byEndpoint.get(r.endpoint);
      loads[r.id] = { inFlight: u?.inFlight ?? 0, external: u?.external ?? 0, down: u !== undefined && u.downUntil > now, slotSeconds: u?.times.slotSeconds ?? 0, secondsPerToken: u?.times.secondsPerToken ?? 0 };
    }
    const tokens = seen?.tokens ?? 0;
    const active = seen?.active ?? 0;
    const c = original.apply(this, a);
    let list = decisions.get(key);
    if (list === undefined) decisions.set(key, (list = []));
    list.push({ last, loads, tokens, active, fromQueue: fromQueue === true, chosen: c?.replica.id ?? '', home: c?.home ?? false });
    return c;
  };
}

const RING = new Ring(Array.from({ length: REPLICAS }, (_, i) => `r${i + 1}`));

async function streamTurn(base: string, messages: { role: string; content: string }[], turn: number, previous: string): Promise<TurnResult & { content: string }> {
  const key = affinityKey('/v1/chat/completions', { messages })!;
  const home = RING.ids[RING.home(key)]!;
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
  let timings: { prompt_n: number; cache_n: number; prompt_ms: number; predicted_ms: number } | null = null;
  for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!line.startsWith('data: {')) continue;
      const ev = JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[]; timings?: { prompt_n: number; cache_n: number; prompt_ms: number; predicted_ms: number } };
      const piece = ev.choices?.[0]?.delta?.content;
      if (piece) {
        if (ttftMs < 0) ttftMs = performance.now() - t0;
        content += piece;
      }
      if (ev.timings) timings = ev.timings;
    }
  }
  if (timings === null) throw new Error(`turn ${turn}: no timings in the stream`);
  const d = decisions.get(key);
  const decision = d !== undefined && d.length > 0 ? d[d.length - 1]! : null;
  decisions.delete(key);
  return { turn, home, previous, ttftMs, promptN: timings.prompt_n, cacheN: timings.cache_n, slotMs: timings.prompt_ms + timings.predicted_ms, replica, content, decision };
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
  const fleet = new FakeFleetView(fakeSpec({ models: { chat: { parallel: PARALLEL, routing: mode } }, keys: [{ name: 'bench', key: KEY, models: ['*'], trusted: true }] })); // trusted: it reads timings off the answers
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

/**
 * Why affinity's follow-ups went where they went, from the decisions the router made: a follow-up that
 * left its previous replica did so because that replica was marked down, or (from the router's queue)
 * had no free slot, or held as many requests as the stay bound allows (counting other routers' load
 * from /slots, and without it); a follow-up that stayed while its replica's slots were all busy and
 * another replica had one free waited in llama-server's queue there.
 */
function whyMoved(follow: readonly TurnResult[]): string[] {
  const by = new Map<string, { n: number; evaluated: number; ttft: number[]; slot: number[] }>();
  const weighedMoves: string[] = [];
  const add = (why: string, t: TurnResult) => {
    let b = by.get(why);
    if (b === undefined) by.set(why, (b = { n: 0, evaluated: 0, ttft: [], slot: [] }));
    b.slot.push(t.slotMs);
    b.n++;
    b.evaluated += t.promptN;
    b.ttft.push(t.ttftMs);
  };
  for (const t of follow) {
    const d = t.decision;
    if (d === null) {
      add('no decision recorded', t);
      continue;
    }
    const ids = Object.keys(d.loads);
    const usable = ids.filter((id) => !d.loads[id]!.down);
    const load = (id: string) => d.loads[id]!.inFlight + d.loads[id]!.external;
    const total = usable.reduce((a, id) => a + load(id), 0);
    const limit = Math.max(PARALLEL, Math.ceil((2 * (total + 1)) / usable.length));
    const freeElsewhere = usable.some((id) => id !== d.last && load(id) < PARALLEL);
    if (t.replica === t.previous) {
      if (load(t.previous) >= PARALLEL && freeElsewhere) add(`stayed, its replica's ${PARALLEL} slots busy (${load(t.previous)} in flight there) while another had a free slot`, t);
      else if (load(t.previous) >= PARALLEL) add('stayed, its replica busy and no free slot anywhere', t);
      else add('stayed, a free slot on its replica', t);
      continue;
    }
    const l = d.loads[t.previous];
    const target = d.loads[t.replica];
    const perToken = target !== undefined && target.secondsPerToken > 0 ? target.secondsPerToken : (l?.secondsPerToken ?? 0);
    const weighed = l !== undefined && d.tokens > 0 && l.slotSeconds > 0 && perToken > 0;
    if (d.last !== t.previous) add(`moved, the router remembered ${d.last || 'nothing'} (not the previous replica)`, t);
    else if (l === undefined || l.down) add('moved: its replica marked down', t);
    else if (weighed && load(t.previous) >= PARALLEL) {
      const wait = ((load(t.previous) - PARALLEL + 1) * l.slotSeconds) / PARALLEL;
      add(`moved: weighed, the wait for its replica's slot (${load(t.previous)} in flight there) estimated longer than evaluating its tokens again`, t);
      const running = target === undefined ? 0 : target.inFlight + target.external;
      weighedMoves.push(`${wait.toFixed(2)} s > ${(d.tokens * perToken * (1 + running)).toFixed(2)} s (${d.tokens} tokens, ${running} running there)`);
    } else if (d.fromQueue && load(t.previous) >= PARALLEL) add('moved from the router queue: no free slot on its replica, costs not known', t);
    else if (load(t.previous) >= limit) {
      const own = ids.reduce((a, id) => a + (d.loads[id]!.down ? 0 : d.loads[id]!.inFlight), 0);
      const ownLimit = Math.max(PARALLEL, Math.ceil((2 * (own + 1)) / usable.length));
      if (l.inFlight >= ownLimit) add(`moved: the stay bound, costs not known (its replica held ${l.inFlight} of ${total} in flight, bound ${limit})`, t);
      else add(`moved: the stay bound only with other routers' load from /slots (${l.inFlight} + ${l.external} outside, bound ${limit})`, t);
    }
    else add(`moved, not explained by what the router saw (turn ${t.turn}, from ${t.previous} to ${t.replica}, ${d.tokens} tokens known, ${d.active} in flight, from the queue: ${d.fromQueue}, loads ${JSON.stringify(d.loads)})`, t);
  }
  const out: string[] = [];
  const evaluated = follow.reduce((a, t) => a + t.promptN, 0);
  for (const [why, b] of [...by].sort((a, b) => b[1].n - a[1].n)) {
    out.push(`${why}: ${b.n}, slot time mean ${(b.slot.reduce((a, x) => a + x, 0) / b.n).toFixed(0)} ms p50 ${quantile(b.slot, 0.5).toFixed(0)} ms, evaluated ${b.evaluated} (${((100 * b.evaluated) / evaluated).toFixed(0)}% of follow-up evaluation, ${(b.evaluated / b.n).toFixed(0)} each), TTFT p50 ${quantile(b.ttft, 0.5).toFixed(0)} ms`);
  }
  if (weighedMoves.length > 0) out.push(`the weighed moves (estimated wait > estimated re-evaluation): ${weighedMoves.join('; ')}`);
  return out;
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
      if (mode === 'affinity') {
        for (const line of whyMoved(follow)) console.log(`            ${line}`);
      }
      const firsts = r.turns.filter((t) => t.turn === 1);
      console.log(`            slot time (prompt_ms + predicted_ms): first turns mean ${mean(firsts, (t) => t.slotMs)} ms, follow-ups mean ${mean(follow, (t) => t.slotMs)} ms, all mean ${mean(r.turns, (t) => t.slotMs)} ms`);
      console.log(`            follow-ups on the previous turn's replica ${stay.length} (evaluated ${mean(stay, (t) => t.promptN)}, cached ${mean(stay, (t) => t.cacheN)} on average), elsewhere ${moved.length} (evaluated ${mean(moved, (t) => t.promptN)}, cached ${mean(moved, (t) => t.cacheN)})`);
      const sumEval = r.turns.reduce((a, t) => a + t.promptN, 0);
      const sumCache = r.turns.reduce((a, t) => a + t.cacheN, 0);
      const same = sumEval === r.metricEvaluated && sumCache === r.metricCached;
      console.log(`            router's llmgw_router_prompt_tokens_total: evaluated ${r.metricEvaluated}, cache ${r.metricCached} (${same ? 'equal to' : 'DIFFERENT from'} the responses' timings: ${sumEval}, ${sumCache})`);
    }
    if (results.length < 2) return;
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
