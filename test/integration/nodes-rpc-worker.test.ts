/**
 * RPC workers (#40) on a real OpenSSH node with the real rpc-server of the cached engine
 * (scripts/build-llama-server.sh builds it with GGML_RPC=ON): started through the NodeDriver bound to
 * the node's listen_address only (127.0.0.2 here, a loopback address that is not 127.0.0.1) on a port
 * of its range; `ss -ltn` shows it there and nowhere else; a real head llama-server splits a tiny model
 * onto it (its log shows the worker's buffers) and answers; a stop ends it and nothing listens after;
 * a kill -9 is seen by observe; 0.0.0.0 is refused by the driver and by the node script itself.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { NodeSpec } from '../../src/fleet-spec/types.js';
import { rpcWorkerArgs, rpcWorkerStartScript } from '../../src/nodes/ops/rpc-worker.js';
import { workersNotLoaded } from '../../src/nodes/rpc-log.js';
import { scriptError } from '../../src/nodes/script-errors.js';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { isCode } from '../harness/errors.js';
import { llamaServerDir, startLlamaServer } from '../harness/llama-server.js';
import { killReplica, pidAlive } from '../harness/nodes-driver.js';
import { freePort } from '../harness/ports.js';
import { sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { until } from '../harness/wait.js';

let work: string;
let sshd: SshdInstance;
let llamaDir: string;
let model: TinyModelFile;
const drivers: ShellNodeDriver[] = [];
const pids = new Set<number>();

function driverFor(overrides: Partial<NodeSpec>): { node: NodeSpec; driver: ShellNodeDriver } {
  const node = sshdNodeSpec(sshd, { name: 'rpc-node', ...overrides });
  const driver = new ShellNodeDriver(node, openShell(node, { secretsDir: sshd.secretsDir }));
  drivers.push(driver);
  return { node, driver };
}

/** Local addresses of the sockets listening on `port` (`ss -ltn`: this machine is the node). */
function listeningOn(port: number): string[] {
  return execFileSync('ss', ['-ltnH'], { encoding: 'utf8' }).split('\n')
    .map((l) => l.trim().split(/\s+/)[3] ?? '')
    .filter((local) => local.endsWith(`:${port}`));
}

before(async () => {
  llamaDir = await llamaServerDir();
  work = await mkdtemp(join(tmpdir(), 'llmgw-rpc-worker-'));
  model = await writeTinyModel(join(work, 'tiny.gguf'), { seed: 40 });
  sshd = await startSshd();
});

