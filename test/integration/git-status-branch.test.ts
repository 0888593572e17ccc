/** The status branch: only-when-changed commits, compare-and-swap with retry, operators never affected. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { FleetRepo } from '../../src/git/repo.js';
import { writeStatusBranch } from '../../src/git/status-branch.js';
import { isLlmgwError } from '../../src/errors/catalogue.js';
import type { GitHttpServer } from '../harness/git-http.js';
import { WorkRepo, cleanupTempDirs, git, makeTempDir, revParse, servedFleetRepo, type ServedFleetRepo } from '../harness/git.js';
import { rejectsWith } from '../harness/errors.js';

const ENV = `LLMGW_TEST_GIT_TOKEN_S_${process.pid}`;
const BRANCH = 'llmgw/status';


/** Someone else (another controller, a person) commits on the status branch and pushes it. */
async function moveRemoteStatus(url: string, note: string): Promise<string> {
  const other = await WorkRepo.clone(url);
  await other.git(['-c', 'credential.helper=', 'fetch', '-q', 'origin', `${BRANCH}:refs/remotes/origin/${BRANCH}`]);
  await other.git(['checkout', '-q', '-b', 'st', `origin/${BRANCH}`]);
  await other.write({ 'note.txt': note });
  const oid = await other.commit(`someone else: ${note}`);
  await other.push(url, `st:${BRANCH}`);
  return oid;
}

describe('status branch on a remote', () => {
  let server: GitHttpServer;
  let url: string;
  let bare: string;

  let served: ServedFleetRepo;

  before(async () => {
    served = await servedFleetRepo(ENV, [{ files: { 'fleet.yaml': '{}\n' }, message: 'fleet' }]);
    server = served.server;
    url = served.url;
    bare = served.bare;
  });

  after(() => served.close());

  const remote = (): Promise<FleetRepo> => served.remote();

  it('commits only when the content changed', async () => {
    const repo = await remote();
    const mainBefore = await revParse(bare, 'main');
    const files = { 'fleet.json': '{"revision":"a"}\n', 'models/m1.json': '{"ready":1}\n' };
    const w1 = await writeStatusBranch(repo, { files, message: 'status: a' });
    assert.equal(w1.changed, true);
    assert.equal(await revParse(bare, BRANCH), w1.oid);
    assert.equal(await git(bare, ['show', `${BRANCH}:models/m1.json`]), '{"ready":1}');
    assert.equal(await git(bare, ['log', '-1', '--format=%an <%ae>%n%s', BRANCH]), 'llmgw <llmgw@localhost>\nstatus: a');

    const w2 = await writeStatusBranch(repo, { files: { ...files }, message: 'status: a again' });
    assert.deepEqual(w2, { changed: false, oid: w1.oid, attempts: 1 });

    // A fresh controller (empty cache) sees the same tip and also writes nothing.
    const w3 = await writeStatusBranch(await remote(), { files, message: 'status: a from elsewhere' });
    assert.equal(w3.changed, false);

    const w4 = await writeStatusBranch(repo, { files: { ...files, 'models/m1.json': '{"ready":2}\n' }, message: 'status: b' });
    assert.equal(w4.changed, true);
    assert.equal(await git(bare, ['rev-parse', `${BRANCH}^`]), w1.oid);
    assert.equal(await revParse(bare, 'main'), mainBefore);
    // The fleet branch in the mirror is untouched too.
    await rejectsWith(writeStatusBranch(repo, { branch: 'main', files, message: 'no' }), 'USAGE');
  });

  it('an operator pushing main between fetch and push is neither rejected nor overwritten', async () => {
    const repo = await remote();
    const operator = await WorkRepo.clone(url);
    let operatorCommit = '';
    const res = await writeStatusBranch(repo, {
      files: { 'fleet.json': '{"revision":"c"}\n' },
      message: 'status: c',
      beforeUpdate: async () => {
        await operator.write({ 'models/new.yaml': 'x: 1\n' });
        operatorCommit = await operator.commit('operator adds a model');
        await operator.push(url, 'main'); // must succeed
      },
    });
    assert.equal(res.changed, true);
    assert.equal(res.attempts, 1);
    assert.equal(await revParse(bare, 'main'), operatorCommit);
    assert.equal(await revParse(bare, BRANCH), res.oid);
    assert.equal(await git(bare, ['show', `main:models/new.yaml`]), 'x: 1');
    // And the controller's next sync sees the operator's commit.
    assert.equal((await repo.sync()).head, operatorCommit);
  });

  it('retries on the new tip when someone else moved the status branch', async () => {
    const repo = await remote();
    await writeStatusBranch(repo, { files: { 'fleet.json': '{"revision":"d"}\n' }, message: 'status: d' });
    let theirs = '';
    const res = await writeStatusBranch(repo, {
      files: { 'fleet.json': '{"revision":"e"}\n' },
      message: 'status: e',
      beforeUpdate: async (attempt) => {
        if (attempt === 0) theirs = await moveRemoteStatus(url, 'moved');
      },
    });
    assert.equal(res.changed, true);
    assert.equal(res.attempts, 2);
    assert.equal(await revParse(bare, BRANCH), res.oid);
    // Their commit is kept: ours is built on it.
    assert.equal(await git(bare, ['rev-parse', `${BRANCH}^`]), theirs);
    assert.equal(await git(bare, ['show', `${BRANCH}:fleet.json`]), '{"revision":"e"}');
  });

  it('gives up with GIT_PUSH_REJECTED when the branch keeps moving', async () => {
    const repo = await remote();
    let n = 0;
    await rejectsWith(
      writeStatusBranch(repo, {
        files: { 'fleet.json': `{"revision":"f"}\n` },
        message: 'status: f',
        maxAttempts: 2,
        beforeUpdate: async () => {
          await moveRemoteStatus(url, `again ${n++}`);
        },
      }),
      'GIT_PUSH_REJECTED',
    );
    assert.equal(n, 2);
  });

  it('a wrong token is GIT_AUTH_FAILED without the token in the error', async () => {
    const wrong = 'wrong-status-token-77aa';
    process.env[`${ENV}_W`] = wrong;
    try {
      const repo = new FleetRepo({ url: server.url('fleet.git'), cacheDir: join(await makeTempDir('llmgw-cache-'), 'm'), token: { env: `${ENV}_W` } });
      await assert.rejects(writeStatusBranch(repo, { files: { a: 'b' }, message: 'x' }), (e: unknown) => {
        assert.ok(isLlmgwError(e, 'GIT_AUTH_FAILED'), inspect(e));
        assert.ok(!inspect(e).includes(wrong) && !inspect(e).includes(server.token));
        return true;
      });
    } finally {
      delete process.env[`${ENV}_W`];
    }
  });
});

