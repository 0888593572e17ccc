/**
 * The folders under src/ import each other without a cycle (type-only imports included: a cycle
 * of types is still a layer that reaches back up). Drawn from the source's own import lines; the
 * failure names each cycle and the files whose imports make it.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { repoRoot } from '../harness/paths.js';

const SRC = join(repoRoot, 'src');
const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'";]*?from\s+['"](\.[^'"]+)['"]/g;

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

const folderOf = (file: string): string => relative(SRC, file).split('/')[0]!;

/** folder → folder → the importing files (for the message). */
function folderGraph(): Map<string, Map<string, string[]>> {
  const g = new Map<string, Map<string, string[]>>();
  for (const f of files(SRC)) {
    const from = folderOf(f);
    for (const m of readFileSync(f, 'utf8').matchAll(IMPORT)) {
      const target = resolve(dirname(f), m[1]!);
      if (!target.startsWith(SRC)) continue;
      const to = folderOf(target);
      if (to === from || to.endsWith('.js') || to.endsWith('.ts')) continue;
      const edges = g.get(from) ?? new Map<string, string[]>();
      edges.set(to, [...(edges.get(to) ?? []), relative(repoRoot, f)]);
      g.set(from, edges);
    }
  }
  return g;
}

/** Strongly connected components of more than one folder (Tarjan). */
function cycles(g: Map<string, Map<string, string[]>>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of g.get(v)?.keys() ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const c: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1) out.push(c.sort());
    }
  };
  for (const v of g.keys()) if (!idx.has(v)) visit(v);
  return out;
}

/** file → imported file → [the importing file] (files of `dir` and what they import inside it). */
function fileGraph(dir: string): Map<string, Map<string, string[]>> {
  const g = new Map<string, Map<string, string[]>>();
  for (const f of files(dir)) {
    const from = relative(repoRoot, f);
    for (const m of readFileSync(f, 'utf8').matchAll(IMPORT)) {
      const target = resolve(dirname(f), m[1]!).replace(/\.js$/, '.ts');
      if (!target.startsWith(dir + '/')) continue;
      const edges = g.get(from) ?? new Map<string, string[]>();
      edges.set(relative(repoRoot, target), [from]);
      g.set(from, edges);
    }
  }
  return g;
}

describe('folder graph', () => {
  test('src/ folders import each other without a cycle', () => {
    const g = folderGraph();
    assert.ok(g.size >= 10, `read the import graph (${g.size} folders import others)`);
    const found = cycles(g).map((c) => {
      const arrows = c.flatMap((a) => c.filter((b) => g.get(a)?.has(b)).map((b) => `  ${a} → ${b}: ${[...new Set(g.get(a)!.get(b)!)].join(', ')}`));
      return `cycle ${c.join(' ↔ ')}\n${arrows.join('\n')}`;
    });
    assert.deepEqual(found, [], found.join('\n'));
  });

  test('the files of src/router import each other without a cycle (type-only imports included)', () => {
    const g = fileGraph(join(SRC, 'router'));
    assert.ok(g.size >= 15, `read the router's imports (${g.size} files import others)`);
    const found = cycles(g).map((c) => `cycle ${c.join(' ↔ ')}`);
    assert.deepEqual(found, [], found.join('\n'));
  });

  test('the wire format imports only the domain (the record, spec, events, usage rows, the rollout\'s vocabulary) and the catalogue', () => {
    const g = folderGraph();
    const allowed = new Set(['reconciler', 'fleet-spec', 'errors', 'schedule', 'events', 'util', 'rollout']);
    const bad = [...(g.get('wire')?.entries() ?? [])].filter(([to]) => !allowed.has(to));
    assert.deepEqual(bad, []);
  });
});
