/**
 * The canary's verdict (src/rollout/verdict.ts) and what it does to the rollout (outcome.ts), as
 * tables: sample sizes below, at and above the minimum; TTFT like with like (a cold canary's misses
 * against a warm stable arm's hits is no comparison, nor later turns' misses against first turns';
 * the same bucket 2.4× is a fail); ties and boundaries; a stable latency of 0 ms; the error-rate boundary; TPOT; the order of the checks.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { Reasons } from '../../src/errors/catalogue.js';
import { emptyCounts, withLatency } from '../../src/rollout/latency.js';
import { abortedReason, stepOutcome } from '../../src/rollout/outcome.js';
import type { ArmWindow, CanarySpec, CanaryWindow, LatencyCounts, StepVerdict, TtftBucket } from '../../src/rollout/types.js';
import { bucketMinimum, bucketWords, describeFigures, judgeStep, latencyRatio, percent, times } from '../../src/rollout/verdict.js';

const SPEC: CanarySpec = {
  steps: [0.1, 0.5],
  intervalMs: 120_000,
  minRequests: 30,
  maxErrorRateIncrease: 0.02,
  maxTtftRatio: 1.5,
  maxTpotRatio: 1.5,
  onInconclusive: 'hold',
};

/** Counts holding `n` values of `ms` each (and more groups after). */
function counts(...groups: [n: number, ms: number][]): LatencyCounts {
  let c: number[] = emptyCounts();
  for (const [n, ms] of groups) for (let i = 0; i < n; i++) c = withLatency(c, ms);
  return c;
}

interface ArmInput {
  requests: number;
  errors?: number;
  ttft?: Partial<Record<TtftBucket, [number, number][]>>;
  tpot?: [number, number][];
}
function arm(a: ArmInput): ArmWindow {
  const ttft: Partial<Record<TtftBucket, LatencyCounts>> = {};
  for (const [b, groups] of Object.entries(a.ttft ?? {})) ttft[b as TtftBucket] = counts(...groups);
  return { requests: a.requests, errors: a.errors ?? 0, ttft, tpot: counts(...(a.tpot ?? [])) };
}
const win = (stable: ArmInput, canary: ArmInput): CanaryWindow => ({ since: 1_000, stable: arm(stable), canary: arm(canary) });

/** A healthy arm of n requests: misses at 300 ms, 20 ms per token. */
const healthy = (n: number, extra: Partial<ArmInput> = {}): ArmInput => ({ requests: n, ttft: { 'p0:miss': [[n, 300]] }, tpot: [[n, 20]], ...extra });

function kindOf(v: StepVerdict): string {
  return v.kind === 'fail' ? `fail:${v.on}` : v.kind;
}

describe('judgeStep: sample sizes', () => {
  const cases: { name: string; stable: number; canary: number; kind: string }[] = [
    { name: 'no requests at all', stable: 0, canary: 0, kind: 'inconclusive' },
    { name: 'canary one below the minimum', stable: 380, canary: 29, kind: 'inconclusive' },
    { name: 'canary at the minimum', stable: 380, canary: 30, kind: 'pass' },
    { name: 'canary above the minimum', stable: 380, canary: 31, kind: 'pass' },
    { name: 'stable below the minimum (a 90% step)', stable: 12, canary: 300, kind: 'inconclusive' },
    { name: 'both at the minimum', stable: 30, canary: 30, kind: 'pass' },
  ];
  for (const c of cases) {
    test(`${c.name}: ${c.kind}`, () => {
      assert.equal(kindOf(judgeStep(SPEC, win(healthy(c.stable), healthy(c.canary)))), c.kind);
    });
  }

  test('the reason says how many of how many, on each arm; the figures are there', () => {
    const v = judgeStep(SPEC, win(healthy(380), healthy(12)));
    assert.equal(v.kind, 'inconclusive');
    assert.equal(v.reason.code, Reasons.ROLLOUT_INCONCLUSIVE.code);
    assert.equal(v.reason.message, '12 of 30 requests on the canary (stable: 380 of 30)');
    assert.equal(v.canary.requests, 12);
    assert.equal(v.stable.requests, 380);
  });

  test('below the minimum, even a canary failing every request is inconclusive, never judged on 12 requests', () => {
    const v = judgeStep(SPEC, win(healthy(380), { requests: 12, errors: 12 }));
    assert.equal(v.kind, 'inconclusive');
    assert.equal(v.canary.errorRate, 1);
  });
});

