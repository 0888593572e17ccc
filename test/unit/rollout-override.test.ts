/**
 * An operator's override of a rollout's verdict (rollout-life.ts rolloutOverridden, pure), as a table:
 * `llmgw ctl rollout promote|abort MODEL` from every phase — what it becomes, the outcome the admin
 * API answers, the verdict's code and words (at the step's share, by whom), and that the record given
 * is never changed.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { ROLLOUT_EDGES, rolloutOverridden, type OverrideOutcome, type RolloutPhase, type RolloutRecord } from '../../src/reconciler/rollout-life.js';
import type { CanarySpec } from '../../src/rollout/types.js';

const NOW = 1_000_000;
const CANARY: CanarySpec = { steps: [0.1, 0.5], intervalMs: 120_000, minRequests: 30, maxErrorRateIncrease: 0.02, maxTtftRatio: 1.5, maxTpotRatio: 1.5, onInconclusive: 'hold' };
const rev = { digest: 'new', stable: 'old' } as const;
const HELD_VERDICT = { code: 'ROLLOUT_HELD', message: 'held at 50%: 12 of 30 requests on the canary' };

const checking: RolloutRecord = { ...rev, phase: 'checking', since: 10 };
const canary0: RolloutRecord = { ...rev, phase: 'canary', since: 20, step: 0 };
const canary1: RolloutRecord = { ...rev, phase: 'canary', since: 30, step: 1 };
const heldChecks: RolloutRecord = { ...rev, phase: 'held', since: 40, verdict: { code: 'ROLLOUT_CHECK_FAILED', message: 'check answers-arithmetic failed' } };
const heldStep: RolloutRecord = { ...rev, phase: 'held', since: 50, step: 1, verdict: HELD_VERDICT };
const rolledBack: RolloutRecord = { ...rev, phase: 'rolled_back', since: 60, step: 0, verdict: { code: 'ROLLOUT_ROLLED_BACK', message: 'canary rolled back at 10%: …' } };
const promoted: RolloutRecord = { ...rev, phase: 'promoted', since: 70 };

interface Case {
  readonly name: string;
  readonly r: RolloutRecord | undefined;
  readonly how: 'promote' | 'abort';
  readonly canary?: CanarySpec | null;
  readonly by?: string;
  readonly outcome: OverrideOutcome;
  /** 'same': the record given, unchanged (the very object); else what it becomes. */
  readonly becomes: 'same' | RolloutRecord | undefined;
}

const aborted = (message: string, step?: number): RolloutRecord => ({ ...rev, phase: 'rolled_back', since: NOW, ...(step !== undefined ? { step } : {}), verdict: { code: 'ROLLOUT_ABORTED', message } });
const promotedNow: RolloutRecord = { ...rev, phase: 'promoted', since: NOW };

const CASES: readonly Case[] = [
  // no rollout: nothing to do, whatever was asked
  { name: 'promote, no rollout', r: undefined, how: 'promote', outcome: 'no-rollout', becomes: undefined },
  { name: 'abort, no rollout', r: undefined, how: 'abort', outcome: 'no-rollout', becomes: undefined },
  // promote: from any phase but promoted, the checks or the rest of the canary skipped; the verdict and step go
  { name: 'promote during the checks', r: checking, how: 'promote', outcome: 'promoted', becomes: promotedNow },
  { name: 'promote at the first step', r: canary0, how: 'promote', outcome: 'promoted', becomes: promotedNow },
  { name: 'promote at the last step', r: canary1, how: 'promote', outcome: 'promoted', becomes: promotedNow },
  { name: 'promote a revision held by a failed check', r: heldChecks, how: 'promote', outcome: 'promoted', becomes: promotedNow },
  { name: 'promote a step held as inconclusive', r: heldStep, how: 'promote', outcome: 'promoted', becomes: promotedNow },
  { name: 'promote a rolled-back revision', r: rolledBack, how: 'promote', outcome: 'promoted', becomes: promotedNow },
  { name: 'promote a promoted one: already', r: promoted, how: 'promote', outcome: 'already', becomes: 'same' },
  // abort: rolled back with ROLLOUT_ABORTED, at the step's share while a canary runs
  { name: 'abort during the checks', r: checking, how: 'abort', by: 'llmgw ctl (ops@host)', outcome: 'aborted', becomes: aborted('rollout aborted during the checks by llmgw ctl (ops@host); the stable revision serves') },
  { name: 'abort at the first step (10%)', r: canary0, how: 'abort', by: 'the admin API', outcome: 'aborted', becomes: aborted('rollout aborted at 10% by the admin API; the stable revision serves', 0) },
  { name: 'abort at the last step (50%), by no one named', r: canary1, how: 'abort', outcome: 'aborted', becomes: aborted('rollout aborted at 50% by an operator; the stable revision serves', 1) },
  { name: 'abort a revision held by a failed check', r: heldChecks, how: 'abort', by: 'ops', outcome: 'aborted', becomes: aborted('rollout aborted during the checks by ops; the stable revision serves') },
  { name: 'abort a rolled-back one: already', r: rolledBack, how: 'abort', outcome: 'already', becomes: 'same' },
  { name: 'abort a promoted one: already (its stable replicas may be gone)', r: promoted, how: 'abort', outcome: 'already', becomes: 'same' },
];

const freeze = (r: RolloutRecord | undefined): RolloutRecord | undefined => (r ? Object.freeze({ ...r, ...(r.verdict ? { verdict: Object.freeze({ ...r.verdict }) } : {}) }) : r);

describe('rolloutOverridden: ctl rollout promote|abort from every phase', () => {
  for (const c of CASES) {
    test(c.name, () => {
      const given = freeze(c.r);
      const o = rolloutOverridden(given, c.how, NOW, c.canary === undefined ? CANARY : c.canary, c.by);
      assert.equal(o.outcome, c.outcome);
      if (c.becomes === 'same') assert.equal(o.rollout, given);
      else assert.deepEqual(o.rollout, c.becomes);
      // every change is an edge of the rollout's graph
      const from: RolloutPhase | 'none' = given?.phase ?? 'none';
      const to: RolloutPhase | 'none' = o.rollout?.phase ?? 'none';
      if (from !== to) assert.ok(ROLLOUT_EDGES[from].includes(to), `${from} → ${to} is not an edge`);
    });
  }

  test('a step held as inconclusive, aborted: rolled back with ROLLOUT_ABORTED, its step kept, by whom it says', () => {
    const o = rolloutOverridden(heldStep, 'abort', NOW, CANARY, 'ops');
    assert.equal(o.outcome, 'aborted');
    assert.equal(o.rollout?.phase, 'rolled_back');
    assert.equal(o.rollout?.step, 1);
    assert.equal(o.rollout?.since, NOW);
    assert.equal(o.rollout?.verdict?.code, 'ROLLOUT_ABORTED');
    // at the share of the step it was held at (step 1: 50%), not "during the checks"
    assert.equal(o.rollout!.verdict!.message, 'rollout aborted at 50% by ops; the stable revision serves');
  });

  test('the share is the canary spec\'s for the step', () => {
    assert.match(rolloutOverridden(canary0, 'abort', NOW, { ...CANARY, steps: [0.25, 1] }, 'x').rollout!.verdict!.message, /^rollout aborted at 25% by x/);
  });
});