describe('status branch in a local repo', () => {
  after(cleanupTempDirs);

  it('updates only the status ref, never the working tree or HEAD, with CAS retry', async () => {
    const work = await WorkRepo.init();
    await work.write({ 'fleet.yaml': '{}\n' });
    const head = await work.commit('fleet');
    await work.write({ 'fleet.yaml': 'poll_interval: 5s\n', 'scratch.txt': 'uncommitted\n' }); // operator's edits in progress
    const statusBefore = await work.git(['status', '--porcelain']);
    const repo = new FleetRepo({ path: work.dir });

    const w1 = await writeStatusBranch(repo, { files: { 'fleet.json': '1\n' }, message: 'status 1' });
    assert.equal(w1.changed, true);
    assert.equal(await revParse(work.dir, BRANCH), w1.oid);
    assert.equal((await writeStatusBranch(repo, { files: { 'fleet.json': '1\n' }, message: 'status 1' })).changed, false);

    // Someone moves the ref between our read and our swap: we retry on their commit.
    let theirs = '';
    const w2 = await writeStatusBranch(repo, {
      files: { 'fleet.json': '2\n' },
      message: 'status 2',
      beforeUpdate: async (attempt) => {
        if (attempt > 0) return;
        const tree = await work.git(['mktree'], { input: '' });
        theirs = await work.git(['commit-tree', tree, '-p', w1.oid, '-m', 'theirs']);
        await work.git(['update-ref', `refs/heads/${BRANCH}`, theirs, w1.oid]);
      },
    });
    assert.equal(w2.attempts, 2);
    assert.equal(await work.git(['rev-parse', `${BRANCH}^`]), theirs);
    assert.equal(await work.git(['show', `${BRANCH}:fleet.json`]), '2');

    assert.equal(await work.head(), head);
    assert.equal(await work.git(['symbolic-ref', 'HEAD']), 'refs/heads/main');
    assert.equal(await work.git(['status', '--porcelain']), statusBefore);
    assert.equal(await work.git(['fsck', '--no-dangling']), '');
  });

  it('refuses to move a checked-out status branch', async () => {
    const work = await WorkRepo.init();
    await work.commit('fleet');
    await work.git(['checkout', '-q', '-b', BRANCH]);
    const repo = new FleetRepo({ path: work.dir });
    await rejectsWith(writeStatusBranch(repo, { files: { a: 'b' }, message: 'x' }), 'GIT_FAILED');
  });
});
