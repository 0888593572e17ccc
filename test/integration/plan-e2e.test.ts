/**
 * `llmgw plan` in a PR check, against what a real controller wrote: a controller (real sshd node,
 * llama-server, fleet repo served by git http-backend) runs the fleet and writes the status branch;
 * a fresh clone (as CI has) plans a PR that adds a model that fits, an on-demand model that fits
 * only after the idle on-demand replica is evicted, one too big for any node, and changes a
 * profile. Then the PR is merged and the controller does what the plan said.
 */
import { strict as assert } from 'node:assert';
import { stat } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { gguf } from '@huggingface/gguf';
import { replicaMemory, shapeFromMetadata } from '../../src/reconciler/memory.js';
import { runCli } from '../harness/cli.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { makeTempDir, WorkRepo } from '../harness/git.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildAdminApp } from '../../src/admin/app.js';
import { assertGolden } from '../harness/golden.js';

const MiB = 2 ** 20;
let fleet: TestFleet;
let ctl: TestController;
let clone: WorkRepo;
const model = (name: string) => ctl.reconciler.model(name)!;

/** Oids and the status's age differ between runs. */
const normalize = (s: string): string =>
  s
    .replace(/\b[0-9a-f]{40}\b/g, '<oid>')
    .replace(/\b[0-9a-f]{12}\b/g, '<oid>')
    .replace(/written [0-9hms]+ ago/g, 'written <age> ago');

/** What the controller's estimator gives a tiny model on the tiny profile (ctx 256, 16 MiB prompt cache, 64 MiB overhead). */
async function needOfFile(path: string): Promise<number> {
  const [{ metadata }, st] = await Promise.all([gguf(path, { allowLocalFile: true }), stat(path)]);
  return replicaMemory(shapeFromMetadata(metadata as unknown as Record<string, unknown>, st.size), { ctxSize: 256, memoryOverheadBytes: 64 * MiB, cacheRamBytes: 16 * MiB });
}

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const { good, good2 } = fleet.models;
  const [x, x2] = [await needOfFile(good.path), await needOfFile(good2.path)];
  // Room for good (x) + fits (x2) + burst (350 MiB) and 20 MiB more, above the 256 MiB reserve: with
  // lazy's 300 MiB in use, burst fits only once lazy's replica is evicted.
  const capacity = 256 * MiB + x + x2 + 370 * MiB;
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  files['nodes/node-1.yaml'] += `capacity: { memory: ${capacity} }\n`;
  files['profiles/spare.yaml'] = files['profiles/tiny.yaml']!;
  files['models/good.yaml'] = modelYaml(good, ['replicas: 1']);
  files['models/lazy.yaml'] = modelYaml(good, ['on_demand: { idle_timeout: 1h }', 'memory: 300MiB']);
  files['models/spare.yaml'] = modelYaml(good, ['replicas: 0', 'memory: 100MiB']).replace('profile: tiny', 'profile: spare');
  await fleet.push(files, 'a chat model, an on-demand one, a spare');
  ctl = await fleet.startController();
  await ctl.until('good ready', 90_000, () => model('good').phase === 'ready');
  await ctl.reconciler.demand('lazy');
  await ctl.until('lazy ready', 90_000, () => model('lazy').ready === 1);
  // one more pass: the status branch says lazy runs
  await ctl.reconciler.requestPass('test');

  // a CI clone: the status branch comes along as origin/llmgw/status
  clone = await WorkRepo.clone(fleet.git.authUrl('fleet.git'));
  await clone.git(['checkout', '-q', '-b', 'pr']);
  await clone.write({
    'models/fits.yaml': modelYaml(good2, ['replicas: 1']),
    'models/burst.yaml': modelYaml(good2, ['on_demand: { idle_timeout: 1h }', 'memory: 350MiB']),
    'models/huge.yaml': modelYaml(good2, ['replicas: 1', 'memory: 4GiB']),
    'profiles/spare.yaml': files['profiles/spare.yaml']!.replace('ctx_size: 256', 'ctx_size: 512'),
  });
  await clone.commit('add fits, burst and huge; spare: 512 context');
});

after(async () => {
  await fleet?.cleanup();
});

