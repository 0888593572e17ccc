/**
 * The rollout's gauges (src/metrics/rollout.ts) from a snapshot's rollouts: the phase while a model
 * has one; in a canary step the step (from 1), the share and both arms' figures (seconds for the
 * p95s, absent where the arm has none); every step and arm series removed when the rollout leaves
 * the canary phase, and every series when it ends.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { createMetrics, type LlmgwMetrics } from '../../src/metrics/registry.js';
import { findSamples, parseExposition, sampleValue, type Sample } from '../../src/metrics/parse.js';
import type { ModelView } from '../../src/reconciler/view.js';
import type { RolloutView } from '../../src/rollout/types.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { arm, canaryRollout } from '../harness/rollout-views.js';
import { modelView, snapshot } from '../harness/views.js';

const T0 = Date.parse('2025-05-01T12:00:00.000Z');
const SPEC = fakeSpec({ models: { chat: {}, code: {} } });
const model = (name: 'chat' | 'code', rollout?: RolloutView): ModelView => modelView(SPEC.models[name]!, { ready: 1, ...(rollout ? { rollout } : {}) });

const ARM_METRICS = ['llmgw_rollout_requests', 'llmgw_rollout_errors', 'llmgw_rollout_error_ratio', 'llmgw_rollout_ttft_p95_seconds', 'llmgw_rollout_tpot_p95_seconds'] as const;
const STEP_METRICS = ['llmgw_rollout_step', 'llmgw_rollout_share'] as const;

async function apply(m: LlmgwMetrics, ...models: ModelView[]): Promise<Sample[]> {
  m.applySnapshot(snapshot({ at: T0, models }));
  return parseExposition(await m.registry.metrics());
}

const rolloutSeries = (s: readonly Sample[], model: string): string[] =>
  s.filter((x) => x.name.startsWith('llmgw_rollout_') && x.labels['model'] === model).map((x) => `${x.name}${JSON.stringify(x.labels)}=${x.value}`).sort();

describe('llmgw_rollout_* from the snapshot', () => {
  it('a canary step: the phase, the step from 1, the share and both arms\' figures (p95s in seconds)', async () => {
    const m = createMetrics({ defaultMetrics: false });
    const s = await apply(m, model('chat', canaryRollout(T0, { step: 1, share: 0.5 })), model('code'));
    assert.equal(sampleValue(s, 'llmgw_rollout_phase', { model: 'chat', phase: 'canary' }), 1);
    assert.equal(sampleValue(s, 'llmgw_rollout_step', { model: 'chat' }), 2);
    assert.equal(sampleValue(s, 'llmgw_rollout_share', { model: 'chat' }), 0.5);
    const byArm = (name: string): Record<string, number> => Object.fromEntries(findSamples(s, name, { model: 'chat' }).map((x) => [x.labels['arm'], x.value]));
    assert.deepEqual(byArm('llmgw_rollout_requests'), { stable: 380, canary: 42 });
    assert.deepEqual(byArm('llmgw_rollout_errors'), { stable: 0, canary: 1 });
    assert.deepEqual(byArm('llmgw_rollout_error_ratio'), { stable: 0, canary: 1 / 42 });
    assert.deepEqual(byArm('llmgw_rollout_ttft_p95_seconds'), { stable: 0.338, canary: 0.401 });
    assert.deepEqual(byArm('llmgw_rollout_tpot_p95_seconds'), { stable: 0.041, canary: 0.044 });
    assert.deepEqual(rolloutSeries(s, 'code'), [], 'a model without a rollout has no rollout series');
  });

  it('an arm without a p95 has no p95 series (never a 0 that reads as instant); before the first judgement, no arm series', async () => {
    const m = createMetrics({ defaultMetrics: false });
    let s = await apply(m, model('chat', canaryRollout(T0, { figures: { stable: arm(12, 0, 300, null), canary: arm(0, 0, null, null), verdict: 'inconclusive' } })));
    assert.deepEqual(findSamples(s, 'llmgw_rollout_ttft_p95_seconds').map((x) => x.labels['arm']), ['stable']);
    assert.deepEqual(findSamples(s, 'llmgw_rollout_tpot_p95_seconds'), []);
    assert.equal(sampleValue(s, 'llmgw_rollout_requests', { model: 'chat', arm: 'canary' }), 0, '0 requests is a real figure');
    const { figures: _none, ...unjudged } = canaryRollout(T0);
    s = await apply(m, model('chat', unjudged));
    for (const name of ARM_METRICS) assert.deepEqual(findSamples(s, name), [], name);
    assert.equal(sampleValue(s, 'llmgw_rollout_step', { model: 'chat' }), 1);
  });

  const leaving: readonly { readonly to: string; readonly rollout: RolloutView | undefined; readonly phase: string | null }[] = [
    { to: 'rolled back', rollout: canaryRollout(T0, { phase: 'rolled_back', verdict: { code: 'ROLLOUT_ROLLED_BACK', message: 'canary rolled back at 10%: error rate 31% vs 0%' } }), phase: 'rolled_back' },
    { to: 'held', rollout: canaryRollout(T0, { phase: 'held', verdict: { code: 'ROLLOUT_HELD', message: '12 of 30 requests on the canary' } }), phase: 'held' },
    { to: 'promoted', rollout: canaryRollout(T0, { phase: 'promoted' }), phase: 'promoted' },
    { to: 'replaced by a new revision (checking again)', rollout: canaryRollout(T0, { phase: 'checking', figures: undefined }), phase: 'checking' },
    { to: 'ended', rollout: undefined, phase: null },
  ];
  for (const c of leaving) {
    it(`a canary ${c.to}: its step and arm series go, ${c.phase ? `the phase says ${c.phase}` : 'and its phase'}`, async () => {
      const m = createMetrics({ defaultMetrics: false });
      let s = await apply(m, model('chat', canaryRollout(T0)), model('code', canaryRollout(T0)));
      assert.equal(rolloutSeries(s, 'chat').length, 1 + STEP_METRICS.length + ARM_METRICS.length * 2);
      // the reconciler's view keeps the last figures on a rollout that left the canary phase: they are not shown
      s = await apply(m, model('chat', c.rollout), model('code', canaryRollout(T0)));
      assert.deepEqual(rolloutSeries(s, 'chat'), c.phase ? [`llmgw_rollout_phase{"model":"chat","phase":"${c.phase}"}=1`] : []);
      assert.equal(rolloutSeries(s, 'code').length, 1 + STEP_METRICS.length + ARM_METRICS.length * 2, 'the other model\'s canary stays');
    });
  }

  it('the next step replaces the figures, it does not add to them', async () => {
    const m = createMetrics({ defaultMetrics: false });
    await apply(m, model('chat', canaryRollout(T0)));
    const s = await apply(m, model('chat', canaryRollout(T0 + 120_000, { step: 1, share: 0.5, figures: { stable: arm(40, 0, 330, 40), canary: arm(35, 0, 350, 42), verdict: 'pass' } })));
    assert.deepEqual(findSamples(s, 'llmgw_rollout_requests').map((x) => [x.labels['arm'], x.value]).sort(), [['canary', 35], ['stable', 40]]);
    assert.deepEqual(findSamples(s, 'llmgw_rollout_step').map((x) => x.value), [2]);
    assert.deepEqual(findSamples(s, 'llmgw_rollout_share').map((x) => x.value), [0.5]);
  });
});
