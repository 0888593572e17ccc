/**
 * A model's rollout on the status page, the pure part (src/ui/rollout-view.ts and the view's
 * wiring in view.ts): numbers in words (shares, error rates, latencies), the step from the spec's
 * canary, each phase's summary, both arms side by side in a canary step, and the verdict with its
 * hint only when the revision is held or rolled back. The page in Chromium is
 * test/integration/ui-rollout-browser.test.ts.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { ModelView } from '../../src/reconciler/view.js';
import type { RolloutView } from '../../src/rollout/types.js';
import { judgedOnText, latency, pageRollout, percent, stepText } from '../../src/ui/rollout-view.js';
import { viewBase, viewOfPage, type PageModel } from '../../src/ui/view.js';
import { modelJson } from '../../src/wire/shape.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { arm, CANARY, CANARY_DIGEST, canaryRollout, STABLE_DIGEST, withCanary } from '../harness/rollout-views.js';
import { modelView, replicaView, snapshot } from '../harness/views.js';

const T0 = Date.parse('2025-05-01T12:00:00.000Z');
const SPEC = fakeSpec({ models: { chat: {}, code: {} } });
const chatSpec = withCanary(SPEC.models.chat!);
const wire = (r: RolloutView, name = 'chat') => modelJson(modelView(chatSpec, { name, rollout: r }), 'rev1', T0).rollout!;

describe('numbers in words', () => {
  const table = <T>(f: (x: T) => string, cases: readonly (readonly [T, string])[]): void => {
    for (const [x, want] of cases) assert.equal(f(x), want, `${String(x)}`);
  };
  it('shares and error rates: whole percents bare, one decimal otherwise, a small non-zero never 0%', () => {
    table(percent, [[0, '0%'], [0.1, '10%'], [0.5, '50%'], [1, '100%'], [0.125, '12.5%'], [1 / 42, '2.4%'], [0.31, '31%'], [0.0004, '<0.1%'], [0.001, '0.1%'], [0.9996, '100%'], [Number.NaN, '-']]);
  });
  it('latencies: ms below a second (one decimal below 10 ms), seconds above; none is "-"', () => {
    table(latency, [[null, '-'], [338, '338 ms'], [337.6, '338 ms'], [4.25, '4.3 ms'], [0, '0 ms'], [999.4, '999 ms'], [1000, '1.0 s'], [2412, '2.4 s'], [12_345, '12 s'], [Number.POSITIVE_INFINITY, '-']]);
  });
  it('the step counts from 1 and says of how many when the spec does', () => {
    assert.equal(stepText(0, 0.1, 2), 'step 1 of 2, 10%');
    assert.equal(stepText(1, 0.5, 2), 'step 2 of 2, 50%');
    assert.equal(stepText(2, 0.25, null), 'step 3, 25%');
  });
  it('what a step is judged on', () => {
    assert.equal(judgedOnText(CANARY), "at least 30 requests an arm; the canary's error rate at most 2 points above the stable one's, its TTFT p95 at most 1.5× and its TPOT p95 at most 1.5× the stable one's");
    assert.match(judgedOnText({ ...CANARY, minRequests: 1200, maxErrorRateIncrease: 0.01 }), /^at least 1,200 requests an arm; the canary's error rate at most 1 point above/);
  });
});

describe('a rollout on the card, phase by phase', () => {
  it('a canary step: the step, its end, both arms side by side and the verdict so far', () => {
    const p = pageRollout(wire(canaryRollout(T0)), CANARY);
    assert.deepEqual(p, {
      phase: 'canary',
      label: 'canary',
      summary: 'revision bbbbbbbbbbbb takes 10% of the requests (step 1 of 2); aaaaaaaaaaaa serves the rest',
      since: '2025-05-01T12:00:00.000Z',
      step: 'step 1 of 2, 10%',
      until: '2025-05-01T12:02:00.000Z',
      judgedOn: judgedOnText(CANARY),
      arms: {
        stable: { requests: '380', errors: '0', errorRate: '0%', ttftP95: '338 ms', tpotP95: '41 ms', revision: 'aaaaaaaaaaaa' },
        canary: { requests: '42', errors: '1', errorRate: '2.4%', ttftP95: '401 ms', tpotP95: '44 ms', revision: 'bbbbbbbbbbbb' },
        verdict: 'pass',
        verdictText: 'passes so far',
      },
      verdict: null,
    });
  });

  it('an inconclusive step so far: its reason, without the fix (nothing to fix yet); no figures before the first judgement', () => {
    const inconclusive = canaryRollout(T0, { verdict: { code: 'ROLLOUT_INCONCLUSIVE', message: '12 of 30 requests on the canary' }, figures: { stable: arm(110, 0, 300, 40), canary: arm(12, 0, null, null), verdict: 'inconclusive' } });
    const p = pageRollout(wire(inconclusive), CANARY);
    assert.deepEqual(p.verdict, { code: 'ROLLOUT_INCONCLUSIVE', message: '12 of 30 requests on the canary', hint: null });
    assert.equal(p.arms?.verdictText, 'too few requests to judge so far');
    assert.deepEqual([p.arms?.canary.ttftP95, p.arms?.canary.tpotP95], ['-', '-']);
    const { figures: _f, ...unjudged } = canaryRollout(T0);
    assert.equal(pageRollout(wire(unjudged), CANARY).arms, null);
  });

  const finals = [
    { phase: 'rolled_back', code: 'ROLLOUT_ROLLED_BACK', message: 'canary rolled back at 10%: error rate 31% vs 0% on the stable revision over 42 / 380 requests', label: 'rolled back', summary: 'revision bbbbbbbbbbbb was rolled back; aaaaaaaaaaaa serves' },
    { phase: 'held', code: 'ROLLOUT_CHECK_FAILED', message: 'check answers-arithmetic: expected status 200 and text matching /4/, got "five"', label: 'held', summary: 'revision bbbbbbbbbbbb is held back; aaaaaaaaaaaa serves' },
  ] as const;
  for (const f of finals) {
    it(`${f.label}: the verdict with its hint (the model's name in the command), no step, no arms`, () => {
      const p = pageRollout(wire(canaryRollout(T0, { phase: f.phase, verdict: { code: f.code, message: f.message } })), CANARY);
      assert.equal(p.label, f.label);
      assert.equal(p.summary, f.summary);
      assert.deepEqual([p.step, p.until, p.arms, p.judgedOn], [null, null, null, null]);
      assert.equal(p.verdict?.message, f.message);
      assert.equal(p.verdict?.code, f.code);
      assert.match(p.verdict?.hint ?? '', /llmgw ctl retry chat/);
    });
  }

  it('checking and promoted: what happens, in a line', () => {
    assert.equal(pageRollout(wire(canaryRollout(T0, { phase: 'checking', figures: undefined })), CANARY).summary, 'revision bbbbbbbbbbbb runs its checks and takes no request; aaaaaaaaaaaa serves meanwhile');
    assert.equal(pageRollout(wire(canaryRollout(T0, { phase: 'promoted' })), CANARY).summary, 'revision bbbbbbbbbbbb proved itself and replaces aaaaaaaaaaaa');
  });
});

describe('the view: the card carries the rollout, the step count from the spec of the revision under test', () => {
  const card = (models: ModelView[], name: string): PageModel => viewOfPage(viewBase(snapshot({ at: T0, models }), SPEC), { page: 0, size: 10, phase: null, node: null, q: null }).groups.flatMap((g) => g.models).find((m) => m.name === name)!;

  it('a canary of the spec in force: "of 2"; a model without a rollout: null', () => {
    const c = card([modelView(chatSpec, { rollout: canaryRollout(T0) }), modelView(SPEC.models.code!)], 'chat');
    assert.equal(c.rollout?.step, 'step 1 of 2, 10%');
    assert.equal(card([modelView(SPEC.models.code!)], 'code').rollout, null);
  });

  it('the spec in force is another revision (a push back while the view was built): the step without a count', () => {
    const other = { ...chatSpec, digest: 'c'.repeat(64) };
    assert.equal(card([modelView(other, { rollout: canaryRollout(T0) })], 'chat').rollout?.step, 'step 1, 10%');
  });

  it('each replica says which revision it runs: the arm in a canary step, the new revision when held or rolled back, outdated once promoted', () => {
    const replicas = [replicaView('chat-r1', 'chat', { digest: STABLE_DIGEST }), replicaView('chat-r2', 'chat', { digest: CANARY_DIGEST, phase: 'draining' }), replicaView('chat-r3', 'chat', { digest: 'e'.repeat(64) })];
    const phases = (r: RolloutView): string[] => card([modelView(chatSpec, { rollout: r, replicas })], 'chat').replicas.map((x) => x.phase);
    assert.deepEqual(phases(canaryRollout(T0)), ['ready (stable)', 'draining (canary)', 'ready (outdated)']);
    assert.deepEqual(phases(canaryRollout(T0, { phase: 'rolled_back' })), ['ready (stable)', 'draining (new revision)', 'ready (outdated)']);
    assert.deepEqual(phases(canaryRollout(T0, { phase: 'promoted' })), ['ready (outdated)', 'draining', 'ready (outdated)']);
  });
});
