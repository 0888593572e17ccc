/**
 * src/ha reads no clock and sets no timer of its own (#27): the shells take a ShellTime (or, the
 * election, clock/monotonic/timers options) made at the composition root, src/serve/serve.ts, and
 * fast tests pass a fake one. Drawn from the source, as folder-graph.test.ts draws imports: every
 * global timer call, Date.now, performance.now, argument-less `new Date()` and node:timers import
 * under src/ha fails the test unless it is the default of an injected value (`?? Date.now`,
 * `= nodeTimers`). A file that takes injected time says in its header comment that it is a shell.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { repoRoot } from '../harness/paths.js';

const HA = join(repoRoot, 'src', 'ha');

/** A clock read or a timer of the process's own: not a method of an injected value (`timers.setTimeout`). */
const CLOCK = /(?<![.\w$])(?:setTimeout|setInterval|setImmediate|clearTimeout|clearInterval|clearImmediate)\s*\(|\bDate\.now\b|\bperformance\.now\b|\bnew Date\(\s*\)|['"]node:timers(?:\/promises)?['"]|\bnodeTimers\b/g;
/** The default of an injected value: `o.clock ?? Date.now`, `now: () => number = Date.now`, `timers = nodeTimers`. */
const INJECTED_DEFAULT = /(?:\?\?\s*|:[^;,]+?\s=\s*)(?:Date\.now(?!\s*\()|\(?\(\)\s*=>\s*performance\.now\(\)\)?|nodeTimers\b)/g;
/** An import of nodeTimers for such a default (the import line itself). */
const DEFAULT_IMPORT = /^import\s+\{[^}]*\bnodeTimers\b[^}]*\}\s+from\s+'\.\.\/reconciler\/loop\.js';$/;

/** The source with its comments blanked (a header may name what it does not do). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' ')).replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

/** Each clock read or timer that is not an injected default: file:line and the line. */
export function clockUses(files: readonly { readonly name: string; readonly text: string }[]): string[] {
  const found: string[] = [];
  for (const f of files) {
    code(f.text)
      .split('\n')
      .forEach((line, i) => {
        if (DEFAULT_IMPORT.test(line.trim())) return;
        const rest = line.replace(INJECTED_DEFAULT, '');
        if ([...rest.matchAll(CLOCK)].length > 0) found.push(`${f.name}:${i + 1}: ${line.trim()}`);
      });
  }
  return found;
}

const sources = (): { name: string; text: string }[] =>
  readdirSync(HA)
    .filter((n) => n.endsWith('.ts'))
    .map((n) => ({ name: relative(repoRoot, join(HA, n)), text: readFileSync(join(HA, n), 'utf8') }));

describe('src/ha: no timer or clock read outside the injected time of its shells', () => {
  test('the grep finds what it must, and lets injected defaults and injected timers through', () => {
    const uses = clockUses([
      { name: 'a.ts', text: 'const t = setTimeout(f, 1);\nthis.clock = o.clock ?? Date.now;\nconst x = Date.now() + 1;\nthis.o.timers.setTimeout(f, 1);' },
      { name: 'b.ts', text: "// setTimeout in a comment\n/** Date.now in a doc */\nimport { setTimeout as wait } from 'node:timers/promises';\nawait new Promise((r) => setInterval(r, 5));" },
      { name: 'c.ts', text: "import { nodeTimers } from '../reconciler/loop.js';\nconstructor(private readonly timers: LoopTimers = nodeTimers) {}\nconst t = nodeTimers;\nconst d = new Date();\nconst e = new Date(ms);" },
    ]);
    assert.deepEqual(uses, [
      'a.ts:1: const t = setTimeout(f, 1);',
      'a.ts:3: const x = Date.now() + 1;',
      "b.ts:3: import { setTimeout as wait } from 'node:timers/promises';",
      'b.ts:4: await new Promise((r) => setInterval(r, 5));',
      'c.ts:3: const t = nodeTimers;',
      'c.ts:4: const d = new Date();',
    ]);
  });

  test('src/ha sets no timer and reads no clock but through the time injected into its shells', () => {
    const files = sources();
    assert.ok(files.length > 10, `src/ha holds ${files.length} files`);
    assert.deepEqual(clockUses(files), [], 'read the clock or set a timer through the ShellTime (shell-time.ts) the shell is given');
  });

  test('a file that takes injected time says in its header comment that it is a shell', () => {
    const unsaid = sources()
      .filter((f) => /\b(?:ShellTime|LoopTimers)\b/.test(code(f.text)))
      .filter((f) => !/^\/\*\*[\s\S]*?\bshells?\b[\s\S]*?\*\//i.test(f.text))
      .map((f) => f.name);
    assert.deepEqual(unsaid, []);
  });
});
