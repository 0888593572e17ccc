/**
 * Fault 11, the node scripts: every script the node operations (src/nodes/ops/) render, with hostile-but-valid values
 * (quotes, $(…), backticks, globs, spaces, tabs in paths, URLs and argv), checked by Debian's
 * `shellcheck -s sh`. Must hold: no error or warning, except SC2089/SC2090 (shellcheck noticing
 * quote characters inside a quoted value: that is the hostile data, kept literal as intended); word
 * splitting (SC2086) only where it is meant (the /proc stat fields, the ccache launcher flags).
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import * as scripts from '../../src/nodes/ops/index.js';
import { recordFault } from '../harness/fault-report.js';

const H = "/data/it's a \"dir\" $(touch /tmp/llmgw-pwn) `id` ; rm -rf / & | > < * ? [a] {b} ~ \\ \t";
const E = { dataDir: H, engine: 'llama-cpp', version: 'b6500', nonce: 'n1a2', fingerprint: "fp$(id)'" };
const SHA = 'a'.repeat(64);
/** A fence whose owner and label are hostile free text (they travel base64-encoded). */
const F = { owner: "ctl'$(id)` x", label: "llmgw on h'ost \"a\" $(touch /tmp/llmgw-pwn)\n; rm -rf /", epoch: 12345678901, ttlSeconds: 30 };
const EF = { ...E, fence: F };

const rendered: Record<string, string> = {
  observeScript: scripts.observeScript(H, 'abc123', 50),
  'observeScript(fence)': scripts.observeScript(H, 'abc123', 50, F),
  // a record above etcd's revision named to be taken over (Fence.supersede)
  'observeScript(fence, supersede)': scripts.observeScript(H, 'abc123', 50, { ...F, supersede: { epoch: 999999999999, seq: 41 } }),
  'stopReplicaScript(fence, supersede)': scripts.stopReplicaScript(H, 'good-1a2b', 2000, { ...F, supersede: { epoch: 999999999999, seq: 41 } }),
  'observeScript(env)': scripts.observeScript(H, 'abc123', 50, F, { GGML_VK_VISIBLE_DEVICES: "0'; id" }),
  inspectReplicaScript: scripts.inspectReplicaScript(H, 'good-1a2b', 'abc123', 50),
  usedPortsScript: scripts.usedPortsScript(H, 'abc123'),
  startReplicaScript: scripts.startReplicaScript({ dataDir: H, id: 'good-1a2b', port: 24001, argv: ['/opt/llama server/llama-server', '-m', `${H}/m.gguf`, '--alias', "x'; id"], stateHead: '{"id":"good-1a2b","model":"it\'s $(id)"' }),
  'startReplicaScript(env)': scripts.startReplicaScript({ dataDir: H, id: 'good-1a2b', port: 24001, argv: ['/opt/llama server/llama-server'], stateHead: '{"id":"good-1a2b"', env: { GGML_VK_VISIBLE_DEVICES: '0', CUDA_VISIBLE_DEVICES: "$(id)'" } }),
  'startReplicaScript(fence)': scripts.startReplicaScript({ dataDir: H, id: 'good-1a2b', port: 24001, argv: ['/opt/llama server/llama-server', "x'; id"], stateHead: '{"id":"good-1a2b"', fence: F }),
  'startReplicaScript(inputs, path engine)': scripts.startReplicaScript({ dataDir: H, id: 'good-1a2b', port: 24001, argv: ['/opt/llama server/llama-server'], stateHead: '{"id":"good-1a2b"', inputs: { engine: scripts.engineStillInstalled({ dataDir: H, engine: 'llama', version: "v'1", fingerprint: 'fp$(id)' }, 'path', '/opt/llama server/llama-server`id`'), modelPath: `${H}/models/$(id).gguf` } }),
  'startReplicaScript(inputs, artifact)': scripts.startReplicaScript({ dataDir: H, id: 'good-1a2b', port: 24001, argv: ['/opt/llama server/llama-server'], stateHead: '{"id":"good-1a2b"', fence: F, inputs: { engine: scripts.engineStillInstalled({ dataDir: H, engine: 'llama', version: 'v1', fingerprint: 'fp' }, 'artifact', `${H}/engines/llama/v1/bin/llama-server`), modelPath: `${H}/models/a b.gguf` } }),
  stopReplicaScript: scripts.stopReplicaScript(H, 'good-1a2b', 2000),
  'stopReplicaScript(fence)': scripts.stopReplicaScript(H, 'good-1a2b', 2000, F),
  logTailScript: scripts.logTailScript(H, 'good-1a2b', 100),
  readRangeScript: scripts.readRangeScript(`${H}/m.gguf`, 0, 4096),
  engineInstalledScript: scripts.engineInstalledScript(E),
  'artifactInstallScript(url)': scripts.artifactInstallScript({ ...E, url: "https://h.invalid/a?b=c&d='e'$(id)", sha256: SHA, binary: 'bin/llama server' }),
  'artifactInstallScript(upload)': scripts.artifactInstallScript({ ...E, url: null, sha256: SHA, binary: 'llama-server' }),
  'artifactInstallScript(url, fence)': scripts.artifactInstallScript({ ...EF, url: 'https://h.invalid/a', sha256: SHA, binary: 'llama-server' }),
  engineStageScript: scripts.engineStageScript(E),
  'engineStageScript(fence)': scripts.engineStageScript(EF),
  engineCleanupScript: scripts.engineCleanupScript(E),
  buildInstallScript: scripts.buildInstallScript({ ...E, git: 'https://g.invalid/x.git?$(id)', ref: 'b6500', cmakeFlags: ['-DGGML_X=ON', "-DY='1 2' $(id)"], target: 'llama-server', jobs: 2 }),
  'buildInstallScript(nproc)': scripts.buildInstallScript({ ...E, git: '/srv/x y.bundle', ref: 'main', cmakeFlags: [], target: 'llama-server', jobs: null }),
  'buildInstallScript(fence)': scripts.buildInstallScript({ ...EF, git: '/srv/x.bundle', ref: 'main', cmakeFlags: [], target: 'llama-server', jobs: 1 }),
  pathEngineScript: scripts.pathEngineScript({ ...E, path: '/opt/llama server/llama-server`id`' }),
  'pathEngineScript(fence)': scripts.pathEngineScript({ ...EF, path: '/opt/llama-server' }),
  modelFromUrlScript: scripts.modelFromUrlScript(H, SHA),
  'modelFromUrlScript(token)': scripts.modelFromUrlScript(H, SHA, 'hf-token'),
  'modelFromUrlScript(token, fence)': scripts.modelFromUrlScript(H, SHA, 'hf-token', F),
  modelFromFileScript: scripts.modelFromFileScript(H, SHA, `${H}/m.gguf`),
  'buildInstallScript(rpc)': scripts.buildInstallScript({ ...E, git: '/srv/x.bundle', ref: 'main', cmakeFlags: ['-DGGML_RPC=ON'], target: 'llama-server', jobs: 1 }),
  rpcWorkerStartScript: scripts.rpcWorkerStartScript({ dataDir: H, id: 'w-1a2b', host: '10.0.0.5', port: 24002, engineBinary: `${H}/engines/e/v/llama-server`, args: scripts.rpcWorkerArgs('10.0.0.5', 24002, 4), stateHead: '{"id":"w-1a2b","group":"it\'s $(id)"', env: { CUDA_VISIBLE_DEVICES: "$(id)'" } }),
  'rpcWorkerStartScript(fence)': scripts.rpcWorkerStartScript({ dataDir: H, id: 'w-1a2b', host: '127.0.0.1', port: 24002, engineBinary: "/opt/llama server'$(id)/llama-server", args: [], stateHead: '{"id":"w"', fence: F }),
  rpcWorkerStopScript: scripts.rpcWorkerStopScript(H, 'w-1a2b', 2000, F),
  'modelFromFileScript(fence)': scripts.modelFromFileScript(H, SHA, `${H}/m.gguf`, F),
};

