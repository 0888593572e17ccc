/**
 * The controller's heap sizing (src/serve/heap-sizing.ts): what it sizes given node's own flags, the
 * young generation's growth factor (pure tables), and, in fresh node processes allocating the same
 * surviving garbage, that V8 grows the young generation past the cap by default and not past it
 * once `sizeHeap` ran. The figure compared is V8's own young-generation capacity (whole semi-space
 * pages), not a time or an RSS.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, test } from 'node:test';
import { GROWING_PERCENT, YOUNG_CAP_BYTES, heapSizingFor, youngGrowthFactor } from '../../src/serve/heap-sizing.js';
import { repoRoot } from '../harness/paths.js';

const MiB = 2 ** 20;

describe('heap sizing', () => {
  test('llmgw sizes what node was not told', () => {
    const both = { youngCapBytes: YOUNG_CAP_BYTES, growingPercent: GROWING_PERCENT };
    const cases: [string[], string | undefined, { youngCapBytes: number | null; growingPercent: number | null }][] = [
      [[], undefined, both],
      [[], '', both],
      [['--enable-source-maps'], '--max-old-space-size=512', both],
      [['--max-semi-space-size=8'], undefined, { youngCapBytes: null, growingPercent: GROWING_PERCENT }],
      [[], '--max_semi_space_size=1', { youngCapBytes: null, growingPercent: GROWING_PERCENT }],
      [['--min-semi-space-size=4'], undefined, { youngCapBytes: null, growingPercent: GROWING_PERCENT }],
      [['--semi-space-growth-factor=4'], undefined, { youngCapBytes: null, growingPercent: GROWING_PERCENT }],
      [['--heap-growing-percent=50'], undefined, { youngCapBytes: YOUNG_CAP_BYTES, growingPercent: null }],
      [['--max-semi-space-size=2', '--heap-growing-percent=20'], undefined, { youngCapBytes: null, growingPercent: null }],
    ];
    for (const [argv, options, want] of cases) assert.deepEqual(heapSizingFor(argv, options), want, `${argv.join(' ')} / NODE_OPTIONS=${options}`);
  });

  test('the young generation doubles only while the double fits the cap', () => {
    const rows: [number, number, 1 | 2][] = [
      [1 * MiB, 4 * MiB, 2],
      [2 * MiB, 4 * MiB, 2],
      [3 * MiB, 4 * MiB, 1],
      [4 * MiB, 4 * MiB, 1],
      [32 * MiB, 4 * MiB, 1],
      [0, 4 * MiB, 2],
    ];
    for (const [young, cap, want] of rows) assert.equal(youngGrowthFactor(young, cap), want, `${young / MiB} MiB under a cap of ${cap / MiB} MiB`);
  });

  /** A fresh node process that keeps ~64 MiB of 1 KiB objects alive across many scavenges; the largest young generation it saw. */
  function largestYoung(sized: boolean, nodeArgs: readonly string[] = []): { young: number; sizing: unknown } {
    const script = `
      import v8 from 'node:v8';
      const { sizeHeap } = await import(${JSON.stringify(pathToFileURL(join(repoRoot, 'dist', 'src', 'serve', 'heap-sizing.js')).href)});
      const sizing = ${sized} ? sizeHeap() : null;
      const young = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
      let largest = young();
      const kept = [];
      for (let round = 0; round < 48; round++) {
        for (let i = 0; i < 1024; i++) kept.push({ round, i, text: 'x'.repeat(1000) + i });
        if (kept.length > 32 * 1024) kept.splice(0, 1024);
        // the observer's turn: a gc performance entry is delivered between tasks, as in the serve
        await new Promise((r) => setImmediate(r));
        largest = Math.max(largest, young());
      }
      console.log(JSON.stringify({ young: largest, sizing }));
    `;
    const r = spawnSync(process.execPath, [...nodeArgs, '--input-type=module', '-e', script], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as { young: number; sizing: unknown };
  }

  test("V8's young generation grows past the cap by default and stays within it once sized", () => {
    const byDefault = largestYoung(false);
    assert.ok(byDefault.young > YOUNG_CAP_BYTES, `by default the young generation reached only ${byDefault.young / MiB} MiB: this allocation does not show the cap`);
    const sized = largestYoung(true);
    console.log(`young generation, largest seen: ${byDefault.young / MiB} MiB by default, ${sized.young / MiB} MiB sized (cap ${YOUNG_CAP_BYTES / MiB} MiB)`);
    assert.deepEqual(sized.sizing, { youngCapBytes: YOUNG_CAP_BYTES, growingPercent: GROWING_PERCENT });
    assert.ok(sized.young <= YOUNG_CAP_BYTES, `sized, the young generation reached ${sized.young / MiB} MiB`);
  });

  test('a flag given to node wins', () => {
    const r = largestYoung(true, ['--max-semi-space-size=8']);
    assert.deepEqual(r.sizing, { youngCapBytes: null, growingPercent: GROWING_PERCENT });
    assert.ok(r.young > YOUNG_CAP_BYTES, `with --max-semi-space-size=8 the young generation reached only ${r.young / MiB} MiB`);
  });
});
