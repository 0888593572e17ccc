/** The stable revision's replicas while a rollout is unpromoted (reconciler/stable-replicas.ts), as a table. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { initialHealth } from '../../src/reconciler/health.js';
import { planPass, type Located, type PlanInput } from '../../src/reconciler/planner.js';
import { stablePlan, stableRank } from '../../src/reconciler/stable-replicas.js';
import { node, observed, specOf } from '../harness/reconciler-core.js';

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

describe('the planner heals the stable revision of an unpromoted rollout', async () => {
  const spec = await specOf((f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace(/replicas: \d+/, 'replicas: 2')));
  const alpha = spec.models.alpha!;
  const stableModel = { ...alpha, digest: 'old' };
  const only = { ...spec, models: { alpha } };
  const input = (phase: 'held' | 'checking', withStable: boolean, alive: number): PlanInput => ({
    spec: only,
    nodes: [node('cpu-01', Array.from({ length: alive }, (_, i) => observed(only, `alpha-${i}`, 'alpha', 'ready', { digest: 'old' }))), node('cpu-02')],
    health: { alpha: initialHealth(alpha.digest) },
    inflightStarts: [],
    stopping: new Set(),
    demand: {},
    restarts: new Set(),
    draining: {},
    memory: { alpha: alpha.memoryBytes },
    accountedFailures: new Set(),
    rollouts: { alpha: { stable: 'old', want: phase === 'checking' ? 1 : 0, ...(withStable ? { stableModel } : {}) } },
    now: 1_000_000,
    newReplicaId: (model, digest) => `${model}-${digest}`,
  });
  const starts = (i: PlanInput): string[] => planPass(i).actions.flatMap((a) => (a.kind === 'start' ? [a.digest === 'old' ? 'stable' : 'new'] : [])).sort();
  const table: { name: string; in: PlanInput; want: string[] }[] = [
    { name: 'held, one of two stable replicas gone: one stable start', in: input('held', true, 1), want: ['stable'] },
    { name: 'held, both there: nothing', in: input('held', true, 2), want: [] },
    { name: 'held, the stable definition not read: nothing (kept only)', in: input('held', false, 1), want: [] },
    { name: 'checking with one stable replica left of two: the new one only (replicas − 1 serve; no fight for its room)', in: input('checking', true, 1), want: ['new'] },
    { name: 'checking, none left: one stable and the new one', in: input('checking', true, 0), want: ['new', 'stable'] },
  ];
  for (const t of table) it(t.name, () => assert.deepEqual(starts(t.in), t.want));
});
