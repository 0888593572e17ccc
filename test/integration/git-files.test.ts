/** gitFiles: entry kinds, symlinks, huge blobs, and object sizes read from headers (loose, packed, deltas). */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ObjectSizer } from '../../src/git/objects.js';
import { FleetRepo } from '../../src/git/repo.js';
import { WorkRepo, cleanupTempDirs } from '../harness/git.js';
import { rejectsWith } from '../harness/errors.js';

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');
const BIG = 50 * 1024 * 1024;
const LIMIT = 256 * 1024;


/** 50 MB that zlib cannot shrink (a random 64 KiB block repeated beyond its 32 KiB window). */
function bigBlob(): Buffer {
  const block = randomBytes(64 * 1024);
  const out = Buffer.alloc(BIG);
  for (let off = 0; off < BIG; off += block.length) block.copy(out, off);
  return out;
}

describe('gitFiles', () => {
  let work: WorkRepo;
  let head: string;

  before(async () => {
    work = await WorkRepo.init();
    await work.git(['config', 'core.compression', '1']); // 50 MB of noise: spend less time in zlib
    await work.write({
      'fleet.yaml': '{}\n',
      'models/a.yaml': 'a: 1\n',
      'models/deep/x.yaml': 'deep\n',
      'shared/base.yaml': 'base: true\n',
      'README.md': '# fleet\n',
    });
    await work.symlink('models/link-ok.yaml', '../shared/base.yaml');
    await work.symlink('models/link-up.yaml', '../../outside.yaml');
    await work.symlink('models/link-abs.yaml', '/etc/passwd');
    await work.symlink('models/link-to-link.yaml', 'link-ok.yaml');
    await work.symlink('models/link-dangling.yaml', 'nothing-here.yaml');
    await work.symlink('models/link-dir.yaml', '../shared');
    await work.write({ 'models/big.yaml': bigBlob() });
    await work.commit('fleet with links and a big blob');
    // A submodule entry (gitlink), as `git submodule add` would leave in the tree.
    const sub = await work.head();
    await work.git(['update-index', '--add', '--cacheinfo', `160000,${sub},vendor`]);
    await work.git(['commit', '-q', '-m', 'add a gitlink']); // not commit(): `add -A` would drop the gitlink
    head = await work.head();
  });

  after(cleanupTempDirs);

  it('lists top level and one level down with kinds and sizes', async () => {
    const repo = new FleetRepo({ path: work.dir });
    const list = await repo.files(head).list();
    const byPath = new Map(list.map((e) => [e.path, e]));
    assert.deepEqual(byPath.get('fleet.yaml'), { path: 'fleet.yaml', kind: 'file', size: 3 });
    assert.deepEqual(byPath.get('models'), { path: 'models', kind: 'dir', size: 0 });
    assert.deepEqual(byPath.get('models/deep'), { path: 'models/deep', kind: 'dir', size: 0 });
    assert.equal(byPath.has('models/deep/x.yaml'), false);
    assert.deepEqual(byPath.get('models/link-ok.yaml'), { path: 'models/link-ok.yaml', kind: 'symlink', size: '../shared/base.yaml'.length });
    assert.deepEqual(byPath.get('models/big.yaml'), { path: 'models/big.yaml', kind: 'file', size: BIG });
    assert.deepEqual(byPath.get('vendor'), { path: 'vendor', kind: 'other', size: 0 });
    assert.equal(repo.files(head).label, head.slice(0, 12));
  });

  it('follows a symlink inside the repo and refuses ones that escape or chain', async () => {
    const files = new FleetRepo({ path: work.dir }).files(head);
    assert.equal(text(await files.read('models/link-ok.yaml', 100)), 'base: true\n');
    for (const p of ['models/link-up.yaml', 'models/link-abs.yaml', 'models/link-to-link.yaml', 'models/link-dangling.yaml']) {
      const { detail } = await rejectsWith(files.read(p, 100), 'SPEC_SYMLINK_ESCAPES');
      assert.equal(detail.path, p);
    }
    await rejectsWith(files.read('models/link-dir.yaml', 100), 'SPEC_UNEXPECTED_FILE');
    await rejectsWith(files.read('models', 100), 'SPEC_UNEXPECTED_FILE');
    await rejectsWith(files.read('vendor', 100), 'SPEC_UNEXPECTED_FILE');
    await rejectsWith(files.read('../fleet.yaml', 100), 'GIT_PATH_NOT_FOUND');
    await rejectsWith(files.read('models/none.yaml', 100), 'GIT_PATH_NOT_FOUND');
    assert.equal(text(await files.read('models/deep/x.yaml', 100)), 'deep\n');
  });

  async function assertTooLarge(repo: FleetRepo): Promise<void> {
    const files = repo.files(head);
    const before = process.memoryUsage().arrayBuffers;
    const started = Date.now();
    const { detail } = await rejectsWith(files.read('models/big.yaml', LIMIT), 'SPEC_FILE_TOO_LARGE');
    assert.equal(detail.size, BIG);
    assert.equal(detail.maxBytes, LIMIT);
    // Refused from the object header: the 50 MB blob was never inflated. (isomorphic-git does
    // hold a whole packfile's raw bytes once it reads any object from it, so in the packed case
    // the pack is already in memory before this measurement, from resolve().)
    const grown = process.memoryUsage().arrayBuffers - before;
    assert.ok(grown < 16 * 1024 * 1024, `read grew buffers by ${grown} bytes`);
    assert.ok(Date.now() - started < 5000);
  }

  it('refuses a 50 MB loose blob from its header', async () => {
    await assertTooLarge(new FleetRepo({ path: work.dir }));
  });

  it('refuses a 50 MB packed blob from its pack entry header', async () => {
    const packed = await WorkRepo.clone(work.dir);
    await packed.git(['-c', 'pack.compression=1', 'repack', '-q', '-a', '-d', '--window=0']);
    await packed.git(['prune-packed']);
    const repo = new FleetRepo({ path: packed.dir });
    assert.equal(await repo.resolve('main'), head);
    await assertTooLarge(repo);
  });
});