describe('judgeStep: error rate', () => {
  const cases: { name: string; stable: [number, number]; canary: [number, number]; kind: string }[] = [
    { name: 'equal rates', stable: [100, 3], canary: [100, 3], kind: 'pass' },
    { name: 'exactly 2 points more (5% vs 3%) at a 2% limit', stable: [100, 3], canary: [100, 5], kind: 'pass' },
    { name: '3 points more', stable: [100, 3], canary: [100, 6], kind: 'fail:error_rate' },
    { name: 'the canary better than stable', stable: [100, 10], canary: [100, 0], kind: 'pass' },
    { name: 'one error in 50 on the canary against none (2.0%)', stable: [400, 0], canary: [50, 1], kind: 'pass' },
    { name: 'two errors in 50 against none (4%)', stable: [400, 0], canary: [50, 2], kind: 'fail:error_rate' },
  ];
  for (const c of cases) {
    test(`${c.name}: ${c.kind}`, () => {
      const v = judgeStep(SPEC, win(healthy(c.stable[0], { errors: c.stable[1] }), healthy(c.canary[0], { errors: c.canary[1] })));
      assert.equal(kindOf(v), c.kind);
    });
  }

  test('the reason carries both arms\' rates and request counts', () => {
    const v = judgeStep(SPEC, win(healthy(380), healthy(42, { errors: 13 })));
    assert.equal(v.kind, 'fail');
    assert.equal(v.reason.code, Reasons.ROLLOUT_ROLLED_BACK.code);
    assert.equal(v.reason.message, 'error rate 31% vs 0% on the stable revision over 42 / 380 requests (at most 2% more)');
    assert.equal(v.canary.errors, 13);
    assert.equal(v.stable.errorRate, 0);
  });

  test('a zero limit: any increase fails, the same rate passes', () => {
    const spec = { ...SPEC, maxErrorRateIncrease: 0 };
    assert.equal(kindOf(judgeStep(spec, win(healthy(100, { errors: 1 }), healthy(100, { errors: 1 })))), 'pass');
    assert.equal(kindOf(judgeStep(spec, win(healthy(100, { errors: 1 }), healthy(100, { errors: 2 })))), 'fail:error_rate');
  });
});

