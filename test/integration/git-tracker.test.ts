/** SpecTracker with the real spec loader over the smart-HTTP remote: good → bad → fix. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SpecTracker, type RejectedRevision } from '../../src/git/tracker.js';
import { WorkRepo, servedFleetRepo, type ServedFleetRepo } from '../harness/git.js';

const ENV = `LLMGW_TEST_GIT_TOKEN_T_${process.pid}`;

describe('SpecTracker over a real remote with the real loader', () => {
  let work: WorkRepo;
  let url: string;

  let served: ServedFleetRepo;

  before(async () => {
    served = await servedFleetRepo(ENV, [{ files: { 'fleet.yaml': '{}\n' }, message: 'empty fleet' }]);
    work = served.work;
    url = served.url;
  });

  after(() => served.close());

  it('applies a good revision, rejects a bad one keeping the good, applies the fix', async () => {
    const repo = await served.remote();
    const tracker = new SpecTracker(repo);
    // Read through a function: asserting on the property would narrow its type for later reads.
    const rejected = (): RejectedRevision | null => tracker.rejected;

    await work.write({ 'fleet.yaml': 'poll_interval: 15s\npark_after_failures: 3\n' });
    const good = await work.commit('tune the fleet');
    await work.push(url, 'main');
    const r1 = await tracker.refresh();
    assert.equal(r1.outcome, 'applied');
    assert.equal(tracker.applied?.revision, good);
    assert.equal(tracker.applied?.spec.revision, good);
    assert.equal(tracker.applied?.spec.settings.pollIntervalMs, 15_000);
    assert.equal(tracker.applied?.spec.settings.parkAfterFailures, 3);
    assert.equal(rejected(), null);
    assert.ok(tracker.lastSyncOk instanceof Date);

    await work.write({ 'fleet.yaml': 'poll_interval: [15s\n' });
    const bad = await work.commit('break the yaml\n\nLlmgw-Retry: m1\n');
    await work.push(url, 'main');
    const r2 = await tracker.refresh();
    assert.equal(r2.outcome, 'rejected');
    assert.deepEqual(r2.retries, []);
    assert.equal(tracker.applied?.revision, good);
    assert.equal(tracker.applied?.spec.settings.pollIntervalMs, 15_000);
    assert.equal(rejected()?.revision, bad);
    assert.ok((rejected()?.problems.length ?? 0) > 0);
    assert.equal(rejected()?.problems[0]?.file, 'fleet.yaml');
    assert.ok(rejected()?.problems[0]?.line);

    await work.write({ 'fleet.yaml': 'poll_interval: 20s\n' });
    const fix = await work.commit('fix the yaml');
    await work.push(url, 'main');
    const r3 = await tracker.refresh();
    assert.equal(r3.outcome, 'applied');
    assert.equal(tracker.applied?.revision, fix);
    assert.equal(tracker.applied?.spec.settings.pollIntervalMs, 20_000);
    assert.equal(rejected(), null);
    // The retry in the rejected commit was not lost.
    assert.deepEqual(r3.retries.map((r) => [r.model, r.commit]), [['m1', bad]]);

    // The server going away keeps the applied spec and records the error.
    await served.server.close();
    const r4 = await tracker.refresh();
    assert.equal(r4.outcome, 'failed');
    assert.equal(tracker.lastSyncError?.code, 'GIT_UNREACHABLE');
    assert.equal(tracker.applied?.revision, fix);
  });
});
