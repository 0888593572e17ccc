/**
 * Scaling's series (#42): llmgw_model_scale_total counts each change of a model's count once, by
 * direction, none from before this process; llmgw_model_short_replicas says how many replicas the
 * load wants that fit nowhere, present only while some do not; llmgw_model_desired_replicas is the count decided;
 * llmgw_model_load{kind=busy|queued} and llmgw_model_queue_wait_seconds the load the last decision read.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { createMetrics } from '../../src/metrics/registry.js';
import { findSamples, parseExposition, sampleValue } from '../../src/metrics/parse.js';
import type { ModelSpec } from '../../src/fleet-spec/types.js';
import type { ScaleView } from '../../src/reconciler/view.js';
import { modelView, snapshot } from '../harness/views.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const spec: ModelSpec = {
  name: 'sc', file: 'models/sc.yaml', source: 'https://example.com/sc.gguf', sha256: 'a'.repeat(64), profile: 'chat',
  scaling: { mode: 'on_demand', idleTimeoutMs: 600_000, maxReplicas: 3 }, aliases: [], nodeSelector: {}, memoryBytes: null, maxConcurrency: null,
  routing: 'affinity', queue: { max: 64, timeoutMs: 60_000 }, token: null, rollout: null, digest: 'd1',
};
const at = (scale: ScaleView, desired: number) => snapshot({ at: T0, models: [modelView(spec, { desired, ready: desired, scale })] });
const change = (t: number, from: number, to: number) => ({ at: t, from, to, direction: (to > from ? 'up' : 'down') as 'up' | 'down', why: 'numbers' });

describe('metrics: scaling', () => {
  it('counts each change once by direction, none from before this process; the shortfall while there is one', async () => {
    const m = createMetrics({ defaultMetrics: false, clock: () => T0 });
    const scrape = async () => parseExposition(await m.registry.metrics());
    // a change the record kept from before this process started: not counted here
    m.applySnapshot(at({ min: 1, max: 3, count: 3, last: change(T0 - 60_000, 1, 3), short: null }, 3));
    assert.deepEqual(findSamples(await scrape(), 'llmgw_model_scale_total'), []);
    m.applySnapshot(at({ min: 1, max: 3, count: 2, last: change(T0 + 1000, 3, 2), short: null }, 2));
    m.applySnapshot(at({ min: 1, max: 3, count: 2, last: change(T0 + 1000, 3, 2), short: null }, 2)); // the same change again
    m.applySnapshot(at({ min: 1, max: 3, count: 3, last: change(T0 + 2000, 2, 3), short: { wants: 3, fit: 2, code: 'PLACEMENT_NO_ROOM', reason: 'needs 6.0 GiB' } }, 3));
    const s = await scrape();
    assert.equal(sampleValue(s, 'llmgw_model_scale_total', { model: 'sc', direction: 'down' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_scale_total', { model: 'sc', direction: 'up' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_short_replicas', { model: 'sc' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_desired_replicas', { model: 'sc' }), 3);
    assert.equal(sampleValue(s, 'llmgw_model_max_replicas', { model: 'sc' }), 3);
    m.applySnapshot(at({ min: 1, max: 3, count: 3, last: change(T0 + 2000, 2, 3), short: null }, 3));
    assert.deepEqual(findSamples(await scrape(), 'llmgw_model_short_replicas'), []);
  });

  it('the load its last decision read: llmgw_model_load{kind=busy|queued} and the oldest wait; none before a decision', async () => {
    const m = createMetrics({ defaultMetrics: false, clock: () => T0 });
    const scrape = async () => parseExposition(await m.registry.metrics());
    m.applySnapshot(at({ min: 1, max: 3, count: 1, last: null, short: null }, 1));
    assert.deepEqual(findSamples(await scrape(), 'llmgw_model_load'), []);
    m.applySnapshot(at({ min: 1, max: 3, count: 1, last: null, short: null, load: { busy: 1, queued: 5, waitMs: 9800 } }, 1));
    let s = await scrape();
    assert.equal(sampleValue(s, 'llmgw_model_load', { model: 'sc', kind: 'busy' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_load', { model: 'sc', kind: 'queued' }), 5);
    assert.equal(sampleValue(s, 'llmgw_model_queue_wait_seconds', { model: 'sc' }), 9.8);
    m.applySnapshot(at({ min: 1, max: 3, count: 3, last: null, short: null, load: { busy: 3, queued: 0, waitMs: 0 } }, 3));
    s = await scrape();
    assert.equal(sampleValue(s, 'llmgw_model_load', { model: 'sc', kind: 'queued' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_queue_wait_seconds', { model: 'sc' }), 0);
  });
});
