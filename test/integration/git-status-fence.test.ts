/**
 * The status fence summary on a real branch (#37 item 5), against the real git smart-HTTP server:
 * a history of 5,000 commits without summaries (from before them, made with git fast-import), with
 * the highest epoch (7) at its root. A fresh writer fetches the last 64 commits, not all of them;
 * the key holder deepens to 1,001, walks 1,000 and writes a summary signed with the cluster's key;
 * the next fresh writer fetches 64 and reads one commit. Forged and copied summaries are walked through, never trusted; a
 * writer that does not hold the key walks the whole history, deepening its shallow mirror, and finds
 * epoch 7 at the root.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FleetRepo } from '../../src/git/repo.js';
import { writeStatusBranch } from '../../src/git/status-branch.js';
import { SHALLOW_DEPTH } from '../../src/git/status-fence-walk.js';
import { FENCE_TRAILER, FENCE_WALK } from '../../src/git/status-fence.js';
import { trailerValues } from '../../src/git/trailers.js';
import { WorkRepo, git, revParse, servedFleetRepo, type ServedFleetRepo } from '../harness/git.js';
import { rejectsWith } from '../harness/errors.js';
import { importStatusHistory } from '../harness/status-history.js';

const ENV = `LLMGW_TEST_GIT_TOKEN_F_${process.pid}`;
const KEY = Buffer.from('5f'.repeat(32), 'hex');
const N = 5000;
const files = (who: string, n: number): Record<string, string> => ({ 'fleet.json': `{"writer":"${who}","n":${n}}\n` });
/** Commits of a branch in a mirror (a shallow mirror counts only what it has). */
const countIn = async (repo: FleetRepo, branch: string): Promise<number> => Number(await git(repo.gitdir, ['rev-list', '--count', `refs/remotes/origin/${branch}`]));
const holder = (epoch: number) => async (): Promise<number> => epoch;
/** Not the key holder: etcd's revision is above its epoch. */
const deposed = async (): Promise<number> => 100;

