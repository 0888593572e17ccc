import { strict as assert } from 'node:assert';
import { after, describe, it } from 'node:test';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { minimalFleet, SHA_B } from '../harness/fleet.js';
import { cleanupTempDirs, makeTempDir, WorkRepo } from '../harness/git.js';
import { assertGolden } from '../harness/golden.js';
import { runCli } from '../harness/cli.js';
import { createServer, type Socket } from 'node:net';
import { stat } from 'node:fs/promises';
import { gguf } from '@huggingface/gguf';
import { replicaMemory, shapeFromMetadata } from '../../src/reconciler/memory.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { startGatedOrigin } from '../harness/gated-origin.js';

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

  it('a model with an https source: its need is computed from the GGUF header the origin serves', async () => {
    const dir = await makeTempDir();
    const tiny = await writeTinyModel(join(dir, 'tiny.gguf'), { seed: 7 });
    const origin = await startGatedOrigin(tiny.path, null);
    try {
      const repo = await fleetRepo();
      const base = await repo.head();
      await repo.write({ 'models/remote.yaml': `source: ${origin.url}\nsha256: ${tiny.sha256}\nprofile: chat\nreplicas: 1\n` });
      await repo.commit('add remote');
      const r = await runCli(['plan', '--base', base, '--no-status', '-f', 'json'], repo.dir);
      assert.equal(r.code, 1, r.stderr);
      const remote = (JSON.parse(r.stdout) as { models: { model: string; memoryBytes: number | null; placement: { verdict: string } }[] }).models.find((m) => m.model === 'remote')!;
      // the controller's estimator over the same file: size + KV cache for the chat profile (ctx 4096) + its prompt cache (default 1 GiB) + its overhead (default 512 MiB)
      const [{ metadata }, st] = await Promise.all([gguf(tiny.path, { allowLocalFile: true }), stat(tiny.path)]);
      const expected = replicaMemory(shapeFromMetadata(metadata as unknown as Record<string, unknown>, st.size), { ctxSize: 4096, memoryOverheadBytes: 512 * 2 ** 20, cacheRamBytes: 2 ** 30 });
      assert.equal(remote.memoryBytes, expected);
      assert.ok(expected > tiny.bytes + 512 * 2 ** 20, 'the KV cache is counted');
      assert.equal(remote.placement.verdict, 'fits');
      assert.ok(origin.cdnSeen.some((x) => x.method === 'GET'), 'the header was read from the origin');
    } finally {
      await origin.close();
    }
  });

  it('a model whose origin hangs: "timed out" within the stated time, once, naming its file; it does not count as fitting nowhere', async () => {
    const sockets = new Set<Socket>();
    const hang = createServer((s) => {
      sockets.add(s); // accept, read, never answer
      s.on('data', () => undefined);
    });
    await new Promise<void>((resolve) => hang.listen(0, '127.0.0.1', resolve));
    const port = (hang.address() as { port: number }).port;
    try {
      const repo = await fleetRepo();
      const base = await repo.head();
      await repo.write({ 'models/slow.yaml': `source: http://127.0.0.1:${port}/slow.gguf\nsha256: ${SHA_B}\nprofile: chat\nreplicas: 1\n` });
      await repo.commit('add slow');
      const t = performance.now();
      const r = await plan(repo, '--base', base, '--no-status', '--header-timeout', '1s');
      const elapsed = performance.now() - t;
      assert.equal(r.code, 1, r.err);
      assert.ok(elapsed >= 1000 && elapsed < 4000, `answered after ${Math.round(elapsed)} ms (timeout 1 s)`);
      const says = `memory need unknown: could not read the GGUF header of http://127.0.0.1:${port}/slow.gguf (timed out after 1s); set memory: in models/slow.yaml`;
      assert.equal(r.out.split(says).length - 1, 1, r.out);
      assert.doesNotMatch(r.out, /fits nowhere/);
      assert.match(r.out, /1 model's memory need is unknown\.$/m);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => hang.close(() => resolve()));
    }
  });

  it('a schedule: the count in force at --at, which entry set it and the next change; placement for that count', async () => {
    const repo = await fleetRepo();
    const base = await repo.head();
    const alpha = minimalFleet()['models/alpha.yaml']!;
    await repo.write({ 'models/alpha.yaml': `${alpha}timezone: Europe/Berlin\nschedule:\n  - { cron: "0 8 * * 1-5", replicas: 2 }\n  - { cron: "0 20 * * 1-5", replicas: 0 }\n` });
    await repo.commit('alpha: two replicas on weekdays 08-20');
    const day = await plan(repo, '--base', base, '--no-status', '--at', '2026-03-30T10:00:00Z'); // Monday 12:00 CEST
    assert.equal(day.code, 1, day.err);
    assertGolden('plan-schedule.txt', day.out);
    const night = await plan(repo, '--base', base, '--no-status', '--at', '2026-03-28T10:00:00Z'); // Saturday
    assert.match(night.out, /schedule: 0 replicas in force now \("0 20 \* \* 1-5" since 2026-03-27T19:00Z\); next: 2 at 2026-03-30T06:00Z \("0 8 \* \* 1-5"\)/);
    assert.match(night.out, /no replicas wanted now: the 1 running stop/);
  });
});
