/**
 * The parking scenario end to end: real sshd nodes, the real llama-server, a fleet repo served by
 * git http-backend and changed with the git CLI.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { buildRouter } from '../../src/router/app.js';
import { after, before, describe, it } from 'node:test';
import { parseExposition, sampleValue } from '../../src/metrics/index.js';
import { git } from '../harness/git.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';

let fleet: TestFleet;
let ctl: TestController;

const model = (name: string) => ctl.reconciler.model(name)!;

before(async () => {
  fleet = await startTestFleet({ nodes: 2 });
  await fleet.push(fleet.baseFiles(), 'initial fleet');
  ctl = await fleet.startController();
});

after(async () => {
  await fleet?.cleanup();
});

describe('parking, end to end (sshd + llama-server + git http-backend)', () => {
  it('the good model becomes ready; the unknown-architecture model is parked after 5 failures with the engine’s reason', async () => {
    await ctl.until('good ready and kev parked', 90_000, () => model('good').phase === 'ready' && model('kev').phase === 'parked');
    const kev = model('kev');
    assert.equal(kev.consecutiveFailures, 5);
    assert.ok(kev.parked);
    assert.equal(kev.parked.lastError.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
    assert.match(kev.parked.lastError.message, /unknown model architecture: 'kev'/);
    // exactly 5 counted failures; a start set back by the node (a port taken in between) is not counted
    const setbacks = ctl.logs.filter((l) => l.msg.startsWith('replica start set back') && l.model === 'kev').length;
    assert.ok((ctl.starts.get('kev') ?? 0) >= 5 && (ctl.starts.get('kev') ?? 0) - 5 <= setbacks, `starts ${ctl.starts.get('kev')}, setbacks ${setbacks}`);
    assert.equal(model('good').ready, 1);
    // the parking was logged as an error, with the model and reason
    const parkedLog = ctl.logs.filter((l) => l.msg.startsWith('model parked') && l.model === 'kev');
    assert.equal(parkedLog.length, 1);
    assert.match(String(parkedLog[0]!.reason), /unknown model architecture/);
  });

  it('the official clients at their default retries, on the parked model: one HTTP request each, the parked reason in each API\'s envelope', async () => {
    const router = buildRouter({ fleet: ctl.reconciler, auth: { required: false } });
    await router.listen({ port: 0, host: '127.0.0.1' });
    try {
      const origin = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}`;
      let requests = 0;
      const counting = ((input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) => {
        requests++;
        return fetch(input, init);
      }) as typeof fetch;
      const messages = [{ role: 'user' as const, content: 'hi' }];
      const a = await new Anthropic({ apiKey: 'unused', baseURL: origin, fetch: counting }).messages.create({ model: 'kev', max_tokens: 2, messages }).then(() => null, (e: unknown) => e);
      assert.ok(a instanceof Anthropic.APIError, String(a));
      assert.equal(requests, 1, 'x-should-retry: false stops the Anthropic SDK\'s retries of a 503');
      const body = a.error as { type: string; error: { type: string; message: string } };
      assert.deepEqual([a.status, body.type, body.error.type], [503, 'error', 'overloaded_error']);
      assert.match(body.error.message, /parked/);
      assert.match(body.error.message, /unknown model architecture: 'kev'/);
      const o = await new OpenAI({ apiKey: 'unused', baseURL: `${origin}/v1`, fetch: counting }).chat.completions.create({ model: 'kev', max_tokens: 2, messages }).then(() => null, (e: unknown) => e);
      assert.ok(o instanceof OpenAI.APIError, String(o));
      assert.equal(requests, 2, 'one request for the openai client too');
      assert.equal(o.code, 'model_parked');
      assert.match(o.message, /unknown model architecture: 'kev'/);
    } finally {
      await router.close();
    }
  });

  it('a model bigger than every node is unplaceable with need and largest free, warned once', async () => {
    const huge = model('huge');
    assert.equal(huge.phase, 'unplaceable');
    assert.equal(huge.unplaceable?.code, 'PLACEMENT_NO_ROOM');
    assert.match(huge.unplaceable?.reason ?? '', /^needs 1 TiB; largest free [\d.]+ GiB on node-[12]; 2 nodes checked$/);
    for (let i = 0; i < 3; i++) await ctl.reconciler.requestPass('test');
    assert.equal(ctl.logs.filter((l) => l.msg === 'model unplaceable' && l.model === 'huge').length, 1);
    assert.equal(ctl.starts.get('huge'), undefined);
  });

  it('/metrics shows it: parked 1, ready 0, failures 5 for the parked model; unplaceable 1 for the oversize one', async () => {
    const res = await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' });
    assert.equal(res.statusCode, 200);
    const s = parseExposition(res.body);
    assert.equal(sampleValue(s, 'llmgw_model_parked', { model: 'kev' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_ready_replicas', { model: 'kev' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_desired_replicas', { model: 'kev' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_consecutive_start_failures', { model: 'kev' }), 5);
    assert.equal(sampleValue(s, 'llmgw_model_unplaceable', { model: 'huge' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_parked', { model: 'huge' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_ready_replicas', { model: 'good' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_unplaceable', { model: 'good' }), 0);
    assert.equal(sampleValue(s, 'llmgw_spec_valid'), 1);
    assert.equal(sampleValue(s, 'llmgw_leader'), 1);
    assert.equal(sampleValue(s, 'llmgw_node_reachable', { node: 'node-1' }), 1);
  });

  it('a second pass over an unchanged world plans zero actions', async () => {
    const starts = ctl.starts.get('kev');
    await ctl.reconciler.requestPass('test');
    await ctl.reconciler.requestPass('test');
    assert.equal(ctl.reconciler.snapshot().lastPass?.actions, 0);
    assert.equal(ctl.starts.get('kev'), starts, 'a parked model is not started again');
  });

  it('the status branch holds the parked model’s file with last error and digest', async () => {
    const bare = `${fleet.git.root}/fleet.git`;
    const text = await git(bare, ['show', 'llmgw/status:models/kev.json']);
    const status = JSON.parse(text) as { parked: { lastError: { message: string } }; digest: string; consecutiveFailures: number };
    assert.match(status.parked.lastError.message, /unknown model architecture/);
    assert.equal(status.digest, model('kev').spec.digest);
    assert.equal(status.consecutiveFailures, 5);
    const fleetJson = JSON.parse(await git(bare, ['show', 'llmgw/status:fleet.json'])) as { revision: string };
    assert.equal(fleetJson.revision, await git(bare, ['rev-parse', 'main']));
  });

  it('a commit that only edits another model leaves it parked', async () => {
    const files = fleet.baseFiles();
    await fleet.push({ 'models/good.yaml': files['models/good.yaml']!.replace('aliases: [good-alias]', 'aliases: [good-alias, good-2]') }, 'good: another alias');
    const starts = ctl.starts.get('kev');
    await ctl.until('the new revision applied', 90_000, () => ctl.reconciler.spec()?.modelNames['good-2'] === 'good');
    await ctl.reconciler.requestPass('test');
    assert.equal(model('kev').phase, 'parked');
    assert.equal(ctl.starts.get('kev'), starts);
  });

  it('a restarted controller keeps parking and failure counts', async () => {
    await ctl.stop();
    ctl = await fleet.startController();
    await ctl.reconciler.requestPass('test');
    assert.equal(model('kev').phase, 'parked');
    assert.equal(model('kev').consecutiveFailures, 5);
    assert.equal(ctl.starts.get('kev'), undefined, 'the new controller starts nothing for a parked model');
    assert.equal(model('good').phase, 'ready', 'the running replica is adopted');
    assert.equal(ctl.starts.get('good'), undefined, 'and not started twice');
  });

  it('a replica that crashes is counted, replaced, and its model’s series never disappear', async () => {
    spawnSync('pkill', ['-9', '-f', `${fleet.models.good.sha256}.gguf`]);
    await ctl.until('the crash counted', 90_000, () => model('good').consecutiveFailures === 1);
    const s = parseExposition((await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
    for (const name of ['llmgw_model_desired_replicas', 'llmgw_model_ready_replicas', 'llmgw_model_consecutive_start_failures', 'llmgw_model_parked', 'llmgw_model_unplaceable']) {
      assert.notEqual(sampleValue(s, name, { model: 'good' }), undefined, `${name} present after the crash`);
    }
    assert.equal(model('good').lastError?.code, 'REPLICA_EXITED');
    await ctl.until('good replaced', 90_000, () => model('good').phase === 'ready');
  });

  it('a commit changing its source to a good GGUF unparks it and it becomes ready', async () => {
    await fleet.push({ 'models/kev.yaml': modelYaml(fleet.models.good2, ['replicas: 1']) }, 'kev: use a GGUF this engine knows');
    await ctl.until('kev ready after the definition change', 90_000, () => model('kev').phase === 'ready');
    assert.equal(model('kev').consecutiveFailures, 0);
    assert.equal(model('kev').parked, null);
  });

  it('parked again, an empty commit with Llmgw-Retry unparks it exactly once', async () => {
    await fleet.push({ 'models/kev.yaml': modelYaml(fleet.models.kev2, ['replicas: 1']) }, 'kev: back to an unknown architecture');
    await ctl.until('kev parked again', 90_000, () => model('kev').phase === 'parked');
    const before = ctl.starts.get('kev') ?? 0;
    await fleet.push({}, 'retry kev\n\nLlmgw-Retry: kev\n');
    await ctl.until('a start after the retry', 90_000, () => (ctl.starts.get('kev') ?? 0) > before);
    assert.equal(ctl.logs.filter((l) => l.msg === 'retry handled' && l.model === 'kev').length, 1);
    // it fails again and parks again; the trailer is not handled a second time
    await ctl.until('kev parked after the retry', 90_000, () => model('kev').phase === 'parked');
    const afterRetry = ctl.starts.get('kev') ?? 0;
    assert.ok(afterRetry - before >= 5, 'five more failed starts after the retry');
    assert.equal(model('kev').consecutiveFailures, 5);
    for (let i = 0; i < 3; i++) await ctl.reconciler.requestPass('test');
    assert.equal(ctl.starts.get('kev'), afterRetry);
    assert.equal(ctl.logs.filter((l) => l.msg === 'retry handled' && l.model === 'kev').length, 1);
  });
});