describe('status fence summaries on a long branch', () => {
  let served: ServedFleetRepo;
  let root: string;
  const branch = 'llmgw/status-long';
  before(async () => {
    served = await servedFleetRepo(ENV, [{ files: { 'fleet.yaml': '{}\n' }, message: 'fleet' }]);
    // epoch 7 at the root, epochs 2 and none above it
    const made = await importStatusHistory(served.bare, `refs/heads/${branch}`, N, (i) => (i === 0 ? 'old status\n\nLlmgw-Epoch: 7\n' : i % 3 === 0 ? 'old status\n' : 'old status\n\nLlmgw-Epoch: 2\n'));
    await git(served.bare, ['update-ref', 'refs/heads/llmgw/status-deep', made.tip]);
    root = await git(served.bare, ['rev-list', '--max-parents=0', branch]);
  });
  after(() => served.close());

  it('the key holder fetches 64 commits, deepens to 1,001 and walks 1,000, then signs the summary; the next writer reads one commit', async () => {
    const w9 = await served.remote();
    const w = await writeStatusBranch(w9, { branch, files: files('9', 1), message: 'llmgw status', epoch: 9, epochBound: holder(9), fenceKey: KEY });
    assert.equal(w.changed, true);
    assert.equal(await countIn(w9, branch), FENCE_WALK + 2, 'the first fetch is shallow (64 commits), deepened to 1,001 for the walk, and its own pushed on top');
    const msg = await git(served.bare, ['log', '-1', '--format=%B', branch]);
    const [summary] = trailerValues(msg, FENCE_TRAILER);
    // epoch 2 seen in the 1,000 commits read; the rest (with its 7) covered by the holder's own epoch
    assert.match(summary ?? '', /^2@[0-9a-f]{40} cover=9 mac=[0-9a-f]{32}$/);

    // a fresh writer that is not the key holder: stopped by the summary, it reads no further
    const w8 = await served.remote();
    const stale = await rejectsWith(writeStatusBranch(w8, { branch, files: files('8', 1), message: 'llmgw status', epoch: 8, epochBound: deposed, fenceKey: KEY }), 'STATUS_EPOCH_STALE');
    assert.equal((stale.detail as { headEpoch: number }).headEpoch, 9);
    assert.equal(await countIn(w8, branch), SHALLOW_DEPTH, 'its mirror stayed shallow: not deepened');

    // the holder's next write reads one commit (its own): a summary on top of its summary
    const w2 = await writeStatusBranch(w9, { branch, files: files('9', 2), message: 'llmgw status', epoch: 9, epochBound: holder(9), fenceKey: KEY });
    assert.equal(w2.changed, true);
    assert.match(trailerValues(await git(served.bare, ['log', '-1', '--format=%B', branch]), FENCE_TRAILER)[0] ?? '', new RegExp(`^9@${w.oid} 2@[0-9a-f]{40} cover=9 mac=`));
  });

  it('hand pushes on top — unsigned, a lower epoch, a forged low summary, a signed summary copied onto a lower epoch — reset nothing', async () => {
    const work = await WorkRepo.clone(served.url);
    await work.git(['-c', 'credential.helper=', 'fetch', '-q', served.url, `${branch}:${branch}`]);
    await work.checkout(branch);
    const signed = trailerValues(await work.git(['log', '-1', '--format=%B']), FENCE_TRAILER)[0]!;
    await work.write({ 'fleet.json': '{"hand":1}\n' });
    await work.commit('unsigned');
    await work.write({ 'fleet.json': '{"hand":2}\n' });
    await work.commit(`forged low\n\nLlmgw-Epoch: 1\n${FENCE_TRAILER}: 1@${'0'.repeat(40)} mac=${'0'.repeat(32)}`);
    await work.write({ 'fleet.json': '{"hand":3}\n' });
    await work.commit(`copied\n\nLlmgw-Epoch: 1\n${FENCE_TRAILER}: ${signed}`);
    await work.push(served.url, branch);
    const fresh = await served.remote();
    const stale = await rejectsWith(writeStatusBranch(fresh, { branch, files: files('8', 2), message: 'llmgw status', epoch: 8, epochBound: deposed, fenceKey: KEY }), 'STATUS_EPOCH_STALE');
    assert.equal((stale.detail as { headEpoch: number }).headEpoch, 9);
    assert.match(stale.message, /its history holds [0-9a-f]{12} \(head [0-9a-f]{12}\), written by epoch 9/);
    // a forged summary too high fences nothing above the bound: the holder of epoch 10 writes on and names it
    await work.write({ 'fleet.json': '{"hand":4}\n' });
    const high = await work.commit(`forged high\n\nLlmgw-Epoch: 999999999999\n${FENCE_TRAILER}: 999999999999@${'1'.repeat(40)} mac=${'f'.repeat(32)}`);
    await work.push(served.url, branch);
    const w10 = await writeStatusBranch(await served.remote(), { branch, files: files('10', 1), message: 'llmgw status', epoch: 10, epochBound: holder(10), fenceKey: KEY });
    assert.equal(w10.changed, true);
    assert.deepEqual(w10.forged, { epoch: 999999999999, commit: high, bound: 10 });
    // the forgery stays named while it is on the history: the next writer learns it from the summary
    const w10b = await writeStatusBranch(await served.remote(), { branch, files: files('10', 2), message: 'llmgw status', epoch: 10, epochBound: holder(10), fenceKey: KEY });
    assert.deepEqual(w10b.forged, { epoch: 999999999999, commit: high, bound: 10 });
    // without the key nothing is trusted: the whole history is walked (deepened) and the fence is the same
    const keyless = await rejectsWith(writeStatusBranch(await served.remote(), { branch, files: files('8', 3), message: 'llmgw status', epoch: 8, epochBound: deposed }), 'STATUS_EPOCH_STALE');
    assert.equal((keyless.detail as { headEpoch: number }).headEpoch, 10);
  });

  it('a writer that does not hold the key walks the whole unsigned history, deepening its shallow mirror: epoch 7 at the root fences it', async () => {
    const deep = 'llmgw/status-deep';
    const w5 = await served.remote();
    const stale = await rejectsWith(writeStatusBranch(w5, { branch: deep, files: files('5', 1), message: 'llmgw status', epoch: 5, epochBound: deposed, fenceKey: KEY }), 'STATUS_EPOCH_STALE');
    assert.deepEqual(stale.detail, { branch: deep, epoch: 5, headEpoch: 7, head: await revParse(served.bare, deep), fencedBy: root });
    assert.equal(await countIn(w5, deep), N, 'deepened to the whole history');
  });
});

describe('status fence summaries in a local repo', () => {
  it('summaries are written and trusted there too; the unsigned commits below a cut are covered by the holder', async () => {
    const work = await WorkRepo.init();
    await work.commit('fleet');
    const branch = 'llmgw/status';
    await importStatusHistory(`${work.dir}/.git`, `refs/heads/${branch}`, 1500, (i) => (i === 0 ? 'old\n\nLlmgw-Epoch: 7\n' : 'old\n'));
    const w = await writeStatusBranch(new FleetRepo({ path: work.dir }), { branch, files: files('9', 1), message: 's', epoch: 9, epochBound: holder(9), fenceKey: KEY });
    assert.equal(w.changed, true);
    assert.match(await work.git(['log', '-1', '--format=%B', branch]), /\nLlmgw-Epoch: 9\nLlmgw-Fence: cover=9 mac=[0-9a-f]{32}$/);
    const stale = await rejectsWith(writeStatusBranch(new FleetRepo({ path: work.dir }), { branch, files: files('8', 1), message: 's', epoch: 8, epochBound: deposed, fenceKey: KEY }), 'STATUS_EPOCH_STALE');
    assert.deepEqual(stale.detail, { branch, epoch: 8, headEpoch: 9, head: w.oid });
  });
});
