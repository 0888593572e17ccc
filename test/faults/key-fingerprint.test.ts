/**
 * Fault 2, the driver's side: a replica records a fingerprint of the engine key it was started with
 * (first 16 hex of sha256, in its state.json on the node; never the key), and observe() reports it as
 * ReplicaObservation.keyFingerprint, so a controller whose key changed (a lost state dir) can tell
 * the replicas that will refuse it. Against a real sshd and the real llama-server.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { engineKeyFingerprint } from '../../src/nodes/driver.js';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { killReplicasUnder } from '../harness/controller.js';
import { llamaServerDir } from '../harness/llama-server.js';
import { sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { tinyProfile } from '../harness/nodes-driver.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';

const OLD_KEY = `old-engine-key-${randomBytes(12).toString('hex')}`;
const NEW_KEY = `new-engine-key-${randomBytes(12).toString('hex')}`;
let sshd: SshdInstance;
let driver: ShellNodeDriver;
let work: string;

before(async () => {
  work = await mkdtemp(join(tmpdir(), 'llmgw-fault-fp-'));
  sshd = await startSshd();
  const spec = sshdNodeSpec(sshd, { name: 'node-fp' });
  driver = new ShellNodeDriver(spec, openShell(spec, { secretsDir: sshd.secretsDir }), { artifactCacheDir: join(work, 'cache') });
});

after(async () => {
  await driver?.close();
  if (sshd) killReplicasUnder(sshd.dataDir);
  await sshd?.stop();
  await rm(work, { recursive: true, force: true });
});

describe('fault 2 (driver side): the engine key fingerprint of each replica', () => {
  it('observe() reports the fingerprint of the key a replica was started with; the key itself is on the node nowhere but its process', async () => {
    const llamaDir = await llamaServerDir();
    const model = await writeTinyModel(join(work, 'tiny.gguf'), { seed: 5 });
    const { binary } = await driver.ensureEngine({ engine: 'llama', version: 'cached', install: { method: 'path', path: join(llamaDir, 'llama-server') } });
    const m = await driver.ensureModel(`file://${model.path}`, model.sha256);
    await driver.startReplica({ id: 'fp-old', model: 'tiny', digest: 'd1', modelPath: m.path, binary, profile: tinyProfile(), apiKey: OLD_KEY });
    await driver.waitReady('fp-old', { timeoutMs: 60_000 });
    await driver.startReplica({ id: 'fp-new', model: 'tiny', digest: 'd1', modelPath: m.path, binary, profile: tinyProfile(), apiKey: NEW_KEY });
    await driver.waitReady('fp-new', { timeoutMs: 60_000 });

    const obs = await driver.observe();
    const byId = new Map(obs.replicas.map((r) => [r.id, r]));
    assert.equal(byId.get('fp-old')?.keyFingerprint, engineKeyFingerprint(OLD_KEY));
    assert.equal(byId.get('fp-new')?.keyFingerprint, engineKeyFingerprint(NEW_KEY));
    assert.notEqual(engineKeyFingerprint(OLD_KEY), engineKeyFingerprint(NEW_KEY));
    assert.match(engineKeyFingerprint(NEW_KEY), /^[0-9a-f]{16}$/);
    // the fingerprint tells which replica takes which key: the old one refuses the new key
    const refused = await fetch(`${byId.get('fp-old')!.endpoint}/completion`, { method: 'POST', headers: { authorization: `Bearer ${NEW_KEY}`, 'content-type': 'application/json' }, body: '{"prompt":"hi","n_predict":1}' });
    assert.equal(refused.status, 401);

    // on the node: the fingerprint in state.json, the key in no file of the data dir
    const scan = new SecretsScan().secret('old engine key', OLD_KEY).secret('new engine key', NEW_KEY);
    for (const id of ['fp-old', 'fp-new']) {
      const dir = join(sshd.dataDir, 'replicas', id);
      const state = await readFile(join(dir, 'state.json'), 'utf8');
      assert.equal((JSON.parse(state) as { keyFingerprint: string }).keyFingerprint, id === 'fp-old' ? engineKeyFingerprint(OLD_KEY) : engineKeyFingerprint(NEW_KEY));
      for (const f of await readdir(dir)) scan.collect(`node ${id}/${f}`, await readFile(join(dir, f), 'utf8'));
    }
    scan.collect('observation', JSON.stringify(obs));
    scan.assertClean();

    // a replica started by an llmgw that did not record it: no fingerprint, not a wrong one
    const stateFile = join(sshd.dataDir, 'replicas', 'fp-new', 'state.json');
    const st = JSON.parse(await readFile(stateFile, 'utf8')) as Record<string, unknown>;
    delete st.keyFingerprint;
    await (await import('node:fs/promises')).writeFile(stateFile, JSON.stringify(st));
    const again = (await driver.observe()).replicas.find((r) => r.id === 'fp-new')!;
    assert.equal(again.keyFingerprint, undefined);
    assert.equal(again.state, 'ready');

    for (const id of ['fp-old', 'fp-new']) await driver.stopReplica(id, 2000);
    recordFault({ fault: '2 lost state dir: key fingerprint (driver side)', injected: 'two replicas on a real sshd node started with different engine keys; one state.json without the field', held: `observe() reports each replica's keyFingerprint (16 hex of sha256), absent when not recorded; the old-key replica 401s the new key; ${scan.summary}` });
  });
});
