/**
 * Adoption: a controller process starts two replicas on two sshd nodes and is SIGKILLed; a new
 * controller (new drivers, new ssh connections) finds both running, ready, with the same pids, and
 * starts nothing; a replica killed meanwhile is reported failed with its log tail.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import type { NodeSpec } from '../../src/fleet-spec/types.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { llamaServerDir } from '../harness/llama-server.js';
import { repoRoot } from '../harness/paths.js';
import { sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { killReplica, pidAlive, tinyProfile } from '../harness/nodes-driver.js';
import { until } from '../harness/wait.js';

const execFileP = promisify(execFile);

let work: string;
let ssh: SshdInstance[] = [];
let nodes: NodeSpec[] = [];
let model: TinyModelFile;
let binary: string;
let child: ChildProcess | null = null;
const drivers: ShellNodeDriver[] = [];
const pids = new Set<number>();

before(async () => {
  binary = join(await llamaServerDir(), 'llama-server');
  work = await mkdtemp(join(tmpdir(), 'llmgw-adopt-'));
  model = await writeTinyModel(join(work, 'tiny.gguf'), { seed: 7 });
  ssh = await Promise.all([startSshd(), startSshd()]);
  nodes = ssh.map((s, i) => sshdNodeSpec(s, { name: `adopt-${i}` }));
});

after(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const d of drivers) {
    try {
      for (const r of (await d.observe()).replicas) await d.stopReplica(r.id, 2_000);
    } catch {
      /* the pids below are killed anyway */
    }
    await d.close();
  }
  for (const pid of pids) killReplica(pid, [work]);
  await Promise.all(ssh.map((s) => s.stop()));
  if (work) await rm(work, { recursive: true, force: true });
});

/** Run the child controller (tsx from sources, or plain node from dist) until it prints READY. */
function runChild(): Promise<{ proc: ChildProcess; replicas: { node: string; id: string; pid: number; port: number }[] }> {
  const here = fileURLToPath(import.meta.url);
  const fromTs = here.endsWith('.ts');
  const script = join(dirname(here), '..', 'harness', fromTs ? 'nodes-driver-child.ts' : 'nodes-driver-child.js');
  const args = fromTs ? ['--import', 'tsx', script] : [script];
  const input = { nodes: nodes.map((spec, i) => ({ spec, secretsDir: ssh[i]!.secretsDir })), binary, modelPath: model.path, apiKey: 'sk-adopt', profile: tinyProfile() };
  const proc = spawn(process.execPath, args, { cwd: repoRoot, env: { ...process.env, LLMGW_CHILD_INPUT: JSON.stringify(input) }, stdio: ['ignore', 'pipe', 'pipe'] });
  child = proc;
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`child not ready in 90 s:\n${out}\n${err}`)), 90_000);
    proc.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /^READY (.*)$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, replicas: (JSON.parse(m[1]!) as { replicas: { node: string; id: string; pid: number; port: number }[] }).replicas });
      }
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`child exited (${code ?? signal}) before READY:\n${out}\n${err}`));
    });
  });
}

async function llamaServers(): Promise<string[]> {
  const { stdout } = await execFileP('ps', ['-eo', 'pid=,args=']);
  return stdout.split('\n').filter((l) => l.includes(model.path) && l.includes('llama-server') && !l.includes('llmgw-replica'));
}

test('a SIGKILLed controller\'s replicas are adopted by the next one: both ready, same pids, nothing new; a killed one is failed with its log tail', async () => {
  const { proc, replicas } = await runChild();
  assert.equal(replicas.length, 2);
  for (const r of replicas) pids.add(r.pid);
  const gone = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGKILL');
  await gone;

  // the replicas outlived their controller and its ssh connections
  for (const r of replicas) assert.ok(pidAlive(r.pid), `replica ${r.id} died with its controller`);

  for (const [i, spec] of nodes.entries()) drivers.push(new ShellNodeDriver(spec, openShell(spec, { secretsDir: ssh[i]!.secretsDir })));
  for (const [i, d] of drivers.entries()) {
    const o = await d.observe();
    const want = replicas.find((r) => r.node === nodes[i]!.name)!;
    assert.equal(o.replicas.length, 1, `node ${d.node}: exactly the one replica`);
    const r = o.replicas[0]!;
    assert.deepEqual([r.id, r.pid, r.port, r.state, r.model, r.digest], [want.id, want.pid, want.port, 'ready', 'tiny', `digest-${i}`]);
    assert.equal(r.endpoint, `http://127.0.0.1:${want.port}`);
    // the new controller can wait on an adopted replica (no in-memory state needed)
    await d.waitReady(r.id, { timeoutMs: 10_000 });
  }
  assert.equal((await llamaServers()).length, 2, 'no duplicate llama-server was started');

  // kill one replica while "the controller is away"
  const victim = replicas.find((r) => r.node === nodes[0]!.name)!;
  const survivor = replicas.find((r) => r.node === nodes[1]!.name)!;
  process.kill(victim.pid, 'SIGKILL');
  await until('the killed replica to exit', 5_000, () => !pidAlive(victim.pid));
  const o0 = await drivers[0]!.observe();
  const dead = o0.replicas.find((r) => r.id === victim.id);
  assert.equal(dead?.state, 'failed');
  assert.equal(dead?.failure?.code, 'REPLICA_EXITED');
  assert.match(dead?.failure?.logTail ?? '', /server is listening|model loaded/);
  const o1 = await drivers[1]!.observe();
  assert.equal(o1.replicas[0]?.state, 'ready');

  // stopping both leaves no orphan
  await drivers[0]!.stopReplica(victim.id, 2_000);
  await drivers[1]!.stopReplica(survivor.id, 5_000);
  assert.deepEqual(await llamaServers(), []);
  assert.deepEqual([(await drivers[0]!.observe()).replicas, (await drivers[1]!.observe()).replicas], [[], []]);
});
