/**
 * Fail over before the first byte, against real llama-server replicas (tiny GGUF) and the official
 * `openai` client with `maxRetries: 0` (so any error the router lets through fails the test): one of
 * two replicas is SIGKILLed while requests wait for their first byte on it — queued inside
 * llama-server (the router does not know its slots) or at the router (it does: parallel 1) — and
 * those requests are answered by the other replica; streams that already had their first byte from
 * the killed replica end with an error the client raises (the official `openai` client on chat
 * completions, the official `@anthropic-ai/sdk` on /v1/messages), never a silent truncation.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Anthropic, { APIError as AnthropicAPIError } from '@anthropic-ai/sdk';
import OpenAI, { APIError } from 'openai';
import { buildRouter, routerStats } from '../../src/router/app.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';
import { until } from '../harness/wait.js';

const ENGINE_KEY = `engine-${randomBytes(12).toString('hex')}`;
const CLIENT_KEY = 'client-key';
const messages = [{ role: 'user' as const, content: 'Tell me a long story about a lighthouse keeper.' }];

describe('router failover with real llama-server replicas and the official clients', { timeout: 10 * 60_000 }, () => {
  let tmp = '';
  let dir = '';
  let modelPath = '';
  const servers: LlamaServer[] = [];
  let survivor: LlamaServer;
  let fleet: FakeFleetView;
  let app: ReturnType<typeof buildRouter>;
  let client: OpenAI;
  let anthropic: Anthropic;

  async function llama(): Promise<LlamaServer> {
    const s = await startLlamaServer({ dir, model: modelPath, args: ['--slots', '--ctx-size', '8192', '--parallel', '1'], env: { LLAMA_API_KEY: ENGINE_KEY } });
    servers.push(s);
    return s;
  }

  before(async () => {
    dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-failover-'));
    modelPath = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 11, contextLength: 8192 })).path;
    survivor = await llama();
    fleet = new FakeFleetView(
      fakeSpec({
        models: {
          // no profile: the router does not know the slots, so requests wait inside llama-server
          unknown: { routing: 'least_busy' },
          // parallel 1: requests beyond a replica's slot wait in the router's queue
          one: { routing: 'least_busy', parallel: 1 },
          streams: { routing: 'least_busy' },
          messages: {},
        },
        keys: [{ name: 'all', key: CLIENT_KEY, models: ['*'] }],
      }),
      ENGINE_KEY,
    );
    app = buildRouter({ fleet, auth: { required: true } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    client = new OpenAI({ apiKey: CLIENT_KEY, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: CLIENT_KEY, baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 });
  });

  after(async () => {
    await app?.close();
    await Promise.all(servers.map((s) => s.stop()));
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  /** Sends `n` non-streaming requests at once, SIGKILLs `victim` once `waiting` of them are in flight on it, and returns who answered each. */
  async function killWhileWaiting(model: string, victim: LlamaServer, n: number, waiting: (s: ReturnType<typeof routerStats>) => boolean): Promise<{ answeredBy: string[]; tokens: number[] }> {
    const calls = Array.from({ length: n }, () => client.chat.completions.create({ model, messages, max_tokens: 48 }).withResponse());
    await until('requests waiting on the victim', 20_000, () => waiting(routerStats(app)), { everyMs: 2 });
    victim.proc.kill('SIGKILL');
    const results = await Promise.allSettled(calls);
    const failed = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
    assert.deepEqual(failed, [], '0 failed requests');
    const ok = results.map((r) => (r as PromiseFulfilledResult<Awaited<(typeof calls)[number]>>).value);
    return { answeredBy: ok.map((r) => r.response.headers.get('x-llmgw-replica') ?? ''), tokens: ok.map((r) => r.data.usage?.completion_tokens ?? 0) };
  }

  test('SIGKILL of a replica with requests queued inside it: every one is answered by the other replica, 0 failed', async () => {
    const victim = await llama();
    fleet.setReady('unknown', [replica('unknown', victim.url, 'victim'), replica('unknown', survivor.url, 'survivor')]);
    // least-busy spreads 6 requests 3 and 3; each replica works on one and holds two in its own queue
    const { answeredBy, tokens } = await killWhileWaiting('unknown', victim, 6, (s) => s.inFlight(victim.url) >= 3);
    assert.deepEqual(answeredBy, Array(6).fill('survivor'));
    assert.ok(tokens.every((t) => t > 0), `tokens ${tokens.join()}`);
    assert.equal(routerStats(app).inFlight(victim.url), 0);
  });

  test('SIGKILL of a replica with parallel 1 and a queue at the router: the one on it and the queued ones go to the other replica, 0 failed', async () => {
    const victim = await llama();
    fleet.setReady('one', [replica('one', victim.url, 'victim-1'), replica('one', survivor.url, 'survivor')]);
    const { answeredBy } = await killWhileWaiting('one', victim, 6, (s) => s.inFlight(victim.url) === 1 && s.queued('one') >= 3);
    // one request was on each replica when the victim died (the survivor's own, answered by it)
    assert.deepEqual(answeredBy, Array(6).fill('survivor'));
    assert.equal(routerStats(app).queued('one'), 0);
  });

  test('streams in flight on a SIGKILLed replica end with an error the openai client raises; streams elsewhere complete', async () => {
    const victim = await llama();
    fleet.setReady('streams', [replica('streams', victim.url, 'victim-s'), replica('streams', survivor.url, 'survivor')]);
    const open = await Promise.all(
      Array.from({ length: 2 }, () => client.chat.completions.create({ model: 'streams', messages, max_tokens: 3000, stream: true }).withResponse()),
    );
    const byReplica = new Map(open.map((o) => [o.response.headers.get('x-llmgw-replica'), o.data]));
    assert.deepEqual([...byReplica.keys()].sort(), ['survivor', 'victim-s'], 'one stream on each replica');
    const onVictim = byReplica.get('victim-s')![Symbol.asyncIterator]();
    // the victim's stream is running: a few chunks in, then its replica dies
    for (let i = 0; i < 3; i++) assert.equal((await onVictim.next()).done, false);
    victim.proc.kill('SIGKILL');
    await assert.rejects(
      (async () => {
        for (let r = await onVictim.next(); !r.done; r = await onVictim.next()) {
          /* the chunks already on their way */
        }
      })(),
      (e: unknown) => e instanceof APIError && /failed mid-response/.test(e.message),
      'the client raises; the stream is not cut silently',
    );
    // the survivor's stream is not affected (read a while, then let it go)
    let n = 0;
    for await (const chunk of byReplica.get('survivor')!) {
      assert.ok(chunk.choices.length >= 0);
      if (++n === 20) break;
    }
    assert.equal(n, 20);
  });

  test('an Anthropic Messages stream (/v1/messages) on a SIGKILLed replica ends with an error the official Anthropic client raises', async () => {
    const victim = await llama();
    fleet.setReady('messages', [replica('messages', victim.url, 'victim-m')]);
    const stream = await anthropic.messages.create({ model: 'messages', max_tokens: 3000, stream: true, messages: [{ role: 'user', content: 'Tell me a long story about a lighthouse keeper.' }] });
    const it = stream[Symbol.asyncIterator]();
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await it.next();
      assert.equal(r.done, false);
      seen.push(r.value.type);
    }
    assert.equal(seen[0], 'message_start');
    victim.proc.kill('SIGKILL');
    await assert.rejects(
      (async () => {
        for (let r = await it.next(); !r.done; r = await it.next()) {
          /* the events already on their way */
        }
      })(),
      (e: unknown) => e instanceof AnthropicAPIError && /failed mid-response/.test(e.message) && e.type === 'api_error',
      'the Anthropic client raises; the stream is not cut silently',
    );
  });
});