after(async () => {
  for (const d of drivers) await d.close();
  for (const pid of pids) killReplica(pid, [llamaDir]);
  await sshd?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('RPC workers on an ssh node', () => {
  test('an engine with rpc-server beside llama-server is reported rpc: true; one without, rpc: false, and a worker of it is ENGINE_NO_RPC', async () => {
    const { driver } = driverFor({});
    const bare = join(work, 'bare');
    await mkdir(bare);
    await symlink(join(llamaDir, 'llama-server'), join(bare, 'llama-server'));
    await driver.ensureEngine({ engine: 'llama', version: 'cached', install: { method: 'path', path: join(llamaDir, 'llama-server') } });
    const { binary } = await driver.ensureEngine({ engine: 'llama', version: 'bare', install: { method: 'path', path: join(bare, 'llama-server') } });
    const engines = new Map((await driver.observe()).engines.map((e) => [e.version, e.rpc]));
    assert.deepEqual(Object.fromEntries(engines), { bare: false, cached: true });
    await assert.rejects(driver.startRpcWorker({ id: 'w-bare', group: 'big', binary }), isCode('ENGINE_NO_RPC', /no rpc-server beside llama-server/));
    assert.equal(existsSync(join(sshd.dataDir, 'rpc', 'w-bare')), false);
  });

  test('a worker binds only listen_address:port from the range; a head splits onto it and answers; the stop ends it and nothing listens', async () => {
    const { node, driver } = driverFor({ listenAddress: '127.0.0.2' });
    const { binary } = await driver.ensureEngine({ engine: 'llama', version: 'cached', install: { method: 'path', path: join(llamaDir, 'llama-server') } });
    const h = await driver.startRpcWorker({ id: 'w-1', group: 'big', binary, threads: 1 });
    pids.add(h.pid);
    assert.equal(h.host, '127.0.0.2');
    assert.equal(h.endpoint, `127.0.0.2:${h.port}`);
    assert.ok(h.port >= node.ports.from && h.port <= node.ports.to, `port ${h.port} in ${node.ports.from}-${node.ports.to}`);
    assert.deepEqual(listeningOn(h.port), [`127.0.0.2:${h.port}`], 'bound to the listen address only');
    const seen = (await driver.observe()).rpcWorkers ?? [];
    assert.deepEqual(seen.map((w) => ({ id: w.id, group: w.group, host: w.host, port: w.port, pid: w.pid, state: w.state })),
      [{ id: 'w-1', group: 'big', host: '127.0.0.2', port: h.port, pid: h.pid, state: 'ready' }]);

    // a head on this machine puts the model's layers on the worker (-lv 4 prints its buffers)
    const head = await startLlamaServer({ model: model.path, args: ['--rpc', h.endpoint, '-lv', '4'] });
    try {
      assert.deepEqual(workersNotLoaded(head.log(), [h.endpoint]), [], 'the head\'s log shows the worker\'s model buffer');
      const res = await fetch(`${head.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });
      assert.equal(res.status, 200);
      assert.equal(((await res.json()) as { object: string }).object, 'chat.completion');
    } finally {
      await head.stop();
    }

    await driver.stopRpcWorker('w-1', 2_000);
    assert.deepEqual(listeningOn(h.port), [], 'nothing listens after the stop');
    assert.equal(pidAlive(h.pid), false);
    assert.equal(existsSync(join(sshd.dataDir, 'rpc', 'w-1')), false);
    assert.equal((await driver.observe()).rpcWorkers, undefined);
    await driver.stopRpcWorker('w-1', 2_000); // idempotent
  });

  test('kill -9 of a worker: the next look reports it failed (RPC_WORKER_EXITED); its port is free again', async () => {
    const { driver } = driverFor({});
    const { binary } = await driver.ensureEngine({ engine: 'llama', version: 'cached', install: { method: 'path', path: join(llamaDir, 'llama-server') } });
    const h = await driver.startRpcWorker({ id: 'w-2', group: 'big', binary });
    pids.add(h.pid);
    assert.deepEqual(listeningOn(h.port), [`127.0.0.1:${h.port}`], 'no listen_address: loopback only');
    process.kill(h.pid, 'SIGKILL');
    const w = await until('the look sees the worker dead', 10_000, async () => (await driver.observe()).rpcWorkers?.find((x) => x.id === 'w-2' && x.state === 'failed'));
    assert.equal(w.failure?.code, 'RPC_WORKER_EXITED');
    assert.match(w.failure?.message ?? '', /^rpc-server exited; its last log line: \S/);
    assert.match(w.failure?.logTail ?? '', new RegExp(`endpoint +: 127\\.0\\.0\\.1:${h.port}\n`), 'its banner is in the log (line-buffered) though it was killed');
    assert.deepEqual(listeningOn(h.port), []);
    await driver.stopRpcWorker('w-2', 1_000);
    assert.equal((await driver.observe()).rpcWorkers, undefined);
  });

  test('a worker that exits at start is RPC_WORKER_EXITED with rpc-server\'s own words, and leaves nothing behind', async () => {
    const { driver } = driverFor({});
    const { binary } = await driver.ensureEngine({ engine: 'llama', version: 'cached', install: { method: 'path', path: join(llamaDir, 'llama-server') } });
    await assert.rejects(driver.startRpcWorker({ id: 'w-bad', group: 'big', binary, threads: 0 }), isCode('RPC_WORKER_EXITED', /rpc-server exited at start: Invalid parameters/));
    assert.equal(existsSync(join(sshd.dataDir, 'rpc', 'w-bad')), false);
    assert.equal((await driver.observe()).rpcWorkers, undefined);
  });

  test('0.0.0.0 is refused: by the driver (RPC_BIND_REFUSED, nothing started) and by the node script itself', async () => {
    const { driver } = driverFor({ listenAddress: '0.0.0.0' });
    const { binary } = await driver.ensureEngine({ engine: 'llama', version: 'cached', install: { method: 'path', path: join(llamaDir, 'llama-server') } });
    await assert.rejects(driver.startRpcWorker({ id: 'w-any', group: 'big', binary }), isCode('RPC_BIND_REFUSED', /binds every interface/));
    // the script's own check, with a rendering whose host was changed after the driver's check
    const port = await freePort();
    const shell = openShell(sshdNodeSpec(sshd), { secretsDir: sshd.secretsDir });
    try {
      const script = rpcWorkerStartScript({ dataDir: sshd.dataDir, id: 'w-any', host: '127.0.0.1', port, engineBinary: binary, args: rpcWorkerArgs('0.0.0.0', port, null), stateHead: '{"id":"w-any"' })
        .replace("host='127.0.0.1'", "host='0.0.0.0'");
      const res = await shell.run(script, { timeoutMs: 30_000 });
      assert.equal(scriptError('rpc-node', 'start', res).code, 'RPC_BIND_REFUSED');
    } finally {
      await shell.close();
    }
    assert.equal(existsSync(join(sshd.dataDir, 'rpc', 'w-any')), false);
    assert.deepEqual(listeningOn(port), []);
  });
});
