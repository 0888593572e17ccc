/**
 * docs/layout.md's map of src/ is the code's: one row per folder under src/, its "imports" cell
 * exactly the src/ folders its files import (read with TypeScript's own import scanner, type-only
 * imports and re-exports included), and the rows in layer order — each folder imports only folders
 * listed above it. test/unit/folder-graph.test.ts says the same graph has no cycle.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { readPage, section, tableRows } from '../harness/markdown.js';
import { repoRoot } from '../harness/paths.js';

const PAGE = 'docs/layout.md';
const HEADING = '## The folders under `src/`';
const WHERE = `${PAGE}, the table under "${HEADING}"`;
const SRC = join(repoRoot, 'src');

const tsFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));

/** folder → folder it imports → the importing files (repo-relative). */
function importsByFolder(): Map<string, Map<string, string[]>> {
  const g = new Map<string, Map<string, string[]>>();
  for (const f of tsFiles(SRC)) {
    const from = relative(SRC, f).split('/')[0]!;
    const edges = g.get(from) ?? new Map<string, string[]>();
    g.set(from, edges);
    for (const { fileName } of ts.preProcessFile(readFileSync(f, 'utf8'), true, true).importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = resolve(dirname(f), fileName);
      if (!target.startsWith(SRC + '/')) continue;
      const to = relative(SRC, target).split('/')[0]!;
      if (to !== from) edges.set(to, [...(edges.get(to) ?? []), relative(repoRoot, f)]);
    }
  }
  return g;
}

interface Row {
  readonly folder: string;
  readonly imports: string[];
}

/** The table's rows: `src/X/` and the folder names of its imports cell (`–` for none). */
function documented(): Row[] {
  const rows = tableRows(section(readPage(PAGE), HEADING, PAGE));
  assert.deepEqual(rows[0], ['folder', 'what it holds', 'imports'], `${WHERE}: its columns`);
  return rows.slice(1).map((cells) => {
    const folder = /^`src\/([a-z0-9-]+)\/`$/.exec(cells[0] ?? '')?.[1];
    assert.ok(folder, `${WHERE}: a row whose first cell is not \`src/NAME/\`: | ${cells.join(' | ')} |`);
    const cell = cells[2] ?? '';
    const imports = cell === '–' ? [] : cell.split(',').map((c) => /^`([a-z0-9-]+)`$/.exec(c.trim())?.[1] ?? `(not a \`folder\`: ${c.trim()})`);
    return { folder, imports };
  });
}

const cellOf = (folders: Iterable<string>): string => [...folders].sort().map((f) => `\`${f}\``).join(', ') || '–';

describe('docs/layout.md ↔ the imports under src/', () => {
  const graph = importsByFolder();
  const rows = documented();

  it('has one row for every folder under src/ and none for a folder that is not there', () => {
    const folders = readdirSync(SRC, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    assert.ok(folders.length >= 15, `${folders.length} folders under src/`);
    const problems: string[] = [];
    for (const f of folders) {
      const n = rows.filter((r) => r.folder === f).length;
      if (n === 0) problems.push(`src/${f}/ has no row: add | \`src/${f}/\` | WHAT IT HOLDS | ${cellOf(graph.get(f)?.keys() ?? [])} | to ${WHERE}, below the folders it imports`);
      if (n > 1) problems.push(`src/${f}/ has ${n} rows in ${WHERE}: keep one`);
    }
    for (const r of rows) if (!folders.includes(r.folder)) problems.push(`${WHERE} has a row for src/${r.folder}/, which does not exist: remove it`);
    assert.deepEqual(problems, []);
  });

  it("each row's imports cell is exactly the folders its files import", () => {
    const problems: string[] = [];
    for (const { folder, imports } of rows) {
      const edges = graph.get(folder) ?? new Map<string, string[]>();
      const added = [...edges.keys()].filter((t) => !imports.includes(t));
      const gone = imports.filter((t) => !edges.has(t));
      if (added.length === 0 && gone.length === 0) continue;
      const why = [
        ...added.map((t) => `imports ${t} (${[...new Set(edges.get(t))].join(', ')})`),
        ...gone.map((t) => `no longer imports ${t}`),
      ].join('; ');
      problems.push(`src/${folder}/ ${why}: set its imports cell in ${WHERE} to ${cellOf(edges.keys())}`);
    }
    assert.deepEqual(problems, []);
  });

  it('lists the folders in layer order: each imports only folders above it', () => {
    const position = new Map(rows.map((r, i) => [r.folder, i]));
    const problems: string[] = [];
    for (const [from, edges] of graph) {
      for (const to of edges.keys()) {
        if ((position.get(to) ?? -1) >= (position.get(from) ?? Infinity)) {
          problems.push(`src/${from}/ imports src/${to}/, which ${WHERE} lists below it (${[...new Set(edges.get(to))].join(', ')}): move the row of src/${from}/ below src/${to}/`);
        }
      }
    }
    assert.deepEqual(problems, []);
  });
});
