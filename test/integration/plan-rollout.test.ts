/**
 * `llmgw plan` on a fleet repo with rollouts (#34), read from real git objects (checks/ included):
 * a definition change shows the checks that will run, the canary's steps with their times and
 * what an inconclusive step does, and whether a node has room for both revisions (surge) or the
 * checks run on a replica that replaces an old one (the model dips to replicas − 1). A change of
 * the rollout block alone rolls nothing out.
 */
import { strict as assert } from 'node:assert';
import { after, describe, it } from 'node:test';
import { join } from 'node:path';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import { gitFiles } from '../../src/git/files.js';
import type { RolloutPlan } from '../../src/plan/rollout-plan.js';
import { runCli } from '../harness/cli.js';
import { minimalFleet } from '../harness/fleet.js';
import { cleanupTempDirs, WorkRepo } from '../harness/git.js';
import { assertGolden } from '../harness/golden.js';

const normalize = (s: string): string => s.replace(/\b[0-9a-f]{40}\b/g, '<oid>').replace(/\b[0-9a-f]{12}\b/g, '<oid>');

const ARITHMETIC = 'request:\n  messages: [{ role: user, content: "What is 2+2? Answer with one number." }]\n  max_tokens: 8\nexpect: { matches: "4" }\n';
/** fleet.yaml's default: the shared check and a two-step canary. */
const FLEET_ROLLOUT = 'rollout:\n  checks: [{ use: arithmetic }]\n  canary: { steps: [10%, 50%], interval: 2m, min_requests: 20 }\n';
/** alpha's own block, which replaces the default whole. */
const ALPHA_ROLLOUT = [
  'rollout:',
  '  checks:',
  '    - use: arithmetic',
  '    - name: says-paris',
  '      request: { messages: [{ role: user, content: "Capital of France?" }], max_tokens: 8 }',
  '      expect: { contains: Paris, max_ttft: 5s }',
  '  canary:',
  '    steps: [5%, 25%, 100%]',
  '    interval: 3m',
  '    on_inconclusive: rollback',
  '',
].join('\n');

async function rolloutRepo(edit: (f: Record<string, string>) => void = () => {}): Promise<WorkRepo> {
  const repo = await WorkRepo.init();
  const files = minimalFleet();
  files['checks/arithmetic.yaml'] = ARITHMETIC;
  files['fleet.yaml'] += FLEET_ROLLOUT;
  files['models/alpha.yaml'] += ALPHA_ROLLOUT;
  edit(files);
  await repo.write(files);
  await repo.commit('a fleet with rollouts');
  return repo;
}

interface PlanJson {
  models: { model: string; change: string; definitionChanged: boolean; effects: string[]; rollout: RolloutPlan | null }[];
}

async function planJson(repo: WorkRepo, base: string): Promise<PlanJson> {
  const r = await runCli(['plan', '--base', base, '--no-status', '-f', 'json'], repo.dir);
  assert.equal(r.code, 1, r.stderr);
  return JSON.parse(r.stdout) as PlanJson;
}

after(cleanupTempDirs);

describe('llmgw plan: rollouts', () => {
  it('a profile change: the checks, the steps and their times, and room for both revisions (surge)', async () => {
    const repo = await rolloutRepo();
    const base = await repo.head();
    await repo.write({ 'profiles/chat.yaml': 'engine: llama-cpp@b6500\nctx_size: 8192\nparallel: 2\n' });
    const head = await repo.commit('chat: 8k context');
    // the git-object loader sees checks/ (the plan reads the same files)
    const spec = await loadFleetSpec(gitFiles({ gitdir: join(repo.dir, '.git'), oid: head }), head);
    assert.ok(spec.ok, JSON.stringify(!spec.ok && spec.problems));
    assert.deepEqual(spec.spec.models.beta!.rollout!.checks.map((c) => [c.name, c.file]), [['arithmetic', 'checks/arithmetic.yaml']]);

    const text = await runCli(['plan', '--base', base, '--no-status'], repo.dir);
    assert.equal(text.code, 1, text.stderr);
    assertGolden('plan-rollout-surge.txt', normalize(text.stdout));
    const md = await runCli(['plan', '--base', base, '--no-status', '--format', 'markdown'], repo.dir);
    assert.match(md.stdout, /canary: 5% for 3m, 25% for 3m, 100% for 3m, then promoted: ≥ 9m/);

    const json = await planJson(repo, base);
    const alpha = json.models.find((m) => m.model === 'alpha')!;
    assert.equal(alpha.definitionChanged, true);
    assert.deepEqual(alpha.rollout, {
      checks: ['arithmetic', 'says-paris'],
      canary: {
        steps: [{ share: 0.05, forMs: 180_000 }, { share: 0.25, forMs: 180_000 }, { share: 1, forMs: 180_000 }],
        minDurationMs: 540_000,
        minRequests: 30,
        maxErrorRateIncrease: 0.02,
        maxTtftRatio: 1.5,
        maxTpotRatio: 1.5,
        onInconclusive: 'rollback',
      },
      room: 'surge',
      nodes: [alpha.rollout!.nodes[0]!],
    });
    assert.match(alpha.effects.join('\n'), new RegExp(`room for both revisions: the new revision's first replica starts beside the old on ${alpha.rollout!.nodes[0]}`));
    // beta (on demand, not running without a status) takes fleet.yaml's default: nothing to compare with
    const beta = json.models.find((m) => m.model === 'beta')!;
    assert.deepEqual(beta.rollout?.checks, ['arithmetic']);
    assert.equal(beta.rollout?.canary?.minDurationMs, 240_000);
    assert.equal(beta.rollout?.room, 'nothing-running');
    // gamma's profile did not change: no rollout shown
    assert.equal(json.models.find((m) => m.model === 'gamma')!.rollout, null);
  });

  it('no room for both revisions: the checks run on a replica that replaces an old one, the model dips to replicas − 1', async () => {
    // two replicas of 10 GiB fill both nodes (16 and 12 GiB, 1 GiB kept free): a third fits nowhere
    const repo = await rolloutRepo((f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 2').replace('memory: 4GiB', 'memory: 10GiB')));
    const base = await repo.head();
    await repo.write({ 'profiles/chat.yaml': 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 4\n' });
    await repo.commit('chat: 4 slots');
    const json = await planJson(repo, base);
    const alpha = json.models.find((m) => m.model === 'alpha')!;
    assert.equal(alpha.rollout?.room, 'replace');
    assert.deepEqual(alpha.rollout?.nodes, []);
    assert.ok(
      alpha.effects.includes('no room for both revisions: the checks run on a replica that replaces one old replica, so the model dips to 1 of 2 replicas meanwhile'),
      alpha.effects.join('\n'),
    );
    const text = await runCli(['plan', '--base', base, '--no-status'], repo.dir);
    assertGolden('plan-rollout-replace.txt', normalize(text.stdout));
  });

  it('changing only the rollout block rolls nothing out, and says so', async () => {
    const repo = await rolloutRepo();
    const base = await repo.head();
    await repo.write({ 'models/alpha.yaml': minimalFleet()['models/alpha.yaml']! + ALPHA_ROLLOUT.replace('interval: 3m', 'interval: 10m') });
    await repo.commit('alpha: slower canary');
    const json = await planJson(repo, base);
    const alpha = json.models.find((m) => m.model === 'alpha')!;
    assert.equal(alpha.change, 'changed');
    assert.equal(alpha.definitionChanged, false);
    assert.equal(alpha.rollout, null);
    assert.deepEqual(alpha.effects, ['rollout changed: it applies from the next definition change; nothing rolls out now']);
  });
});