interface Finding {
  readonly line: number;
  readonly level: string;
  readonly code: number;
  readonly message: string;
}

const LITERAL_QUOTES = new Set([2089, 2090]);
const MEANT_SPLIT = /set -- \$\{_s##\*\) \}|\$launcher/;

describe('fault 11: the node scripts pass shellcheck with hostile values', () => {
  it('every exported script function is rendered here', () => {
    const exported = Object.keys(scripts).filter((k) => k.endsWith('Script'));
    const covered = new Set(Object.keys(rendered).map((k) => k.replace(/\(.*\)$/, '')));
    assert.deepEqual(exported.filter((k) => !covered.has(k)), []);
  });

  it('shellcheck -s sh: no errors or warnings beyond literal quotes in data; splitting only where meant', () => {
    const problems: string[] = [];
    let notes = 0;
    for (const [name, text] of Object.entries(rendered)) {
      const r = spawnSync('shellcheck', ['-s', 'sh', '-f', 'json', '-'], { input: text, encoding: 'utf8' });
      assert.ok(r.status === 0 || r.status === 1, `shellcheck failed to run on ${name}: ${r.stderr}`);
      const lines = text.split('\n');
      for (const f of JSON.parse(r.stdout) as Finding[]) {
        const src = lines[f.line - 1] ?? '';
        if ((f.level === 'error' || f.level === 'warning') && !LITERAL_QUOTES.has(f.code)) problems.push(`${name}:${f.line} SC${f.code} ${f.message}: ${src.trim().slice(0, 120)}`);
        else if (f.code === 2086 && !MEANT_SPLIT.test(src)) problems.push(`${name}:${f.line} SC2086 unquoted: ${src.trim().slice(0, 120)}`);
        else notes++;
      }
    }
    assert.deepEqual(problems, []);
    recordFault({ fault: '11 fuzzing: node scripts', injected: `${Object.keys(rendered).length} renderings of every node script with quotes, $(…), backticks, globs, spaces and tabs in paths, URLs and argv`, held: `shellcheck -s sh: no error or warning (beyond quotes kept literal in data), word splitting only where meant (${notes} style notes)` });
  });
});
