/**
 * Prefix affinity, slots and the queue, against three real llama-server replicas of a tiny model
 * (`--parallel 2`) behind the router (a fake FleetView says which are ready):
 * - the slots other routers use (seen through GET /slots) steer the choice;
 * - with its replica's slots busy and another's free, a conversation with a long prompt cached waits
 *   for its replica, and a short one moves (the move weighed by its cost, move.ts);
 * - 60 requests in flight at once, half of whose prefixes belong to one replica, spread within the load bound;
 * - queue: with every slot busy, later requests wait and go upstream in order; beyond `max` 429
 *   model_overloaded with Retry-After at once, and the openai client's retries then succeed; a client
 *   abort frees its place; a wait past the timeout is a 429 too; the metrics show depth and wait;
 * - prompt tokens counted from the responses (JSON and streamed) match what llama-server reported;
 * - stopping one replica mid-run moves only its conversations.
 */
import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { createMetrics } from '../../src/metrics/registry.js';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { affinityKey } from '../../src/router/affinity.js';
import { Ring } from '../../src/router/ring.js';
import { buildRouter, routerStats } from '../../src/router/app.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { until } from '../harness/wait.js';

const BUILD_TIMEOUT = 40 * 60_000;
const KEY = 'client-key';
const SIX = [1, 2, 3, 4, 5, 6];
const IDS = ['r-a', 'r-b', 'r-c'];

/**
 * A forwarder in front of a replica recording the order in which POSTs reach it (by a marker in the
 * body), into one log shared by all forwarders. A client that goes away aborts the upstream request.
 */
async function recorder(target: string, log: string[]): Promise<{ url: string; server: Server }> {
  const t = new URL(target);
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      const body = Buffer.concat(parts);
      if (req.method === 'POST') log.push(/"marker:([^"]+)"/.exec(body.toString())?.[1] ?? '?');
      const up = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode ?? 502, ur.headers);
        ur.pipe(res);
      });
      up.on('error', () => res.destroy());
      res.on('close', () => up.destroy());
      up.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** A streamed request held open: resolves once its first chunk arrived; `abort()` ends it. */
async function holdStream(url: string, body: object, headers: Record<string, string> = {}): Promise<{ abort: () => void; replica: string | null; done: Promise<unknown> }> {
  const ac = new AbortController();
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers }, body: JSON.stringify({ ...body, stream: true }), signal: ac.signal });
  if (r.status !== 200) assert.fail(`status ${r.status}: ${await r.text()}`);
  const reader = r.body!.getReader();
  await reader.read();
  const done = (async () => {
    for (;;) if ((await reader.read()).done) return;
  })().catch(() => undefined);
  return { abort: () => ac.abort(), replica: r.headers.get('x-llmgw-replica'), done };
}

