/**
 * The canary bench's simulation (bench/rollout-sim.ts) on a tiny configuration, pure: a 31% error
 * regression is rolled back within the step, on its error rate; a revision that answers as the stable
 * one does is promoted at the step's end; and the same configuration gives the same figures twice.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { BASELINE, simulateCanary, type SimConfig } from '../../bench/rollout-sim.js';
import type { CanarySpec } from '../../src/rollout/types.js';

const CANARY: CanarySpec = { steps: [0.5], intervalMs: 60_000, minRequests: 10, maxErrorRateIncrease: 0.02, maxTtftRatio: 1.5, maxTpotRatio: 1.5, onInconclusive: 'hold' };
/** Single requests (no follow-ups, no traffic before the step): a minute at 5 requests/s, about 150 per arm. */
const tiny = (seed: number, candidate: SimConfig['candidate']): SimConfig => ({ seed, canary: CANARY, ratePerS: 5, stable: BASELINE, candidate, warmupMs: 0, newConversationShare: 1 });

describe('the rollout bench simulation (tiny configuration)', () => {
  for (const seed of [1, 2, 3]) {
    test(`seed ${seed}: a 31% error regression is rolled back before the step's end, on its error rate`, () => {
      const r = simulateCanary(tiny(seed, { ...BASELINE, errorRate: 0.31 }));
      assert.equal(r.outcome, 'rolled_back', JSON.stringify(r));
      assert.ok(r.concludedAtMs !== null && r.concludedAtMs < CANARY.intervalMs, `rolled back at ${r.concludedAtMs} ms`);
      assert.match(r.reason ?? '', /^canary rolled back at 50%: error rate \d+% vs 0% on the stable revision over \d+ \/ \d+ requests/);
      assert.ok(r.candidateRequests >= CANARY.minRequests, `${r.candidateRequests} requests reached the canary`);
      assert.ok(r.candidateFailed > 0 && r.candidateFailed < r.candidateRequests, `${r.candidateFailed} of ${r.candidateRequests} failed`);
      assert.equal(r.stableFailed, 0);
    });

    test(`seed ${seed}: a good revision is promoted at the step's end`, () => {
      const r = simulateCanary(tiny(seed, BASELINE));
      assert.equal(r.outcome, 'promoted', JSON.stringify(r));
      assert.equal(r.concludedAtMs, CANARY.intervalMs);
      assert.equal(r.reason, null);
      assert.equal(r.candidateFailed, 0);
      assert.ok(r.candidateRequests > r.requests / 4 && r.candidateRequests < (r.requests * 3) / 4, `${r.candidateRequests} of ${r.requests} at a 50% step`);
      assert.equal(r.passes, 4, 'judged at each quarter of the interval (canaryDue)');
    });
  }

  test('poll passes come on top of the quarter wakes; a time both give is one pass', () => {
    const r = simulateCanary({ ...tiny(1, BASELINE), pollMs: 10_000 });
    assert.equal(r.outcome, 'promoted', JSON.stringify(r));
    assert.equal(r.concludedAtMs, CANARY.intervalMs);
    // quarters at 15, 30, 45, 60 s; polls at 10, 20, 30, 40, 50, 60 s
    assert.equal(r.passes, 8);
  });

  test('the same configuration gives the same figures', () => {
    const cfg = { ...tiny(7, { ...BASELINE, tpotFactor: 2 }), countArrivalsUntilMs: 120_000 };
    const a = simulateCanary(cfg);
    assert.deepEqual(simulateCanary(cfg), a);
    assert.ok(a.arrivalsUntil > 0);
  });
});
