import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The project root (the folder holding package.json), whether running from test/ via tsx or dist/test/. */
export const repoRoot: string = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) || dir.endsWith('/dist')) {
    const up = dirname(dir);
    if (up === dir) throw new Error('repo root not found');
    dir = up;
  }
  return dir;
})();

export const fixturesDir = join(repoRoot, 'test', 'fixtures');
export const goldenDir = join(repoRoot, 'test', 'golden');
