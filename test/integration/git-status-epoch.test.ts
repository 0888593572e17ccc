/**
 * Status-branch fencing by leader epoch (issue #16): commits carry Llmgw-Epoch, a writer whose
 * epoch is older than the branch head's is refused with STATUS_EPOCH_STALE, also when it finds
 * out by losing the compare-and-swap; along first-parent history epochs never decrease. Against
 * the real git smart-HTTP server and a real local repo.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FleetRepo } from '../../src/git/repo.js';
import { writeStatusBranch, type StatusWriteResult } from '../../src/git/status-branch.js';
import { epochOf } from '../../src/git/trailers.js';
import { isLlmgwError } from '../../src/errors/catalogue.js';
import { WorkRepo, cleanupTempDirs, git, revParse, servedFleetRepo, type ServedFleetRepo } from '../harness/git.js';
import { rejectsWith } from '../harness/errors.js';
import { startEtcd } from '../harness/etcd.js';
import { Etcd3 } from 'etcd3';

const ENV = `LLMGW_TEST_GIT_TOKEN_E_${process.pid}`;

/** Epochs of the branch's first-parent history, oldest first (null: a commit without the trailer). */
async function firstParentEpochs(gitdir: string, branch: string): Promise<Array<number | null>> {
  const out = await git(gitdir, ['log', '--first-parent', '--reverse', '--format=%B%x00', branch]);
  return out
    .split('\0')
    .slice(0, -1)
    .map((m) => epochOf(m.replace(/^\n/, '')));
}

function assertNonDecreasing(epochs: ReadonlyArray<number | null>): void {
  const nums = epochs.map((e) => e ?? 0);
  for (let i = 1; i < nums.length; i++) assert.ok(nums[i]! >= nums[i - 1]!, `epochs along first-parent history decrease: ${JSON.stringify(epochs)}`);
}

const files = (who: string, n: number): Record<string, string> => ({ 'fleet.json': `{"writer":"${who}","n":${n}}\n` });

/** Resolves once `n` callers have arrived: every caller waits for the last one. */
function barrier(n: number): () => Promise<void> {
  let arrived = 0;
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return () => {
    if (++arrived === n) open();
    return opened;
  };
}

