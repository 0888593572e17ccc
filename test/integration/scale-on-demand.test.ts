/**
 * Scaling with demand (#42) on the real stack: an on-demand model with `max_replicas: 3`, threads 1
 * and one slot per replica, on a node with room, under 6 concurrent long streams through the router
 * and the official `openai` client. The router reports the model's load (router/load-report.ts) and
 * the controller decides on it; no pass is asked for by the test (poll_interval 1h): the passes come
 * from the requests and the decision's own wakes. A second replica serves within up_after +
 * activation + a pass, never more than 3 replicas, every request completes; once the load is gone
 * the count comes back to 1, one step per down_after.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildRouter, routerStats } from '../../src/router/app.js';
import { RouterLoad } from '../../src/router/load-report.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { scaleFleetFiles } from '../harness/scale-files.js';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { freePort } from '../harness/ports.js';
import { until } from '../harness/wait.js';

const UP_AFTER_MS = 3000;
const DOWN_AFTER_MS = 8000;

let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;
let client: OpenAI;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'sc.gguf'), { seed: 42, embeddingLength: 512, layers: 8, tensorType: 'f16' });
  const f = scaleFleetFiles(fleet, { model: 'sc', gguf: chat, scale: `{ target: 80%, up_after: ${UP_AFTER_MS / 1000}s, down_after: ${DOWN_AFTER_MS / 1000}s }` });
  await fleet.push(f, 'an on-demand model that scales to 3');
  const load = new RouterLoad('test-router');
  ctl = await fleet.startController({ modelLoad: () => [load.report()] });
  router = buildRouter({ fleet: ctl.reconciler, load, auth: { required: false } });
  const port = await freePort();
  await router.listen({ port, host: '127.0.0.1' });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300_000 });
});

after(async () => {
  await router?.close();
  await fleet?.cleanup();
});

describe('on-demand with max_replicas: 3 under 6 concurrent long requests', { timeout: 8 * 60_000 }, () => {
  it('grows to a second serving replica within up_after + activation + a pass, never above 3, fails nothing, and shrinks back to 1 after', async () => {
    await ctl.until('the model in the spec', 90_000, () => ctl.reconciler.spec()?.models.sc !== undefined);
    const replicasOf = () => (ctl.reconciler.model('sc')?.replicas ?? []).filter((r) => r.phase !== 'stopping');
    let most = 0;
    let firstReadyAt = 0;
    let secondServingAt = 0;
    const served = new Set<string>();
    const stats = routerStats(router);
    // every snapshot the controller publishes (no count between two samples is missed), and which
    // replicas have requests in flight at the router, read as the streams' chunks arrive
    const look = (): void => {
      const rs = replicasOf();
      most = Math.max(most, rs.length);
      const ready = rs.filter((r) => r.phase === 'ready');
      if (ready.length > 0 && firstReadyAt === 0) firstReadyAt = Date.now();
      for (const r of ready) if (r.endpoint && stats.inFlight(r.endpoint) > 0) served.add(r.id);
      if (served.size >= 2 && secondServingAt === 0) secondServingAt = Date.now();
    };
    const offSnapshots = ctl.reconciler.onSnapshot(look);
    const t0 = Date.now();
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, async (_, i) => {
        const stream = await client.chat.completions.create({ model: 'sc', messages: [{ role: 'user', content: `a long answer please (${i})` }], stream: true, max_tokens: 700, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsStreaming);
        let finished = false;
        for await (const c of stream) {
          look();
          if (c.choices[0]?.finish_reason) finished = true;
        }
        return finished;
      }),
    );
    const loadEnded = Date.now();
    const failed = results.filter((r) => r.status === 'rejected' || r.value !== true);
    assert.deepEqual(failed.map((r) => (r.status === 'rejected' ? String(r.reason) : 'cut')), [], 'every request completes');
    const ups = ctl.logs.filter((l) => l.msg.startsWith('scaled sc ') && l.direction === 'up');
    assert.ok(ups.length >= 1, 'the model scaled up');
    assert.ok(secondServingAt > 0, `a second replica served (replicas that served: ${[...served].join(', ')})`);
    const toSecond = secondServingAt - firstReadyAt;
    // up_after + a replica's activation (its start_timeout bounds it) + a pass
    assert.ok(toSecond <= UP_AFTER_MS + 60_000 + 5_000, `the second replica served ${toSecond} ms after the first was ready`);
    assert.ok(most <= 3, `${most} replicas at once: above max_replicas`);
    console.log(JSON.stringify({ loadMs: loadEnded - t0, firstReadyMs: firstReadyAt - t0, secondServingAfterFirstReadyMs: toSecond, mostReplicas: most, ups: ups.map((l) => l.msg) }));

    // after the load: one step per down_after, back to 1 (not 0: the idle timeout is 10 m) — no pass asked for by the test
    await until('back to 1 replica', 4 * DOWN_AFTER_MS + 60_000, () => replicasOf().length === 1 && ctl.reconciler.record().models.sc?.scale?.count === 1, { diag: () => JSON.stringify({ scale: ctl.reconciler.record().models.sc?.scale, replicas: replicasOf().map((r) => r.phase) }) });
    offSnapshots();
    const downs = ctl.logs.filter((l) => l.msg.startsWith('scaled sc ') && l.direction === 'down');
    assert.ok(downs.length >= 1 && downs.every((l) => Number(l.to) === Number(l.from) - 1), `one replica at a time: ${downs.map((l) => l.msg).join('; ')}`);
    // the load falls below as the streams end one by one (1 left on 3 replicas is below), so a step down
    // counts from the load's fall, never from before the count went up
    assert.ok(Number(downs[0]!.time) - Number(ups.at(-1)!.time) >= DOWN_AFTER_MS, 'the first step down waited down_after');
    for (const [i, d] of downs.entries()) if (i > 0) assert.ok(Number(d.time) - Number(downs[i - 1]!.time) >= DOWN_AFTER_MS, 'each step down waited a whole down_after');
    console.log(JSON.stringify({ downsAfterLoadEndedMs: downs.map((l) => Number(l.time) - loadEnded), downs: downs.map((l) => l.msg) }));
    assert.ok(most <= 3, `${most} replicas at once: above max_replicas`);
    assert.equal(ctl.reconciler.model('sc')?.desired, 1);
  });
});
