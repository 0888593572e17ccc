/**
 * Fault 3: a network partition between the controller and a node halfway through a model download.
 * A TCP forwarder between the controller and a real sshd destroys every connection (sshd and what it
 * runs are untouched, as in a real partition: the node's download keeps going, with no pty and no
 * SIGHUP) and refuses new ones for 2 s. The GGUF comes from a throttled HTTP origin. Must hold: at
 * most one download of the file on the node at any time; the final file matches its sha256 with no
 * partial left; no checksum mismatch (nothing counted toward parking); the model becomes ready.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { startTcpForwarder, type TcpForwarder } from '../harness/tcp-forwarder.js';
import { startThrottledOrigin, type ThrottledOrigin } from '../harness/throttled-origin.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { recordFault } from './report.js';
import { SecretsScan } from './secrets-scan.js';

let fleet: TestFleet;
let ctl: TestController;
let fwd: TcpForwarder;
let origin: ThrottledOrigin;
let model: TinyModelFile;
const BYTES_PER_SECOND = 300 * 1024;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  model = await writeTinyModel(join(fleet.stateDir, '..', 'slowdl.gguf'), { seed: 11 });
  origin = await startThrottledOrigin(model.path, { bytesPerSecond: BYTES_PER_SECOND });
  fwd = await startTcpForwarder(fleet.nodes[0]!.port);
  const files = fleet.baseFiles();
  for (const f of ['models/good.yaml', 'models/kev.yaml', 'models/huge.yaml']) delete files[f];
  files['nodes/node-1.yaml'] = files['nodes/node-1.yaml']!.replace(`port: ${fleet.nodes[0]!.port}`, `port: ${fwd.port}`);
  files['models/slowdl.yaml'] = [`source: ${origin.url}`, `sha256: ${model.sha256}`, 'profile: tiny', 'replicas: 1', ''].join('\n');
  await fleet.push(files, 'a model downloaded slowly, through a forwarder that will be cut');
});

after(async () => {
  await fleet?.cleanup();
  await fwd?.close();
  await origin?.close();
});

/** curl processes writing this model's part file right now. */
function downloads(): number {
  const r = spawnSync('pgrep', ['-a', 'curl'], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l.includes(`${model.sha256}.gguf.part`)).length;
}

describe('fault 3: a partition mid-download', () => {
  it('cut halfway through the download, restored after 2 s: one download, the right file, nothing counted, ready', async () => {
    let maxDownloads = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        maxDownloads = Math.max(maxDownloads, downloads());
        await sleep(100);
      }
    })();
    ctl = await fleet.startController();
    const first = () => origin.gets.find((g) => g.range === '' || /^bytes=\d+-$/.test(g.range));
    const deadline = Date.now() + 60_000;
    while (!(first() && first()!.sent > model.bytes * 0.3)) {
      if (Date.now() > deadline) throw new Error(`the download did not start: ${JSON.stringify(origin.gets)}`);
      await sleep(50);
    }
    const sentAtCut = first()!.sent;
    fwd.cut();
    await sleep(2000);
    fwd.restore();
    await ctl.until(() => ctl.reconciler.model('slowdl')?.phase === 'ready', 'slowdl ready after the partition', 120_000);
    sampling = false;
    await sampler;

    const m = ctl.reconciler.model('slowdl')!;
    assert.equal(m.consecutiveFailures, 0, JSON.stringify(m.lastError));
    assert.ok(!ctl.logs.some((l) => JSON.stringify(l).includes('MODEL_CHECKSUM_MISMATCH')), 'no checksum mismatch');
    assert.ok(maxDownloads <= 1, `${maxDownloads} downloads of the file at once`);
    assert.ok(maxDownloads === 1, 'the sampler saw the download');
    const modelsDir = join(fleet.nodes[0]!.dataDir, 'models');
    const left = readdirSync(modelsDir).filter((f) => f.endsWith('.part') || f.endsWith('.err'));
    assert.deepEqual(left, [], 'no partial left');
    const final = join(modelsDir, `${model.sha256}.gguf`);
    assert.ok(existsSync(final));
    assert.equal(createHash('sha256').update(readFileSync(final)).digest('hex'), model.sha256);
    // the download that outlived its connection finished the file; nothing downloaded it again
    const full = origin.gets.filter((g) => g.range === '' || /^bytes=\d+-$/.test(g.range));
    assert.equal(full.length, 1, JSON.stringify(origin.gets));
    assert.ok(fwd.refused > 0 || fwd.accepted > 1, 'the controller reconnected after the cut');

    const scan = new SecretsScan().secret('engine key', 'test-engine-key').secret('git token', fleet.git.token);
    scan.collect('controller log', ctl.logs.map((l) => JSON.stringify(l)).join('\n'));
    scan.collect('snapshot', JSON.stringify(ctl.reconciler.snapshot()));
    scan.assertClean();
    recordFault({
      fault: '3 partition mid-download',
      injected: `every controller↔sshd connection destroyed (forwarder, sshd untouched) at ${Math.round((sentAtCut / model.bytes) * 100)}% of a ${(model.bytes / 2 ** 20).toFixed(1)} MiB download at ${BYTES_PER_SECOND / 1024} KiB/s, new ones refused for 2 s`,
      held: `at most ${maxDownloads} download of the file at once (the retry waited on the node's lock); one full GET; sha256 matches, no .part/.err left; 0 failures counted, no checksum mismatch; ready; ${scan.summary}`,
    });
  });

  it('cut right after "starting replica", restored after 2 s: the replica ends adopted or stopped — ready once, no orphan, nothing counted', async () => {
    const files = fleet.baseFiles();
    await fleet.push({ 'models/good.yaml': files['models/good.yaml']! }, 'add good (file:// source: its start is quick to reach)');
    const mark = ctl.logs.length;
    void ctl.reconciler.requestPass('test');
    const deadline = Date.now() + 60_000;
    while (!ctl.logs.slice(mark).some((l) => l.msg === 'starting replica' && l.model === 'good')) {
      if (Date.now() > deadline) throw new Error('good never started');
      await sleep(20);
    }
    fwd.cut();
    await sleep(2000);
    fwd.restore();
    await ctl.until(() => ctl.reconciler.model('good')?.phase === 'ready', 'good ready after the partition', 120_000);
    // settled: every llama-server of good on the node is a replica the controller reports
    await ctl.until(() => {
      const known = new Set(ctl.reconciler.model('good')!.replicas.map((r) => r.id));
      const running = replicaProcesses(fleet.nodes[0]!.dataDir).filter((id) => id.startsWith('good-'));
      return running.length === 1 && running.every((id) => known.has(id));
    }, 'one llama-server of good, the one the controller reports', 60_000);
    const m = ctl.reconciler.model('good')!;
    assert.equal(m.consecutiveFailures, 0, JSON.stringify(m.lastError));
    assert.equal(m.replicas.length, 1);
    recordFault({
      fault: '3 partition mid-start',
      injected: "every controller↔sshd connection destroyed right after 'starting replica', new ones refused for 2 s",
      held: 'the replica ended adopted or stopped and replaced: one llama-server of the model, the one the controller reports; 0 failures counted; ready',
    });
  });
});
