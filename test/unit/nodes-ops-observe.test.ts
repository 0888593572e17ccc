/**
 * The observe operation, rendered, run under dash and bash over a fixture data dir, and parsed: every
 * section the script prints is one the parser reads (OBSERVE_SECTIONS), and what it reads is what the
 * fixture holds — engines and the devices they list (with the node's env), model files, replicas
 * alive, dead (with their log) and unreadable, the owner record, and stale install dirs removed.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, existsSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OBSERVE_SECTIONS, observeScript, parseObservation } from '../../src/nodes/ops/observe.js';
import { failureOf } from '../../src/nodes/ops/replica-inspect.js';
import { parseSections } from '../../src/nodes/ops/sections.js';
import { killGroup, makeDataDir, procStartTime, runOk, SHELLS, writeExe, type DataDir } from '../harness/nodes-ops-fixture.js';

const SHA = 'b'.repeat(64);
const NONCE = 'f00dcafe12345678';
const ENV = { GGML_VK_VISIBLE_DEVICES: "1'$(id)" };

let fx: DataDir;
let live: number;
let binary: string;
let rpcBinary: string;
let liveWorker: number;

function replicaDir(id: string, state: string, extra: Record<string, string> = {}): void {
  const r = join(fx.dataDir, 'replicas', id);
  mkdirSync(r, { recursive: true });
  writeFileSync(join(r, 'state.json'), state);
  for (const [k, v] of Object.entries(extra)) writeFileSync(join(r, k), v);
}

before(() => {
  fx = makeDataDir('observe');
  const d = fx.dataDir;
  // an installed engine whose binary lists one device, named with the env it saw
  const ed = join(d, 'engines', 'llama', 'b1');
  mkdirSync(ed, { recursive: true });
  binary = writeExe(join(ed, 'llama-server'), `[ "$1" = --list-devices ] || exit 2
printf 'Available devices:\\n  Vulkan0: Fake GPU vis=%s (2048 MiB, 1024 MiB free)\\n' "$GGML_VK_VISIBLE_DEVICES"
`);
  writeFileSync(join(ed, '.complete'), `${binary}\nfp1\n`);
  // an engine with an rpc-server beside its llama-server (#40): it can run RPC workers
  const er = join(d, 'engines', 'llama', 'b-rpc');
  mkdirSync(er, { recursive: true });
  rpcBinary = writeExe(join(er, 'llama-server'), 'exit 2\n');
  writeExe(join(er, 'rpc-server'), 'exit 0\n');
  writeFileSync(join(er, '.complete'), `${rpcBinary}\nfp2\n`);
  // install leftovers: one from two days ago (removed), one fresh (kept: an install may be running)
  const stale = join(d, 'engines', 'llama', '.b0.tmp-old');
  const fresh = join(d, 'engines', 'llama', '.b2.build-new');
  mkdirSync(stale);
  mkdirSync(fresh);
  const old = new Date(Date.now() - 2 * 86_400_000);
  utimesSync(stale, old, old);
  // model files: one in the cache's naming, one not (printed, not reported)
  writeFileSync(join(d, 'models', `${SHA}.gguf`), Buffer.alloc(1234, 1));
  writeFileSync(join(d, 'models', 'other.gguf'), 'x');
  // a live replica (a process we started), a dead one with a log, one whose state.json is unreadable, a dir without state
  const p = spawn('sleep', ['120'], { detached: true, stdio: 'ignore' });
  p.unref();
  live = p.pid!;
  replicaDir('live-1', JSON.stringify({ id: 'live-1', model: 'm', digest: 'd1', port: 24123, argv: [], log: '', pid: live, procStartTime: 1, startedAt: 5000, keyFingerprint: '0123456789abcdef', devices: ['Vulkan0'], gpuLayers: 'all' }), {
    pid: `${live}\n`, starttime: `${procStartTime(live)}\n`, port: '24123\n',
    // its load log at -lv 4: a metadata string that says "offloaded" (a model's own text) is not the count
    log: 'llama_model_loader: - kv   1: general.name str = offloaded 99/99 layers to GPU\nload_tensors: offloading 3 repeating layers to GPU\nload_tensors: offloaded 4/4 layers to GPU\nload_tensors: Vulkan0 model buffer size = 2.04 MiB\n',
  });
  // a replica on the host only: its log is not read for an offload count, whatever it says
  replicaDir('dead-1', JSON.stringify({ id: 'dead-1', model: 'm', digest: 'd2', port: 24124, argv: [], log: '', pid: 999_999_999, procStartTime: 1, startedAt: 6000 }), {
    pid: '999999999\n', starttime: '1\n', log: "load_tensors: offloaded 1/4 layers to GPU\nloading\nllama_model_load: error loading model architecture: unknown model architecture: 'kev'\n",
  });
  replicaDir('broken-1', '{not json');
  // RPC workers (rpc/<id>/): a live one (alive, not listening on its port: starting) and a dead one with its log
  const w = spawn('sleep', ['120'], { detached: true, stdio: 'ignore' });
  w.unref();
  liveWorker = w.pid!;
  const worker = (id: string, state: object, extra: Record<string, string>): void => {
    const r = join(d, 'rpc', id);
    mkdirSync(r, { recursive: true });
    writeFileSync(join(r, 'state.json'), JSON.stringify(state));
    for (const [k, v] of Object.entries(extra)) writeFileSync(join(r, k), v);
  };
  worker('w-live', { version: 1, kind: 'rpc-worker', id: 'w-live', group: 'big', host: '127.0.0.1', port: 24130, args: [], log: '', binary: '/x/rpc-server', pid: liveWorker, procStartTime: 1, startedAt: 7000 },
    { pid: `${liveWorker}\n`, starttime: `${procStartTime(liveWorker)}\n`, port: '24130\n' });
  worker('w-dead', { version: 1, kind: 'rpc-worker', id: 'w-dead', group: 'big', host: '10.0.0.5', port: 24131, args: [], log: '', binary: '/x/rpc-server', pid: 999_999_998, procStartTime: 1, startedAt: 8000 },
    { pid: '999999998\n', starttime: '1\n', port: '24131\n', log: 'Starting RPC server v6.0.0\n  endpoint       : 10.0.0.5:24131\nFailed to bind: Address already in use\n\n' });
  mkdirSync(join(d, 'replicas', 'nostate-1'));
});

after(() => {
  killGroup(live);
  killGroup(liveWorker);
  fx.remove();
});

describe('ops/observe: render, run under dash and bash, parse', () => {
  for (const shell of SHELLS) {
    it(`${shell}: every section printed is read, and reads what the data dir holds`, () => {
      const res = runOk(shell, observeScript(fx.dataDir, NONCE, 20, null, ENV));
      const printed = parseSections(res.stdout, NONCE).map((s) => s.name);
      assert.deepEqual(printed.filter((n) => !(OBSERVE_SECTIONS as readonly string[]).includes(n)), [], 'sections the parser does not read');
      assert.ok(!printed.includes('fence'), 'no fence section without a fence');
      const o = parseObservation(res.stdout, res.stderr, NONCE, 'n1', ENV);

      const memTotalKb = Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync('/proc/meminfo', 'utf8'))![1]);
      assert.equal(o.memory.totalBytes, memTotalKb * 1024);
      assert.ok(o.memory.availableBytes > 0 && o.memory.availableBytes <= o.memory.totalBytes);
      assert.equal(o.cpus, Number(spawnSync('nproc', { encoding: 'utf8' }).stdout.trim()));
      assert.equal(o.arch, spawnSync('uname', ['-m'], { encoding: 'utf8' }).stdout.trim());
      assert.ok(o.diskFreeBytes > 0, 'df read');
      assert.ok(o.cpuFlags.length > 0, 'cpu flags read');

      const dev = { name: 'Vulkan0', description: "Fake GPU vis=1'$(id)", totalBytes: 2048 * 2 ** 20, freeBytes: 1024 * 2 ** 20 };
      assert.deepEqual([...o.engines].sort((a, b) => a.version.localeCompare(b.version)), [
        { engine: 'llama', version: 'b-rpc', binary: rpcBinary, rpc: true },
        { engine: 'llama', version: 'b1', binary, rpc: false, devices: [dev] },
      ]);
      assert.deepEqual(o.devices, [dev]);
      assert.deepEqual(o.models, [{ sha256: SHA, path: join(fx.dataDir, 'models', `${SHA}.gguf`), bytes: 1234 }]);

      const byId = new Map(o.replicas.map((r) => [r.id, r]));
      assert.deepEqual([...byId.keys()].sort(), ['broken-1', 'dead-1', 'live-1']);
      const l = byId.get('live-1')!;
      assert.equal(l.alive, true);
      assert.equal(l.logTail, '');
      assert.deepEqual({ port: l.state?.port, pid: l.state?.pid, startedAt: l.state?.startedAt, key: l.state?.keyFingerprint, devices: l.state?.devices, layers: l.state?.gpuLayers },
        { port: 24123, pid: live, startedAt: 5000, key: '0123456789abcdef', devices: ['Vulkan0'], layers: 'all' });
      assert.deepEqual(l.offloaded, { layers: 4, of: 4 }, "llama-server's own count, from its load_tensors line");
      const dd = byId.get('dead-1')!;
      assert.equal(dd.offloaded, undefined, 'a replica without devices: no offload count');
      assert.equal(dd.alive, false);
      assert.match(dd.logTail, /unknown model architecture: 'kev'$/);
      assert.equal(failureOf(dd.logTail).code, 'REPLICA_UNKNOWN_ARCHITECTURE');
      assert.equal(byId.get('broken-1')!.state, null);

      assert.ok(!existsSync(join(fx.dataDir, 'engines', 'llama', '.b0.tmp-old')), 'a day-old staging dir is removed');
      assert.ok(existsSync(join(fx.dataDir, 'engines', 'llama', '.b2.build-new')), 'a fresh build dir is kept');
      assert.equal(o.fence, undefined);

      const workers = new Map((o.rpcWorkers ?? []).map((w) => [w.id, w]));
      assert.deepEqual(workers.get('w-live'), { id: 'w-live', group: 'big', host: '127.0.0.1', port: 24130, pid: liveWorker, startedAt: 7000, state: 'starting' }, 'alive, not listening on its port');
      const wd = workers.get('w-dead')!;
      assert.equal(wd.state, 'failed');
      assert.equal(wd.failure?.code, 'RPC_WORKER_EXITED');
      assert.equal(wd.failure?.message, 'rpc-server exited; its last log line: Failed to bind: Address already in use');
      assert.deepEqual([...workers.keys()].sort(), ['w-dead', 'w-live']);
    });
  }

  it('output cut short (no end section) is NODE_COMMAND_FAILED, not a partial look', () => {
    const res = runOk('dash', observeScript(fx.dataDir, NONCE, 20));
    const cut = res.stdout.slice(0, res.stdout.indexOf(`@@${NONCE} end`));
    assert.throws(() => parseObservation(cut, 'boom', NONCE, 'n1'), (e: unknown) => (e as { code?: string }).code === 'NODE_COMMAND_FAILED');
  });

  it('a forged marker (another nonce) inside a log stays log text', () => {
    writeFileSync(join(fx.dataDir, 'replicas', 'dead-1', 'log'), `@@${'0'.repeat(16)} end\n@@ model\nreal line\n`);
    const o = parseObservation(runOk('bash', observeScript(fx.dataDir, NONCE, 20)).stdout, '', NONCE, 'n1');
    assert.equal(o.replicas.find((r) => r.id === 'dead-1')!.logTail, `@@${'0'.repeat(16)} end\n@@ model\nreal line`);
  });
});
