/**
 * Node-side fencing against a real OpenSSH sshd node and the local transport (the same scripts): two
 * drivers with different owners on one node, the same owner at epochs 5 and 7 (one after the other,
 * and two starts racing on the node's owner lock), and a stop whose grace outlives its epoch. Launches
 * are real llama-server replicas of a tiny GGUF, except where the replica must ignore SIGTERM.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { NodeSpec, EngineVersionSpec } from '../../src/fleet-spec/types.js';
import type { Fence, NodeFenceView, ReplicaStartSpec } from '../../src/nodes/driver.js';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { rejectsWith } from '../harness/errors.js';
import { llamaServerDir } from '../harness/llama-server.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { localNodeSpec, sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { until } from '../harness/wait.js';
import { killReplica, pidAlive, tinyProfile } from './nodes-driver-helpers.js';

let work: string;
let sshd: SshdInstance;
let good: TinyModelFile;
let other: TinyModelFile;
let llama: string;
let stubborn: string;
let marker: string;
const drivers: ShellNodeDriver[] = [];
const pids = new Set<number>();
const holders: ChildProcess[] = [];

before(async () => {
  llama = join(await llamaServerDir(), 'llama-server');
  work = await mkdtemp(join(tmpdir(), 'llmgw-fence-'));
  sshd = await startSshd();
  good = await writeTinyModel(join(work, 'models', 'tiny.gguf'));
  other = await writeTinyModel(join(work, 'models', 'other.gguf'), { seed: 9 });
  marker = join(work, 'pwned');
  // a "replica" that survives SIGTERM (and says it got one), for the stop's second check
  stubborn = join(work, 'stubborn-server');
  await writeFile(stubborn, `#!/bin/sh
case "$1" in --version) echo "stubborn 1"; exit 0;; --list-devices) echo "Available devices:"; exit 0;; esac
trap 'echo got-term' TERM
while :; do sleep 1; done
`);
  await chmod(stubborn, 0o755);
});

after(async () => {
  for (const h of holders) if (h.exitCode === null) h.kill('SIGKILL');
  for (const d of drivers) await d.close();
  for (const pid of pids) killReplica(pid, [work, sshd?.dir ?? '']);
  for (const pid of pids) if (pidAlive(pid)) killReplica(pid, [work, sshd?.dir ?? '']);
  await sshd?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

/** A label that is free text: quotes, command substitutions, a newline. */
const hostile = (): string => `llmgw on h'ost "b" $(touch ${marker}) \`touch ${marker}\`\n; rm -rf / &`;

const pathEngine = (path: string, version = 'cached'): EngineVersionSpec => ({ engine: 'llama', version, install: { method: 'path', path } });

/** A fence the test can change between actions. */
interface FenceRef { f: Fence }

function nodeFor(transport: 'ssh' | 'local', name: string): NodeSpec {
  return transport === 'ssh'
    ? sshdNodeSpec(sshd, { name, dataDir: join(sshd.dir, `data-${name}`) })
    : localNodeSpec(join(work, `data-${name}`), { name });
}

function driver(node: NodeSpec, ref: FenceRef | null): ShellNodeDriver {
  const shell = openShell(node, { secretsDir: node.transport === 'ssh' ? sshd.secretsDir : work });
  const d = new ShellNodeDriver(node, shell, ref ? { fence: () => ref.f } : {});
  drivers.push(d);
  return d;
}

function startSpec(id: string, modelPath: string, binary: string): ReplicaStartSpec {
  return { id, model: 'tiny', digest: 'd1', modelPath, binary, profile: tinyProfile(), apiKey: 'sk-fence-test' };
}

const record = (node: NodeSpec): Promise<string> => readFile(join(node.dataDir, '.locks', 'owner'), 'utf8');

async function replicaFence(node: NodeSpec, id: string): Promise<{ epoch: number; seq: number }> {
  const st = JSON.parse(await readFile(join(node.dataDir, 'replicas', id, 'state.json'), 'utf8')) as { fence?: { epoch: number; seq: number } };
  assert.ok(st.fence, `replica ${id}'s state.json records the fence it was started under`);
  return st.fence;
}

