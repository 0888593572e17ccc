/**
 * Scaling meets placement (#42) on the real stack: real llama-server over sshd, the router and the
 * official `openai` client, the admin API and `llmgw ctl status`. A node with room for 2 replicas of
 * an on-demand model with max_replicas 3 (memory: the node declares 1000 MiB, 256 MiB reserved, 300 MiB
 * a replica), under 6 clients of one-slot requests: 2 replicas, the model ready, "wants 3, 2 fit" with
 * placement's numbers in the admin API's JSON and `ctl status`; the routers' report carries the queue
 * wait. Then another on-demand model's activation on that node takes the surplus replica (drained:
 * its request in flight finishes), not the first, and no request of the first model fails.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildAdminApp } from '../../src/admin/app.js';
import { buildRouter } from '../../src/router/app.js';
import { RouterLoad } from '../../src/router/load-report.js';
import type { ModelJson } from '../../src/wire/shape.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { runCli } from '../harness/cli.js';
import { scaleFleetFiles } from '../harness/scale-files.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { freePort } from '../harness/ports.js';
import { until } from '../harness/wait.js';

const TOKEN = 'scale-short-evict-admin-token';
let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;
let admin: FastifyInstance;
let adminUrl: string;
let client: OpenAI;
const load = new RouterLoad('test-router');

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'sc.gguf'), { seed: 42, embeddingLength: 512, layers: 8, tensorType: 'f16' });
  const f = scaleFleetFiles(fleet, { model: 'sc', gguf: chat, scale: '{ target: 80%, up_after: 2s, down_after: 10m }', stopGrace: '2s', drainGrace: '60s', ctxSize: 1024 });
  // room for 2 replicas of 300 MiB (744 MiB after the reserve); the cores are not what holds the third back
  f['nodes/node-1.yaml'] = f['nodes/node-1.yaml']!.replace('transport: ssh', 'transport: ssh\ncapacity: { memory: 1000MiB, cpus: 8 }');
  f['models/other.yaml'] = modelYaml(fleet.models.good, ['on_demand: { idle_timeout: 10m }', 'memory: 300MiB']);
  await fleet.push(f, 'a scaling model with room for 2 of its 3, and another on-demand model');
  ctl = await fleet.startController({ modelLoad: () => [load.report()] });
  router = buildRouter({ fleet: ctl.reconciler, load, auth: { required: false } });
  const port = await freePort();
  await router.listen({ port, host: '127.0.0.1' });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300_000 });
  admin = buildAdminApp({ backend: ctl.reconciler, token: TOKEN });
  const adminPort = await freePort();
  await admin.listen({ port: adminPort, host: '127.0.0.1' });
  adminUrl = `http://127.0.0.1:${adminPort}`;
});

after(async () => {
  await router?.close();
  await admin?.close();
  await fleet?.cleanup();
});

async function modelJson(name: string): Promise<ModelJson> {
  const res = await fetch(`${adminUrl}/admin/v1/models`, { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200);
  const body = (await res.json()) as { models: ModelJson[] };
  const m = body.models.find((x) => x.name === name);
  assert.ok(m, `${name} in the admin API's models`);
  return m;
}

describe('a node with room for 2 of a model that wants 3, then another model\'s activation', { timeout: 8 * 60_000 }, () => {
  it('serves with 2, says "wants 3, 2 fit" in the admin API and ctl status; the activation takes the surplus replica, no request of the first fails', async () => {
    await ctl.until('the models in the spec', 90_000, () => ctl.reconciler.spec()?.models.other !== undefined);
    const live = () => (ctl.reconciler.model('sc')?.replicas ?? []).filter((r) => r.phase !== 'stopping' && r.phase !== 'draining');
    let most = 0;
    let mostWaitMs = 0;
    const look = (): void => {
      most = Math.max(most, live().length);
      mostWaitMs = Math.max(mostWaitMs, load.report().models.sc?.waitMs ?? 0);
    };
    const offSnapshots = ctl.reconciler.onSnapshot(look);
    // 6 clients, each sending one streamed request after another until told to stop
    let stop = false;
    let sent = 0;
    const failures: string[] = [];
    const clients = Array.from({ length: 6 }, async (_, i) => {
      while (!stop) {
        sent++;
        try {
          const stream = await client.chat.completions.create({ model: 'sc', messages: [{ role: 'user', content: `tell a story (${i})` }], stream: true, max_tokens: 150, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsStreaming);
          let finished = false;
          for await (const c of stream) {
            look();
            if (c.choices[0]?.finish_reason) finished = true;
          }
          if (!finished) failures.push(`client ${i}: cut`);
        } catch (e) {
          failures.push(`client ${i} at ${Date.now()}: ${String(e)}`);
        }
      }
    });

    try {
      await until('2 replicas of sc ready and short of its third', 180_000, () => {
        const m = ctl.reconciler.model('sc');
        return m != null && m.ready === 2 && m.scale?.short?.wants === 3 && m.scale.short.fit === 2;
      }, { diag: () => JSON.stringify({ scale: ctl.reconciler.model('sc')?.scale, replicas: live().map((r) => r.phase) }) });
      const sc = await modelJson('sc');
      assert.equal(sc.phase, 'ready', 'the model is ready, not unplaceable');
      assert.equal(sc.unplaceable, null);
      assert.equal(sc.scale?.count, 3);
      assert.equal(sc.scale?.short?.code, 'PLACEMENT_NO_ROOM');
      assert.match(sc.scale?.short?.reason ?? '', /^needs 300 MiB per replica; largest free \d+ MiB on node-1; 1 node checked/);
      assert.ok((sc.scale?.load?.busy ?? 0) + (sc.scale?.load?.queued ?? 0) > 0, `the load its decision read: ${JSON.stringify(sc.scale?.load)}`);
      const status = await runCli(['ctl', 'status', '--server', adminUrl], undefined, { ...process.env, LLMGW_ADMIN_TOKEN: TOKEN });
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /desired 3 of 1\.\.3: wants 3, 2 fit: needs 300 MiB per replica; largest free \d+ MiB on node-1/);
      assert.ok(mostWaitMs > 0, 'the router reported how long the oldest request waited');

      const [first, surplus] = [...live()].sort((a, b) => a.startedAt - b.startedAt);
      assert.ok(first && surplus, 'two replicas');
      // another on-demand model asked for: it needs the room of one replica of sc
      const answer = await client.chat.completions.create({ model: 'other', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });
      assert.ok(answer.choices[0]?.message, 'the other model answered');
      await until('sc down to its first replica', 60_000, () => live().length === 1);
      assert.deepEqual(live().map((r) => r.id), [first.id], 'the surplus replica went, not the first');
      const evicted = ctl.logs.filter((l) => l.replica === surplus.id && /evict/.test(JSON.stringify(l)));
      assert.ok(evicted.length > 0, `the surplus replica was evicted (${surplus.id})`);
      const after = await modelJson('sc');
      assert.equal(after.phase, 'ready');
      assert.equal(after.scale?.short?.fit, 1, 'sc is short of room now, and does not take it back');
      assert.equal((await modelJson('other')).ready, 1);
    } finally {
      stop = true;
      await Promise.all(clients);
      offSnapshots();
    }
    const stops = ctl.logs.filter((l) => typeof l.replica === 'string' && l.model === 'sc' && l.level >= 30).map((l) => `${String(l.time)} ${l.msg} ${String(l.replica)} ${String(l.reason ?? '')} ${String(l.drainedMs ?? '')}`);
    assert.deepEqual(failures, [], `every request of sc completes (${sent} sent); sc's replica lines: ${stops.join(' | ')}`);
    assert.ok(most <= 3, `${most} replicas of sc at once`);
    console.log(JSON.stringify({ sent, most, mostWaitMs, sc: (await modelJson('sc')).scale }));
  });
});