describe('status branch epoch fencing on a remote', () => {
  let served: ServedFleetRepo;
  before(async () => {
    served = await servedFleetRepo(ENV, [{ files: { 'fleet.yaml': '{}\n' }, message: 'fleet' }]);
  });
  after(() => served.close());

  it('epoch 3 writes, epoch 4 writes, epoch 3 is refused and the branch still shows epoch 4', async () => {
    const branch = 'llmgw/status-seq';
    const [leader3, leader4] = [await served.remote(), await served.remote()];
    const w3 = await writeStatusBranch(leader3, { branch, files: files('3', 1), message: 'llmgw status at aaa', epoch: 3 });
    assert.equal(w3.changed, true);
    assert.equal(await git(served.bare, ['log', '-1', '--format=%B', branch]), 'llmgw status at aaa\n\nLlmgw-Epoch: 3');

    const w4 = await writeStatusBranch(leader4, { branch, files: files('4', 1), message: 'llmgw status at aaa', epoch: 4 });
    assert.equal(w4.changed, true);
    assert.equal(await git(served.bare, ['rev-parse', `${branch}^`]), w3.oid);

    const err = await rejectsWith(writeStatusBranch(leader3, { branch, files: files('3', 2), message: 'llmgw status at bbb', epoch: 3 }), 'STATUS_EPOCH_STALE');
    assert.deepEqual(err.detail, { branch, epoch: 3, headEpoch: 4, head: w4.oid });
    assert.equal(err.reason.http, 409);
    assert.equal(err.reason.countsTowardParking, false);
    assert.equal(await revParse(served.bare, branch), w4.oid);
    assert.equal(await git(served.bare, ['show', `${branch}:fleet.json`]), '{"writer":"4","n":1}');

    // Refused even when it would write nothing new: the deposed writer learns it is deposed.
    await rejectsWith(writeStatusBranch(leader3, { branch, files: files('4', 1), message: 'same content', epoch: 3 }), 'STATUS_EPOCH_STALE');

    // Equal epoch proceeds as today (only when changed), a higher one too.
    assert.deepEqual(await writeStatusBranch(leader4, { branch, files: files('4', 1), message: 'again', epoch: 4 }), { changed: false, oid: w4.oid, attempts: 1 });
    const w4b = await writeStatusBranch(leader4, { branch, files: files('4', 2), message: 'llmgw status at ccc', epoch: 4 });
    assert.equal(w4b.changed, true);
    const w5 = await writeStatusBranch(leader3, { branch, files: files('5', 1), message: 'llmgw status at ddd', epoch: 5 });
    assert.equal(w5.changed, true);
    assert.deepEqual(await firstParentEpochs(served.bare, branch), [3, 4, 4, 5]);
  });

  it('without an epoch: no trailer and no check, exactly as before', async () => {
    const branch = 'llmgw/status-none';
    const repo = await served.remote();
    await writeStatusBranch(repo, { branch, files: files('e', 1), message: 'with epoch', epoch: 9 });
    const w = await writeStatusBranch(repo, { branch, files: files('plain', 1), message: 'llmgw status at eee' });
    assert.equal(w.changed, true);
    assert.equal(await git(served.bare, ['log', '-1', '--format=%B', branch]), 'llmgw status at eee');
    // A head without the trailer resets nothing: the fence is the highest epoch on first-parent history.
    const stale = await rejectsWith(writeStatusBranch(repo, { branch, files: files('e', 2), message: 'epoch 1', epoch: 1 }), 'STATUS_EPOCH_STALE');
    assert.equal((stale.detail as { headEpoch: number }).headEpoch, 9);
    const w9 = await writeStatusBranch(repo, { branch, files: files('e', 2), message: 'epoch 9 again', epoch: 9 });
    assert.equal(w9.changed, true);
    assert.deepEqual(await firstParentEpochs(served.bare, branch), [9, null, 9]);
  });

  it('an unsigned commit pushed by hand over a newer epoch resets nothing (F8); a fresh writer (no cache) sees it too', async () => {
    const branch = 'llmgw/status-unsigned';
    const leader7 = await served.remote();
    await writeStatusBranch(leader7, { branch, files: files('7', 1), message: 'llmgw status', epoch: 7 });
    // anyone who can push llmgw/status: a commit without the trailer (and one with a lower epoch) on top
    const work = await WorkRepo.clone(served.url);
    await work.git(['-c', 'credential.helper=', 'fetch', '-q', served.url, `${branch}:${branch}`]);
    await work.checkout(branch);
    await work.write({ 'fleet.json': '{"forged":true}\n' });
    await work.commit('reset the fence');
    await work.write({ 'fleet.json': '{"forged":2}\n' });
    await work.commit('lower\n\nLlmgw-Epoch: 2');
    await work.push(served.url, branch);
    for (const writer of [leader7, await served.remote()]) {
      const err = await rejectsWith(writeStatusBranch(writer, { branch, files: files('3', 1), message: 'llmgw status', epoch: 3 }), 'STATUS_EPOCH_STALE');
      assert.equal((err.detail as { headEpoch: number }).headEpoch, 7);
      assert.match(err.message, /its history holds [0-9a-f]{12} \(head [0-9a-f]{12}\), written by epoch 7/);
    }
    const w8 = await writeStatusBranch(leader7, { branch, files: files('8', 1), message: 'llmgw status', epoch: 8 });
    assert.equal(w8.changed, true);
  });

  it('a forged Llmgw-Epoch above the bound (etcd\'s revision) fences nothing: the write goes on and names the forgery (F1)', async (t) => {
    // real epochs and a real bound: leader keys created in a real etcd, and its current revision
    const etcd = await startEtcd();
    const client = new Etcd3({ hosts: etcd.endpoint });
    t.after(async () => {
      client.close();
      await etcd.stop();
    });
    const epochOfKey = async (key: string): Promise<number> => Number((await client.put(key).value('leader').exec()).header.revision);
    const revision = async (): Promise<number> => Number((await client.get('/llmgw-test/leader').exec()).header.revision);
    const [e5, e6] = [await epochOfKey('/llmgw-test/leader-5'), await epochOfKey('/llmgw-test/leader-6')];
    const branch = 'llmgw/status-forged';
    const leader = await served.remote();
    await writeStatusBranch(leader, { branch, files: files('5', 1), message: 'llmgw status', epoch: e5 });
    const work = await WorkRepo.clone(served.url);
    await work.git(['-c', 'credential.helper=', 'fetch', '-q', served.url, `${branch}:${branch}`]);
    await work.checkout(branch);
    await work.write({ 'fleet.json': '{"forged":true}\n' });
    const forgedOid = await work.commit('forged\n\nLlmgw-Epoch: 999999999999');
    await work.push(served.url, branch);
    // without a bound the forgery fences (as before); with etcd's revision it is named and passed over
    await rejectsWith(writeStatusBranch(leader, { branch, files: files('6', 1), message: 'llmgw status', epoch: e6 }), 'STATUS_EPOCH_STALE');
    let asked = 0;
    let bound = 0;
    const w = await writeStatusBranch(leader, { branch, files: files('6', 1), message: 'llmgw status', epoch: e6, epochBound: async () => (asked++, (bound = await revision())) });
    assert.equal(w.changed, true);
    assert.equal(asked, 1);
    assert.ok(bound >= e6 && bound < 999999999999, `etcd's revision ${bound}`);
    assert.deepEqual(w.forged, { epoch: 999999999999, commit: forgedOid, bound });
    // the real epochs below the bound still fence: e5 < e6 written, an older epoch refused
    const stale = await rejectsWith(writeStatusBranch(await served.remote(), { branch, files: files('4', 1), message: 'llmgw status', epoch: e5, epochBound: revision }), 'STATUS_EPOCH_STALE');
    assert.equal((stale.detail as { headEpoch: number }).headEpoch, e6);
    // an unsigned commit on top of all that resets nothing either (F8): the fence is still e6
    await work.git(['-c', 'credential.helper=', 'fetch', '-q', served.url, `+${branch}:refs/remotes/origin/${branch}`]);
    await work.git(['checkout', '-q', '-B', branch, `origin/${branch}`]);
    await work.write({ 'fleet.json': '{"unsigned":true}\n' });
    await work.commit('no trailer');
    await work.push(served.url, branch);
    const after = await rejectsWith(writeStatusBranch(await served.remote(), { branch, files: files('4', 2), message: 'llmgw status', epoch: e5, epochBound: revision }), 'STATUS_EPOCH_STALE');
    assert.equal((after.detail as { headEpoch: number }).headEpoch, e6);
    // more forged epochs than the fence remembers per commit (8): the real one under them is found by a walk
    for (let k = 1; k <= 9; k++) {
      await work.write({ 'fleet.json': `{"forged":${k}}\n` });
      await work.commit(`forged ${k}\n\nLlmgw-Epoch: ${999999999999 - k}`);
    }
    await work.push(served.url, branch);
    const walked = await rejectsWith(writeStatusBranch(await served.remote(), { branch, files: files('4', 3), message: 'llmgw status', epoch: e5, epochBound: revision }), 'STATUS_EPOCH_STALE');
    assert.equal((walked.detail as { headEpoch: number }).headEpoch, e6);
    const over = await writeStatusBranch(leader, { branch, files: files('6', 3), message: 'llmgw status', epoch: e6, epochBound: revision });
    assert.equal(over.changed, true);
    assert.equal(over.forged?.epoch, 999999999999);
    // an unforged write asks no bound
    const again = await writeStatusBranch(leader, { branch, files: files('6', 2), message: 'llmgw status', epoch: 999999999999, epochBound: async () => assert.fail('asked') });
    assert.equal(again.changed, true);
  });

  it('bad epochs and a message that already names one are USAGE, before anything is written', async () => {
    const branch = 'llmgw/status-usage';
    const repo = await served.remote();
    for (const epoch of [-1, 1.5, Number.NaN, 2 ** 53]) {
      await rejectsWith(writeStatusBranch(repo, { branch, files: files('u', 1), message: 'x', epoch }), 'USAGE');
    }
    for (const message of ['x\n\nLlmgw-Epoch: 99', 'x\n\nllmgw-epoch: not-a-number\n']) {
      await rejectsWith(writeStatusBranch(repo, { branch, files: files('u', 1), message, epoch: 1 }), 'USAGE');
    }
    assert.equal(await git(served.bare, ['for-each-ref', `refs/heads/${branch}`]), '');
  });

  it('a writer that loses the swap to a newer epoch is refused, not retried over it', async () => {
    const branch = 'llmgw/status-lost';
    const [leader3, leader4] = [await served.remote(), await served.remote()];
    await writeStatusBranch(leader3, { branch, files: files('3', 0), message: 'base', epoch: 3 });
    let w4: StatusWriteResult | null = null;
    const attempts3: number[] = [];
    const err = await rejectsWith(
      writeStatusBranch(leader3, {
        branch,
        files: files('3', 1),
        message: 'deposed',
        epoch: 3,
        // Between building on the tip and the push, the new leader writes.
        beforeUpdate: async (attempt) => {
          attempts3.push(attempt);
          if (attempt === 0) w4 = await writeStatusBranch(leader4, { branch, files: files('4', 1), message: 'new leader', epoch: 4 });
        },
      }),
      'STATUS_EPOCH_STALE',
    );
    assert.deepEqual(attempts3, [0]); // one push, lost; the second attempt stops at the epoch check
    assert.equal(err.detail['head'], w4!.oid);
    assert.equal(await revParse(served.bare, branch), w4!.oid);
    assert.equal(await git(served.bare, ['show', `${branch}:fleet.json`]), '{"writer":"4","n":1}');
    assert.deepEqual(await firstParentEpochs(served.bare, branch), [3, 4]);
  });

  it('a newer epoch that loses the swap to an older one retries on top of it', async () => {
    const branch = 'llmgw/status-won';
    const [leader3, leader4] = [await served.remote(), await served.remote()];
    let w3: StatusWriteResult | null = null;
    const w4 = await writeStatusBranch(leader4, {
      branch,
      files: files('4', 1),
      message: 'new leader',
      epoch: 4,
      beforeUpdate: async (attempt) => {
        if (attempt === 0) w3 = await writeStatusBranch(leader3, { branch, files: files('3', 1), message: 'old leader, last write', epoch: 3 });
      },
    });
    assert.equal(w4.attempts, 2);
    assert.equal(await git(served.bare, ['rev-parse', `${branch}^`]), w3!.oid);
    assert.equal(await git(served.bare, ['show', `${branch}:fleet.json`]), '{"writer":"4","n":1}');
    assert.deepEqual(await firstParentEpochs(served.bare, branch), [3, 4]);
  });

  it('epochs 3 and 4 pushing at once: 4 lands last, 3 is refused or ordered before it', async (t) => {
    const outcomes: string[] = [];
    for (let round = 0; round < 6; round++) {
      const branch = `llmgw/status-race-${round}`;
      const [leader3, leader4] = [await served.remote(), await served.remote()];
      await writeStatusBranch(leader3, { branch, files: files('base', round), message: 'base', epoch: 2 });
      // Both build on the same tip, then push together: the server's ref swap picks one.
      const both = barrier(2);
      const gate = async (attempt: number): Promise<void> => {
        if (attempt === 0) await both();
      };
      const [r3, r4] = await Promise.allSettled([
        writeStatusBranch(leader3, { branch, files: files('3', round), message: `old ${round}`, epoch: 3, beforeUpdate: gate }),
        writeStatusBranch(leader4, { branch, files: files('4', round), message: `new ${round}`, epoch: 4, beforeUpdate: gate }),
      ]);
      assert.equal(r4.status, 'fulfilled', r4.status === 'rejected' ? String(r4.reason) : '');
      const tip = await revParse(served.bare, branch);
      assert.equal(tip, r4.value.oid);
      assert.equal(await git(served.bare, ['show', `${branch}:fleet.json`]), `{"writer":"4","n":${round}}`);
      const epochs = await firstParentEpochs(served.bare, branch);
      assertNonDecreasing(epochs);
      if (r3.status === 'rejected') {
        assert.ok(isLlmgwError(r3.reason, 'STATUS_EPOCH_STALE'), String(r3.reason));
        assert.deepEqual(epochs, [2, 4]);
        assert.equal(r4.value.attempts, 1);
        outcomes.push('3 refused');
      } else {
        // 3 won the swap; 4 lost it and built on 3's commit.
        assert.equal(await git(served.bare, ['rev-parse', `${branch}^`]), r3.value.oid);
        assert.deepEqual(epochs, [2, 3, 4]);
        assert.equal(r4.value.attempts, 2);
        outcomes.push('3 first');
      }
    }
    // Which one wins the server's swap is up to the server; both outcomes are checked above.
    assert.equal(outcomes.length, 6);
    t.diagnostic(`rounds: ${outcomes.join(', ')}`);
  });
});

