/**
 * The status page's feed at scale (#37 item 1): a page of the models in attention order, a filter by
 * phase and node and a search, and a client's page sent once whole and then as per-model patches.
 * Table tests of the pure parts (src/ui/view-page.ts, view.ts viewBase/viewOfPage); the stream on a
 * real serve at 10,000 models is test/integration/ui-scale.test.ts.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import type { ModelView } from '../../src/reconciler/view.js';
import { viewBase, viewOfPage } from '../../src/ui/view.js';
import { ALL_MODELS, PageDiff, viewQueryOf } from '../../src/ui/view-page.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { modelView, nodeView, replicaView, snapshot } from '../harness/views.js';

const N = 1_000;
const names = Array.from({ length: N }, (_, i) => `m${String(i).padStart(4, '0')}`);
const SPEC: FleetSpec = fakeSpec({ models: Object.fromEntries(names.map((n) => [n, {}])) });
const ARCH = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };

/** Every 100th model parked, every 10th (not parked) ready on node-2 with a replica, the rest idle. */
function models(over: Record<string, Partial<ModelView>> = {}): ModelView[] {
  return names.map((n, i) => {
    const base: Partial<ModelView> =
      i % 100 === 7 ? { phase: 'parked', consecutiveFailures: 5, lastError: ARCH, parked: { since: 1, lastError: ARCH }, desired: 0 }
        : i % 10 === 3 ? { phase: 'ready', replicas: [replicaView(`${n}-r1`, n, { node: 'node-2', phase: 'ready', endpoint: 'http://10.0.0.2:9000' })] }
          : { phase: 'idle', desired: 0 };
    return modelView(SPEC.models[n]!, { ...base, ...(over[n] ?? {}) });
  });
}
const snap = (at: number, ms: ModelView[]) => snapshot({ at, appliedRevision: 'a'.repeat(16), lastSyncOk: at, models: ms, nodes: [nodeView('node-1'), nodeView('node-2')] });
const namesOf = (v: ReturnType<typeof viewOfPage>): string[] => v.groups.flatMap((g) => g.models.map((m) => m.name));

describe('a page of the models', () => {
  const base = viewBase(snap(1000, models()), SPEC);

  test('the first page: attention first (the parked), then the ready, then the idle; 100 models, and where it is', () => {
    const v = viewOfPage(base, viewQueryOf({}));
    assert.deepEqual(v.groups.map((g) => [g.phase, g.models.length]), [['parked', 10], ['ready', 90]]);
    assert.equal(v.groups[0]!.models[0]!.name, 'm0007');
    assert.deepEqual(v.page, { page: 0, size: 100, pages: 10, matched: N, phase: null, node: null, q: null });
    assert.equal(v.status.models.total, N, 'the header counts the whole fleet');
  });

  test('the last page, and a page past it is the last', () => {
    const last = viewOfPage(base, viewQueryOf({ page: 9 }));
    assert.deepEqual(namesOf(last).slice(-1), ['m0999']);
    assert.deepEqual(namesOf(viewOfPage(base, viewQueryOf({ page: 50 }))), namesOf(last));
  });

  const cases: { name: string; raw: Parameters<typeof viewQueryOf>[0]; want: string[] | number }[] = [
    { name: 'a search by a part of the name, any case', raw: { q: 'M099' }, want: names.filter((n) => n.startsWith('m099')).sort((a, b) => (a === 'm0993' ? -1 : b === 'm0993' ? 1 : a < b ? -1 : 1)) },
    { name: 'one phase', raw: { phase: 'parked', size: 500 }, want: 10 },
    { name: 'models on a node', raw: { node: 'node-2', size: 500 }, want: 100 },
    { name: 'a search nothing matches', raw: { q: 'nope' }, want: [] },
    { name: 'a size above the most is the most', raw: { size: 10_000 }, want: 500 },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const got = namesOf(viewOfPage(base, viewQueryOf(c.raw)));
      if (typeof c.want === 'number') assert.equal(got.length, c.want);
      else assert.deepEqual(got, c.want);
    });
  }

  test('without a query (GET /view): every model, as before', () => {
    assert.equal(namesOf(viewOfPage(base, ALL_MODELS)).length, N);
  });
});

describe('a client\'s page: whole once, then what changed model by model', () => {
  test('one model failing sends that model alone; nothing changed sends nothing; a model leaving the page sends the new order', () => {
    const diff = new PageDiff();
    const q = viewQueryOf({});
    const first = viewOfPage(viewBase(snap(1000, models()), SPEC), q);
    diff.whole(first);
    assert.equal(diff.patch(viewOfPage(viewBase(snap(1000, models()), SPEC), q)), null, 'the same page: nothing');
    const failing = { m0013: { phase: 'failing' as const, consecutiveFailures: 1, lastError: ARCH, nextAttemptAt: 5000 } };
    // the same time (a card's words say how long ago: a later snapshot changes the parked ones' too)
    const p = diff.patch(viewOfPage(viewBase(snap(1000, models(failing)), SPEC), q))!;
    assert.deepEqual(p.upsert.map((m) => [m.name, m.phase]), [['m0013', 'failing']]);
    assert.equal(p.order[10], 'm0013', 'after the parked, before the ready');
    assert.equal(p.nodes, undefined, 'the nodes did not change');
    assert.ok(JSON.stringify(p).length < 40_000, `${JSON.stringify(p).length} bytes`);
    assert.ok(JSON.stringify(first).length > JSON.stringify(p).length);
  });

  test('the first frame at 10,000 models is one page: small whatever the fleet', () => {
    const many = Array.from({ length: 10_000 }, (_, i) => `x${String(i).padStart(5, '0')}`);
    const spec = fakeSpec({ models: Object.fromEntries(many.map((n) => [n, {}])) });
    const s = snapshot({ at: 1, models: many.map((n) => modelView(spec.models[n]!, { phase: 'idle', desired: 0 })), nodes: [nodeView('node-1')] });
    const v = viewOfPage(viewBase(s, spec), viewQueryOf({}));
    assert.ok(JSON.stringify(v).length < 128 * 1024, `${JSON.stringify(v).length} bytes`);
    assert.deepEqual(namesOf(viewOfPage(viewBase(s, spec), viewQueryOf({ q: 'x09999' }))), ['x09999']);
  });
});