describe('llmgw plan on what the controller wrote', () => {
  it('reads the status branch at the base and reports each model as the controller will treat it', async () => {
    const r = await runCli(['plan'], clone.dir);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stderr, '', 'no notes: the status branch was found and is for the base');
    const out = normalize(r.stdout);
    assert.match(out, /status: status branch llmgw\/status at <oid> \(written <age> ago, for <oid>\)/);
    assert.match(out, /\+ fits +added: 1 replica, profile tiny \(llama-cpp@test\)\n +fits on node-1\n/);
    assert.match(out, /\+ burst .*\n +fits on node-1 when activated, after evicting the idle on-demand replica of lazy on node-1\n/);
    assert.match(out, /\+ huge .*\n +fits nowhere: needs 4 GiB; largest free .* on node-1; 1 node checked\n/);
    assert.match(out, /~ spare +definition changed \(profile spare settings\)/);
    assert.match(out, /3 models? change|4 models change/);
    assert.match(out, /; 1 changed model fits nowhere\.$/m, 'only huge counts as fitting nowhere');
    assert.doesNotMatch(out, /memory need unknown/);
    assert.doesNotMatch(out, /does not say where replicas run/, 'the status branch says where replicas run');
    assertGolden('plan-e2e.txt', out);
  });

  it('markdown: one PR comment with a table per model and per node, the eviction marked', async () => {
    const r = await runCli(['plan', '--format', 'markdown'], clone.dir);
    assert.equal(r.code, 1, r.stderr);
    const out = normalize(r.stdout);
    assert.ok(out.startsWith('<!-- llmgw-plan -->\n'));
    assert.match(out, /\| `node-1` \|.*♻️ \*\*evicts\*\* `lazy`/);
    assertGolden('plan-e2e.md', out);
  });

  it('github: an annotation on each changed model file, a warning for the one that fits nowhere', async () => {
    const r = await runCli(['plan', '--format', 'github'], clone.dir);
    assert.equal(r.code, 1, r.stderr);
    const out = normalize(r.stdout);
    const annotations = out.split('\n').filter((l) => l.startsWith('::'));
    assert.deepEqual(annotations.map((l) => /^::(\w+) file=([^,]+),line=(\d+)/.exec(l)!.slice(1)), [
      ['notice', 'models/burst.yaml', '4'],
      ['notice', 'models/fits.yaml', '4'],
      ['warning', 'models/huge.yaml', '4'],
      ['notice', 'models/spare.yaml', '4'],
    ]);
    assertGolden('plan-e2e.github.txt', annotations.join('\n'));
    // run from the checkout's parent, the files are named from there
    const up = await runCli(['plan', '--format', 'github', 'work'], join(clone.dir, '..'));
    assert.match(up.stdout, /^::notice file=work\/models\/burst\.yaml,line=4,/m);
  });

  it('--status also reads a checkout of the status branch, and the admin API’s /models and /nodes JSON (which say where replicas run)', async () => {
    const text = (out: string) => normalize(out).split('\n').filter((l) => !l.startsWith('status: ')).join('\n');
    const expected = text((await runCli(['plan'], clone.dir)).stdout);
    const dir = await makeTempDir();
    await clone.git(['worktree', 'add', '-q', '--detach', join(dir, 'status'), 'origin/llmgw/status']);
    const checkout = await runCli(['plan', '--status', join(dir, 'status')], clone.dir);
    assert.equal(checkout.code, 1, checkout.stderr);
    assert.equal(text(checkout.stdout), expected);

    const admin = buildAdminApp({ backend: ctl.reconciler, token: 'plan-e2e-token' });
    try {
      for (const what of ['models', 'nodes']) {
        const res = await admin.inject({ method: 'GET', url: `/admin/v1/${what}`, headers: { authorization: 'Bearer plan-e2e-token' } });
        assert.equal(res.statusCode, 200, res.body);
        writeFileSync(join(dir, `${what}.json`), res.body);
      }
    } finally {
      await admin.close();
    }
    const api = await runCli(['plan', '--status', join(dir, 'models.json'), '--status', join(dir, 'nodes.json'), '-f', 'json'], clone.dir);
    assert.equal(api.code, 1, api.stderr);
    const report = JSON.parse(api.stdout) as { usage: string; models: { model: string; placement: { verdict: string } | null }[] };
    assert.equal(report.usage, 'observed', 'the admin API says where replicas run');
    assert.deepEqual(
      report.models.filter((m) => m.placement).map((m) => [m.model, m.placement!.verdict]),
      [['burst', 'fits-after-eviction'], ['fits', 'fits'], ['good', 'running'], ['huge', 'fits-nowhere'], ['lazy', 'running'], ['spare', 'none-wanted']],
    );
  });

  it('in a detached checkout with no local main (as actions/checkout leaves a PR), the same plan', async () => {
    const expected = normalize((await runCli(['plan'], clone.dir)).stdout);
    await clone.git(['checkout', '-q', '--detach', 'pr']);
    await clone.git(['branch', '-q', '-D', 'main']);
    const r = await runCli(['plan'], clone.dir);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(normalize(r.stdout), expected);
  });

  it('merged, the controller does what the plan said', async () => {
    await clone.push(fleet.git.authUrl('fleet.git'), 'pr:main');
    const m = (name: string) => ctl.reconciler.model(name);
    await ctl.until('fits ready, huge unplaceable', 90_000, () => m('fits')?.ready === 1 && m('huge')?.phase === 'unplaceable');
    assert.match(model('huge').unplaceable!.reason, /needs 4 GiB; largest free .* on node-1; 1 node checked/);
    await ctl.reconciler.demand('burst');
    await ctl.until('burst ready, lazy evicted', 90_000, () => model('burst').ready === 1 && model('lazy').replicas.length === 0);
    assert.ok(ctl.logs.some((l) => l.msg === 'stopping replica' && l.model === 'lazy' && l.reason === 'evicted'));
  });
});
