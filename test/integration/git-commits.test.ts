/** commitsBetween over merged branches, and retry trailers handled exactly once across refreshes. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SpecTracker } from '../../src/git/tracker.js';
import { extractRetries, retryId } from '../../src/git/trailers.js';
import { WorkRepo, git, servedFleetRepo, type ServedFleetRepo } from '../harness/git.js';

const ENV = `LLMGW_TEST_GIT_TOKEN_C_${process.pid}`;

describe('commitsBetween and retry trailers', () => {
  let work: WorkRepo;
  let url: string;

  let served: ServedFleetRepo;

  before(async () => {
    served = await servedFleetRepo(ENV, [
      { files: { 'fleet.yaml': '{}\n' }, message: 'initial\n\nLlmgw-Retry: from-history\n' },
      { files: { 'fleet.yaml': 'poll_interval: 20s\n' }, message: 'tune polling' },
    ]);
    work = served.work;
    url = served.url;
  });

  after(() => served.close());

  it('includes merged branches, oldest first, and reports a trailer in them exactly once', async () => {
    const repo = await served.remote();
    const tracker = new SpecTracker(repo);
    const seen: string[] = [];

    // First sync: applies head; history's trailers are not replayed.
    const first = await tracker.refresh();
    assert.equal(first.outcome, 'applied');
    assert.deepEqual(first.retries, []);
    const base = first.head as string;
    assert.deepEqual((await repo.commitsBetween(null, base)).map((c) => c.oid), [base]);

    // A feature branch with the retry (dated in the past, to show order is not by date), merged --no-ff.
    await work.git(['checkout', '-q', '-b', 'feature']);
    const f1 = await work.commit('retry m1 on the feature branch\n\nLlmgw-Retry: m1\n', { date: '2001-01-01T00:00:00Z' });
    await work.write({ 'fleet.yaml': 'poll_interval: 25s\n' });
    const f2 = await work.commit('feature: tune');
    await work.checkout('main');
    const m1 = await work.commit('unrelated main commit');
    const merge = await work.merge('feature', 'Merge branch feature');
    await work.push(url, 'main');

    const second = await tracker.refresh();
    assert.equal(second.outcome, 'applied');
    assert.equal(second.head, merge);
    seen.push(...second.retries.map(retryId));
    assert.deepEqual(second.retries.map((r) => [r.model, r.commit, r.author]), [['m1', f1, 'Op Erator <op@example.test>']]);

    const commits = await repo.commitsBetween(base, merge);
    const oids = commits.map((c) => c.oid);
    assert.deepEqual(new Set(oids), new Set([f1, f2, m1, merge]));
    assert.equal(oids.length, 4);
    assert.equal(oids[oids.length - 1], merge);
    assert.ok(oids.indexOf(f1) < oids.indexOf(f2));
    assert.deepEqual(commits.find((c) => c.oid === merge)?.parents, [m1, f2]);
    assert.deepEqual(extractRetries(commits).map((r) => [r.model, r.commit]), [['m1', f1]]);
    // Matches git's own answer.
    const fromGit = (await git(work.dir, ['rev-list', `${base}..${merge}`])).split('\n');
    assert.deepEqual(new Set(fromGit), new Set(oids));

    // Later refreshes (unchanged, then a new commit) do not report it again.
    assert.deepEqual((await tracker.refresh()).retries, []);
    await work.commit('another change');
    await work.push(url, 'main');
    const third = await tracker.refresh();
    assert.equal(third.outcome, 'applied');
    seen.push(...third.retries.map(retryId));
    assert.deepEqual(seen, [retryId(second.retries[0]!)]);
    assert.equal(second.retries[0]!.commit, f1);
    assert.deepEqual(await repo.commitsBetween(merge, merge), []);
  });
});