/** Holds the node's owner lock from outside (as a script would) until release(). */
async function holdOwnerLock(node: NodeSpec): Promise<{ release: () => Promise<void> }> {
  const lock = join(node.dataDir, '.locks', 'owner.lock');
  await mkdir(join(node.dataDir, '.locks'), { recursive: true });
  const h = spawn('flock', [lock, 'sh', '-c', 'echo locked; read _'], { stdio: ['pipe', 'pipe', 'inherit'] });
  holders.push(h);
  await new Promise<void>((resolve, reject) => {
    h.once('error', reject);
    h.stdout.on('data', (b: Buffer) => { if (b.toString().includes('locked')) resolve(); });
  });
  return {
    release: async () => {
      const gone = new Promise((resolve) => h.once('exit', resolve));
      h.stdin.end();
      await gone;
    },
  };
}

/** Node scripts waiting on the owner lock: `flock` processes whose fd 7 is the node's owner.lock. */
async function lockWaiters(node: NodeSpec): Promise<number> {
  const lock = join(node.dataDir, '.locks', 'owner.lock');
  let n = 0;
  for (const pid of (await readdir('/proc')).filter((p) => /^\d+$/.test(p))) {
    try {
      if ((await readFile(`/proc/${pid}/comm`, 'utf8')).trim() !== 'flock') continue;
      if ((await readlink(`/proc/${pid}/fd/7`)) === lock) n++;
    } catch {
      /* gone, or not ours */
    }
  }
  return n;
}

