/** FleetRepo over a local repo: committed objects only, never the working tree. */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FleetRepo } from '../../src/git/repo.js';
import { isLlmgwError } from '../../src/errors/catalogue.js';
import { WorkRepo, cleanupTempDirs, makeTempDir } from '../harness/git.js';
import { rejectsWith } from '../harness/errors.js';

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');


describe('FleetRepo over a local path', () => {
  let work: WorkRepo;
  let c1: string;
  let c2: string;

  before(async () => {
    work = await WorkRepo.init();
    await work.write({ 'fleet.yaml': 'poll_interval: 10s\n', 'models/a.yaml': 'v: 1\n' });
    c1 = await work.commit('first');
    await work.git(['tag', 'v1']);
    await work.git(['tag', '-a', 'v1-annotated', '-m', 'annotated']);
    await work.write({ 'models/a.yaml': 'v: 2\n' });
    c2 = await work.commit('second');
    await work.branch('feature', c1);
  });

  after(cleanupTempDirs);

  it('reads committed content, not uncommitted or staged working-tree edits', async () => {
    await work.write({ 'fleet.yaml': 'poll_interval: 99s\n', 'models/untracked.yaml': 'x: 1\n', 'models/staged.yaml': 's: 1\n' });
    await work.git(['add', 'models/staged.yaml']);
    try {
      const repo = new FleetRepo({ path: work.dir });
      assert.deepEqual(await repo.sync(), { head: c2 });
      const files = repo.files(c2);
      assert.equal(text(await files.read('fleet.yaml', 100)), 'poll_interval: 10s\n');
      assert.deepEqual(
        (await files.list()).map((e) => e.path),
        ['fleet.yaml', 'models', 'models/a.yaml'],
      );
      await rejectsWith(files.read('models/untracked.yaml', 100), 'GIT_PATH_NOT_FOUND');
    } finally {
      await work.git(['reset', '-q', '--hard']);
      await work.git(['clean', '-q', '-fd']);
    }
  });

  it('resolves HEAD, branches, lightweight and annotated tags, full and short oids', async () => {
    const repo = new FleetRepo({ path: work.dir });
    assert.equal(await repo.resolve('HEAD'), c2);
    assert.equal(await repo.resolve('main'), c2);
    assert.equal(await repo.resolve('feature'), c1);
    assert.equal(await repo.resolve('refs/heads/feature'), c1);
    assert.equal(await repo.resolve('v1'), c1);
    assert.equal(await repo.resolve('v1-annotated'), c1);
    assert.equal(await repo.resolve(c1), c1);
    assert.equal(await repo.resolve(c1.slice(0, 7)), c1);
    await rejectsWith(repo.resolve('nope'), 'GIT_REF_NOT_FOUND');
  });

  it('syncs another branch when configured', async () => {
    const repo = new FleetRepo({ path: work.dir, branch: 'feature' });
    assert.equal((await repo.sync()).head, c1);
  });

  it('reads a bare repo and a packed (gc-ed) repo', async () => {
    const root = await makeTempDir('llmgw-bare-');
    const bare = await work.bareCopy(root, 'fleet.git');
    const repo = new FleetRepo({ path: bare });
    assert.equal((await repo.sync()).head, c2);
    assert.equal(text(await repo.files(c1).read('models/a.yaml', 100)), 'v: 1\n');

    const packed = await WorkRepo.clone(work.dir);
    await packed.git(['gc', '-q', '--aggressive', '--prune=now']);
    const prepo = new FleetRepo({ path: packed.dir });
    assert.equal(await prepo.resolve('main'), c2);
    assert.equal(text(await prepo.files(c2).read('models/a.yaml', 100)), 'v: 2\n');
    assert.deepEqual(await prepo.files(c2).list(), await repo.files(c2).list());
  });

  it('a path that is not a repo is GIT_UNREACHABLE; a missing branch GIT_REF_NOT_FOUND', async () => {
    const dir = await makeTempDir('llmgw-notrepo-');
    writeFileSync(join(dir, 'fleet.yaml'), '{}\n');
    await rejectsWith(new FleetRepo({ path: dir }).sync(), 'GIT_UNREACHABLE');
    await rejectsWith(new FleetRepo({ path: join(dir, 'missing') }).sync(), 'GIT_UNREACHABLE');
    await rejectsWith(new FleetRepo({ path: work.dir, branch: 'nope' }).sync(), 'GIT_REF_NOT_FOUND');
  });

  it('config needs exactly one of url and path, and a cacheDir for a url', () => {
    assert.throws(() => new FleetRepo({}), (e: unknown) => isLlmgwError(e, 'USAGE'));
    assert.throws(() => new FleetRepo({ url: 'https://x/y.git' }), (e: unknown) => isLlmgwError(e, 'USAGE'));
    assert.throws(() => new FleetRepo({ url: 'ssh://x/y.git', cacheDir: '/tmp/x' }), (e: unknown) => isLlmgwError(e, 'USAGE'));
  });
});
