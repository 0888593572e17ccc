import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, test } from 'node:test';
import {
  artifactInstallScript, buildInstallScript, engineInstalledScript, inspectReplicaScript, logTailScript,
  modelFromFileScript, modelFromUrlScript, observeScript, pathEngineScript, startReplicaScript, stopReplicaScript,
  usedPortsScript,
} from '../../src/nodes/ops/index.js';
import { parseDfAvailableKb, parseSections, replicaArgv } from '../../src/nodes/ops/index.js';
import { slotSaveDir } from '../../src/engine-api/slot-files.js';
import { scriptError } from '../../src/nodes/script-errors.js';
import type { ProfileSpec } from '../../src/fleet-spec/types.js';

const HOSTILE = `x'; touch /tmp/llmgw-pwned-unit; echo '$(id)\`id\`"`;
const SHA = 'a'.repeat(64);

function syntaxOk(script: string): void {
  const r = spawnSync('sh', ['-n'], { input: script, encoding: 'utf8' });
  assert.equal(r.status, 0, `sh -n failed: ${r.stderr}\n${script}`);
}

const profile: ProfileSpec = {
  name: 'p', file: 'profiles/p.yaml', engine: 'llama', engineVersion: 'b1', ctxSize: 512, threads: 2, parallel: 1,
  batchSize: 64, embeddings: true, extraArgs: ['--no-webui', '; touch /tmp/pwned'], memoryOverheadBytes: 0, cacheRamBytes: 0, startTimeoutMs: 1000,
};

