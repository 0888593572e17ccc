/**
 * A rollout as `llmgw ctl` prints it (pure, src/format/rollout-format.ts): the canary's step in a few
 * words, the time left, both arms side by side, `ctl rollout MODEL` in every phase (golden), what an
 * override prints, and the ROLLOUTS section of `ctl status`.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { rolloutText } from '../../src/format/ctl-format.js';
import { armsTable, renderOverride, renderRollout, stepText, timeLeft } from '../../src/format/rollout-format.js';
import type { RolloutJson, RolloutOneJson } from '../../src/wire/shape.js';
import { assertGolden } from '../harness/golden.js';

const AT = '2025-03-01T12:00:00.000Z';
const t = (s: number): string => new Date(Date.parse(AT) + s * 1000).toISOString();
const NEW = '5d41402abc4b2a76b9719d911017c592ae8f1c0d6a2f4e1b7c3d9e0f1a2b3c4d';
const OLD = '7d793037a0760186574b0282f2f435e7a1b2c3d4e5f60718293a4b5c6d7e8f90';

const canary: RolloutJson = {
  stableGone: false,
  phase: 'canary',
  digest: NEW,
  stableDigest: OLD,
  since: t(-40),
  step: 0,
  steps: [0.1, 0.5],
  share: 0.1,
  until: t(80),
  verdict: null,
  arms: {
    stable: { requests: 380, errors: 0, errorRate: 0, ttftP95Ms: 338.2, tpotP95Ms: 21.4 },
    canary: { requests: 42, errors: 13, errorRate: 13 / 42, ttftP95Ms: 812, tpotP95Ms: null },
    verdict: 'fail',
  },
};
const held: RolloutJson = {
  ...canary,
  phase: 'held',
  since: t(-300),
  step: null,
  share: null,
  until: null,
  arms: null,
  verdict: { code: 'ROLLOUT_HELD', message: 'held at 10%: 12 of 30 requests on the canary', hint: 'until an operator decides: `llmgw ctl rollout promote chat` …' },
};
const rolledBack: RolloutJson = { ...held, phase: 'rolled_back', verdict: { code: 'ROLLOUT_ROLLED_BACK', message: 'canary rolled back at 10%: error rate 31% vs 0% on the stable revision over 42 / 380 requests', hint: 'the old revision serves' } };
const one = (rollout: RolloutJson | null, model = 'chat'): RolloutOneJson => ({ at: AT, model, digest: NEW, rollout });

describe('the canary step in words', () => {
  test('stepText: share, step k of n, time left; nothing outside the canary', () => {
    assert.equal(stepText(canary, AT), 'canary 10% (step 1/2), 1m20s left');
    assert.equal(stepText({ ...canary, step: 1, share: 0.5, until: t(5) }, AT), 'canary 50% (step 2/2), 5s left');
    assert.equal(stepText({ ...canary, steps: null }, AT), 'canary 10% (step 1), 1m20s left');
    assert.equal(stepText({ ...canary, until: t(0) }, AT), 'canary 10% (step 1/2), interval over, judged at the next pass');
    assert.equal(stepText(held, AT), null);
  });

  test('timeLeft: none without an end', () => {
    assert.equal(timeLeft(null, AT), null);
    assert.equal(timeLeft(t(3 * 3600 + 60), AT), '3h1m left');
    assert.equal(timeLeft(t(-30), AT), 'interval over, judged at the next pass');
  });

  test('armsTable: both arms in aligned columns; a rate of no requests is "-", a figure not measured is "-"', () => {
    assert.equal(
      armsTable(canary.arms!.stable, canary.arms!.canary),
      ['            STABLE  CANARY', 'requests    380     42', 'errors      0       13', 'error rate  0%      31%', 'TTFT p95    338 ms  812 ms', 'TPOT p95    21 ms   -'].join('\n'),
    );
    const none = { requests: 0, errors: 0, errorRate: 0, ttftP95Ms: null, tpotP95Ms: null };
    assert.match(armsTable(none, none), /^error rate {2}- {7}-$/m);
  });
});

describe('ctl rollout MODEL', () => {
  test('every phase (golden)', () => {
    const pages = [
      renderRollout(one(canary)),
      renderRollout(one({ ...canary, arms: null })),
      renderRollout(one({ ...canary, phase: 'checking', step: null, share: null, until: null, arms: null })),
      renderRollout(one(held)),
      renderRollout(one(rolledBack)),
      renderRollout(one({ ...canary, phase: 'promoted', since: t(-30), step: null, share: null, until: null, arms: null })),
      renderRollout(one(null, 'plain')),
    ];
    assertGolden('ctl-rollout.txt', pages.join('\n\n-----\n\n'));
  });

  test('a canary: the step, both arms, the verdict so far, and the two decisions', () => {
    const text = renderRollout(one(canary));
    assert.match(text, /^phase\s+canary 10% \(step 1\/2\), 1m20s left \(since 40s ago\)/m);
    assert.match(text, /^steps\s+10% → 50%$/m);
    assert.match(text, /^error rate {2}0% {6}31%$/m);
    assert.match(text, /^so far\s+FAIL/m);
    assert.match(text, /^decide\s+llmgw ctl rollout promote chat {2}\| {2}llmgw ctl rollout abort chat$/m);
  });

  test('held and rolled back: the verdict with its hint; a retry runs it again', () => {
    const h = renderRollout(one(held));
    assert.match(h, /^verdict\s+held at 10%: 12 of 30 requests on the canary \[ROLLOUT_HELD\]$/m);
    assert.match(h, /^hint\s+until an operator decides/m);
    assert.match(h, /llmgw ctl rollout abort chat {2}\| {2}llmgw ctl retry chat$/m);
    const r = renderRollout(one(rolledBack));
    assert.match(r, /^phase\s+ROLLED BACK 5m ago/m);
    assert.doesNotMatch(r, /rollout abort/);
  });

  test('an override prints what it did and the verdict after', () => {
    const out = renderOverride({ model: 'chat', outcome: 'aborted', rollout: { ...rolledBack, verdict: { code: 'ROLLOUT_ABORTED', message: 'rollout aborted at 10% by ops; the stable revision serves', hint: 'h' } }, message: 'chat: rollout of revision 5d41402abc4b aborted' });
    assert.equal(out, 'chat: rollout of revision 5d41402abc4b aborted\nverdict: rollout aborted at 10% by ops; the stable revision serves [ROLLOUT_ABORTED]');
  });

  test('a verdict\'s text is made printable whatever the server sent', () => {
    const text = renderRollout(one({ ...held, verdict: { code: 'ROLLOUT_HELD', message: 'held\u001b[2J at 10%', hint: 'h\u0007' } }));
    assert.doesNotMatch(text, /[\u0000-\u0008\u000b-\u001f\u007f]/);
  });
});

describe('ctl status and ctl models: a rollout in a line', () => {
  test('a canary shows its share, step and time left; rolled back and held say so', () => {
    assert.equal(rolloutText(canary, AT), 'rollout: revision 5d41402abc4b canary 10% (step 1/2), 1m20s left; 7d793037a076 serves the rest');
    assert.match(rolloutText(rolledBack, AT), /^rollout ROLLED BACK 5m ago: canary rolled back at 10%: error rate 31% vs 0% .* \[ROLLOUT_ROLLED_BACK\]; 7d793037a076 serves$/);
    assert.match(rolloutText(held, AT), /^rollout HELD 5m ago: held at 10%/);
  });
});
