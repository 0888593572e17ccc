/**
 * Small obvious files: no file under src/ is longer than MAX_LINES (counted as `wc -l` does),
 * except one listed in EXCEPTIONS with why. The failure names each file over the limit and its
 * length; an exception that is no longer needed fails too, so the list stays true.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { repoRoot } from '../harness/paths.js';

const SRC = join(repoRoot, 'src');
const MAX_LINES = 450;
/** A file under src/ (repo-relative path) allowed above MAX_LINES, and why. None today. */
const EXCEPTIONS: Readonly<Record<string, string>> = {};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

const lengths = (): Map<string, number> => new Map(sourceFiles(SRC).map((f) => [relative(repoRoot, f), readFileSync(f, 'utf8').split('\n').length - 1]));

describe('file sizes under src/', () => {
  test(`no file is above ${MAX_LINES} lines unless listed with why`, () => {
    const all = lengths();
    assert.ok(all.size > 100, `read ${all.size} files under ${SRC}`);
    const over = [...all].filter(([f, n]) => n > MAX_LINES && EXCEPTIONS[f] === undefined).map(([f, n]) => `${f}: ${n} lines`);
    assert.deepEqual(over, [], `split these by what they hold (or list one in EXCEPTIONS with why): ${over.join(', ')}`);
  });

  test('every exception is a file still above the limit', () => {
    const all = lengths();
    const stale = Object.keys(EXCEPTIONS).filter((f) => (all.get(f) ?? 0) <= MAX_LINES);
    assert.deepEqual(stale, [], `no longer above ${MAX_LINES} lines (or gone): remove from EXCEPTIONS`);
  });
});
