/**
 * The engine install operations — artifact (downloaded from a file:// URL, or uploaded into the
 * staging dir), path, "installed?", stage and cleanup — rendered, run under dash and bash over a
 * fixture data dir, and parsed: each prints the installed binary's path, and each known failure is
 * its catalogue code. The build method (cmake and a C++ compiler, ~3 s a case) is in
 * test/integration/nodes-ops-engine-build.test.ts.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { artifactInstallScript } from '../../src/nodes/ops/engine-artifact.js';
import {
  engineCleanupScript, engineInstalledScript, engineStageDir, engineStageScript, parseInstalledBinary, pathEngineScript, type EnginePaths,
} from '../../src/nodes/ops/engine.js';
import { scriptError } from '../../src/nodes/script-errors.js';
import { makeDataDir, run, runOk, SHELLS, writeExe, type DataDir } from '../harness/nodes-ops-fixture.js';

const sha = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

let fx: DataDir;
let tgz: string;
let zip: string;
let broken: string;

before(() => {
  fx = makeDataDir('engine');
  // with an rpc-server beside the binary, stored without its exec bit (the install makes it runnable)
  mkdirSync(join(fx.root, 'src', 'bin'), { recursive: true });
  writeFileSync(join(fx.root, 'src', 'bin', 'rpc-server'), '#!/bin/sh\nexit 0\n', { mode: 0o644 });
  tgz = archive('src', '[ "$1" = --version ] && { echo "version: 1 (stand-in)"; exit 0; }\nexit 2\n');
  zip = join(fx.root, 'engine.zip');
  execFileSync('zip', ['-qr', zip, 'bin'], { cwd: join(fx.root, 'src') });
  broken = archive('bad', 'echo "cannot run here" >&2\nexit 1\n');
});

after(() => fx.remove());

/** A tar.gz of bin/llama-server (a stand-in script with this body), built in <root>/<name>. */
function archive(name: string, body: string): string {
  const dir = join(fx.root, name);
  mkdirSync(join(dir, 'bin'), { recursive: true });
  writeExe(join(dir, 'bin', 'llama-server'), body);
  const out = join(fx.root, `${name}.tar.gz`);
  execFileSync('tar', ['-czf', out, '-C', dir, 'bin']);
  return out;
}

