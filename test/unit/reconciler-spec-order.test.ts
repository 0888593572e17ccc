/** A spec's models and nodes in name order, sorted once per spec (spec-order.ts). */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { modelsInOrder, nodesInOrder } from '../../src/reconciler/spec-order.js';
import { specOf } from '../harness/reconciler-core.js';

const spec = await specOf();

describe('spec order', () => {
  it('models and nodes by name (localeCompare), one array per spec, a new one for another spec', () => {
    const models = { b: { name: 'b' }, 'A-2': { name: 'A-2' }, a: { name: 'a' }, 'a-10': { name: 'a-10' } };
    const sorted = Object.values(models).sort((x, y) => x.name.localeCompare(y.name)).map((m) => m.name);
    assert.deepEqual(modelsInOrder({ models } as never).map((m) => m.name), sorted);
    assert.equal(modelsInOrder(spec), modelsInOrder(spec));
    assert.deepEqual(modelsInOrder(spec).map((m) => m.name), ['alpha', 'beta', 'gamma']);
    assert.deepEqual(nodesInOrder(spec).map((n) => n.name), ['cpu-01', 'cpu-02']);
    const next = { ...spec, models: { ...spec.models } };
    assert.notEqual(modelsInOrder(next), modelsInOrder(spec));
    assert.deepEqual(modelsInOrder(next), modelsInOrder(spec));
  });
});
