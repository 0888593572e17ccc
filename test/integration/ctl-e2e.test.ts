/**
 * `llmgw ctl` against the real stack (sshd nodes, llama-server, git http-backend) through the admin
 * API: retry unparks a parked model that becomes ready once the cause is fixed; retry on a model
 * that is not parked says so; restart --model keeps the model serving through the router.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stopIds } from '../../src/reconciler/stops.js';
import { runCli } from '../harness/cli.js';
import { serveFront, type Front } from '../harness/front.js';
import { keepAsking } from '../harness/router-client.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';

let fleet: TestFleet;
let ctl: TestController;
let front: Front;
let adminUrl: string;
let routerUrl: string;
let lateDir: string;
/** The replicas of good that `restart --model good` replaced. */
let replaced: readonly string[] = [];
const TOKEN = 'ctl-e2e-admin-token';

const model = (name: string) => ctl.reconciler.model(name)!;
const ctlRun = (...args: string[]) => runCli(['ctl', '--server', adminUrl, '--token', TOKEN, ...args]);

before(async () => {
  fleet = await startTestFleet({ nodes: 2 });
  lateDir = mkdtempSync(join(tmpdir(), 'llmgw-late-engine-'));
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  // an engine version whose binary is not installed on the nodes yet
  files['engines/llama-cpp.yaml'] += `  late:\n    path: ${lateDir}/engine/llama-server\n`;
  files['profiles/late.yaml'] = files['profiles/tiny.yaml']!.replace('llama-cpp@test', 'llama-cpp@late');
  files['models/lazy.yaml'] = modelYaml(fleet.models.good2, ['replicas: 1']).replace('profile: tiny', 'profile: late');
  await fleet.push(files, 'a model on an engine that is not installed yet');
  ctl = await fleet.startController();
  front = await serveFront(ctl, TOKEN);
  ({ adminUrl, routerUrl } = front);
});

after(async () => {
  await front?.close();
  await fleet?.cleanup();
  rmSync(lateDir, { recursive: true, force: true });
});

describe('llmgw ctl against the real stack', () => {
  it('status shows the parked model with the engine’s reason', async () => {
    await ctl.until('lazy parked, good ready', 90_000, () => model('lazy').phase === 'parked' && model('good').phase === 'ready');
    assert.equal(model('lazy').parked?.lastError.code, 'ENGINE_NOT_FOUND');
    const r = await ctlRun('status');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /PARKED \(1\)/);
    assert.match(r.stdout, /lazy\s+0\/1\s+parked/);
    assert.match(r.stdout, /llmgw ctl retry lazy/);
  });

  it('retry on a parked model unparks it; once the cause is fixed it becomes ready', async () => {
    symlinkSync(dirname(fleet.engineBinary), join(lateDir, 'engine'));
    const r = await ctlRun('retry', 'lazy');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /lazy: unparked/);
    await ctl.until('lazy ready after the retry', 90_000, () => model('lazy').phase === 'ready');
    assert.equal(model('lazy').consecutiveFailures, 0);
  });

  it('retry on a model that is not parked says so and clears its backoff', async () => {
    const r = await ctlRun('retry', 'good');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /good: not parked; backoff cleared/);
    const json = await ctlRun('retry', 'good-alias', '-o', 'json');
    assert.equal((JSON.parse(json.stdout) as { outcome: string }).outcome, 'backoff-cleared');
  });

  it('restart --model keeps the model serving through the router when there is room', async () => {
    const before = model('good').replicas.map((r) => r.id);
    replaced = before;
    const client = keepAsking(routerUrl, 'good');
    const r = await ctlRun('restart', '--model', 'good');
    const { ok, failures } = await client.stop();
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const afterIds = model('good').replicas.filter((x) => x.phase === 'ready').map((x) => x.id);
    assert.equal(afterIds.length, 1);
    assert.ok(!before.includes(afterIds[0]!), 'the replica was replaced');
    assert.ok(ok > 3, `requests were answered during the restart (${ok})`);
    assert.deepEqual(failures, []);
  });

  it('logs shows a replica’s log tail; a replaced one’s log is gone with it (REPLICA_NOT_FOUND)', async () => {
    // The restart above returns once its old replica is gone from its node; the snapshot may still
    // list it (stopping) until the next pass, and its log went with its directory. The replica whose
    // log is read is the one that stays: the fleet settled, good's one replica ready, none stopping.
    await ctl.until('good settled: its replica ready, none being stopped', 90_000, () => {
      const m = model('good');
      return m.phase === 'ready' && m.replicas.length === m.desired && m.replicas.every((x) => x.phase === 'ready') && stopIds(ctl.reconciler.record()).length === 0;
    });
    const [replica] = model('good').replicas;
    assert.ok(replica && !replaced.includes(replica.id), `the new replica, not one of ${replaced.join(', ')}`);
    const r = await ctlRun('logs', replica.id, '--lines', '20');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /llama|server|listening|slot/i);
    assert.ok(r.stdout.trimEnd().split('\n').length <= 20, r.stdout);
    // the replaced replica: no longer listed, its log gone; ctl says so with the catalogue's code and hint
    const gone = await ctlRun('logs', replaced[0]!);
    assert.notEqual(gone.code, 0, gone.stdout);
    assert.match(gone.stderr, new RegExp(`no replica "${replaced[0]}" \\[REPLICA_NOT_FOUND\\]`));
    assert.match(gone.stderr, /hint: .*a stopped replica's directory goes with it, its log included/);
  });
});