for (const transport of ['ssh', 'local'] as const) {
  describe(`${transport} transport`, () => {
    test('two owners: the first claims the node on observe; the second sees "other" and every write of it is refused NODE_OWNED; when the first stops renewing, the second takes over after the ttl', async () => {
      const node = nodeFor(transport, 'owners');
      const fa: FenceRef = { f: { owner: 'ctl-a', label: 'llmgw on host-a (state dir /var/lib/llmgw)', epoch: 0, ttlSeconds: 3600 } };
      const fb: FenceRef = { f: { owner: "ctl-b '$(id)", label: hostile(), epoch: 0, ttlSeconds: 3600 } };
      const a = driver(node, fa);
      const b = driver(node, fb);

      const oa = await a.observe();
      assert.deepEqual(oa.fence, { state: 'mine', owner: 'ctl-a', label: fa.f.label, epoch: 0, renewedAgoSeconds: 0, ttlSeconds: 3600, seq: 1 });
      const { binary } = await a.ensureEngine(pathEngine(llama));
      const m = await a.ensureModel(`file://${good.path}`, good.sha256);
      const h = await a.startReplica(startSpec('a-1', m.path, binary));
      pids.add(h.pid);
      await a.waitReady('a-1', { timeoutMs: 60_000 });
      const held = await record(node);

      const ob = await b.observe();
      assert.equal(ob.fence?.state, 'other');
      assert.equal(ob.fence?.owner, 'ctl-a');
      assert.equal(ob.fence?.label, fa.f.label);
      assert.equal(ob.fence?.epoch, 0);
      assert.equal(ob.fence?.ttlSeconds, 3600);
      assert.deepEqual(ob.replicas.map((r) => [r.id, r.state]), [['a-1', 'ready']], 'a look by the other owner still sees the node');
      assert.equal(await record(node), held, 'a look by the other owner changes nothing');

      const refused = await rejectsWith(b.startReplica(startSpec('b-1', m.path, binary)), 'NODE_OWNED');
      assert.ok(refused.message.includes(fa.f.label) && refused.message.includes(node.name), refused.message);
      assert.match(refused.message, /renewed its ownership \d+ s ago/);
      assert.equal(refused.detail['owner'], 'ctl-a');
      assert.equal(existsSync(join(node.dataDir, 'replicas', 'b-1')), false, 'nothing of the refused start is on the node');
      await rejectsWith(b.stopReplica('a-1', 1_000), 'NODE_OWNED');
      await rejectsWith(b.ensureModel(`file://${other.path}`, other.sha256), 'NODE_OWNED');
      assert.equal(existsSync(join(node.dataDir, 'models', `${other.sha256}.gguf`)), false);
      await rejectsWith(b.ensureEngine(pathEngine(llama, 'v2')), 'NODE_OWNED');
      assert.equal(existsSync(join(node.dataDir, 'engines', 'llama', 'v2')), false);
      assert.ok(pidAlive(h.pid), "the first owner's replica survives the second's stop");
      assert.deepEqual(replicaProcesses(node.dataDir), ['a-1']);
      assert.equal((await a.observe()).replicas.find((r) => r.id === 'a-1')?.state, 'ready');
      assert.equal(await record(node).then((r) => r.split(' ')[1]), held.split(' ')[1], 'the refused actions left the record the first owner\'s');

      // a driver without a fence neither reads nor writes the record (as before fencing)
      const plain = driver(node, null);
      const before = await record(node);
      assert.equal('fence' in (await plain.observe()), false);
      assert.equal(await record(node), before);

      // the first owner renews once more, with a 1 s ttl, then stops renewing
      fa.f = { ...fa.f, ttlSeconds: 1 };
      const renewedBy = Date.now();
      assert.equal((await a.observe()).fence?.state, 'mine');
      let took: NodeFenceView | undefined;
      await until(async () => {
        const f = (await b.observe()).fence;
        if (f?.state === 'mine') { took = f; return true; }
        assert.equal(f?.state, 'other');
        return false;
      }, 'the second owner to take the node over', 30_000, 100);
      assert.ok(Date.now() - renewedBy >= 1_000, 'not before the ttl passed');
      assert.equal(took?.owner, fb.f.owner);
      assert.equal(took?.label, fb.f.label, 'the free-text label round-trips exactly');
      assert.equal(took?.tookOverFrom?.owner, 'ctl-a');
      assert.equal(took?.tookOverFrom?.label, fa.f.label);
      assert.ok((took?.tookOverFrom?.renewedAgoSeconds ?? 0) > 1);

      const back = await a.observe();
      assert.equal(back.fence?.state, 'other');
      assert.equal(back.fence?.label, fb.f.label);
      const e = await rejectsWith(a.startReplica(startSpec('a-2', m.path, binary)), 'NODE_OWNED');
      assert.ok(e.message.includes(fb.f.label), e.message);
      await b.stopReplica('a-1', 5_000);
      assert.equal(pidAlive(h.pid), false);
      assert.equal(existsSync(marker), false, 'no label or owner value ran as a command');
    });

    test('same owner, epoch 5 then 7: after the 7-driver\'s first action every write of the 5-driver is refused NODE_FENCED and nothing is launched; its look sees "newer-epoch" and changes nothing', async () => {
      const node = nodeFor(transport, 'epochs');
      const f5: FenceRef = { f: { owner: 'cluster-x', label: 'etcd cluster /llmgw/test', epoch: 5, ttlSeconds: 3600 } };
      const f7: FenceRef = { f: { ...f5.f, epoch: 7 } };
      const d5 = driver(node, f5);
      const d7 = driver(node, f7);
      const { binary } = await d5.ensureEngine(pathEngine(llama));
      const m = await d5.ensureModel(`file://${good.path}`, good.sha256);
      assert.equal((await d5.observe()).fence?.epoch, 5);

      const h7 = await d7.startReplica(startSpec('r7', m.path, binary));
      pids.add(h7.pid);
      assert.equal((await replicaFence(node, 'r7')).epoch, 7);
      const held = await record(node);

      const e = await rejectsWith(d5.startReplica(startSpec('r5', m.path, binary)), 'NODE_FENCED');
      assert.match(e.message, /epoch 5 is superseded/);
      assert.ok(e.message.includes('etcd cluster /llmgw/test') && e.message.includes('epoch 7'), e.message);
      assert.equal(e.detail['epoch'], 7);
      assert.equal(existsSync(join(node.dataDir, 'replicas', 'r5')), false);
      await d7.waitReady('r7', { timeoutMs: 60_000 });
      assert.deepEqual(replicaProcesses(node.dataDir), ['r7'], 'only the newer epoch launched');

      const o5 = await d5.observe();
      assert.deepEqual(
        { state: o5.fence?.state, owner: o5.fence?.owner, epoch: o5.fence?.epoch },
        { state: 'newer-epoch', owner: 'cluster-x', epoch: 7 },
      );
      await rejectsWith(d5.stopReplica('r7', 1_000), 'NODE_FENCED');
      await rejectsWith(d5.ensureModel(`file://${other.path}`, other.sha256), 'NODE_FENCED');
      assert.equal(await record(node), held, 'a superseded epoch changes nothing');
      assert.ok(pidAlive(h7.pid));

      await d7.stopReplica('r7', 5_000);
      assert.equal(pidAlive(h7.pid), false);
    });

    test('epochs 5 and 7 start at once (both waiting on the owner lock): the 5-start never launches after 7 was recorded', async () => {
      const node = nodeFor(transport, 'race');
      const f5: FenceRef = { f: { owner: 'cluster-y', label: 'etcd cluster /llmgw/race', epoch: 5, ttlSeconds: 3600 } };
      const f7: FenceRef = { f: { ...f5.f, epoch: 7 } };
      const d5 = driver(node, f5);
      const d7 = driver(node, f7);
      const { binary } = await d7.ensureEngine(pathEngine(llama));
      const m = await d7.ensureModel(`file://${good.path}`, good.sha256);
      const seen: string[] = [];
      for (let k = 1; k <= 3; k++) {
        f5.f = { ...f5.f, epoch: 10 * k + 5 };
        f7.f = { ...f7.f, epoch: 10 * k + 7 };
        const hold = await holdOwnerLock(node);
        const p5 = d5.startReplica(startSpec(`r5-${k}`, m.path, binary));
        const p7 = d7.startReplica(startSpec(`r7-${k}`, m.path, binary));
        await until(async () => (await lockWaiters(node)) === 2, 'both starts waiting on the owner lock', 30_000, 20);
        await hold.release();
        const [s5, s7] = await Promise.allSettled([p5, p7]);
        assert.equal(s7.status, 'fulfilled', s7.status === 'rejected' ? String(s7.reason) : '');
        pids.add(s7.value.pid);
        const r7 = await replicaFence(node, `r7-${k}`);
        assert.equal(r7.epoch, 10 * k + 7);
        assert.equal((await record(node)).split(' ')[2], String(10 * k + 7), 'the record keeps the higher epoch');
        if (s5.status === 'fulfilled') {
          pids.add(s5.value.pid);
          const r5 = await replicaFence(node, `r5-${k}`);
          assert.equal(r5.epoch, 10 * k + 5);
          assert.ok(r5.seq < r7.seq, `the epoch-${10 * k + 5} launch (seq ${r5.seq}) came before epoch ${10 * k + 7} was recorded (seq ${r7.seq})`);
          seen.push('5 then 7');
        } else {
          await rejectsWith(p5, 'NODE_FENCED');
          assert.equal(existsSync(join(node.dataDir, 'replicas', `r5-${k}`)), false);
          seen.push('7 then 5 (refused)');
        }
        const expected = [`r7-${k}`, ...(s5.status === 'fulfilled' ? [`r5-${k}`] : [])].sort();
        await until(() => replicaProcesses(node.dataDir).length === expected.length, 'the launched replicas to exec llama-server', 30_000, 20);
        assert.deepEqual(replicaProcesses(node.dataDir), expected);
        for (const id of expected) await d7.stopReplica(id, 5_000);
        assert.deepEqual(replicaProcesses(node.dataDir), []);
      }
      process.stderr.write(`[node-fence ${transport}] concurrent starts: ${seen.join(', ')}\n`);
    });

    test('a start holds the owner lock from its check through its launch: a newer epoch\'s start waits for it, then both stand in order', async () => {
      const node = nodeFor(transport, 'held');
      const f5: FenceRef = { f: { owner: 'cluster-h', label: 'etcd cluster /llmgw/held', epoch: 5, ttlSeconds: 3600 } };
      const f7: FenceRef = { f: { ...f5.f, epoch: 7 } };
      const d5 = driver(node, f5);
      const d7 = driver(node, f7);
      const { binary } = await d5.ensureEngine(pathEngine(llama));
      const m = await d5.ensureModel(`file://${good.path}`, good.sha256);
      // the replica dir's lock (taken after the owner lock) held from outside: the 5-start stops
      // between its fence check and its launch
      const replicasLock = join(node.dataDir, 'replicas', '.lock');
      await mkdir(replicasLock, { recursive: true });
      const seqOf = async (): Promise<number> => Number((await record(node)).trim().split(' ')[6]);
      const seq0 = await seqOf();
      const p5 = d5.startReplica(startSpec('h5', m.path, binary));
      p5.catch(() => {});
      await until(async () => (await seqOf()) > seq0, 'the 5-start to pass its fence check', 30_000, 20);
      const p7 = d7.startReplica(startSpec('h7', m.path, binary));
      p7.catch(() => {});
      await until(async () => {
        assert.equal((await record(node)).split(' ')[2], '5', 'epoch 7 is not recorded while the 5-start is launching');
        return (await lockWaiters(node)) === 1;
      }, 'the 7-start to wait on the owner lock', 30_000, 20);
      assert.equal((await record(node)).split(' ')[2], '5', 'epoch 7 is not recorded while the 5-start is launching');
      await rm(replicasLock, { recursive: true });
      const [h5, h7] = await Promise.all([p5, p7]);
      pids.add(h5.pid);
      pids.add(h7.pid);
      const [r5, r7] = [await replicaFence(node, 'h5'), await replicaFence(node, 'h7')];
      assert.ok(r5.epoch === 5 && r7.epoch === 7 && r5.seq < r7.seq, JSON.stringify({ r5, r7 }));
      await rejectsWith(d5.startReplica(startSpec('h5b', m.path, binary)), 'NODE_FENCED');
      for (const id of ['h5', 'h7']) await d7.stopReplica(id, 5_000);
      assert.deepEqual(replicaProcesses(node.dataDir), []);
    });

    test('a stop whose grace outlives its epoch: the newer epoch recorded during the grace makes it refuse the SIGKILL and keep the replica dir', async () => {
      const node = nodeFor(transport, 'grace');
      const f5: FenceRef = { f: { owner: 'cluster-z', label: 'etcd cluster /llmgw/grace', epoch: 5, ttlSeconds: 3600 } };
      const f7: FenceRef = { f: { ...f5.f, epoch: 7 } };
      const d5 = driver(node, f5);
      const d7 = driver(node, f7);
      const { binary } = await d5.ensureEngine({ engine: 'stub', version: '1', install: { method: 'path', path: stubborn } });
      const m = await d5.ensureModel(`file://${good.path}`, good.sha256);
      const h = await d5.startReplica(startSpec('s-1', m.path, binary));
      pids.add(h.pid);
      const log = join(node.dataDir, 'replicas', 's-1', 'log');
      const GRACE = 8_000;
      const stopping = d5.stopReplica('s-1', GRACE);
      stopping.catch(() => {});
      await until(async () => (await readFile(log, 'utf8').catch(() => '')).includes('got-term'), 'the replica to get SIGTERM', 30_000, 20);
      const termSeen = Date.now();
      assert.equal((await d7.observe()).fence?.epoch, 7, 'the newer epoch is recorded by its look');
      assert.ok(Date.now() - termSeen < GRACE - 1_000, 'the newer epoch was recorded within the grace');
      const e = await rejectsWith(stopping, 'NODE_FENCED');
      assert.match(e.message, /stop replica s-1/);
      assert.ok(pidAlive(h.pid), 'no SIGKILL from the superseded epoch');
      assert.ok(existsSync(join(node.dataDir, 'replicas', 's-1', 'state.json')), 'the replica dir is kept');
      await d7.stopReplica('s-1', 200);
      assert.equal(pidAlive(h.pid), false);
      assert.equal(existsSync(join(node.dataDir, 'replicas', 's-1')), false);
    });

    test('an unreadable owner record is claimed, not obeyed', async () => {
      const node = nodeFor(transport, 'garbage');
      await mkdir(join(node.dataDir, '.locks'), { recursive: true });
      await writeFile(join(node.dataDir, '.locks', 'owner'), "1 not base64! 7 x\n");
      const d = driver(node, { f: { owner: 'ctl-g', label: 'g', epoch: 3, ttlSeconds: 60 } });
      assert.deepEqual((await d.observe()).fence, { state: 'mine', owner: 'ctl-g', label: 'g', epoch: 3, renewedAgoSeconds: 0, ttlSeconds: 60, seq: 1 });
      assert.match(await record(node), /^1 [A-Za-z0-9+/=]+ 3 \d+ 60 Zw== 1\n$/);
    });
  });
}