describe('ObjectSizer agrees with git cat-file -s', () => {
  after(cleanupTempDirs);

  it('for every loose object, then every packed object (with deltas)', async () => {
    const work = await WorkRepo.init();
    let content = Array.from({ length: 400 }, (_, i) => `line ${i}: ${'x'.repeat(i % 50)}`).join('\n');
    for (let i = 0; i < 6; i++) {
      content = content.replace(`line ${i * 7}:`, `line ${i * 7} edited:`);
      await work.write({ 'models/m.yaml': content, [`models/n${i}.yaml`]: `n: ${i}\n` });
      await work.commit(`edit ${i}`);
    }
    await work.git(['tag', '-a', 'v1', '-m', 'tag']);

    const check = async (): Promise<number> => {
      const sizer = new ObjectSizer(`${work.dir}/.git`);
      const all = (await work.git(['cat-file', '--batch-all-objects', '--batch-check'])).split('\n');
      for (const line of all) {
        const [oid, , size] = line.split(' ');
        assert.equal(await sizer.size(oid as string), Number(size), line);
      }
      return all.length;
    };
    assert.ok((await check()) > 20);

    await work.git(['repack', '-q', '-a', '-d', '-f', '--window=50', '--depth=50']);
    await work.git(['prune-packed']);
    const packDir = join(work.dir, '.git', 'objects', 'pack');
    const idx = readdirSync(packDir).filter((n) => n.endsWith('.idx'));
    assert.equal(idx.length, 1);
    const verify = await work.git(['verify-pack', '-v', join(packDir, idx[0] as string)]);
    const deltas = verify.split('\n').filter((l) => /^[0-9a-f]{40} \w+ +\d+ \d+ \d+ \d+ [0-9a-f]{40}$/.test(l));
    assert.ok(deltas.length > 0, 'expected delta entries in the pack');
    assert.ok((await work.git(['count-objects', '-v'])).split('\n').includes('count: 0'));
    assert.ok((await check()) > 20);
  });
});
