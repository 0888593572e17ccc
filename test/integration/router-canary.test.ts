/**
 * The router's side of a canary step (#34), against real llama-server replicas of a tiny model and
 * the official `openai` client (maxRetries 0): a model view with a stable and a canary replica (two
 * processes, two digests) and rollout {phase: 'canary', share}:
 * - conversations (distinct prefixes, two API keys), each with 3 follow-ups: every conversation stays
 *   on one replica, counted at the replica (a forwarder in front of each records the conversations
 *   reaching it), on the arm its draw says; both arms get traffic; the router's window shows every
 *   request on its arm, with TTFT counts in buckets and time-per-token counts;
 * - errors count on the arm they happened on: a canary started with a context too small for the
 *   prompt (llama-server's own 400), a canary SIGKILLed mid-stream (a cut stream) and then gone (the
 *   request fails over to the stable arm: an error on the canary, an answer on stable);
 * - the client's own 4xx and a client abort are not counted.
 */
import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI, { APIError } from 'openai';
import type { UsageRecord } from '../../src/metrics/ports.js';
import type { ModelView, ReplicaView } from '../../src/reconciler/view.js';
import { totalOf } from '../../src/rollout/latency.js';
import type { ArmWindow, RolloutView } from '../../src/rollout/types.js';
import { affinityKey } from '../../src/router/affinity.js';
import { buildRouter, rolloutFiguresOf, routerStats } from '../../src/router/app.js';
import { armOfDraw, drawOf } from '../../src/router/canary.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { until } from '../harness/wait.js';

const BUILD_TIMEOUT = 40 * 60_000;
const KEYS = [
  { name: 'alice', key: 'alice-key' },
  { name: 'bob', key: 'bob-key' },
];
const STABLE = 'sha256:stable-revision';
const CANARY = 'sha256:canary-revision';
const SYSTEM = 'You are brief.';

/** The fake fleet view with a rollout on chosen models (what the controller will publish). */
class RolloutFleet extends FakeFleetView {
  readonly rollouts = new Map<string, RolloutView>();
  override model(name: string): ModelView | null {
    const v = super.model(name);
    const r = this.rollouts.get(name);
    return v === null || r === undefined ? v : { ...v, rollout: r };
  }
}

const canaryView = (share: number, since = Date.now()): RolloutView => ({ phase: 'canary', stableDigest: STABLE, canaryDigest: CANARY, step: 0, share, since, until: since + 120_000, verdict: null });
const withDigest = (r: ReplicaView, digest: string): ReplicaView => ({ ...r, digest });

/**
 * A forwarder in front of a replica recording, for every POST reaching it, the conversation's tag
 * (`conv-N`) and the body's length (each turn of a conversation is longer than the last; a request
 * the router sent again on a fresh connection after a keep-alive reset has the same length).
 */