describe('judgeStep: TTFT like with like', () => {
  test('a cold canary with only misses against a stable arm with only hits: not compared, no fail', () => {
    const v = judgeStep(SPEC, win({ requests: 380, ttft: { 'p0:hit': [[380, 40]] } }, { requests: 42, ttft: { 'p0:miss': [[42, 812]] } }));
    assert.equal(v.kind, 'pass');
    assert.equal(v.bucket, undefined);
    assert.equal(v.canary.ttftP95Ms, null);
    assert.equal(v.stable.ttftP95Ms, null);
    assert.match(describeFigures(SPEC, v), /TTFT not compared \(no prompt band and cache state with 20\+ samples on both arms\)/);
  });

  test('the same bucket 2.4× slower: fail on ttft, with both figures and the bucket in words', () => {
    const v = judgeStep(SPEC, win({ requests: 380, ttft: { 'p0:miss': [[380, 338]] } }, { requests: 42, ttft: { 'p0:miss': [[42, 812]] } }));
    assert.equal(v.kind, 'fail');
    assert.ok(v.kind === 'fail' && v.on === 'ttft');
    assert.equal(v.bucket, 'p0:miss');
    assert.equal(v.reason.code, Reasons.ROLLOUT_ROLLED_BACK.code);
    assert.match(v.reason.message, /^TTFT p95 2\.\d+× the stable revision's \(\d+ vs \d+ ms, prompts 0–511 tokens, cache miss; at most 1\.5×\)$/);
    // read from counts over bounds ~19% apart: within a bucket of the true values
    assert.ok(v.canary.ttftP95Ms! > 812 / 1.19 && v.canary.ttftP95Ms! < 812 * 1.19, String(v.canary.ttftP95Ms));
    assert.ok(v.stable.ttftP95Ms! > 338 / 1.19 && v.stable.ttftP95Ms! < 338 * 1.19, String(v.stable.ttftP95Ms));
  });

  test('the canary\'s misses compare with the stable arm\'s misses, not with its hits', () => {
    const stable = { requests: 380, ttft: { 'p0:hit': [[360, 40]], 'p0:miss': [[20, 700]] } } satisfies ArmInput;
    const v = judgeStep(SPEC, win(stable, { requests: 42, ttft: { 'p0:miss': [[42, 800]] } }));
    assert.equal(v.kind, 'pass');
    assert.equal(v.bucket, 'p0:miss');
    assert.ok(v.canary.ttftP95Ms! > v.stable.ttftP95Ms!);
  });

  test('a canary whose misses are conversations moved to it (later turns, whole histories) against a stable arm of first-turn misses: not compared, no fail', () => {
    // the step moved conversations under way to the canary: their next turns evaluate the whole history there (2,000 ms),
    // while the stable arm's follow-ups hit its cache and its misses are new conversations' first prompts (600 ms)
    const stable = { requests: 380, ttft: { 'p512:hit': [[300, 90]], 'p512:miss': [[80, 600]] } } satisfies ArmInput;
    const canary = { requests: 70, ttft: { 'p512:hit': [[25, 90]], 'p512:miss': [[20, 700]], 'p512:resumed': [[25, 2000]] } } satisfies ArmInput;
    const v = judgeStep(SPEC, win(stable, canary));
    assert.equal(v.kind, 'pass');
    assert.equal(v.bucket, 'p512:miss', 'first-turn misses compared with first-turn misses');
  });

  test('later turns\' misses compare with each other when both arms have enough of them (a stable arm whose cache evicts)', () => {
    const stable = { requests: 380, ttft: { 'p512:hit': [[300, 90]], 'p512:resumed': [[80, 1800]] } } satisfies ArmInput;
    const slow = { requests: 50, ttft: { 'p512:hit': [[30, 92]], 'p512:resumed': [[20, 4400]] } } satisfies ArmInput;
    const v = judgeStep(SPEC, win(stable, slow));
    assert.ok(v.kind === 'fail' && v.on === 'ttft');
    assert.equal(v.bucket, 'p512:resumed');
    assert.match(v.reason.message, /^TTFT p95 2\.\d+× the stable revision's \(\d+ vs \d+ ms, prompts 512–2047 tokens, cache miss of a later turn; at most 1\.5×\)$/);
    const alike = { requests: 50, ttft: { 'p512:hit': [[30, 92]], 'p512:resumed': [[20, 1900]] } } satisfies ArmInput;
    assert.equal(kindOf(judgeStep(SPEC, win(stable, alike))), 'pass');
    const fewOnStable = { requests: 380, ttft: { 'p512:hit': [[361, 90]], 'p512:resumed': [[19, 1800]] } } satisfies ArmInput;
    assert.equal(kindOf(judgeStep(SPEC, win(fewOnStable, slow))), 'pass', 'below the bucket minimum on the stable arm: not compared');
  });

  test('per-bucket minimum: a bucket with one sample fewer than max(20, minRequests/4) on an arm is not compared; at it, it is', () => {
    assert.equal(bucketMinimum(30), 20);
    assert.equal(bucketMinimum(10), 20);
    assert.equal(bucketMinimum(80), 20);
    assert.equal(bucketMinimum(100), 25);
    const canary = { requests: 42, ttft: { 'p0:miss': [[42, 812]] } } satisfies ArmInput;
    assert.equal(kindOf(judgeStep(SPEC, win({ requests: 380, ttft: { 'p0:hit': [[361, 40]], 'p0:miss': [[19, 338]] } }, canary))), 'pass');
    assert.equal(kindOf(judgeStep(SPEC, win({ requests: 380, ttft: { 'p0:hit': [[360, 40]], 'p0:miss': [[20, 338]] } }, canary))), 'fail:ttft');
    const fewCanary = { requests: 42, ttft: { 'p0:hit': [[23, 40]], 'p0:miss': [[19, 812]] } } satisfies ArmInput;
    assert.equal(kindOf(judgeStep(SPEC, win({ requests: 380, ttft: { 'p0:hit': [[300, 40]], 'p0:miss': [[80, 338]] } }, fewCanary))), 'pass');
  });

  test('the worst comparable bucket decides and is named', () => {
    const stable = { requests: 400, ttft: { 'p0:miss': [[200, 300]], 'p512:miss': [[200, 900]] } } satisfies ArmInput;
    const canary = { requests: 60, ttft: { 'p0:miss': [[30, 330]], 'p512:miss': [[30, 2700]] } } satisfies ArmInput;
    const v = judgeStep(SPEC, win(stable, canary));
    assert.ok(v.kind === 'fail' && v.on === 'ttft');
    assert.equal(v.bucket, 'p512:miss');
    assert.match(v.reason.message, /prompts 512–2047 tokens, cache miss/);
  });

  test('buckets in words', () => {
    assert.equal(bucketWords('p0:miss'), 'prompts 0–511 tokens, cache miss');
    assert.equal(bucketWords('p2k:hit'), 'prompts 2048–8191 tokens, cache hit');
    assert.equal(bucketWords('p8k:miss'), 'prompts 8192+ tokens, cache miss');
    assert.equal(bucketWords('p512:resumed'), 'prompts 512–2047 tokens, cache miss of a later turn');
  });
});

describe('judgeStep: ties, boundaries and a stable latency of 0 ms', () => {
  test('identical arms at limits of 1× and +0 points: pass (a figure at its threshold passes)', () => {
    const spec = { ...SPEC, maxErrorRateIncrease: 0, maxTtftRatio: 1, maxTpotRatio: 1 };
    const a = { requests: 50, errors: 2, ttft: { 'p0:miss': [[25, 300], [25, 500]] }, tpot: [[50, 20]] } satisfies ArmInput;
    const v = judgeStep(spec, win(a, a));
    assert.equal(v.kind, 'pass');
    assert.equal(v.canary.ttftP95Ms, v.stable.ttftP95Ms);
  });

  test('latencyRatio: exact ratios, and the 1 ms floor', () => {
    assert.equal(latencyRatio(15, 10), 1.5);
    assert.equal(latencyRatio(0, 0), 1);
    assert.equal(latencyRatio(0.4, 0.1), 1);
    assert.equal(latencyRatio(5, 0), 5);
    assert.equal(latencyRatio(0, 5), 0.2);
  });

  test('stable at 0 ms, canary sub-millisecond: 1×, pass', () => {
    const v = judgeStep(SPEC, win({ requests: 40, ttft: { 'p0:hit': [[40, 0]] }, tpot: [[40, 0]] }, { requests: 40, ttft: { 'p0:hit': [[40, 0.6]] }, tpot: [[40, 0.9]] }));
    assert.equal(v.kind, 'pass');
    assert.ok(v.stable.ttftP95Ms! <= 1);
  });

  test('stable at 0 ms, canary 5 ms: a finite ratio over the floor, fail', () => {
    const v = judgeStep(SPEC, win({ requests: 40, ttft: { 'p0:hit': [[40, 0]] } }, { requests: 40, ttft: { 'p0:hit': [[40, 5]] } }));
    assert.ok(v.kind === 'fail' && v.on === 'ttft');
    assert.doesNotMatch(v.reason.message, /Infinity|NaN/);
    assert.match(v.reason.message, /TTFT p95 [45](\.\d+)?× .*cache hit/);
  });
});

describe('judgeStep: TPOT and the order of the checks', () => {
  test('TPOT 2.5× slower: fail on tpot with both figures', () => {
    const v = judgeStep(SPEC, win(healthy(200), healthy(40, { tpot: [[40, 50]] })));
    assert.ok(v.kind === 'fail' && v.on === 'tpot');
    assert.match(v.reason.message, /^time per output token p95 2\.\d+× the stable revision's \(\d+ vs \d+ ms; at most 1\.5×\)$/);
    assert.ok(v.canary.tpotP95Ms! > v.stable.tpotP95Ms! * 2);
  });

  test('TPOT within its limit passes; too few samples of 2+ tokens are not compared', () => {
    assert.equal(kindOf(judgeStep(SPEC, win(healthy(200), healthy(40, { tpot: [[40, 22]] })))), 'pass');
    const v = judgeStep(SPEC, win(healthy(200), healthy(40, { tpot: [[19, 90]] })));
    assert.equal(v.kind, 'pass');
    assert.equal(v.canary.tpotP95Ms, null);
    assert.match(describeFigures(SPEC, v), /TPOT not compared \(fewer than 20 requests of 2\+ tokens on an arm\)/);
  });

  test('errors before TTFT before TPOT', () => {
    const allBad = healthy(40, { errors: 20, ttft: { 'p0:miss': [[40, 3000]] }, tpot: [[40, 200]] });
    assert.equal(kindOf(judgeStep(SPEC, win(healthy(200), allBad))), 'fail:error_rate');
    assert.equal(kindOf(judgeStep(SPEC, win(healthy(200), { ...allBad, errors: 0 }))), 'fail:ttft');
    assert.equal(kindOf(judgeStep(SPEC, win(healthy(200), { ...allBad, errors: 0, ttft: { 'p0:miss': [[40, 300]] } }))), 'fail:tpot');
  });

  test('a pass carries both arms\' figures and the bucket compared; describeFigures reads them', () => {
    const v = judgeStep(SPEC, win(healthy(380), healthy(42)));
    assert.equal(v.kind, 'pass');
    assert.equal(v.bucket, 'p0:miss');
    assert.deepEqual(Object.keys(v.canary).sort(), ['errorRate', 'errors', 'requests', 'tpotP95Ms', 'ttftP95Ms']);
    assert.match(describeFigures(SPEC, v), /^error rate 0% vs 0% over 42 \/ 380 requests; TTFT p95 1× \(\d+ vs \d+ ms, prompts 0–511 tokens, cache miss\); TPOT p95 1× \(\d+(\.\d)? vs \d+(\.\d)? ms\)$/);
  });

  test('number words', () => {
    assert.deepEqual([0, 0.02, 0.025, 0.3095, 1].map(percent), ['0%', '2%', '2.5%', '31%', '100%']);
    assert.deepEqual([2.4, 1.5234, 1].map((r) => times(r)), ['2.4×', '1.52×', '1×']);
    assert.equal(times(1.5031, 1.5), '1.503×');
    assert.equal(times(1.50004, 1.5), '1.50004×');
  });
});

describe('stepOutcome: what a verdict does to the rollout', () => {
  const pass = judgeStep(SPEC, win(healthy(380), healthy(42)));
  const fail = judgeStep(SPEC, win(healthy(380), healthy(42, { errors: 13 })));
  const inconclusive = judgeStep(SPEC, win(healthy(380), healthy(12)));

  test('a fail rolls back at once, with the step\'s share and the verdict\'s figures', () => {
    for (const over of [false, true]) {
      const o = stepOutcome(SPEC, 0, fail, over);
      assert.equal(o.kind, 'rollback');
      assert.ok(o.kind === 'rollback');
      assert.equal(o.reason.code, Reasons.ROLLOUT_ROLLED_BACK.code);
      assert.equal(o.reason.message, 'canary rolled back at 10%: error rate 31% vs 0% on the stable revision over 42 / 380 requests (at most 2% more)');
    }
  });

  test('before the interval is over, a pass or an inconclusive step waits', () => {
    assert.deepEqual(stepOutcome(SPEC, 0, pass, false), { kind: 'wait' });
    assert.deepEqual(stepOutcome(SPEC, 0, inconclusive, false), { kind: 'wait' });
  });

  test('at its end a pass moves to the next step, and after the last promotes', () => {
    assert.deepEqual(stepOutcome(SPEC, 0, pass, true), { kind: 'next', step: 1 });
    assert.deepEqual(stepOutcome(SPEC, 1, pass, true), { kind: 'promote' });
  });

  test('at its end an inconclusive step holds or rolls back as on_inconclusive says', () => {
    assert.deepEqual(stepOutcome(SPEC, 0, inconclusive, true), {
      kind: 'hold',
      reason: { code: 'ROLLOUT_HELD', message: 'held at 10%: 12 of 30 requests on the canary (stable: 380 of 30)' },
    });
    const o = stepOutcome({ ...SPEC, onInconclusive: 'rollback' }, 1, inconclusive, true);
    assert.ok(o.kind === 'rollback');
    assert.equal(o.reason.message, 'canary rolled back at 50% (on_inconclusive: rollback): 12 of 30 requests on the canary (stable: 380 of 30)');
  });

  test('an operator\'s abort', () => {
    assert.deepEqual(abortedReason(0.1), { code: 'ROLLOUT_ABORTED', message: 'rollout aborted at 10% by an operator; the stable revision serves' });
    assert.equal(abortedReason(null, 'ctl (admin token)').message, 'rollout aborted during the checks by ctl (admin token); the stable revision serves');
  });
});