describe('router affinity, slots and queue with three real llama-server replicas', { timeout: BUILD_TIMEOUT + 10 * 60_000 }, () => {
  let tmp = '';
  const servers: LlamaServer[] = [];
  const recorders: Server[] = [];
  const upstreamOrder: string[] = [];
  let fleet: FakeFleetView;
  let app: ReturnType<typeof buildRouter>;
  let base = '';
  const metrics = createMetrics({ defaultMetrics: false });
  const scrape = async () => parseExposition((await metrics.scrape()).body);
  const ring = new Ring(IDS);
  let direct: string[] = [];
  /** Forwarders in front of the replicas for the 'weighed' model only (their own upstreams, with no timings yet). */
  let weighed: string[] = [];

  before(async () => {
    const dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-affinity-'));
    const model = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 11, contextLength: 4096 })).path;
    const start = () => startLlamaServer({ dir, model, args: ['--threads', '1', '--threads-batch', '1', '--ctx-size', '4096', '--parallel', '2', '--cache-ram', '64'] });
    servers.push(...(await Promise.all([start(), start(), start()])));
    direct = servers.map((s) => s.url);
    const recs = await Promise.all(servers.map((s) => recorder(s.url, upstreamOrder)));
    recorders.push(...recs.map((r) => r.server));
    const weighedRecs = await Promise.all(servers.map((s) => recorder(s.url, [])));
    recorders.push(...weighedRecs.map((r) => r.server));
    weighed = weighedRecs.map((r) => r.url);
    fleet = new FakeFleetView(
      fakeSpec({
        models: {
          chat: { parallel: 2 },
          weighed: { parallel: 2 },
          lb: { parallel: 2, routing: 'least_busy', queue: { max: 4, timeoutMs: 120_000 } },
          impatient: { parallel: 2, routing: 'least_busy', queue: { max: 4, timeoutMs: 300 } },
          spread: {},
        },
        // trusted: the test reads the replicas' timings (cache_n, prompt_n) off the answers
        keys: [
          { name: 'all', key: KEY, models: ['*'], trusted: true },
          ...SIX.map((i) => ({ name: `shared-${i}`, key: `${KEY}-shared-${i}`, models: ['*'] })),
          ...SIX.map((i) => ({ name: `iso-${i}`, key: `${KEY}-iso-${i}`, models: ['*'], isolateCache: true })),
        ],
      }),
    );
    const views = (model: string, urls: readonly string[]) => urls.map((u, i) => replica(model, u, IDS[i]));
    fleet.setReady('chat', views('chat', direct));
    fleet.setReady('spread', views('spread', direct));
    fleet.setReady('weighed', views('weighed', weighed));
    fleet.setReady('lb', views('lb', recs.map((r) => r.url)));
    fleet.setReady('impatient', views('impatient', recs.map((r) => r.url)));
    app = buildRouter({ fleet, metrics: metrics.router, auth: { required: true }, slotsRefreshMs: 1_000_000_000 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await app?.close();
    await Promise.all(recorders.map((s) => new Promise<void>((r) => s.close(() => r()))));
    await Promise.all(servers.map((s) => s.stop()));
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  /** A chat body whose affinity key belongs to replica `home` (0..2), found by trying prefixes. */
  function homedOn(home: number, tag: string, from = 0): { messages: { role: string; content: string }[]; n: number } {
    for (let n = from; ; n++) {
      const messages = [{ role: 'user', content: `${tag} ${n}` }];
      if (ring.home(affinityKey('/v1/chat/completions', { messages })!) === home) return { messages, n };
    }
  }

  const post = (model: string, body: object, extra: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...extra }, body: JSON.stringify({ model, ...body }), signal });

  test('other routers\' requests, seen through GET /slots, move a conversation off its busy replica; it stays where it moved', async () => {
    const { messages } = homedOn(0, 'slots');
    // a short prompt (about 60 tokens) whose turn holds its slot a while: 400 tokens generated, end of
    // sequence ignored (a generated token takes at least as long as one of a batched prompt). With
    // r-a's slots taken, the wait there then costs more than evaluating the prompt again elsewhere (move.ts)
    const first = await post('chat', { messages, max_tokens: 400, ignore_eos: true });
    assert.equal(first.headers.get('x-llmgw-replica'), 'r-a');
    const firstTimings = ((await first.json()) as { timings: { prompt_n: number; prompt_ms: number; predicted_n: number; predicted_ms: number } }).timings;
    assert.ok(firstTimings.predicted_ms > 2 * firstTimings.prompt_ms, `generating took longer than evaluating the prompt: ${JSON.stringify(firstTimings)}`);
    // another client (another router) fills both slots of r-a directly
    const held = await Promise.all([0, 1].map((i) => holdStream(`${direct[0]}/v1/chat/completions`, { messages: [{ role: 'user', content: `elsewhere ${i}` }], max_tokens: 2000 })));
    const stats = routerStats(app);
    await stats.refreshSlots();
    await stats.refreshSlots(); // the smaller of two readings counts
    assert.equal(stats.external(direct[0]!), 2);
    const moved = await post('chat', { messages, max_tokens: 1 });
    const movedTo = moved.headers.get('x-llmgw-replica');
    assert.notEqual(movedTo, 'r-a', 'sent to a replica whose slots are all busy');
    await moved.text();
    for (const h of held) h.abort();
    await Promise.all(held.map((h) => h.done));
    // once the slots are free again (two readings), the conversation stays where it moved: its cache is there now
    await until('r-a\'s slots free again (two readings)', 10_000, async () => {
      await stats.refreshSlots();
      return stats.external(direct[0]!) === 0;
    });
    const next = await post('chat', { messages, max_tokens: 1 });
    assert.equal(next.headers.get('x-llmgw-replica'), movedTo);
    await next.text();
  });

  test('its replica\'s slots busy, another\'s free: a conversation with a long prompt cached waits for its replica, a short one moves', async () => {
    const stats = routerStats(app);
    // about 1,300 prompt tokens (a slot holds 2,048): evaluating them again costs far more than waiting
    const long = homedOn(0, `weighed long ${'the fleet runs tiny models on many nodes. '.repeat(30)}`);
    const short = homedOn(0, 'weighed short');
    const send = (messages: { role: string; content: string }[]) => post('weighed', { messages, max_tokens: 1 });
    const timingsOf = async (r: Response) => ((await r.json()) as { timings: { prompt_n: number; cache_n: number } }).timings;
    for (const m of [long.messages, short.messages]) {
      const r = await send(m);
      assert.equal(r.headers.get('x-llmgw-replica'), 'r-a');
      m.push({ role: 'assistant', content: (((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content) }, { role: 'user', content: 'and then?' });
    }
    // another router's requests fill both slots of r-a
    const held = await Promise.all([0, 1].map((i) => holdStream(`${direct[0]}/v1/chat/completions`, { messages: [{ role: 'user', content: `weighed elsewhere ${i}` }], max_tokens: 2000 })));
    await stats.refreshSlots();
    await stats.refreshSlots(); // the smaller of two readings counts
    assert.equal(stats.external(weighed[0]!), 2);
    // the long conversation goes to r-a and waits there (llama-server's queue) while r-b and r-c are idle
    const longTurn = send(long.messages);
    await until('the long turn sent upstream', 30_000, () => weighed.reduce((a, u) => a + stats.inFlight(u), 0) === 1);
    assert.equal(stats.inFlight(weighed[0]!), 1, 'the long conversation did not wait for its replica');
    // the short one moves to a free slot and is answered while r-a is still busy
    const shortTurn = await send(short.messages);
    assert.notEqual(shortTurn.headers.get('x-llmgw-replica'), 'r-a');
    const shortTimings = await timingsOf(shortTurn);
    for (const h of held) h.abort();
    await Promise.all(held.map((h) => h.done));
    const longReply = await longTurn;
    assert.equal(longReply.headers.get('x-llmgw-replica'), 'r-a');
    const longTimings = await timingsOf(longReply);
    assert.ok(longTimings.cache_n > 10 * longTimings.prompt_n, `the long turn came from r-a's cache: ${JSON.stringify(longTimings)}`);
    assert.ok(longTimings.cache_n > 1000, `${JSON.stringify(longTimings)}`);
    assert.ok(shortTimings.cache_n + shortTimings.prompt_n < 200, `a short conversation: ${JSON.stringify(shortTimings)}`);
    // the outside load is gone again (two readings) before the next test
    await until('the outside load gone from both replicas (two readings)', 10_000, async () => {
      await stats.refreshSlots();
      return stats.external(weighed[0]!) === 0 && stats.external(direct[0]!) === 0;
    });
  });

  test('load spread: 60 distinct prefixes in flight at once, 30 of them belonging to one replica, stay within the bound', async () => {
    const bodies: object[] = [];
    for (let n = 0, onA = 0; bodies.length < 60; n++) {
      const messages = [{ role: 'user', content: `spread ${n}` }];
      const home = ring.home(affinityKey('/v1/chat/completions', { messages })!);
      if (home === 0 && onA >= 30) continue;
      if (home !== 0 && bodies.length - onA >= 30) continue;
      if (home === 0) onA++;
      bodies.push({ messages, max_tokens: 2000, stream: true });
    }
    const before = await scrape();
    const stats = routerStats(app);
    // long generations: none ends before all 60 are placed (the model's profile is not in the spec, so
    // the router counts no slots and the load bound alone decides; llama-server queues beyond its two)
    const acs = bodies.map(() => new AbortController());
    const sent = bodies.map((b, i) => post('spread', b, {}, acs[i]!.signal).catch(() => null));
    await until('all 60 in flight', 30_000, () => stats.active === 60);
    const counts = direct.map((u) => stats.inFlight(u));
    for (const ac of acs) ac.abort();
    await Promise.all(sent);
    const bound = Math.ceil(1.25 * (60 / 3));
    assert.equal(counts.reduce((a, b) => a + b, 0), 60);
    assert.ok(counts.every((c) => c <= bound), `per replica ${counts}: more than ${bound} (1.25 × the mean) on one`);
    const after = await scrape();
    const delta = (result: string) => (sampleValue(after, 'llmgw_router_affinity_total', { model: 'spread', result }) ?? 0) - (sampleValue(before, 'llmgw_router_affinity_total', { model: 'spread', result }) ?? 0);
    assert.equal(delta('hit') + delta('moved'), 60);
    assert.ok(delta('moved') >= 30 - bound, `the bound moved ${delta('moved')} of the 30 off their replica`);
    await until('the aborted calls ended', 30_000, () => stats.active === 0);
  });

  test('queue: with every slot busy requests wait and go in order; beyond max 429 at once; an abort frees its place; a wait past the timeout is a 429; the openai client retries into a place; metrics show depth and wait', async () => {
    const stats = routerStats(app);
    const before = await scrape();
    upstreamOrder.length = 0;
    // the queued requests are long streams too (their headers come once they are upstream), so each slot
    // freed below lets exactly one of them go and the order they go in is seen
    const ask = (model: string, name: string, signal?: AbortSignal) =>
      fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body: JSON.stringify({ model, messages: [{ role: 'user', content: `marker:${name}` }], max_tokens: 2000, stream: true }), signal });
    // fill the 6 slots (least-busy: two per replica)
    const long: Awaited<ReturnType<typeof holdStream>>[] = [];
    for (let i = 0; i < 6; i++) long.push(await holdStream(`${base}/v1/chat/completions`, { model: 'lb', messages: [{ role: 'user', content: `marker:long${i}` }], max_tokens: 2000 }));
    assert.deepEqual(IDS.map((id) => long.filter((l) => l.replica === id).length), [2, 2, 2]);

    // four wait, joining one at a time so their order is known
    const queued = new Map<string, { ac: AbortController; res: Promise<Response | Error> }>();
    for (const name of ['q1', 'q2', 'q3', 'q4']) {
      const ac = new AbortController();
      queued.set(name, { ac, res: ask('lb', name, ac.signal).catch((e: Error) => e) });
      await until(`${name} queued`, 30_000, () => stats.queued('lb') === queued.size);
    }
    let scraped = await scrape();
    assert.equal(sampleValue(scraped, 'llmgw_router_queue_depth', { model: 'lb' }), 4);

    // the fifth is refused at once
    const t = performance.now();
    const refused = await ask('lb', 'refused');
    const refusedMs = performance.now() - t;
    assert.equal(refused.status, 429);
    const env = (await refused.json()) as { error: { code: string; type: string; message: string } };
    assert.equal(env.error.code, 'model_overloaded');
    assert.equal(env.error.type, 'rate_limit_error');
    assert.match(env.error.message, /all 6 slots of its 3 ready replicas are busy and its queue is full \(4 of 4 waiting, the oldest for [\d.]+ s\)/);
    assert.ok(Number(refused.headers.get('retry-after')) >= 1, `Retry-After ${refused.headers.get('retry-after')}`);
    assert.equal(refused.headers.get('x-should-retry'), 'true');
    assert.ok(refusedMs < 1000, `refused after ${refusedMs} ms, not at once`);

    // a client that gives up while queued frees its place
    queued.get('q2')!.ac.abort();
    await until('q2 out of the queue', 30_000, () => stats.queued('lb') === 3);
    const ac5 = new AbortController();
    const q5 = ask('lb', 'q5', ac5.signal);
    await until('q5 queued in its place', 30_000, () => stats.queued('lb') === 4);

    // another model on the same replicas with a short queue timeout: 429 after the wait
    const t1 = performance.now();
    const impatient = await ask('impatient', 'impatient');
    const waitedMs = performance.now() - t1;
    assert.equal(impatient.status, 429);
    const envI = (await impatient.json()) as { error: { code: string; message: string } };
    assert.equal(envI.error.code, 'model_overloaded');
    assert.match(envI.error.message, /waited 0\.\d s in its queue/);
    assert.ok(waitedMs >= 290, `answered after ${waitedMs} ms, before the 300 ms timeout`);

    // the openai client (default retries) gets 429 with Retry-After, waits, and retries
    const seen: number[] = [];
    const client = new OpenAI({
      apiKey: KEY,
      baseURL: `${base}/v1`,
      fetch: async (url, init) => {
        const r = await fetch(url, init);
        seen.push(r.status);
        return r;
      },
    });
    const viaClient = client.chat.completions.create({ model: 'lb', messages: [{ role: 'user', content: 'marker:client' }], max_tokens: 2 });
    await until("the client's first answer", 30_000, () => seen.length === 1);
    assert.deepEqual(seen, [429]);
    // slots free up one at a time: each lets the oldest waiting request go
    const gone = () => upstreamOrder.filter((m) => !m.startsWith('long'));
    for (const expected of ['q1', 'q3', 'q4', 'q5']) {
      const n = gone().length;
      long.shift()!.abort();
      await until(`${expected} upstream`, 30_000, () => gone().length > n);
      assert.deepEqual(gone().slice(n), [expected]);
    }
    for (const name of ['q1', 'q3', 'q4']) assert.equal(((await queued.get(name)!.res) as Response).status, 200, name);
    assert.equal((await q5).status, 200);
    assert.ok((await queued.get('q2')!.res) instanceof Error, 'q2 was aborted');
    // the last two long streams end: the client's retry gets a slot
    for (const l of long) l.abort();
    const done = await viaClient;
    assert.equal(done.object, 'chat.completion');
    assert.equal(seen.at(-1), 200);
    assert.ok(seen.slice(0, -1).every((s) => s === 429), `statuses ${seen}`);
    for (const name of ['q1', 'q3', 'q4']) queued.get(name)!.ac.abort();
    ac5.abort();

    // upstream: after the long ones, the queued in their order, then the client's retry; never the refused ones
    assert.deepEqual(gone(), ['q1', 'q3', 'q4', 'q5', 'client']);

    scraped = await scrape();
    const delta = (name: string, labels: Record<string, string>) => (sampleValue(scraped, name, labels) ?? 0) - (sampleValue(before, name, labels) ?? 0);
    assert.equal(sampleValue(scraped, 'llmgw_router_queue_depth', { model: 'lb' }), 0);
    assert.ok(delta('llmgw_router_queue_wait_seconds_count', { model: 'lb' }) >= 5, 'q1..q5 waited (q2 until it left)');
    assert.ok(delta('llmgw_router_queue_wait_seconds_sum', { model: 'lb' }) > 0);
    assert.equal(delta('llmgw_router_queue_wait_seconds_count', { model: 'impatient' }), 1);
    assert.ok(delta('llmgw_router_queue_wait_seconds_sum', { model: 'impatient' }) >= 0.29);
    assert.ok(delta('llmgw_router_requests_total', { model: 'lb', code: '429' }) >= 2);
    assert.equal(delta('llmgw_router_requests_total', { model: 'lb', code: '499' }) >= 1, true, 'q2 counted as gone');
  });

  test('isolate_cache: one prompt from six keys goes to one replica; from six isolated keys, to their own replicas', async () => {
    const replicaOf = async (key: string, content: string): Promise<string> => {
      const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: JSON.stringify({ model: 'chat', messages: [{ role: 'user', content }], max_tokens: 1 }) });
      assert.equal(r.status, 200);
      await r.text();
      return r.headers.get('x-llmgw-replica')!;
    };
    const shared = new Set<string>();
    for (const i of SIX) shared.add(await replicaOf(`${KEY}-shared-${i}`, 'the same system prompt, shared'));
    const isolated = new Set<string>();
    for (const i of SIX) isolated.add(await replicaOf(`${KEY}-iso-${i}`, 'the same system prompt, isolated'));
    assert.equal(shared.size, 1, `not isolated: ${[...shared].join(', ')}`);
    assert.ok(isolated.size >= 2, `isolated: ${[...isolated].join(', ')}`);
  });

  test('one replica stopped mid-run: only its conversations move, and stay where they moved; prompt tokens counted (JSON and streamed) match what llama-server reported', async () => {
    const before = await scrape();
    const reported = { evaluated: 0, cached: 0 };
    /** One turn of a conversation: its replica; the reply is appended to `messages`. */
    const turn = async (messages: { role: string; content: string }[], stream: boolean): Promise<string> => {
      const r = await post('chat', { messages, max_tokens: 4, stream });
      assert.equal(r.status, 200);
      const replica = r.headers.get('x-llmgw-replica')!;
      let content = '';
      let timings: { prompt_n: number; cache_n: number } | undefined;
      if (stream) {
        for (const line of (await r.text()).split('\n')) {
          if (!line.startsWith('data: {')) continue;
          const ev = JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[]; timings?: { prompt_n: number; cache_n: number } };
          content += ev.choices[0]?.delta.content ?? '';
          timings = ev.timings ?? timings;
        }
      } else {
        const j = (await r.json()) as { choices: { message: { content: string } }[]; timings: { prompt_n: number; cache_n: number } };
        content = j.choices[0]!.message.content;
        timings = j.timings;
      }
      assert.ok(timings, 'llama-server reported timings');
      reported.evaluated += timings.prompt_n;
      reported.cached += timings.cache_n;
      messages.push({ role: 'assistant', content }, { role: 'user', content: 'go on' });
      return replica;
    };
    const convs = Array.from({ length: 12 }, (_, i) => ({ messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: `conversation ${i}: ${'a fleet of tiny models. '.repeat(4)}` }], on: [] as string[] }));
    /** One turn of every conversation, two at a time. */
    const round = async (): Promise<void> => {
      let next = 0;
      await Promise.all([0, 1].map(async () => {
        for (let i = next++; i < convs.length; i = next++) convs[i]!.on.push(await turn(convs[i]!.messages, i % 2 === 1));
      }));
    };
    await round();
    await round();
    for (const c of convs) assert.equal(c.on[1], c.on[0], 'a conversation stays on its replica while nothing changes');
    const onC = convs.filter((c) => c.on[0] === 'r-c');
    assert.ok(onC.length > 0 && onC.length < convs.length, `${onC.length} of ${convs.length} conversations on r-c`);

    await servers[2]!.stop(); // the view still lists it: the router finds out on connecting
    await round();
    fleet.setReady('chat', [replica('chat', direct[0]!, 'r-a'), replica('chat', direct[1]!, 'r-b')]);
    await round();
    for (const c of convs) {
      if (c.on[0] !== 'r-c') assert.deepEqual(c.on.slice(2), [c.on[0], c.on[0]], `a conversation of ${c.on[0]} moved: ${c.on}; upstream errors: ${(await metrics.scrape()).body.split('\n').filter((l) => l.startsWith('llmgw_router_upstream_errors_total')).join('; ')}`);
      else {
        assert.notEqual(c.on[2], 'r-c');
        assert.equal(c.on[3], c.on[2], `a conversation of r-c moved twice: ${c.on}`);
      }
    }

    const scraped = await scrape();
    const delta = (source: string) => (sampleValue(scraped, 'llmgw_router_prompt_tokens_total', { model: 'chat', source }) ?? 0) - (sampleValue(before, 'llmgw_router_prompt_tokens_total', { model: 'chat', source }) ?? 0);
    assert.deepEqual({ evaluated: delta('evaluated'), cached: delta('cache') }, reported);
    assert.ok(reported.cached > reported.evaluated, `follow-ups come from the cache: ${JSON.stringify(reported)}`);
  });
});