describe('node scripts', () => {
  test('every script parses with sh -n, hostile values included', () => {
    const paths = { dataDir: `/data/${HOSTILE}`, engine: 'llama', version: 'b1', nonce: 'n1', fingerprint: HOSTILE };
    syntaxOk(observeScript(`/d/${HOSTILE}`, 'abc', 20));
    syntaxOk(inspectReplicaScript(`/d/${HOSTILE}`, 'r1', 'abc', 20));
    syntaxOk(usedPortsScript(`/d/${HOSTILE}`, 'abc'));
    syntaxOk(startReplicaScript({ dataDir: `/d/${HOSTILE}`, id: 'r1', port: 10000, argv: ['/bin/x', HOSTILE], stateHead: `{"x":${JSON.stringify(HOSTILE)}` }));
    syntaxOk(stopReplicaScript(`/d/${HOSTILE}`, 'r1', 5000));
    syntaxOk(logTailScript(`/d/${HOSTILE}`, 'r1', 10));
    syntaxOk(engineInstalledScript(paths));
    syntaxOk(artifactInstallScript({ ...paths, url: `http://x/${HOSTILE}`, sha256: SHA, binary: 'bin/llama-server' }));
    syntaxOk(artifactInstallScript({ ...paths, url: null, sha256: SHA, binary: 'llama-server' }));
    syntaxOk(buildInstallScript({ ...paths, git: HOSTILE, ref: HOSTILE, cmakeFlags: [HOSTILE], target: 'llama-server', jobs: null }));
    syntaxOk(pathEngineScript({ ...paths, path: `/opt/${HOSTILE}` }));
    // the secret name reaches the script's messages: quoted like every other value (#36 N14)
    syntaxOk(modelFromUrlScript(`/d/${HOSTILE}`, SHA, HOSTILE));
    syntaxOk(modelFromFileScript(`/d/${HOSTILE}`, SHA, `/m/${HOSTILE}`));
  });

  test('a hostile value in a script is data: the script runs and touches nothing', () => {
    const marker = `/tmp/llmgw-pwned-unit`;
    const r = spawnSync('sh', ['-c', logTailScript(`/nonexistent/${HOSTILE}`, 'r1', 10)], { encoding: 'utf8' });
    assert.equal(r.status, 3);
    assert.match(r.stderr, /^llmgw-error: REPLICA_NOT_FOUND /m);
    assert.equal(spawnSync('test', ['-e', marker]).status, 1, 'the hostile value ran a command');
  });

  test('replicaArgv: profile settings, extra args last, each one argument', () => {
    const argv = replicaArgv({ id: 'r', model: 'm', digest: 'd', modelPath: '/m/$(x).gguf', binary: '/e/llama-server', profile, apiKey: 'k' }, '127.0.0.1', 10001);
    assert.deepEqual(argv, [
      '/e/llama-server', '-m', '/m/$(x).gguf', '--host', '127.0.0.1', '--port', '10001', '--alias', 'm', '-c', '512', '-np', '1',
      '-t', '2', '-b', '64', '--embeddings', '--cache-ram', '0', '--no-webui', '; touch /tmp/pwned',
    ]);
    assert.ok(!argv.includes('k'), 'the api key is never an argument');
    const rr = replicaArgv({ id: 'r', model: 'm', digest: 'd', modelPath: '/m/x.gguf', binary: '/e/llama-server', profile: { ...profile, embeddings: false, reranking: true }, apiKey: 'k' }, '127.0.0.1', 10001);
    assert.ok(rr.includes('--reranking') && !rr.includes('--embeddings'), rr.join(' '));
  });

  test('replicaArgv with the model\'s slot dir (#38 item 3): --slot-save-path before the extra args (a profile\'s own wins), made by the start script, quoted', () => {
    const dir = slotSaveDir('/data dir/', 'm');
    assert.match(dir, /^\/data dir\/slots\/[0-9a-f]{16}$/);
    const argv = replicaArgv({ id: 'r', model: 'm', digest: 'd', modelPath: '/m/x.gguf', binary: '/e/llama-server', profile, apiKey: 'k' }, '127.0.0.1', 10001, dir);
    assert.deepEqual(argv.slice(-6), ['--cache-ram', '0', '--slot-save-path', dir, '--no-webui', '; touch /tmp/pwned']);
    const script = startReplicaScript({ dataDir: '/data dir', id: 'r', port: 10001, argv, stateHead: '{' });
    assert.ok(script.includes(`mkdir -p '${dir}' || exit 1\n`), 'the slot dir is made, quoted');
    assert.ok(!startReplicaScript({ dataDir: '/d', id: 'r', port: 1, argv: ['/e/llama-server'], stateHead: '{' }).includes('/slots/'));
    assert.notEqual(slotSaveDir('/d', 'a'), slotSaveDir('/d', 'b'));
  });

  test('scriptError maps llmgw-error lines, ENOSPC and plain failures', () => {
    const e1 = scriptError('n', 'x', { code: 3, signal: null, stdout: '', stderr: 'curl: (22) 404\nllmgw-error: ENGINE_CHECKSUM_MISMATCH artifact sha256 is 1, engines/ says 2\n' });
    assert.equal(e1.code, 'ENGINE_CHECKSUM_MISMATCH');
    assert.match(e1.message, /artifact sha256 is 1/);
    const e2 = scriptError('n', 'x', { code: 3, signal: null, stdout: '', stderr: 'tar: write error: No space left on device\nllmgw-error: ENGINE_ARTIFACT_INVALID tar could not unpack\n' });
    assert.equal(e2.code, 'NODE_DISK_FULL');
    const e3 = scriptError('n', 'x', { code: 1, signal: null, stdout: '', stderr: 'boom\n' });
    assert.equal(e3.code, 'NODE_COMMAND_FAILED');
    const e4 = scriptError('n', 'x', { code: 3, signal: null, stdout: '', stderr: 'llmgw-error: NOT_A_CODE hi\n' });
    assert.equal(e4.code, 'NODE_COMMAND_FAILED');
  });

  test('parseSections ignores forged markers; df parsing', () => {
    const s = parseSections('junk\n@@n1 a\nx\n@@n2 b\n@@n1 c\ny\n\n', 'n1');
    assert.deepEqual(s, [{ name: 'a', lines: ['x', '@@n2 b'] }, { name: 'c', lines: ['y'] }]);
    assert.equal(parseDfAvailableKb('/dev/vda1 81000000 1000 80000000 1% /'), 80000000);
    assert.equal(parseDfAvailableKb('my fs 81000000 1000 70000 1% /mnt/a b'), 70000);
  });
});
