import { strict as assert } from 'node:assert';
import { after, describe, it } from 'node:test';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { minimalFleet, SHA_B } from '../harness/fleet.js';
import { cleanupTempDirs, makeTempDir, WorkRepo } from '../harness/git.js';
import { assertGolden } from '../harness/golden.js';
import { runCli } from '../harness/cli.js';

/** Commit oids differ between runs (dates); golden files hold <oid>. */
const normalize = (s: string): string =>
  s.replace(/\b[0-9a-f]{40}\b/g, '<oid>').replace(/\b[0-9a-f]{12}\b/g, '<oid>').replace(/\/tmp\/[^\s()]+\/([^/\s()]+)/g, '<tmp>/$1');

async function fleetRepo(): Promise<WorkRepo> {
  const repo = await WorkRepo.init();
  await repo.write(minimalFleet());
  await repo.commit('initial fleet');
  return repo;
}

async function plan(repo: WorkRepo, ...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const r = await runCli(['plan', ...args], repo.dir);
  return { code: r.code, out: normalize(r.stdout), err: r.stderr };
}

type NodeStatus = { name: string; reachable: boolean; memory: { totalBytes: number; availableBytes: number } | null; engines: string[] };

/** A status file (the admin API's /models and /nodes answers in one document) in which model alpha is parked with `error`. */
async function parkedAlphaStatus(base: string, error: { code: string; message: string }, nodes: Record<string, NodeStatus> = {}): Promise<string> {
  const reason = { ...error, hint: 'h' };
  const status = {
    at: '2026-11-30T00:00:00Z',
    revision: base,
    nodes: Object.values(nodes).map((n) => ({ ...n, transport: 'ssh', labels: {}, error: null, capacity: null, engineInstallFailures: {}, replicas: 0 })),
    models: [
      {
        name: 'alpha', phase: 'parked', digest: 'x', desired: 1, ready: 0, consecutiveFailures: 5, memoryBytes: 4 * 2 ** 30, unplaceable: null, lastHandledRetry: null, replicas: [],
        lastError: reason,
        parked: { since: '2026-11-29T22:10:00Z', lastError: reason, hint: 'retry' },
      },
    ],
  };
  const statusFile = join(await makeTempDir(), 'status.json');
  writeFileSync(statusFile, JSON.stringify(status));
  return statusFile;
}

after(cleanupTempDirs);

