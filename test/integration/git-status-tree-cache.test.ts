/**
 * The status branch's tree cache: a writer that remembers its blobs and trees builds the same trees
 * as one that writes every object, across files changed, added and removed; git's own fsck and
 * ls-tree read what it built.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { join } from 'node:path';
import { TreeCache, writeFilesTree } from '../../src/git/status-branch.js';
import { cleanupTempDirs, git, makeTempDir } from '../harness/git.js';

describe('status tree cache', () => {
  after(cleanupTempDirs);

  it('builds the trees a full write builds, and git reads them', async () => {
    const dir = await makeTempDir();
    await git(dir, ['init', '-q']);
    const gitdir = join(dir, '.git');
    const cache = new TreeCache(gitdir);
    let files: Record<string, string> = { 'fleet.json': '{}', 'models/a.json': 'a1', 'models/b.json': 'b1', 'deep/x/y.json': 'y1' };
    const steps: [string, (f: Record<string, string>) => Record<string, string>][] = [
      ['first write', (f) => f],
      ['unchanged', (f) => f],
      ['one file changed', (f) => ({ ...f, 'models/a.json': 'a2' })],
      ['a file added', (f) => ({ ...f, 'models/c.json': 'c1' })],
      ['a file removed', (f) => Object.fromEntries(Object.entries(f).filter(([p]) => p !== 'models/b.json'))],
      ['a folder removed', (f) => Object.fromEntries(Object.entries(f).filter(([p]) => !p.startsWith('deep/')))],
      ['the folder back with its old content', (f) => ({ ...f, 'deep/x/y.json': 'y1' })],
      ['a change back to an earlier content', (f) => ({ ...f, 'models/a.json': 'a1' })],
    ];
    for (const [what, edit] of steps) {
      files = edit(files);
      const cached = await writeFilesTree(gitdir, files, cache);
      const full = await writeFilesTree(gitdir, files);
      assert.equal(cached, full, what);
      const listed = (await git(dir, ['ls-tree', '-r', '--name-only', cached])).trim().split('\n').sort();
      assert.deepEqual(listed, Object.keys(files).sort(), what);
    }
    await git(dir, ['fsck', '--no-dangling']);
  });
});