for (const shell of SHELLS) {
  describe(`ops/engine*: ${shell}`, () => {
    const paths = (version: string, nonce = 'n1'): EnginePaths => ({ dataDir: fx.dataDir, engine: `llama-${shell}`, version, nonce, fingerprint: `fp-${version}` });
    const installed = (version: string) => parseInstalledBinary(runOk(shell, engineInstalledScript(paths(version))).stdout);
    const base = () => join(fx.dataDir, 'engines', `llama-${shell}`);
    /** Nothing but installed versions in the engine's dir: no staging or build dir left. */
    const leftovers = () => (existsSync(base()) ? readdirSync(base()).filter((n) => n.startsWith('.')) : []);

    it('artifact from a URL: downloaded, verified, unpacked, run; the binary printed and then reported installed', () => {
      assert.equal(installed('a1'), null);
      const res = runOk(shell, artifactInstallScript({ ...paths('a1'), url: pathToFileURL(tgz).href, sha256: sha(tgz), binary: 'bin/llama-server' }));
      const bin = join(base(), 'a1', 'bin', 'llama-server');
      assert.equal(parseInstalledBinary(res.stdout), bin);
      assert.equal(installed('a1'), bin);
      assert.equal(readFileSync(join(base(), 'a1', '.complete'), 'utf8'), `${bin}\nfp-a1\n`);
      assert.equal(statSync(join(base(), 'a1', 'bin', 'rpc-server')).mode & 0o111, 0o111, 'the rpc-server beside it is executable');
      // again: found installed under the lock, nothing downloaded
      const again = runOk(shell, artifactInstallScript({ ...paths('a1', 'n2'), url: 'file:///nonexistent', sha256: sha(tgz), binary: 'bin/llama-server' }));
      assert.equal(parseInstalledBinary(again.stdout), bin);
      assert.deepEqual(leftovers(), []);
    });

    it('artifact uploaded: stage, upload (a zip), install; cleanup removes a stage', () => {
      const p = paths('a2');
      runOk(shell, engineStageScript(p));
      copyFileSync(zip, join(engineStageDir(p), '.artifact'));
      const res = runOk(shell, artifactInstallScript({ ...p, url: null, sha256: sha(zip), binary: 'bin/llama-server' }));
      assert.equal(parseInstalledBinary(res.stdout), join(base(), 'a2', 'bin', 'llama-server'));
      const q = paths('a3', 'n9');
      runOk(shell, engineStageScript(q));
      assert.ok(existsSync(engineStageDir(q)));
      runOk(shell, engineCleanupScript(q));
      assert.ok(!existsSync(engineStageDir(q)));
      assert.deepEqual(leftovers(), []);
    });

    it('artifact failures are their codes, and leave no staging dir', () => {
      const url = pathToFileURL(tgz).href;
      const fail = (p: Parameters<typeof artifactInstallScript>[0]) => scriptError('n', 'install', run(shell, artifactInstallScript(p))).code;
      assert.equal(fail({ ...paths('f1'), url, sha256: 'c'.repeat(64), binary: 'bin/llama-server' }), 'ENGINE_CHECKSUM_MISMATCH');
      assert.equal(fail({ ...paths('f2'), url: pathToFileURL(join(fx.root, 'missing.tar.gz')).href, sha256: sha(tgz), binary: 'bin/llama-server' }), 'ENGINE_DOWNLOAD_FAILED');
      const notArchive = join(fx.root, 'not-an-archive.txt'); // neither a tar.gz nor a zip
      writeFileSync(notArchive, 'int main() { return 0; }\n');
      assert.equal(fail({ ...paths('f3'), url: pathToFileURL(notArchive).href, sha256: sha(notArchive), binary: 'bin/llama-server' }), 'ENGINE_ARTIFACT_INVALID');
      assert.equal(fail({ ...paths('f4'), url, sha256: sha(tgz), binary: 'bin/other' }), 'ENGINE_ARTIFACT_INVALID');
      assert.equal(fail({ ...paths('f5'), url: pathToFileURL(broken).href, sha256: sha(broken), binary: 'bin/llama-server' }), 'ENGINE_ARTIFACT_INVALID');
      assert.equal(fail({ ...paths('f6'), url: null, sha256: sha(tgz), binary: 'bin/llama-server' }), 'ENGINE_DOWNLOAD_FAILED');
      for (const v of ['f1', 'f2', 'f3', 'f4', 'f5', 'f6']) assert.equal(installed(v), null);
      assert.deepEqual(leftovers(), []);
    });

    it('path: a binary that runs --version is recorded; one that does not is ENGINE_NOT_FOUND and unrecorded', () => {
      const good = join(fx.root, 'src', 'bin', 'llama-server');
      assert.equal(parseInstalledBinary(runOk(shell, pathEngineScript({ ...paths('p1'), path: good })).stdout), good);
      assert.equal(parseInstalledBinary(runOk(shell, pathEngineScript({ ...paths('p1'), path: good })).stdout), good);
      assert.equal(installed('p1'), good);
      const bad = writeExe(join(fx.root, `bad-${shell}`), 'exit 1\n');
      assert.equal(scriptError('n', 'path', run(shell, pathEngineScript({ ...paths('p2'), path: bad }))).code, 'ENGINE_NOT_FOUND');
      assert.equal(scriptError('n', 'path', run(shell, pathEngineScript({ ...paths('p2'), path: join(fx.root, 'none') }))).code, 'ENGINE_NOT_FOUND');
      assert.equal(installed('p2'), null);
    });

    it('path: --version runs once while the binary is unchanged, and again when it is replaced (#38: ~50 ms a start)', () => {
      const runs = join(fx.root, `runs-${shell}`);
      const exe = writeExe(join(fx.root, `counted-${shell}`), `[ "$1" = --version ] && { echo x >>${JSON.stringify(runs)}; echo "version: 1"; exit 0; }\nexit 2\n`);
      const runsSoFar = () => (existsSync(runs) ? readFileSync(runs, 'utf8').split('\n').filter(Boolean).length : 0);
      for (let i = 0; i < 3; i++) assert.equal(parseInstalledBinary(runOk(shell, pathEngineScript({ ...paths('p3'), path: exe })).stdout), exe);
      assert.equal(runsSoFar(), 1);
      // replaced by one that no longer runs (another inode and size): run again, refused, unrecorded
      rmSync(exe);
      writeExe(exe, 'exit 1 # broken now\n');
      assert.equal(scriptError('n', 'path', run(shell, pathEngineScript({ ...paths('p3'), path: exe }))).code, 'ENGINE_NOT_FOUND');
      assert.equal(installed('p3'), null);
    });
  });
}