describe('llmgw plan', () => {
  it('adding a model: added, where it fits, exit 1', async () => {
    const repo = await fleetRepo();
    await repo.git(['checkout', '-q', '-b', 'add-model']);
    await repo.write({
      'models/delta.yaml': `source: hf://org/delta-GGUF/delta-q4.gguf\nsha256: ${SHA_B}\nprofile: chat\nreplicas: 2\nmemory: 3GiB\naliases: [gpt-delta]\n`,
    });
    await repo.commit('add delta');
    const r = await plan(repo);
    assert.equal(r.code, 1, r.err);
    assertGolden('plan-add-model.txt', r.out);
    const md = await plan(repo, '--format', 'markdown');
    assertGolden('plan-add-model.md', md.out);
  });

  it('changing a profile: definitions change, replicas replaced, a parked model is unparked (status file)', async () => {
    const repo = await fleetRepo();
    const base = await repo.head();
    await repo.write({ 'profiles/chat.yaml': 'engine: llama-cpp@b6500\nctx_size: 8192\nparallel: 2\n' });
    const head = await repo.commit('chat: 8k context');
    const statusFile = await parkedAlphaStatus(base, { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" }, {
      'cpu-01': { name: 'cpu-01', reachable: true, memory: { totalBytes: 16 * 2 ** 30, availableBytes: 10 * 2 ** 30 }, engines: ['llama-cpp@b6500'] },
      'cpu-02': { name: 'cpu-02', reachable: true, memory: { totalBytes: 12 * 2 ** 30, availableBytes: 9 * 2 ** 30 }, engines: ['llama-cpp@b6500'] },
    });
    const r = await plan(repo, '--base', base, '--head', head, '--status', statusFile, '--at', '2026-11-30T02:00:00Z');
    assert.equal(r.code, 1, r.err);
    assertGolden('plan-change-profile.txt', r.out);
    const json = JSON.parse((await runCli(['plan', '--base', base, '--head', head, '--status', statusFile, '-f', 'json'], repo.dir)).stdout) as {
      models: { model: string; unparks: boolean; definitionChanged: boolean }[];
    };
    assert.deepEqual(
      json.models.filter((m) => m.definitionChanged).map((m) => [m.model, m.unparks]),
      [['alpha', true], ['beta', false]],
    );
  });

  it('a download token added to a parked model: listed, no replacement, and it says the model stays parked without a retry', async () => {
    const repo = await fleetRepo();
    const base = await repo.head();
    const alpha = minimalFleet()['models/alpha.yaml']!;
    await repo.write({ 'models/alpha.yaml': `${alpha}token: hf-token\n` });
    const head = await repo.commit('alpha: token');
    const statusFile = await parkedAlphaStatus(base, { code: 'MODEL_DOWNLOAD_FAILED', message: 'download failed (exit 22): 401' });
    const planJson = async (h: string) =>
      (JSON.parse((await runCli(['plan', '--base', base, '--head', h, '--status', statusFile, '-f', 'json'], repo.dir)).stdout) as {
        models: { model: string; effects: string[]; unparks: boolean; definitionChanged: boolean }[];
      }).models.find((m) => m.model === 'alpha')!;
    const a = await planJson(head);
    assert.equal(a.definitionChanged, false);
    assert.equal(a.unparks, false);
    assert.deepEqual(a.effects, [
      'download token: none → hf-token (the next download uses it; running replicas stay)',
      'still parked: a new download token does not unpark; add the trailer "Llmgw-Retry: alpha" to this commit, or run `llmgw ctl retry alpha`',
    ]);
    const retried = await repo.commit('retry alpha\n\nLlmgw-Retry: alpha\n');
    const b = await planJson(retried);
    assert.equal(b.unparks, true);
    assert.ok(!b.effects.some((e) => e.startsWith('still parked')), JSON.stringify(b.effects));
  });

  it('a model that fits nowhere: the need and the largest free node', async () => {
    const repo = await fleetRepo();
    const base = await repo.head();
    await repo.write({
      'models/huge.yaml': `source: https://models.example.invalid/huge.gguf\nsha256: ${SHA_B}\nprofile: chat\nreplicas: 1\nmemory: 15.5GiB\n`,
    });
    await repo.commit('add huge');
    const r = await plan(repo, '--base', base);
    assert.equal(r.code, 1, r.err);
    assertGolden('plan-fits-nowhere.txt', r.out);
    assert.match(r.out, /fits nowhere: needs 15\.5 GiB; largest free 11 GiB on cpu-02; 2 nodes checked/);
  });

  it('an engine upgrade: definitions change and the new version is installed where its models run; a retry trailer is listed', async () => {
    const repo = await fleetRepo();
    const base = await repo.head();
    await repo.write({ 'profiles/embed.yaml': 'engine: llama-cpp@b6600\nctx_size: 2048\nembeddings: true\n' });
    await repo.commit('embed: engine b6600');
    await repo.commit('retry alpha\n\nLlmgw-Retry: gpt-alpha\n');
    const r = await plan(repo, '--base', base, '--head', 'HEAD');
    assert.equal(r.code, 1, r.err);
    assertGolden('plan-engine-upgrade.txt', r.out);
  });

  it('no change exits 0; an invalid head exits 2 with its problems', async () => {
    const repo = await fleetRepo();
    const base = await repo.head();
    await repo.write({ 'README.md': 'docs only\n' });
    await repo.commit('docs');
    const same = await plan(repo, '--base', base);
    assert.equal(same.code, 0, same.out + same.err);
    assert.match(same.out, /No changes\./);
    await repo.write({ 'models/alpha.yaml': 'source: nope\n' });
    await repo.commit('break alpha');
    const bad = await plan(repo, '--base', base);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /models\/alpha\.yaml:1:9: error: source: "nope" is not valid here/);
  });
});
