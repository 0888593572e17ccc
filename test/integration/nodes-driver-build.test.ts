/**
 * Engine install by the build method, over ssh: llama.cpp's source from the git bundle that
 * node-llama-cpp 3.21.1 ships (the same one scripts/build-llama-server.sh uses), built on the node
 * with cmake, GGML_NATIVE=ON and GGML_RPC=ON, then run as a replica (and rpc-server as a worker).
 *
 * The real build is slow: ~10-15 min on 2 cores when cold. The driver uses ccache as the compiler
 * launcher when the node has it (Debian package `ccache`, installed by .ci/run), with CCACHE_BASEDIR
 * set so a rebuild in another directory hits the cache: a warm rebuild takes a minute or two.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import type { Shell } from '../../src/nodes/shell.js';
import { openShell } from '../../src/nodes/transport.js';
import type { EngineVersionSpec, NodeSpec } from '../../src/fleet-spec/types.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { llamaServerDir, NODE_LLAMA_CPP_VERSION } from '../harness/llama-server.js';
import { sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { killReplica, tinyProfile } from '../harness/nodes-driver.js';
import { isCode } from '../harness/errors.js';

const execFileP = promisify(execFile);
/** With GGML_RPC on, rpc-server is built and installed beside llama-server too (#40). */
const BUILD_FLAGS = ['-DLLAMA_CURL=OFF', '-DLLAMA_BUILD_TESTS=OFF', '-DLLAMA_BUILD_EXAMPLES=OFF', '-DGGML_RPC=ON'];

let work: string;
let sshd: SshdInstance;
let node: NodeSpec;
let driver: ShellNodeDriver;
let bundle: string;
let ref: string;
let model: TinyModelFile;
const pids = new Set<number>();


before(async () => {
  // The harness fetches node-llama-cpp's bundle (and builds the cached llama-server) if missing.
  await llamaServerDir();
  const cache = process.env['LLMGW_CACHE_DIR'] ?? join(homedir(), '.cache', 'llmgw');
  bundle = join(cache, 'build', `node-llama-cpp-${NODE_LLAMA_CPP_VERSION}`, 'gitRelease.bundle');
  assert.ok(existsSync(bundle), `no llama.cpp bundle at ${bundle}`);
  const { stdout } = await execFileP('git', ['bundle', 'list-heads', bundle]);
  ref = stdout.trim().split('\n')[0]!.split(' ')[0]!;
  work = await mkdtemp(join(tmpdir(), 'llmgw-build-'));
  model = await writeTinyModel(join(work, 'tiny.gguf'));
  sshd = await startSshd();
  node = sshdNodeSpec(sshd, { name: 'builder' });
  driver = new ShellNodeDriver(node, openShell(node, { secretsDir: sshd.secretsDir }));
});

after(async () => {
  if (driver) {
    try {
      for (const r of (await driver.observe()).replicas) await driver.stopReplica(r.id, 2_000);
    } catch {
      /* killed below */
    }
    await driver.close();
  }
  for (const pid of pids) killReplica(pid, [work, sshd?.dir ?? '']);
  await sshd?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('engine build method', () => {
  test('a node without git/cmake/a compiler: ENGINE_TOOL_MISSING, nothing left', async () => {
    const real = openShell(node, { secretsDir: sshd.secretsDir });
    // the same node, seen through a PATH that has none of the build tools
    const bare: Shell = { node: real.node, run: (s, o) => real.run(`PATH=/nonexistent; export PATH\n${s}`, o), upload: (a, b, o) => real.upload(a, b, o), close: () => real.close() };
    const d = new ShellNodeDriver(node, bare);
    try {
      await assert.rejects(d.ensureEngine({ engine: 'llama', version: 'notools', install: { method: 'build', git: bundle, ref, cmakeFlags: [], target: 'llama-server' } }),
        isCode('ENGINE_TOOL_MISSING', /'git' is not installed/));
    } finally {
      await d.close();
    }
    assert.equal(existsSync(join(node.dataDir, 'engines', 'llama', 'notools')), false);
  });

  test('an unreachable git source is ENGINE_DOWNLOAD_FAILED; an unknown ref is ENGINE_BUILD_FAILED; nothing left', async () => {
    await assert.rejects(driver.ensureEngine({ engine: 'llama', version: 'nosrc', install: { method: 'build', git: join(work, 'no-such.bundle'), ref, cmakeFlags: [], target: 'llama-server' } }),
      isCode('ENGINE_DOWNLOAD_FAILED', /git clone failed/));
    await assert.rejects(driver.ensureEngine({ engine: 'llama', version: 'noref', install: { method: 'build', git: bundle, ref: 'no-such-ref', cmakeFlags: [], target: 'llama-server' } }),
      isCode('ENGINE_BUILD_FAILED', /no-such-ref/));
    assert.deepEqual(await readdir(join(node.dataDir, 'engines')).catch(() => []), []);
  });

  test('slow: builds llama-server from the llama.cpp git bundle with native flags (ccache when present) and runs it', { timeout: 60 * 60_000 }, async () => {
    const spec: EngineVersionSpec = { engine: 'llama', version: 'native', install: { method: 'build', git: bundle, ref, cmakeFlags: BUILD_FLAGS, target: 'llama-server' } };
    const t0 = Date.now();
    const [r1, r2] = await Promise.all([driver.ensureEngine(spec), driver.ensureEngine(spec)]);
    const took = Math.round((Date.now() - t0) / 1000);
    process.stderr.write(`[nodes-driver-build] llama-server built on the node in ${took} s\n`);
    const dir = join(node.dataDir, 'engines', 'llama', 'native');
    assert.equal(r1.binary, join(dir, 'llama-server'));
    assert.deepEqual(r2, r1);
    assert.ok(existsSync(join(dir, '.complete')));
    assert.ok((await readdir(dir)).some((f) => f.startsWith('libllama')), 'shared libraries copied beside the binary');
    assert.deepEqual(await readdir(join(node.dataDir, 'engines', 'llama')), ['native'], 'no build or staging dir left');
    const { stdout: ldd } = await execFileP('ldd', [r1.binary]);
    assert.match(ldd, new RegExp(`libllama[^\\n]*=> ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/`), 'libraries resolve beside the binary ($ORIGIN rpath)');
    assert.deepEqual(await driver.ensureEngine(spec), r1);
    // rpc-server beside it (GGML_RPC=ON): it runs, the look says so, and a worker starts from it
    await execFileP(join(dir, 'rpc-server'), ['--help']);
    assert.deepEqual((await driver.observe()).engines.map((e) => [e.version, e.rpc]), [['native', true]]);
    const w = await driver.startRpcWorker({ id: 'built-w', group: 'tiny', binary: r1.binary, threads: 1 });
    pids.add(w.pid);
    assert.equal(w.endpoint, `127.0.0.1:${w.port}`);
    await driver.stopRpcWorker('built-w', 2_000);

    const m = await driver.ensureModel(`file://${model.path}`, model.sha256);
    const h = await driver.startReplica({ id: 'built-1', model: 'tiny', digest: 'd', modelPath: m.path, binary: r1.binary, profile: tinyProfile(), apiKey: 'sk-build' });
    pids.add(h.pid);
    await driver.waitReady('built-1', { timeoutMs: 60_000 });
    const res = await fetch(`${h.endpoint}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-build' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    await driver.stopReplica('built-1', 5_000);
  });
});
