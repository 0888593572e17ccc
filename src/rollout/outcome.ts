/**
 * What a canary step's verdict does to the rollout, and the reason every surface shows for it. Pure:
 * the controller keeps the phase; this says where it goes.
 *
 * - a **fail** rolls back at once, whether or not the interval is over (more requests cannot undo a
 *   comparison that already failed on enough of them): ROLLOUT_ROLLED_BACK, "canary rolled back at
 *   10%: error rate 31% vs 0% on the stable revision over 42 / 380 requests (…)";
 * - before the interval is over, anything else waits (a pass is only earned over the whole window);
 * - at the interval's end a **pass** moves to the next step, or promotes after the last;
 * - at the interval's end an **inconclusive** step holds (ROLLOUT_HELD, "held at 10%: 12 of 30
 *   requests on the canary (…)") or rolls back (ROLLOUT_ROLLED_BACK), as `on_inconclusive` says.
 */
import { Reasons, type ReasonRef } from '../errors/catalogue.js';
import type { CanarySpec, StepVerdict } from './types.js';
import { percent } from './verdict.js';

export type StepOutcome =
  | { readonly kind: 'wait' }
  | { readonly kind: 'next'; readonly step: number }
  | { readonly kind: 'promote' }
  | { readonly kind: 'rollback'; readonly reason: ReasonRef }
  | { readonly kind: 'hold'; readonly reason: ReasonRef };

/** "10%": a step's share of the model's requests. */
export const shareWords = (share: number): string => percent(share);

/** Where the rollout goes after `verdict` on step `step` (an index into spec.steps). */
export function stepOutcome(spec: CanarySpec, step: number, verdict: StepVerdict, intervalOver: boolean): StepOutcome {
  const at = shareWords(spec.steps[step] ?? 1);
  if (verdict.kind === 'fail') return { kind: 'rollback', reason: { code: Reasons.ROLLOUT_ROLLED_BACK.code, message: `canary rolled back at ${at}: ${verdict.reason.message}` } };
  if (!intervalOver) return { kind: 'wait' };
  if (verdict.kind === 'pass') return step + 1 < spec.steps.length ? { kind: 'next', step: step + 1 } : { kind: 'promote' };
  if (spec.onInconclusive === 'rollback') {
    return { kind: 'rollback', reason: { code: Reasons.ROLLOUT_ROLLED_BACK.code, message: `canary rolled back at ${at} (on_inconclusive: rollback): ${verdict.reason.message}` } };
  }
  return { kind: 'hold', reason: { code: Reasons.ROLLOUT_HELD.code, message: `held at ${at}: ${verdict.reason.message}` } };
}

/** The reason of an operator's `llmgw ctl rollout abort MODEL`, at the step's share (null: before the canary, during the checks). */
export function abortedReason(share: number | null, by?: string): ReasonRef {
  const where = share === null ? 'during the checks' : `at ${shareWords(share)}`;
  return { code: Reasons.ROLLOUT_ABORTED.code, message: `rollout aborted ${where} by ${by ?? 'an operator'}; the stable revision serves` };
}
