/**
 * A node's disk fills (a 1 MiB tmpfs as node-1's data dir, real sshd nodes, llama-server, a GGUF
 * served over HTTP that does not fit): the download fails as NODE_DISK_FULL, which is the node's
 * fault, so it does not count toward parking — a model free to go elsewhere is placed on node-2 and
 * serves; a model pinned to node-1 keeps being set back (never parked) and starts on its own once
 * the disk has room, with no retry. The node's free disk shows in the admin API's node JSON.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { nodeJson } from '../../src/wire/shape.js';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { startGatedOrigin, type GatedOrigin } from '../harness/gated-origin.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';

let fleet: TestFleet;
let ctl: TestController;
let origin: GatedOrigin;
let small: string;
const model = (extra: string[]): string => [`source: ${origin.url}`, `sha256: ${fleet.models.good.sha256}`, 'profile: tiny', 'replicas: 1', 'memory: 200MiB', ...extra, ''].join('\n');

function mount(size: string, remount = false): void {
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `${remount ? 'remount,' : ''}size=${size},mode=0777`, 'tmpfs', small], { encoding: 'utf8' });
  assert.equal(r.status, 0, `mount tmpfs at ${small}: ${r.stderr} (the fault tests run as root, as CI does)`);
}

before(async () => {
  fleet = await startTestFleet({ nodes: 2 });
  small = join(fleet.stateDir, 'small-disk');
  mkdirSync(small, { recursive: true });
  mount('1m');
  origin = await startGatedOrigin(fleet.models.good.path, null);
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  delete files['models/good.yaml'];
  files['nodes/node-1.yaml'] = files['nodes/node-1.yaml']!.replace(/data_dir: .*/, `data_dir: ${small}`).replace('transport: ssh', 'transport: ssh\nlabels: { disk: small }');
  files['models/roams.yaml'] = model([]);
  await fleet.push(files, 'fleet: a model downloaded over HTTP (node-1, the first choice, has the small disk)');
  ctl = await fleet.startController();
});

after(async () => {
  await ctl?.stop();
  spawnSync('pkill', ['-9', '-f', `${small}/models/`]); // the harness stops replicas under the nodes' own data dirs only
  spawnSync('umount', ['-l', small]);
  await origin?.close();
  await fleet?.cleanup();
});

describe('a node whose disk is full', () => {
  it('fails the download as NODE_DISK_FULL, not counted, and the model is placed on the other node', async () => {
    await ctl.until('roams ready', 120_000, () => ctl.reconciler.model('roams')?.phase === 'ready');
    const roams = ctl.reconciler.model('roams')!;
    assert.deepEqual(roams.replicas.map((r) => r.node), ['node-2']);
    assert.equal(roams.consecutiveFailures, 0);
    assert.ok(ctl.logs.some((l) => l.msg === 'replica start set back by its node (not counted): placed elsewhere for a while' && l.model === 'roams' && l.code === 'NODE_DISK_FULL'), 'roams was tried on node-1 first and set back');

  });

  it('a model pinned to that node is set back again and again, never counted, never parked; the node shows its free disk', async () => {
    await fleet.push({ 'models/pinned.yaml': model(['node_selector: { disk: small }']) }, 'fleet: a model pinned to the node with the small disk');
    await ctl.until('pinned set back six times', 120_000, () => ctl.logs.filter((l) => l.model === 'pinned' && l.code === 'NODE_DISK_FULL' && l.msg.startsWith('replica start set back')).length >= 6);
    const pinned = ctl.reconciler.model('pinned')!;
    assert.equal(pinned.consecutiveFailures, 0);
    assert.equal(pinned.parked, null);
    assert.equal(pinned.lastError?.code, 'NODE_DISK_FULL');
    const n1 = ctl.reconciler.snapshot().nodes.find((n) => n.name === 'node-1')!;
    assert.ok(nodeJson(n1, ctl.reconciler.spec()).diskFreeBytes! < 2 ** 20, `node-1 shows ${n1.diskFreeBytes} bytes free`);
    const scrape = parseExposition((await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
    assert.ok(sampleValue(scrape, 'llmgw_node_disk_free_bytes', { node: 'node-1' })! < 2 ** 20);
    assert.ok(sampleValue(scrape, 'llmgw_node_disk_free_bytes', { node: 'node-2' })! > 2 ** 20);
  });

  it('once the disk has room, the pinned model starts on its own (no retry) and nothing is left half-downloaded', async () => {
    mount('64m', true);
    await ctl.until('pinned ready after the disk grew', 120_000, () => ctl.reconciler.model('pinned')?.phase === 'ready');
    assert.deepEqual(ctl.reconciler.model('pinned')!.replicas.map((r) => r.node), ['node-1']);
    assert.equal(ctl.logs.filter((l) => l.msg === 'retry handled').length, 0);
    const parts = spawnSync('find', [small, '-name', '*.part'], { encoding: 'utf8' }).stdout.trim();
    assert.equal(parts, '', 'a partial download was left behind');
    const scan = new SecretsScan().secret('engine key', 'test-engine-key').secret('git token', fleet.git.token);
    scan.collect('controller log', ctl.logs.map((l) => JSON.stringify(l)).join('\n'));
    scan.collect('snapshot', JSON.stringify(ctl.reconciler.snapshot()));
    scan.collect('metrics', (await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
    scan.assertClean();
    recordFault({
      fault: "7 a node's disk fills",
      injected: "a 1 MiB tmpfs as node-1's data dir (real sshd), a GGUF downloaded over HTTP that does not fit, node-2 with room",
      held: `NODE_DISK_FULL, not counted: the free model placed on node-2; the pinned one set back 6+ times, never parked, node disk free in /nodes and llmgw_node_disk_free_bytes; started on its own once the disk grew, no partial left; ${scan.summary}`,
    });
  });
});
