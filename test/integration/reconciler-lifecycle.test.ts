/**
 * Replica lifecycle end to end against a real sshd node and the real llama-server: on-demand
 * activation that makes room by stopping an idle on-demand replica, surge restart with room
 * (no failed request), and the drain-grace path without room.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let ctl: TestController;
const MiB = 2 ** 20;

/** The node offers room for exactly one tiny replica (≈ 84 MiB, its 16 MiB prompt cache included) above the 256 MiB reserve. */
function nodeWithCapacity(files: Record<string, string>, mib: number): string {
  return files['nodes/node-1.yaml']!.replace('transport: ssh', `transport: ssh\ncapacity: { memory: ${mib}MiB }`);
}

const model = (name: string) => ctl.reconciler.model(name)!;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  delete files['models/good.yaml'];
  files['models/od-a.yaml'] = modelYaml(fleet.models.good, ['on_demand: { idle_timeout: 10m }']);
  files['models/od-b.yaml'] = modelYaml(fleet.models.good2, ['on_demand: { idle_timeout: 10m }']);
  files['nodes/node-1.yaml'] = nodeWithCapacity(files, 256 + 100);
  await fleet.push(files, 'two on-demand models, room for one');
  ctl = await fleet.startController();
});

after(async () => {
  await fleet?.cleanup();
});

describe('replica lifecycle, end to end', () => {
  it('on demand: a request activates the model; an idle on-demand replica makes room for another (no stale unplaceable)', async () => {
    assert.equal(model('od-a').phase, 'idle');
    assert.equal(model('od-a').desired, 0, 'nobody asked: 0 of 0');
    const a = await ctl.reconciler.demand('od-a');
    assert.ok(a.kind === 'starting' || a.kind === 'ready', `activation began: ${a.kind}`); // a tiny model may be ready before the pass that started it has written its status
    assert.equal((await ctl.reconciler.waitReady('od-a', { timeoutMs: 60_000 })).length, 1);
    const b = await ctl.reconciler.demand('od-b');
    assert.notEqual(b.kind, 'unplaceable', JSON.stringify(b));
    const ready = await ctl.reconciler.waitReady('od-b', { timeoutMs: 60_000 });
    assert.equal(ready.length, 1, `${JSON.stringify(model('od-b'))}\n${ctl.logs.map((l) => `${l.msg} ${l.model ?? ''} ${l.reason ?? ''} ${l.code ?? ''}`).join('\n')}`);
    await ctl.until('od-a stopped', 90_000, () => model('od-a').ready === 0);
    assert.ok(ctl.logs.some((l) => l.msg === 'stopping replica' && l.reason === 'evicted' && l.model === 'od-a'));
  });

  it('surge restart with room keeps the model serving: a client loop sees no failed request', async () => {
    const files = fleet.baseFiles();
    await fleet.push(
      {
        'models/od-a.yaml': null,
        'models/od-b.yaml': null,
        'models/good.yaml': files['models/good.yaml']!,
        'nodes/node-1.yaml': nodeWithCapacity(files, 256 + 200),
      },
      'one always-on model, room for two replicas',
    );
    await ctl.until('good ready', 90_000, () => model('good')?.phase === 'ready');
    const before = model('good').replicas.map((r) => r.id);
    let ok = 0;
    const failed: string[] = [];
    let running = true;
    const client = (async () => {
      while (running) {
        const [r] = ctl.reconciler.readyReplicas('good');
        if (!r) {
          failed.push('no ready replica');
          await until('a ready replica again', 90_000, () => !running || ctl.reconciler.readyReplicas('good').length > 0);
          continue;
        }
        try {
          const res = await request(`${r.endpoint}/v1/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${ctl.reconciler.engineApiKey}` },
            body: JSON.stringify({ prompt: 'hi', max_tokens: 2 }),
          });
          await res.body.text();
          if (res.statusCode === 200) ok++;
          else failed.push(`HTTP ${res.statusCode}`);
        } catch (e) {
          failed.push(`${r.id} (${r.phase}): ${String(e)}; replicas now ${JSON.stringify(model('good').replicas.map((x) => [x.id, x.phase, x.endpoint]))}`);
        }
      }
    })();
    const ids = await ctl.reconciler.restart({ model: 'good' });
    assert.deepEqual(ids, before);
    await ctl.until('restart done', 90_000, () => ctl.reconciler.restartDone(ids) && model('good').phase === 'ready');
    running = false;
    await client;
    const afterIds = model('good').replicas.map((r) => r.id);
    assert.equal(afterIds.length, 1);
    assert.notDeepEqual(afterIds, before);
    assert.ok(ok > 5, `the client got answers (${ok})`);
    if (failed.length) console.error(JSON.stringify(ctl.logs.filter((l) => /replica|pass failed|node/.test(l.msg)).map((l) => ({ t: l.time, msg: l.msg, id: l.replica, model: l.model, reason: l.reason, code: l.code })), null, 0));
    assert.deepEqual(failed, []);
    assert.ok(!ctl.logs.some((l) => l.msg.startsWith('no room to surge')));
  });

  it('restart without room: the old replica serves through the drain grace, then is replaced', async () => {
    const oid = await fleet.push({ 'nodes/node-1.yaml': nodeWithCapacity(fleet.baseFiles(), 256 + 100) }, 'room for one replica only');
    // the capacity in force (a ready model on a reachable node was already so before the push)
    await ctl.until('applied', 90_000, () => ctl.reconciler.snapshot().appliedRevision === oid && ctl.reconciler.snapshot().nodes[0]?.reachable === true && model('good').phase === 'ready');
    const [old] = model('good').replicas.map((r) => r.id);
    const t0 = Date.now();
    const ids = await ctl.reconciler.restart({ model: 'good' });
    assert.deepEqual(ids, [old]);
    assert.ok(ctl.logs.some((l) => l.msg.startsWith('no room to surge') && l.replica === old));
    // during the grace (3 s in the test fleet) the old replica keeps serving
    await ctl.reconciler.requestPass('test');
    if (Date.now() - t0 < 2500) assert.deepEqual(ctl.reconciler.readyReplicas('good').map((r) => r.id), [old]);
    await ctl.until('replaced after the drain', 90_000, () => ctl.reconciler.restartDone(ids) && model('good').phase === 'ready');
    assert.ok(Date.now() - t0 >= 3000, 'not before the drain grace');
    assert.notEqual(model('good').replicas[0]!.id, old);
    assert.ok(ctl.logs.some((l) => l.msg === 'stopping replica' && l.reason === 'drained' && l.replica === old));
  });
});
