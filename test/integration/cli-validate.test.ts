import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { buildCase, invalidCases } from '../fixtures/invalid-fleets.js';
import { minimalFleet, tempFleet } from '../harness/fleet.js';
import { runCli, spawnCli } from '../harness/cli.js';
import { cleanupTempDirs, WorkRepo } from '../harness/git.js';

describe('llmgw validate', () => {
  it('the installed binary: `llmgw validate example-fleet-repo` exits 0', () => {
    const r = spawnCli(['validate', 'example-fleet-repo']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.match(r.stdout, /example-fleet-repo: valid — 3 nodes, 1 engine \(2 versions\), 3 profiles, 4 models, 3 keys/);
  });

  it('the installed binary exits 2 on an invalid fleet and prints GitHub annotations', () => {
    const files = minimalFleet();
    files['models/alpha.yaml'] = files['models/alpha.yaml']!.replace('profile: chat', 'profile: nope');
    const f = tempFleet(files);
    try {
      const r = spawnCli(['validate', f.dir, '--format', 'github']);
      assert.equal(r.code, 2);
      assert.match(r.stdout, /^::error file=.*models\/alpha\.yaml,line=4,col=10,title=llmgw SPEC_DANGLING_REF::profile "nope" does not exist \(field \/profile\)\. Hint: existing profiles: chat, embed$/m);
    } finally {
      f.cleanup();
    }
  });

  it('a warning (a checks/ file no rollout uses) is printed in every format and leaves the repo valid', async () => {
    const files = minimalFleet();
    files['checks/spare.yaml'] = 'request: { prompt: "2+2=" }\npath: /v1/completions\nexpect: { contains: "4" }\n';
    const f = tempFleet(files);
    try {
      const text = await runCli(['validate', f.dir]);
      assert.equal(text.code, 0, text.stdout);
      assert.match(text.stdout, /checks\/spare\.yaml:1:1: warning: no rollout uses check "spare" \[SPEC_UNUSED_CHECK\]\n    hint: .*use: spare/);
      assert.match(text.stdout, /: valid — .* \(1 warning\)$/m);
      const json = JSON.parse((await runCli(['validate', f.dir, '-f', 'json'])).stdout) as { valid: boolean; warnings: { file: string; code: string }[] };
      assert.equal(json.valid, true);
      assert.deepEqual(json.warnings.map((w) => [w.file, w.code]), [['checks/spare.yaml', 'SPEC_UNUSED_CHECK']]);
      const gh = await runCli(['validate', f.dir, '-f', 'github']);
      assert.equal(gh.code, 0);
      assert.match(gh.stdout, /^::warning file=.*checks\/spare\.yaml,line=1,col=1,title=llmgw SPEC_UNUSED_CHECK::no rollout uses check "spare"/m);
    } finally {
      f.cleanup();
    }
  });

  it('refuses what takes away /slots (a drain waits on it before every stop): --no-slots and --api-prefix in extra_args, and (by the node schema, as every LLAMA_*) LLAMA_ARG_ENDPOINT_SLOTS in a node\'s env, each at its file:line', async () => {
    const files = minimalFleet();
    files['profiles/chat.yaml'] += 'extra_args:\n  - --slots\n  - --no-slots\n  - --api-prefix=/llm\n';
    files['profiles/embed.yaml'] += 'extra_args: [--api-prefix, /llm]\n';
    files['nodes/cpu-01.yaml'] += 'env:\n  GGML_VK_VISIBLE_DEVICES: "0"\n  LLAMA_ARG_ENDPOINT_SLOTS: "0"\n';
    const f = tempFleet(files);
    try {
      const r = await runCli(['validate', f.dir, '-f', 'json']);
      assert.equal(r.code, 2, r.stdout);
      const out = JSON.parse(r.stdout) as { problems: { file: string; line: number; path: string; code: string; message: string }[] };
      assert.deepEqual(
        out.problems.map((p) => [p.file, p.line, p.path, p.code]),
        [
          ['nodes/cpu-01.yaml', 7, '/env', 'SPEC_SCHEMA'],
          ['nodes/cpu-01.yaml', 8, '/env/LLAMA_ARG_ENDPOINT_SLOTS', 'SPEC_SCHEMA'],
          ['profiles/chat.yaml', 6, '/extra_args/1', 'SPEC_INVALID_VALUE'],
          ['profiles/chat.yaml', 7, '/extra_args/2', 'SPEC_INVALID_VALUE'],
          ['profiles/embed.yaml', 4, '/extra_args/0', 'SPEC_INVALID_VALUE'],
        ],
      );
      assert.match(out.problems[2]!.message, /extra_args sets --no-slots, which takes away the endpoints llmgw reads/);
      const text = await runCli(['validate', f.dir]);
      assert.match(text.stdout, /profiles\/chat\.yaml:6:\d+: error: extra_args sets --no-slots/);
    } finally {
      f.cleanup();
    }
  });

  it('json format lists the problems with file, line, col, field, code and hint', async () => {
    const files = minimalFleet();
    files['models/beta.yaml'] = files['models/beta.yaml']!.replace('memory: 6GiB', 'memory: 6 GiBs');
    const f = tempFleet(files);
    try {
      const r = await runCli(['validate', f.dir, '-f', 'json']);
      assert.equal(r.code, 2);
      const out = JSON.parse(r.stdout) as { valid: boolean; problems: { file: string; line: number; col: number; path: string; code: string; hint: string }[] };
      assert.equal(out.valid, false);
      assert.deepEqual(
        out.problems.map((p) => [p.file, p.line, p.col, p.path, p.code]),
        [['models/beta.yaml', 5, 9, '/memory', 'SPEC_SCHEMA']],
      );
      assert.match(out.problems[0]!.hint, /512MiB, 14GiB/);
    } finally {
      f.cleanup();
    }
  });

  it('--rev reads the committed files at a revision, never the working tree', async () => {
    const repo = await WorkRepo.init();
    try {
      await repo.write(minimalFleet());
      await repo.commit('good fleet');
      await repo.write({ 'models/alpha.yaml': 'source: nope\n' }); // uncommitted breakage
      assert.equal((await runCli(['validate', '--rev', 'HEAD', repo.dir])).code, 0);
      assert.equal((await runCli(['validate', repo.dir])).code, 2, 'the directory itself is broken');
      await repo.commit('break alpha');
      const bad = await runCli(['validate', '--rev', 'HEAD', repo.dir]);
      assert.equal(bad.code, 2);
      assert.match(bad.stdout, /models\/alpha\.yaml:1:9: error: source: "nope" is not valid here/);
      assert.match(bad.stdout, /at [0-9a-f]{12}: invalid/);
      assert.equal((await runCli(['validate', '--rev', 'HEAD~1', repo.dir])).code, 0);
      const missing = await runCli(['validate', '--rev', 'no-such-branch', repo.dir]);
      assert.equal(missing.code, 2);
      assert.match(missing.stderr, /GIT_REF_NOT_FOUND/);
    } finally {
      await cleanupTempDirs();
    }
  });

  it('usage errors exit 2', async () => {
    assert.equal((await runCli(['validate', '--format', 'xml'])).code, 2);
    assert.equal((await runCli(['validate', '--bogus'])).code, 2);
    assert.equal((await runCli(['frobnicate'])).code, 2);
  });

  for (const c of invalidCases) {
    it(`exits 2 naming file, line and field: ${c.name}`, async () => {
      const f = tempFleet(buildCase(c));
      try {
        c.setup?.(f.dir);
        const r = await runCli(['validate', f.dir]);
        assert.equal(r.code, 2, r.stdout);
        const where = c.expect.line > 0 ? `${c.expect.file}:${c.expect.line}:` : `${c.expect.file}: error`;
        assert.ok(r.stdout.includes(where), `expected "${where}" in:\n${r.stdout}`);
        if (c.expect.field) assert.ok(r.stdout.includes(`(field ${c.expect.field})`), `expected the field in:\n${r.stdout}`);
        assert.ok(r.stdout.includes(`[${c.expect.code}]`));
        assert.match(r.stdout, /hint: /);
      } finally {
        f.cleanup();
      }
    });
  }
});
