/**
 * `llmgw validate` and RPC groups (#40): placement: {spread: rpc} needs an engine version that
 * carries rpc-server (rpc: true, or a build with -DGGML_RPC=ON); otherwise SPEC_ENGINE_NO_RPC at
 * the field that asks for it, naming the engine, its version and its file.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { minimalFleet, tempFleet } from '../harness/fleet.js';
import { runCli } from '../harness/cli.js';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';

interface Out {
  valid: boolean;
  warnings: { file: string; path: string; code: string; message: string }[];
  problems: { file: string; line: number; path: string; code: string; message: string; hint: string }[];
}

async function validate(files: Record<string, string>): Promise<{ code: number; out: Out; text: string }> {
  const f = tempFleet(files);
  try {
    const r = await runCli(['validate', f.dir, '-f', 'json']);
    const text = await runCli(['validate', f.dir]);
    return { code: r.code, out: JSON.parse(r.stdout) as Out, text: text.stdout };
  } finally {
    f.cleanup();
  }
}

const BUILD_RPC = ['  b6700:', '    build:', '      git: https://example.invalid/llama.cpp', '      ref: b6700', '      cmake_flags: [-DGGML_NATIVE=ON, -DGGML_RPC=ON]', ''].join('\n');

describe('llmgw validate: placement spread rpc', () => {
  it('refuses spread: rpc on a model whose profile\'s engine version has no rpc-server, at the model\'s line, naming the engine, version and file', async () => {
    const files = minimalFleet();
    files['models/alpha.yaml'] += 'placement: { spread: rpc, max_hosts: 3 }\n';
    const r = await validate(files);
    assert.equal(r.code, 2, r.text);
    assert.deepEqual(r.out.problems.map((p) => [p.file, p.line, p.path, p.code]), [['models/alpha.yaml', 8, '/placement/spread', 'SPEC_ENGINE_NO_RPC']]);
    const p = r.out.problems[0]!;
    assert.match(p.message, /needs rpc-server; engine llama-cpp version b6500 \(engines\/llama-cpp\.yaml\) does not carry it \(the engine of profile "chat"\)/);
    assert.match(p.hint, /in engines\/llama-cpp\.yaml, version b6500: set rpc: true on it if its install carries rpc-server/);
    assert.match(r.text, /models\/alpha\.yaml:8:\d+: error: placement spread: rpc .* \[SPEC_ENGINE_NO_RPC\]/);
  });

  it('refuses it on a profile too (its models\' placement), at the profile\'s line; a model setting spread: none does not hide it', async () => {
    const files = minimalFleet();
    files['profiles/chat.yaml'] += 'placement:\n  spread: rpc\n';
    files['models/alpha.yaml'] += 'placement: { spread: none }\n';
    const r = await validate(files);
    assert.equal(r.code, 2, r.text);
    assert.deepEqual(r.out.problems.map((p) => [p.file, p.line, p.path, p.code]), [['profiles/chat.yaml', 5, '/placement/spread', 'SPEC_ENGINE_NO_RPC']]);
    assert.match(r.out.problems[0]!.message, /engine llama-cpp version b6500 \(engines\/llama-cpp\.yaml\) does not carry it$/);
  });

  it('accepts it with rpc: true on the version, or a build with -DGGML_RPC=ON (whose hint says so when it is missing)', async () => {
    const files = minimalFleet();
    files['engines/llama-cpp.yaml'] = files['engines/llama-cpp.yaml']!.replace('    path: /opt/llama/b6500/llama-server\n', '    path: /opt/llama/b6500/llama-server\n    rpc: true\n') + BUILD_RPC;
    files['models/alpha.yaml'] += 'placement: { spread: rpc, max_hosts: 3 }\n';
    files['profiles/embed.yaml'] = files['profiles/embed.yaml']!.replace('llama-cpp@b6500', 'llama-cpp@b6700') + 'placement: { spread: rpc }\n';
    const ok = await validate(files);
    assert.equal(ok.code, 0, ok.text);
    assert.equal(ok.out.valid, true);
    // the reconciler runs groups: spread: rpc is valid with no warning
    assert.deepEqual(ok.out.warnings, []);

    const off = { ...files, 'engines/llama-cpp.yaml': files['engines/llama-cpp.yaml']!.replace('-DGGML_RPC=ON', '-DGGML_RPC=OFF') };
    const r = await validate(off);
    assert.equal(r.code, 2, r.text);
    assert.deepEqual(r.out.problems.map((p) => [p.file, p.path, p.code]), [['profiles/embed.yaml', '/placement/spread', 'SPEC_ENGINE_NO_RPC']]);
    assert.match(r.out.problems[0]!.hint, /version b6700: add -DGGML_RPC=ON to its build cmake_flags/);
  });

  it('the schema: max_hosts 2..8, spread none|rpc, rpc beside exactly one install method', async () => {
    const files = minimalFleet();
    files['models/alpha.yaml'] += 'placement: { spread: rpc, max_hosts: 9 }\n';
    files['models/beta.yaml'] += 'placement: { spread: tensor }\n';
    files['engines/llama-cpp.yaml'] += '  b6800:\n    rpc: true\n';
    const r = await validate(files);
    assert.equal(r.code, 2, r.text);
    // (the engine file refused whole, its references dangle: not what this checks)
    const got = r.out.problems.filter((p) => p.code === 'SPEC_SCHEMA').map((p) => [p.file, p.path, p.code]);
    assert.deepEqual(got, [
      ['engines/llama-cpp.yaml', '/versions/b6800', 'SPEC_SCHEMA'],
      ['models/alpha.yaml', '/placement/max_hosts', 'SPEC_SCHEMA'],
      ['models/beta.yaml', '/placement/spread', 'SPEC_SCHEMA'],
    ]);
    assert.match(r.out.problems.find((p) => p.file === 'engines/llama-cpp.yaml')!.hint, /exactly one install method: artifact, build or path \(and rpc: true/);
  });

  it('the loaded spec: the model\'s placement fields over its profile\'s over the default; spread rpc moves the digest, max_hosts does not', async () => {
    const files = minimalFleet();
    files['engines/llama-cpp.yaml'] = files['engines/llama-cpp.yaml']!.replace('    path: /opt/llama/b6500/llama-server\n', '    path: /opt/llama/b6500/llama-server\n    rpc: true\n') + BUILD_RPC;
    const load = async (f: Record<string, string>) => {
      const t = tempFleet(f);
      try {
        const r = await loadFleetSpec(dirFiles(t.dir), null);
        assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
        return r.spec;
      } finally {
        t.cleanup();
      }
    };
    const plain = await load(files);
    assert.deepEqual(plain.models.alpha!.placement, { spread: 'none', maxHosts: 2 });
    assert.equal(plain.engines['llama-cpp']!.versions.b6500!.rpc, true);
    assert.equal(plain.engines['llama-cpp']!.versions.b6600!.rpc, false);
    assert.equal(plain.engines['llama-cpp']!.versions.b6700!.rpc, true);
    const byProfile = await load({ ...files, 'profiles/chat.yaml': files['profiles/chat.yaml'] + 'placement: { spread: rpc, max_hosts: 4 }\n' });
    assert.deepEqual(byProfile.models.alpha!.placement, { spread: 'rpc', maxHosts: 4 });
    assert.notEqual(byProfile.models.alpha!.digest, plain.models.alpha!.digest);
    const byModel = await load({ ...files, 'profiles/chat.yaml': files['profiles/chat.yaml'] + 'placement: { spread: rpc, max_hosts: 4 }\n', 'models/alpha.yaml': files['models/alpha.yaml'] + 'placement: { spread: rpc, max_hosts: 3 }\n' });
    assert.deepEqual(byModel.models.alpha!.placement, { spread: 'rpc', maxHosts: 3 });
    assert.equal(byModel.models.alpha!.digest, byProfile.models.alpha!.digest);
    const none = await load({ ...files, 'models/alpha.yaml': files['models/alpha.yaml'] + 'placement: { spread: none }\n' });
    assert.equal(none.models.alpha!.digest, plain.models.alpha!.digest);
    // field by field: a model setting max_hosts keeps its profile's spread; one setting spread: none turns it off
    const rpcProfile = { ...files, 'profiles/chat.yaml': files['profiles/chat.yaml'] + 'placement: { spread: rpc, max_hosts: 4 }\n' };
    const hostsOnly = await load({ ...rpcProfile, 'models/alpha.yaml': files['models/alpha.yaml'] + 'placement: { max_hosts: 6 }\n' });
    assert.deepEqual(hostsOnly.models.alpha!.placement, { spread: 'rpc', maxHosts: 6 });
    const off = await load({ ...rpcProfile, 'models/alpha.yaml': files['models/alpha.yaml'] + 'placement: { spread: none }\n' });
    assert.deepEqual(off.models.alpha!.placement, { spread: 'none', maxHosts: 4 });
    assert.equal(off.models.alpha!.digest, plain.models.alpha!.digest);
  });
});