describe('status branch epoch fencing in a local repo', () => {
  after(cleanupTempDirs);

  it('3 writes, 4 writes, 3 is refused; losing the ref swap to 4 ends in the refusal too', async () => {
    const work = await WorkRepo.init();
    await work.write({ 'fleet.yaml': '{}\n' });
    await work.commit('fleet');
    const branch = 'llmgw/status';
    const [leader3, leader4] = [new FleetRepo({ path: work.dir }), new FleetRepo({ path: work.dir })];
    await writeStatusBranch(leader3, { branch, files: files('3', 1), message: 's', epoch: 3 });
    const w4 = await writeStatusBranch(leader4, { branch, files: files('4', 1), message: 's', epoch: 4 });
    const err = await rejectsWith(writeStatusBranch(leader3, { branch, files: files('3', 2), message: 's', epoch: 3 }), 'STATUS_EPOCH_STALE');
    assert.deepEqual(err.detail, { branch, epoch: 3, headEpoch: 4, head: w4.oid });
    assert.equal(await revParse(work.dir, branch), w4.oid);

    // Epoch 5 takes over while epoch 4 is between reading the tip and swapping the ref.
    let w5: StatusWriteResult | null = null;
    const attempts4: number[] = [];
    await rejectsWith(
      writeStatusBranch(leader4, {
        branch,
        files: files('4', 2),
        message: 's',
        epoch: 4,
        beforeUpdate: async (attempt) => {
          attempts4.push(attempt);
          if (attempt === 0) w5 = await writeStatusBranch(leader3, { branch, files: files('5', 1), message: 's', epoch: 5 });
        },
      }),
      'STATUS_EPOCH_STALE',
    );
    assert.deepEqual(attempts4, [0]);
    assert.equal(await revParse(work.dir, branch), w5!.oid);
    assert.equal(await work.git(['show', `${branch}:fleet.json`]), '{"writer":"5","n":1}');
    assert.deepEqual(await firstParentEpochs(work.dir, branch), [3, 4, 5]);
  });

  it('epochs 3 and 4 swapping the ref at once: 4 lands last, 3 is refused or ordered before it', async () => {
    for (let round = 0; round < 6; round++) {
      const work = await WorkRepo.init();
      await work.commit('fleet');
      const branch = 'llmgw/status';
      const [leader3, leader4] = [new FleetRepo({ path: work.dir }), new FleetRepo({ path: work.dir })];
      await writeStatusBranch(leader3, { branch, files: files('base', round), message: 'base', epoch: 2 });
      const both = barrier(2);
      const gate = async (attempt: number): Promise<void> => {
        if (attempt === 0) await both();
      };
      const [r3, r4] = await Promise.allSettled([
        writeStatusBranch(leader3, { branch, files: files('3', round), message: 'old', epoch: 3, beforeUpdate: gate }),
        writeStatusBranch(leader4, { branch, files: files('4', round), message: 'new', epoch: 4, beforeUpdate: gate }),
      ]);
      assert.equal(r4.status, 'fulfilled', r4.status === 'rejected' ? String(r4.reason) : '');
      assert.equal(await revParse(work.dir, branch), r4.value.oid);
      assert.equal(await work.git(['show', `${branch}:fleet.json`]), `{"writer":"4","n":${round}}`);
      const epochs = await firstParentEpochs(work.dir, branch);
      assertNonDecreasing(epochs);
      if (r3.status === 'rejected') {
        assert.ok(isLlmgwError(r3.reason, 'STATUS_EPOCH_STALE'), String(r3.reason));
        assert.deepEqual(epochs, [2, 4]);
      } else {
        assert.deepEqual(epochs, [2, 3, 4]);
      }
    }
  });

  it('a ref lock that stays held (a crashed writer) ends in GIT_PUSH_REJECTED naming the lock, which is left alone', async () => {
    const work = await WorkRepo.init();
    const main = await work.commit('fleet');
    await work.git(['update-ref', 'refs/heads/llmgw/status', main]);
    const lock = join(work.dir, '.git', 'refs', 'heads', 'llmgw', 'status.lock');
    await writeFile(lock, '');
    const err = await rejectsWith(
      writeStatusBranch(new FleetRepo({ path: work.dir }), { branch: 'llmgw/status', files: files('x', 1), message: 's', epoch: 1, maxAttempts: 1 }),
      'GIT_PUSH_REJECTED',
    );
    assert.equal(err.detail['lock'], lock);
    assert.equal(await revParse(work.dir, 'llmgw/status'), main);
    assert.equal(await readFile(lock, 'utf8'), '');
  });
});
