/** The stable revision's replicas while a rollout is unpromoted (reconciler/stable-replicas.ts), as a table. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { Located } from '../../src/reconciler/planner.js';
import { stablePlan, stableRank } from '../../src/reconciler/stable-replicas.js';

const rep = (id: string, state: 'ready' | 'starting' = 'ready', digest = 'd1'): Located => ({ node: 'n', reachable: true, r: { id, model: 'm', digest, state, port: 1, pid: 1, startedAt: 0 } as Located['r'] });

describe('stablePlan', () => {
  const table: { name: string; in: Parameters<typeof stablePlan>[0]; want: ReturnType<typeof stablePlan> }[] = [
    { name: 'without the stable definition: the fresh ones kept, nothing started', in: { stable: [rep('a')], restarts: new Set(['a']), pending: 0, asked: 2, canStart: false }, want: { keep: 0, start: false } },
    { name: 'all there: all kept, nothing started', in: { stable: [rep('a'), rep('b')], restarts: new Set(), pending: 0, asked: 2, canStart: true }, want: { keep: 2, start: false } },
    { name: 'one failed (gone from the live ones): one started', in: { stable: [rep('a')], restarts: new Set(), pending: 0, asked: 2, canStart: true }, want: { keep: 1, start: true } },
    { name: 'one starting already: not a second at once', in: { stable: [rep('a')], restarts: new Set(), pending: 1, asked: 2, canStart: true }, want: { keep: 1, start: false } },
    { name: 'a restart: the old one kept while its replacement is not ready', in: { stable: [rep('a'), rep('b')], restarts: new Set(['a']), pending: 0, asked: 2, canStart: true }, want: { keep: 2, start: true } },
    { name: 'a restart whose replacement is starting: both kept', in: { stable: [rep('a'), rep('b'), rep('c', 'starting')], restarts: new Set(['a']), pending: 0, asked: 2, canStart: true }, want: { keep: 3, start: false } },
    { name: 'a restart whose replacement is ready: the old one goes', in: { stable: [rep('a'), rep('b'), rep('c')], restarts: new Set(['a']), pending: 0, asked: 2, canStart: true }, want: { keep: 2, start: false } },
    { name: 'on demand and idle (0 asked): nothing started, the fresh ones kept', in: { stable: [rep('a')], restarts: new Set(), pending: 0, asked: 0, canStart: true }, want: { keep: 1, start: false } },
  ];
  for (const t of table) it(t.name, () => assert.deepEqual(stablePlan(t.in), t.want));

  it('stableRank: others go first, then restarted stable ones, then fresh stable ones', () => {
    const restarts = new Set(['b']);
    assert.deepEqual([rep('x', 'ready', 'd9'), rep('b'), rep('a')].map((l) => stableRank(l, 'd1', restarts)), [0, 1, 2]);
  });
});
