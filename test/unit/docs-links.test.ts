/**
 * The documentation holds together: every relative link in README.md and docs/ reaches a file or
 * folder that exists, and every `#anchor` a heading (or `id=`) of the page it points into; every
 * docs page is reachable from the README; the README stays a front page (≤ 250 lines).
 */
import { strict as assert } from 'node:assert';
import { existsSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../harness/paths.js';
import { anchors, links, markdownPages, readPage, slug } from '../harness/markdown.js';

const README_MAX_LINES = 250;
const EXTERNAL = /^[a-z][a-z0-9+.-]*:/i; // http:, https:, mailto:, …

/** Where a link on `page` leads: the repo-relative file (or folder) and the anchor, if any. */
function resolveLink(page: string, target: string): { file: string; anchor: string | null } {
  const hash = target.indexOf('#');
  const path = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
  const file = path === '' ? page : normalize(join(dirname(page), decodeURIComponent(path)));
  return { file, anchor };
}

describe('documentation links', () => {
  const pages = markdownPages();

  it('finds the pages and their links', () => {
    assert.ok(pages.length >= 10, `pages: ${pages.join(', ')}`);
    const total = pages.reduce((n, p) => n + links(readPage(p)).length, 0);
    assert.ok(total >= 40, `only ${total} links found`);
  });

  it('every relative link in README.md and docs/ resolves, #anchors included', () => {
    const anchorsOf = new Map<string, Set<string>>();
    const problems: string[] = [];
    for (const page of pages) {
      for (const { line, target } of links(readPage(page))) {
        if (EXTERNAL.test(target)) continue;
        const { file, anchor } = resolveLink(page, target);
        const where = `${page}:${line}: (${target})`;
        if (file.startsWith('..') || !existsSync(join(repoRoot, file))) {
          problems.push(`${where}: ${file} does not exist`);
          continue;
        }
        if (anchor === null) continue;
        if (statSync(join(repoRoot, file)).isDirectory() || !file.endsWith('.md')) {
          problems.push(`${where}: an anchor into ${file}, which is not a markdown page`);
          continue;
        }
        if (!anchorsOf.has(file)) anchorsOf.set(file, anchors(readPage(file)));
        const have = anchorsOf.get(file)!;
        if (!have.has(anchor)) problems.push(`${where}: ${file} has no heading with anchor #${anchor} (it has: ${[...have].join(', ')})`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('every page under docs/ is linked from README.md or from a page the README links to', () => {
    const reached = new Set<string>(['README.md']);
    const queue = ['README.md'];
    while (queue.length > 0) {
      const page = queue.shift()!;
      for (const { target } of links(readPage(page))) {
        if (EXTERNAL.test(target)) continue;
        const { file } = resolveLink(page, target);
        if (file.endsWith('.md') && file.startsWith('docs') && !reached.has(file) && existsSync(join(repoRoot, file))) {
          reached.add(file);
          queue.push(file);
        }
      }
    }
    const orphans = pages.filter((p) => !reached.has(p));
    assert.deepEqual(orphans, [], 'docs pages nothing links to: add them to the table under "## Documentation" in README.md');
  });

  it(`README.md stays a front page: at most ${README_MAX_LINES} lines (reference goes under docs/)`, () => {
    const lines = readPage('README.md').split('\n').length - 1;
    assert.ok(lines <= README_MAX_LINES, `README.md has ${lines} lines; move reference material to a page under docs/ and link it`);
  });
});

describe('the anchors GitHub gives headings', () => {
  const table: [string, string][] = [
    ['Reasons', 'reasons'],
    ['The folders under `src/`', 'the-folders-under-src'],
    ['Definition digest: what replaces replicas', 'definition-digest-what-replaces-replicas'],
    ['Per-key limits: the cost of the limit check (2026-12-02, #26)', 'per-key-limits-the-cost-of-the-limit-check-2026-12-02-26'],
    ['Prefix affinity (`npm run bench:affinity`)', 'prefix-affinity-npm-run-benchaffinity'],
    ['bench:rollout — 2026-12-01, shared 2-core VM', 'benchrollout--2026-12-01-shared-2-core-vm'],
    ['[Linked](x.md) and _emphasis_ and snake_case', 'linked-and-emphasis-and-snake_case'],
  ];
  for (const [heading, want] of table) it(heading, () => assert.equal(slug(heading), want));

  it('numbers repeated headings and skips code blocks', () => {
    const md = '# A\n\n## Same\n\n```sh\n# not a heading\n```\n\n## Same\n\n<a id="here"></a>\n';
    assert.deepEqual([...anchors(md)].sort(), ['a', 'here', 'same', 'same-1']);
  });

  it('reads links and images, not code', () => {
    const md = 'see [x](a.md#b) and ![img](p.png "t")\n`[no](c.md)`\n```\n[no](d.md)\n```\n[ref]: e.md\n';
    assert.deepEqual(links(md).map((l) => `${l.line}:${l.target}`), ['1:a.md#b', '1:p.png', '6:e.md']);
  });
});
