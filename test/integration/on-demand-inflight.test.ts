/**
 * Idle respects work in flight (#23 item 3), on the real stack: an on-demand model with a 2 s idle
 * timeout and a 1 s drain grace (an idle stop would cut) serves one stream far longer than its idle
 * timeout through the router and the official `openai` client; passes run all along; the router
 * touches the model only at a request's start and end. The replica is never stopped as idle while the
 * request is in the router or llama-server reports it in flight (GET /slots), the stream completes,
 * and once it has ended the replica is stopped as idle.
 */
import { strict as assert } from 'node:assert';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildRouter } from '../../src/router/app.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;
let client: OpenAI;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'od.gguf'), { seed: 12, embeddingLength: 512, layers: 8, tensorType: 'f16' });
  const f = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['fleet.yaml'] = ['poll_interval: 1h', 'placement_reserve: 256MiB', 'stop_grace: 1s', 'drain_grace: 1s', ''].join('\n');
  f['profiles/stream.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 4096', 'threads: 1', 'parallel: 2', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n');
  f['models/od.yaml'] = modelYaml(chat, ['on_demand: { idle_timeout: 2s }']).replace('profile: tiny', 'profile: stream');
  await fleet.push(f, 'an on-demand model with a short idle timeout');
  ctl = await fleet.startController();
  // the router touches a model at a request's start and end only (no touch while it streams): what
  // keeps the replica through the stream is the request held in the router and llama-server's /slots
  router = buildRouter({ fleet: ctl.reconciler, auth: { required: false }, activityTouchMs: 3_600_000 });
  await router.listen({ port: 0, host: '127.0.0.1' });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${(router.server.address() as AddressInfo).port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  await router?.close();
  await fleet?.cleanup();
});

describe('on-demand: a stream longer than idle_timeout', { timeout: 5 * 60_000 }, () => {
  it('is never stopped as idle while in flight, completes, and the replica is stopped as idle after it', async () => {
    // warm: the first request starts the replica
    await client.chat.completions.create({ model: 'od', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    let ended = 0;
    let finished = false;
    let chunks = 0;
    const t0 = Date.now();
    const streaming = (async () => {
      const stream = await client.chat.completions.create({ model: 'od', messages: [{ role: 'user', content: 'a long answer please' }], stream: true, max_tokens: 1400, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsStreaming);
      for await (const c of stream) {
        chunks++;
        if (c.choices[0]?.finish_reason) finished = true;
      }
      ended = Date.now();
    })();
    // passes all along the stream (a busy router's triggers)
    let passes = 0;
    let keptByActivity = 0;
    while (ended === 0) {
      await ctl.reconciler.requestPass('test');
      passes++;
      // the router touched od when the stream began and touches it again only at its end: a later
      // demand time in the record is the pass seeing the request held and the replica busy
      const last = ctl.reconciler.record().models.od?.demand ?? 0;
      if (ended === 0 && last - t0 > 2500) keptByActivity++;
      await new Promise((r) => setTimeout(r, 150)); // deliberate: the pace of the passes along the stream (a busy router's triggers), not a wait for something
    }
    await streaming;
    const lasted = ended - t0;
    assert.ok(lasted > 2000 + 3000, `the stream lasted ${lasted} ms, not longer than idle_timeout + drain_grace: the test proves nothing`);
    assert.ok(finished, `the stream was cut after ${chunks} chunks`);
    assert.ok(passes >= 3, `only ${passes} passes during the stream`);
    assert.ok(keptByActivity >= 2, `${keptByActivity} passes past idle_timeout saw the stream as activity: the test proves nothing`);
    const idleStops = ctl.logs.filter((l) => l.msg === 'stopping replica' && l.reason === 'idle');
    assert.deepEqual(idleStops.filter((l) => Number(l.time) < ended), [], 'stopped as idle while the stream was in flight');
    // once it has ended, idleness stops it
    await ctl.until('the idle replica stopped', 30_000, () => (ctl.reconciler.model('od')?.replicas.length ?? 1) === 0);
    assert.ok(ctl.logs.some((l) => l.msg === 'stopping replica' && l.reason === 'idle'));
  });
});

describe('on-demand: an eviction waits for the stream on its victim', { timeout: 5 * 60_000 }, () => {
  it('a request for another model while the only replica room streams: the stream completes, then the newcomer takes the room and is answered', async () => {
    // room for one replica: od (a long stream) and od2 share it
    const f = fleet.baseFiles();
    delete f['models/kev.yaml'];
    delete f['models/huge.yaml'];
    delete f['models/good.yaml'];
    const od = ctl.reconciler.spec()!.models.od!;
    f['fleet.yaml'] = ['poll_interval: 1h', 'placement_reserve: 256MiB', 'stop_grace: 1s', 'drain_grace: 1s', ''].join('\n');
    f['profiles/stream.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 4096', 'threads: 1', 'parallel: 2', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n');
    f['models/od.yaml'] = [`source: ${od.source}`, `sha256: ${od.sha256}`, 'profile: stream', 'on_demand: { idle_timeout: 10m }', 'memory: 300MiB', ''].join('\n');
    f['models/od2.yaml'] = modelYaml(fleet.models.good, ['on_demand: { idle_timeout: 10m }', 'memory: 300MiB']);
    f['nodes/node-1.yaml'] = f['nodes/node-1.yaml']!.replace('transport: ssh', 'transport: ssh\ncapacity: { memory: 700MiB }');
    await fleet.push(f, 'od and od2 on demand, room for one');
    await ctl.until('od2 in the spec', 90_000, () => ctl.reconciler.spec()?.models.od2 !== undefined);
    await client.chat.completions.create({ model: 'od', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    let ended = 0;
    let finished = false;
    let firstChunk = false;
    const streaming = (async () => {
      const stream = await client.chat.completions.create({ model: 'od', messages: [{ role: 'user', content: 'a long answer please' }], stream: true, max_tokens: 1400, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsStreaming);
      for await (const c of stream) {
        firstChunk = true;
        if (c.choices[0]?.finish_reason) finished = true;
      }
      ended = Date.now();
    })();
    await until('the first chunk of the long stream', 60_000, () => firstChunk);
    const asked = Date.now();
    const answer = await client.chat.completions.create({ model: 'od2', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    const answered = Date.now();
    await streaming;
    assert.ok(finished, 'the stream on the replica an eviction wanted was cut');
    assert.ok(ended - asked > 2000, `the stream ended ${ended - asked} ms after od2 was asked for: the test proves nothing`);
    assert.equal(answer.object, 'chat.completion');
    const evicted = ctl.logs.filter((l) => l.msg === 'stopping replica' && l.reason === 'evicted' && l.model === 'od');
    assert.equal(evicted.length, 1, 'od was evicted for od2');
    assert.ok(Number(evicted[0]!.time) >= ended - 50, `od was taken out of routing ${ended - Number(evicted[0]!.time)} ms before its stream ended`);
    assert.ok(answered >= ended, 'od2 answered once the room was free');
  });
});
