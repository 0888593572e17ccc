/**
 * Derivations kept by identity across passes (#28): equal plain data (util/equal-data.ts), a model's
 * view kept while it is equal (summarize.ts keptView), and what is derived from a kept view — its
 * published object and text, its status file's text, and no events between two snapshots that share it.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { deriveEvents } from '../../src/events/derive.js';
import { publishedEntries, publishedOf } from '../../src/ha/published.js';
import { keptView } from '../../src/reconciler/summarize.js';
import type { ModelView } from '../../src/reconciler/view.js';
import { equalData, sameEntries } from '../../src/util/equal-data.js';
import { modelJson, statusFiles } from '../../src/wire/shape.js';
import { specOf } from '../harness/reconciler-core.js';
import { modelView, replicaView, snapshot } from '../harness/views.js';

const spec = await specOf();

describe('equal plain data', () => {
  const table: [string, unknown, unknown, boolean][] = [
    ['the same number', 1, 1, true],
    ['two numbers', 1, 2, false],
    ['null and an object', null, {}, false],
    ['null and undefined', null, undefined, false],
    ['a string and a number', '1', 1, false],
    ['equal objects, keys in another order', { a: 1, b: { c: [1, 'x'] } }, { b: { c: [1, 'x'] }, a: 1 }, true],
    ['a nested difference', { a: 1, b: { c: [1, 'x'] } }, { a: 1, b: { c: [1, 'y'] } }, false],
    ['a key more', { a: 1 }, { a: 1, b: 2 }, false],
    ['a key set to undefined is not the key absent', { a: 1, b: undefined }, { a: 1, c: undefined }, false],
    ['arrays of another length', [1, 2], [1, 2, 3], false],
    ['an array and an object with its keys', [1], { 0: 1 }, false],
    ['an object and an array', { 0: 1 }, [1], false],
    ['NaN is not NaN (===)', Number.NaN, Number.NaN, false],
  ];
  for (const [name, a, b, want] of table) it(name, () => {
    assert.equal(equalData(a, b), want);
    assert.equal(equalData(b, a), want, 'either way round');
  });
});

describe('a model view kept while it is equal', () => {
  const alpha = spec.models.alpha!;
  const base = (over: Partial<ModelView> = {}): ModelView => modelView(alpha, { replicas: [replicaView('a1', 'alpha')], unplaceable: null, ...over });
  it('an equal view built again is the one built before; any difference is a new view, kept from then on', () => {
    const first = keptView(base());
    assert.equal(keptView(base()), first, 'equal, new objects all through');
    const table: [string, Partial<ModelView>][] = [
      ['a replica\'s phase', { replicas: [replicaView('a1', 'alpha', { phase: 'starting' })] }],
      ['a replica more', { replicas: [replicaView('a1', 'alpha'), replicaView('a2', 'alpha')] }],
      ['the phase', { phase: 'starting' }],
      ['a failure counted', { consecutiveFailures: 1, lastError: { code: 'X', message: 'y' } }],
      ['unplaceable', { unplaceable: { code: 'PLACEMENT_NO_ROOM', reason: 'r', needBytes: 1, largestFree: { node: 'n', bytes: 0 }, checked: 1, excludedBySelector: 0, unknown: 0, avoided: 0 } }],
      ['replacing set', { replacing: true }],
    ];
    let last = first;
    for (const [name, over] of table) {
      const v = keptView(base(over));
      assert.notEqual(v, last, name);
      assert.deepEqual(v, base(over), name);
      assert.equal(keptView(base(over)), v, `${name}: kept once built`);
      last = v;
    }
    assert.notEqual(keptView(modelView({ ...alpha }, { replicas: [replicaView('a1', 'alpha')], unplaceable: null })), keptView(base()), 'another spec object (another revision): its own view');
  });

  it('a kept view is published as the same object and text, and two snapshots sharing it differ by no event', () => {
    const v = keptView(base({ desired: 3 }));
    const a = snapshot({ models: [v] });
    const b = snapshot({ at: 5, models: [keptView(base({ desired: 3 }))] });
    assert.equal(b.models[0], v);
    assert.equal(publishedOf(b).models[0], publishedOf(a).models[0]);
    assert.deepEqual(publishedOf(a).models[0], (({ spec: _s, ...m }) => m)(v));
    assert.equal(publishedEntries(publishedOf(b)).get('models/alpha'), JSON.stringify(publishedOf(a).models[0]));
    assert.deepEqual(deriveEvents(a, b), []);
    const c = snapshot({ at: 6, models: [keptView(base({ desired: 3, replicas: [replicaView('a1', 'alpha'), replicaView('a2', 'alpha', { phase: 'starting' })] }))] });
    assert.deepEqual(deriveEvents(b, c).map((e) => e.kind), ['replica-starting']);
  });
});

describe('shallow-equal records', () => {
  const table: [string, Record<string, unknown>, Record<string, unknown>, boolean][] = [
    ['the same entries, in another order', { a: 1, b: 'x' }, { b: 'x', a: 1 }, true],
    ['a value differs', { a: 1 }, { a: 2 }, false],
    ['objects by identity, not content', { a: {} }, { a: {} }, false],
    ['a key more', { a: 1 }, { a: 1, b: 2 }, false],
    ['undefined is not absent', { a: undefined, b: 1 }, { c: undefined, b: 1 }, false],
  ];
  for (const [name, a, b, want] of table) it(name, () => assert.equal(sameEntries(a, b) && sameEntries(b, a), want));
});

describe('a model\'s status file kept by its view', () => {
  const fileOf = (v: ModelView, at: number): string => statusFiles(snapshot({ at, models: [v] }), spec)[`models/${v.name}.json`]!;
  const afresh = (v: ModelView, at: number): string => {
    const { revision: _r, ...m } = modelJson(v, null, at);
    return `${JSON.stringify(m, null, 2)}\n`;
  };
  it('the same text (the same string) for a kept view, built afresh it is equal; another view, its own text', () => {
    const v = keptView(modelView(spec.models.beta!, { desired: 0, phase: 'idle', replicas: [] }));
    const first = fileOf(v, 1000);
    assert.equal(first, afresh(v, 1000));
    assert.equal(fileOf(v, 99_000), first, 'an on-demand model\'s file does not move with the time');
    const changed = keptView(modelView(spec.models.beta!, { desired: 1, phase: 'starting', replicas: [replicaView('b1', 'beta', { phase: 'starting' })] }));
    assert.equal(fileOf(changed, 99_000), afresh(changed, 99_000));
    assert.notEqual(fileOf(changed, 99_000), first);
  });
  it('a scheduled model\'s file follows the time (its count in force and next change)', () => {
    const scheduled = { ...spec.models.alpha!, scaling: { mode: 'replicas' as const, replicas: 0, schedule: { timezone: 'UTC', entries: [{ cron: '0 8 * * *', replicas: 2 }, { cron: '0 20 * * *', replicas: 0 }] } } };
    const v = keptView(modelView(scheduled));
    const morning = Date.UTC(2026, 0, 5, 9);
    const night = Date.UTC(2026, 0, 5, 21);
    assert.equal(fileOf(v, morning), afresh(v, morning));
    assert.equal(fileOf(v, night), afresh(v, night));
    assert.notEqual(fileOf(v, morning), fileOf(v, night));
  });
});