async function counter(target: string, seen: string[]): Promise<{ url: string; server: Server }> {
  const t = new URL(target);
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      const body = Buffer.concat(parts);
      if (req.method === 'POST') seen.push(`${/conv-(\d+)/.exec(body.toString())?.[0] ?? '?'}#${body.length}`);
      // a fresh connection to the replica for each request (no keep-alive race between the two hops)
      const up = httpRequest({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, connection: 'close' }, agent: false }, (ur) => {
        const { connection: _c, 'keep-alive': _k, ...headers } = ur.headers;
        res.writeHead(ur.statusCode ?? 502, headers);
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

type Msg = { role: 'system' | 'user' | 'assistant'; content: string };

describe('router canary split and arm figures with real llama-server replicas', { timeout: BUILD_TIMEOUT + 10 * 60_000 }, () => {
  let tmp = '';
  let dir = '';
  let modelPath = '';
  const servers: LlamaServer[] = [];
  const forwarders: Server[] = [];
  const atStable: string[] = [];
  const atCanary: string[] = [];
  let fleet: RolloutFleet;
  let app: ReturnType<typeof buildRouter>;
  let base = '';
  const clients = new Map<string, OpenAI>();
  let killable: LlamaServer;
  /** Every request's usage record as the router ends it (its status: 499 when the client left). */
  const usage: UsageRecord[] = [];

  const llama = async (args: string[]): Promise<LlamaServer> => {
    const s = await startLlamaServer({ dir, model: modelPath, args: ['--threads', '1', '--threads-batch', '1', ...args] });
    servers.push(s);
    return s;
  };

  before(async () => {
    dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-canary-'));
    modelPath = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 7, contextLength: 4096 })).path;
    const [stable, canary, small, kill] = await Promise.all([
      llama(['--ctx-size', '4096', '--parallel', '2']),
      llama(['--ctx-size', '4096', '--parallel', '2']),
      // the regression of the issue: a revision whose context is too small for some prompts
      llama(['--ctx-size', '128', '--parallel', '1']),
      llama(['--ctx-size', '4096', '--parallel', '1']),
    ]);
    killable = kill!;
    const fs = await counter(stable!.url, atStable);
    const fc = await counter(canary!.url, atCanary);
    forwarders.push(fs.server, fc.server);
    fleet = new RolloutFleet(
      fakeSpec({
        models: { chat: { parallel: 2 }, lb: { parallel: 2, routing: 'least_busy' }, busy: { parallel: 1 }, ctx: { parallel: 1 }, kill: { parallel: 1 } },
        keys: KEYS.map((k) => ({ ...k, models: ['*'] })),
      }),
    );
    fleet.setReady('chat', [withDigest(replica('chat', fs.url, 'chat-stable'), STABLE), withDigest(replica('chat', fc.url, 'chat-canary'), CANARY)]);
    fleet.setReady('lb', [withDigest(replica('lb', stable!.url, 'lb-stable'), STABLE), withDigest(replica('lb', canary!.url, 'lb-canary'), CANARY)]);
    fleet.setReady('busy', [withDigest(replica('busy', stable!.url, 'busy-stable'), STABLE), withDigest(replica('busy', canary!.url, 'busy-canary'), CANARY)]);
    fleet.setReady('ctx', [withDigest(replica('ctx', stable!.url, 'ctx-stable'), STABLE), withDigest(replica('ctx', small!.url, 'ctx-canary'), CANARY)]);
    fleet.setReady('kill', [withDigest(replica('kill', stable!.url, 'kill-stable'), STABLE), withDigest(replica('kill', kill!.url, 'kill-canary'), CANARY)]);
    fleet.rollouts.set('chat', canaryView(0.5));
    fleet.rollouts.set('lb', canaryView(0.5));
    fleet.rollouts.set('busy', canaryView(1));
    fleet.rollouts.set('ctx', canaryView(1));
    fleet.rollouts.set('kill', canaryView(1));
    app = buildRouter({ fleet, auth: { required: true }, slotsRefreshMs: 0, usage: { record: (u) => usage.push(u) } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    for (const k of KEYS) clients.set(k.name, new OpenAI({ apiKey: k.key, baseURL: `${base}/v1`, maxRetries: 0 }));
  });

  after(async () => {
    await app?.close();
    await Promise.all(forwarders.map((s) => new Promise<void>((r) => s.close(() => r()))));
    await Promise.all(servers.map((s) => s.stop()));
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  const figures = () => rolloutFiguresOf(app);
  const windowOf = (model: string) => figures().window(model, CANARY);
  /** TTFT counts over every bucket of an arm's window. */
  const ttftCounted = (w: ArmWindow) => Object.values(w.ttft).reduce((n, c) => n + totalOf(c), 0);
  const idle = () => until('the router idle', 30_000, () => routerStats(app).active === 0);

  /** One turn of a conversation (streamed or not); returns the replica that answered and the reply. */
  async function turn(client: OpenAI, model: string, messages: Msg[], stream: boolean): Promise<{ replica: string; text: string }> {
    if (stream) {
      const { data, response } = await client.chat.completions.create({ model, messages, max_tokens: 6, stream: true }).withResponse();
      let text = '';
      let finish: string | null = null;
      for await (const chunk of data) {
        text += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      assert.ok(finish !== null, 'the stream ended with a finish_reason');
      return { replica: response.headers.get('x-llmgw-replica')!, text };
    }
    const { data, response } = await client.chat.completions.create({ model, messages, max_tokens: 6 }).withResponse();
    return { replica: response.headers.get('x-llmgw-replica')!, text: data.choices[0]!.message.content ?? '' };
  }

  /** The arm a conversation's draw picks (what the router computes: key name, prefix, canary digest). */
  const expectedArm = (keyName: string, messages: Msg[], share: number) => armOfDraw(drawOf(keyName, affinityKey('/v1/chat/completions', { messages }), CANARY), share);

  test('conversations stay on one arm (counted at the replica), both arms get traffic, the window counts every request on its arm', async () => {
    const CONVERSATIONS = 24;
    const FOLLOW_UPS = 3;
    const replicasOf = new Map<string, Set<string>>();
    const armOf = new Map<string, string>();
    const conversation = async (n: number): Promise<void> => {
      const key = KEYS[n % 2]!;
      const tag = `conv-${n}`;
      const messages: Msg[] = [{ role: 'system', content: SYSTEM }, { role: 'user', content: `${tag}: tell me about the fleet and its nodes.` }];
      armOf.set(tag, expectedArm(key.name, messages, 0.5));
      const seen = new Set<string>();
      for (let t = 0; t <= FOLLOW_UPS; t++) {
        const r = await turn(clients.get(key.name)!, 'chat', messages, t % 2 === 1);
        seen.add(r.replica);
        messages.push({ role: 'assistant', content: r.text }, { role: 'user', content: `and then? (${t})` });
      }
      replicasOf.set(tag, seen);
    };
    // four conversations at a time
    for (let n = 0; n < CONVERSATIONS; n += 4) await Promise.all([0, 1, 2, 3].map((i) => conversation(n + i)));
    await idle();

    const turns = FOLLOW_UPS + 1;
    for (const [tag, seen] of replicasOf) {
      assert.equal(seen.size, 1, `${tag} answered by ${[...seen].join(', ')}`);
      const want = armOf.get(tag) === 'canary' ? 'chat-canary' : 'chat-stable';
      assert.equal([...seen][0], want, `${tag} on the arm its draw says`);
      // counted at the replica: every turn of it reached that replica, none the other
      const [here, there] = want === 'chat-canary' ? [atCanary, atStable] : [atStable, atCanary];
      const at = (log: string[]) => new Set(log.filter((x) => x.startsWith(`${tag}#`))).size;
      assert.equal(at(here), turns, `${tag}'s turns at its replica`);
      assert.equal(at(there), 0, `${tag} never reached the other replica`);
    }
    const onCanary = [...armOf.values()].filter((a) => a === 'canary').length;
    assert.ok(onCanary > 0 && onCanary < CONVERSATIONS, `both arms get conversations (${onCanary} of ${CONVERSATIONS} on the canary)`);

    const w = windowOf('chat');
    assert.ok(w !== null, 'the router has a window for the canary revision');
    assert.equal(w.canary.requests, onCanary * turns);
    assert.equal(w.stable.requests, (CONVERSATIONS - onCanary) * turns);
    assert.equal(w.canary.errors + w.stable.errors, 0);
    for (const arm of ['stable', 'canary'] as const) {
      assert.equal(ttftCounted(w[arm]), w[arm].requests, `every ${arm} request has its TTFT in a bucket`);
      assert.equal(totalOf(w[arm].tpot), w[arm].requests, `every ${arm} request has its time per token (6 tokens each)`);
      assert.ok(Object.keys(w[arm].ttft).every((b) => b.startsWith('p0:')), `short prompts: band p0 (${Object.keys(w[arm].ttft).join(', ')})`);
    }
    // follow-ups reuse their replica's prompt cache; first turns cannot. A first turn's miss is a 'miss', a
    // follow-up's (the body carries an earlier answer) a 'resumed': the two are never compared with each other
    const both = (b: 'p0:hit' | 'p0:miss' | 'p0:resumed') => totalOf(w.stable.ttft[b]) + totalOf(w.canary.ttft[b]);
    const [hits, misses, resumed] = [both('p0:hit'), both('p0:miss'), both('p0:resumed')];
    assert.ok(hits >= CONVERSATIONS * FOLLOW_UPS - resumed && hits > 0, `cache hits ${hits}, later turns' misses ${resumed}`);
    assert.ok(misses > 0 && misses <= CONVERSATIONS, `first turns' misses ${misses} of ${CONVERSATIONS} first turns`);
    assert.ok(resumed < CONVERSATIONS * FOLLOW_UPS, `later turns' misses ${resumed}: most follow-ups hit their replica's cache`);
    // the same figures in all(), as plain data
    const all = figures().all();
    assert.equal(all['chat']!.canaryDigest, CANARY);
    assert.deepEqual(JSON.parse(JSON.stringify(all['chat']!.window)), JSON.parse(JSON.stringify(w)));
  });

  test('a least-busy model splits by the prompt prefix too, sticky per conversation', async () => {
    const client = clients.get('alice')!;
    let canary = 0;
    for (let n = 0; n < 12; n++) {
      const messages: Msg[] = [{ role: 'user', content: `lb conv-${100 + n}` }];
      const want = expectedArm('alice', messages, 0.5) === 'canary' ? 'lb-canary' : 'lb-stable';
      if (want === 'lb-canary') canary++;
      for (let t = 0; t < 3; t++) {
        const r = await turn(client, 'lb', messages, false);
        assert.equal(r.replica, want);
        messages.push({ role: 'assistant', content: r.text }, { role: 'user', content: `more ${t}` });
      }
    }
    await idle();
    const w = windowOf('lb')!;
    assert.deepEqual([w.canary.requests, w.stable.requests], [canary * 3, (12 - canary) * 3]);
  });

  test('the drawn arm busy and the other free: the request still goes to its arm', async () => {
    const client = clients.get('alice')!;
    // the router counts one slot per replica here: a stream held open fills the canary's
    const held = await client.chat.completions.create({ model: 'busy', messages: [{ role: 'user', content: 'busy conv-500' }], max_tokens: 3000, stream: true }).withResponse();
    assert.equal(held.response.headers.get('x-llmgw-replica'), 'busy-canary');
    const it = held.data[Symbol.asyncIterator]();
    await it.next();
    assert.equal(routerStats(app).inFlight(fleet.readyReplicas('busy')[1]!.endpoint), 1);
    const r = await turn(client, 'busy', [{ role: 'user', content: 'busy conv-501' }], false);
    assert.equal(r.replica, 'busy-canary', 'waited for (llama-server queued it on) its own arm, not the free stable replica');
    held.data.controller.abort();
    await idle();
    const w = windowOf('busy')!;
    assert.deepEqual([w.canary.requests, w.stable.requests], [1, 0], 'the answered turn counted; the held stream, left by its client, not');
  });

  test("a canary whose context is too small: llama-server's 400 counts as the canary's error; the client's own 400 does not count", async () => {
    const client = clients.get('alice')!;
    const short: Msg[] = [{ role: 'user', content: 'ctx conv-200 hello' }];
    assert.equal((await turn(client, 'ctx', short, false)).replica, 'ctx-canary');
    const long: Msg[] = [{ role: 'user', content: `ctx conv-201 ${'the fleet runs tiny models on many nodes. '.repeat(20)}` }];
    await assert.rejects(turn(client, 'ctx', long, false), (e: unknown) => e instanceof APIError && e.status === 400 && /context size/.test(e.message));
    await idle();
    let w = windowOf('ctx')!;
    assert.deepEqual([w.canary.requests, w.canary.errors, w.stable.requests], [2, 1, 0]);
    // the client's own mistake (a body llama-server refuses as invalid) is not the revision's
    const bad = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEYS[0]!.key}` },
      body: JSON.stringify({ model: 'ctx', messages: [{ role: 'user', content: 'ctx conv-202' }], max_tokens: 4, top_logprobs: 2 }),
    });
    const text = await bad.text();
    assert.ok(bad.status >= 400 && bad.status < 500, `the client's 4xx: ${bad.status} ${text}`);
    assert.equal(bad.headers.get('x-llmgw-replica'), 'ctx-canary', 'answered by the canary replica itself');
    await idle();
    w = windowOf('ctx')!;
    assert.deepEqual([w.canary.requests, w.canary.errors], [2, 1]);
  });

  test('a client abort is not counted', async () => {
    const client = clients.get('bob')!;
    const messages: Msg[] = [{ role: 'user', content: 'abort conv-300' }];
    const arm = expectedArm('bob', messages, 0.5);
    const before = windowOf('chat')![arm].requests;
    const ac = new AbortController();
    const stream = await client.chat.completions.create({ model: 'chat', messages, max_tokens: 2000, stream: true }, { signal: ac.signal });
    let chunks = 0;
    for await (const chunk of stream) {
      assert.ok(chunk.choices.length > 0);
      if (++chunks === 2) {
        ac.abort();
        break;
      }
    }
    await idle();
    const last = usage.filter((u) => u.model === 'chat').at(-1)!;
    assert.equal(last.status, 499, 'the router saw the client leave mid-stream');
    assert.equal(windowOf('chat')![arm].requests, before);
    // the router is still counting on that arm
    await turn(client, 'chat', messages, false);
    await idle();
    assert.equal(windowOf('chat')![arm].requests, before + 1);
  });

  test('a canary killed mid-stream: the cut stream is its error; then gone, the request fails over to stable (an error on the canary, an answer on stable)', async () => {
    const client = clients.get('alice')!;
    const messages: Msg[] = [{ role: 'user', content: 'kill conv-400 tell a long story' }];
    const stream = await client.chat.completions.create({ model: 'kill', messages, max_tokens: 3000, stream: true });
    let chunks = 0;
    await assert.rejects(async () => {
      for await (const _ of stream) {
        if (++chunks === 2) killable.proc.kill('SIGKILL');
      }
    }, 'the cut stream ends with an error the client raises');
    await killable.exited;
    await idle();
    let w = windowOf('kill')!;
    assert.deepEqual([w.canary.requests, w.canary.errors, w.stable.requests], [1, 1, 0]);
    // the canary replica is gone (still in the view): the request goes to it, fails to connect and is
    // answered by the stable arm
    const r = await turn(client, 'kill', [{ role: 'user', content: 'kill conv-401' }], false);
    assert.equal(r.replica, 'kill-stable');
    await idle();
    w = windowOf('kill')!;
    assert.deepEqual([w.canary.requests, w.canary.errors, w.stable.requests, w.stable.errors], [2, 2, 1, 0]);
  });
});
