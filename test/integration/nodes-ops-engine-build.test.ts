/**
 * The engine install operation by the build method — a tiny cmake project in a local git repo,
 * cloned at a ref, built with cmake and the C++ compiler, the target installed and run — rendered,
 * run under dash and bash over a fixture data dir, and parsed: it prints the installed binary's path,
 * and a missing ref is ENGINE_BUILD_FAILED. Moved from test/unit/nodes-ops-engine.test.ts (the other
 * engine operations stay there): the four compiles took 12-15 s of the unit tier.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { buildInstallScript } from '../../src/nodes/ops/engine-build.js';
import { parseInstalledBinary, type EnginePaths } from '../../src/nodes/ops/engine.js';
import { scriptError } from '../../src/nodes/script-errors.js';
import { makeDataDir, run, runOk, SHELLS, type DataDir } from '../harness/nodes-ops-fixture.js';

let fx: DataDir;
let repo: string;

before(() => {
  fx = makeDataDir('engine-build');
  // a git repo with a cmake project whose target prints a version
  repo = join(fx.root, 'repo');
  mkdirSync(repo);
  // with GGML_RPC on, like llama.cpp, it also has the ggml-rpc-server target
  writeFileSync(join(repo, 'CMakeLists.txt'), 'cmake_minimum_required(VERSION 3.10)\nproject(standin CXX)\noption(GGML_RPC "rpc" OFF)\nadd_executable(llama-server main.cpp)\nif(GGML_RPC)\n  add_executable(ggml-rpc-server main.cpp)\nendif()\n');
  writeFileSync(join(repo, 'main.cpp'), '#include <cstdio>\n#include <cstring>\nint main(int c, char** v) { if (c > 1 && !std::strcmp(v[1], "--version")) { std::puts("version: built"); return 0; } return 2; }\n');
  const git = (...a: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...a], { cwd: repo, stdio: 'ignore' });
  git('init', '-q', '-b', 'main');
  git('add', '.');
  git('commit', '-qm', 'stand-in');
});

after(() => fx.remove());

for (const shell of SHELLS) {
  describe(`ops/engine build: ${shell}`, () => {
    const paths = (version: string, nonce = 'n1'): EnginePaths => ({ dataDir: fx.dataDir, engine: `llama-${shell}`, version, nonce, fingerprint: `fp-${version}` });
    const base = () => join(fx.dataDir, 'engines', `llama-${shell}`);
    /** Nothing but installed versions in the engine's dir: no staging or build dir left. */
    const leftovers = () => (existsSync(base()) ? readdirSync(base()).filter((n) => n.startsWith('.')) : []);

    it('build: git clone at a ref, cmake, the target binary installed and run; a missing ref is ENGINE_BUILD_FAILED', () => {
      const res = runOk(shell, buildInstallScript({ ...paths('b1'), git: repo, ref: 'main', cmakeFlags: [], target: 'llama-server', jobs: 1 }), { timeoutMs: 180_000 });
      const bin = join(base(), 'b1', 'llama-server');
      assert.equal(parseInstalledBinary(res.stdout), bin);
      assert.equal(execFileSync(bin, ['--version'], { encoding: 'utf8' }), 'version: built\n');
      assert.equal(existsSync(join(base(), 'b1', 'rpc-server')), false, 'no rpc-server without GGML_RPC');
      const r = run(shell, buildInstallScript({ ...paths('b2'), git: repo, ref: 'no-such-ref', cmakeFlags: [], target: 'llama-server', jobs: 1 }), { timeoutMs: 60_000 });
      const e = scriptError('n', 'build', r);
      assert.equal(e.code, 'ENGINE_BUILD_FAILED');
      assert.match(e.message, /git ref 'no-such-ref' not found/);
      assert.deepEqual(leftovers(), []);
    });

    it('build with -DGGML_RPC=ON: rpc-server (the ggml-rpc-server target) built and installed beside the binary', () => {
      const res = runOk(shell, buildInstallScript({ ...paths('b3'), git: repo, ref: 'main', cmakeFlags: ['-DGGML_RPC=ON'], target: 'llama-server', jobs: 1 }), { timeoutMs: 180_000 });
      assert.equal(parseInstalledBinary(res.stdout), join(base(), 'b3', 'llama-server'));
      assert.equal(execFileSync(join(base(), 'b3', 'rpc-server'), ['--version'], { encoding: 'utf8' }), 'version: built\n');
      assert.deepEqual(leftovers(), []);
    });
  });
}
