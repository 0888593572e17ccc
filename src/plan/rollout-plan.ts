/**
 * What a model's rollout (#34) will do after a merge (pure): the checks that run, the canary's
 * steps and their times, what an inconclusive step leads to, and — from the planner's simulation
 * of the pass after the merge — whether a node has room for both revisions at once (the new
 * revision's first replica starts beside the old) or the checks run on a replica that replaces
 * one old replica (the model dips to replicas − 1 meanwhile).
 */
import type { ModelSpec } from '../fleet-spec/types.js';
import { formatDuration } from '../fleet-spec/units.js';
import type { ModelOutcome } from './simulate.js';

/** (rollout/types.ts's, as the spec carries them) */
type RolloutSpec = NonNullable<ModelSpec['rollout']>;
type OnInconclusive = NonNullable<RolloutSpec['canary']>['onInconclusive'];

export interface RolloutPlan {
  /** The checks run on the new revision's first replica before any user request reaches it, by name. */
  readonly checks: readonly string[];
  /** null: no canary — once the checks pass, the new revision takes all traffic. */
  readonly canary: {
    /** Share of the model's requests (0..1) and the time at each step (ms). */
    readonly steps: readonly { readonly share: number; readonly forMs: number }[];
    /** Steps × interval: the soonest the revision can be promoted (an inconclusive step takes longer). */
    readonly minDurationMs: number;
    readonly minRequests: number;
    readonly maxErrorRateIncrease: number;
    readonly maxTtftRatio: number;
    readonly maxTpotRatio: number;
    readonly onInconclusive: OnInconclusive;
  } | null;
  /**
   * surge: a node has room for both revisions, the first new replica starts beside the old ones;
   * replace: none has, it replaces one old replica (the model dips to replicas − 1);
   * nothing-running: no replica of the model runs, so there is no old revision to compare with;
   * fits-nowhere: the new revision fits on no node (the placement says why).
   */
  readonly room: 'surge' | 'replace' | 'nothing-running' | 'fits-nowhere';
  /** Nodes the new revision's first replicas start on (surge). */
  readonly nodes: readonly string[];
}

const pct = (f: number): string => `${+(f * 100).toFixed(2)}%`;
const plural = (n: number, one: string): string => `${n} ${one}${n === 1 ? '' : 's'}`;

function canaryOf(r: RolloutSpec): RolloutPlan['canary'] {
  const c = r.canary;
  if (!c) return null;
  return {
    steps: c.steps.map((share) => ({ share, forMs: c.intervalMs })),
    minDurationMs: c.steps.length * c.intervalMs,
    minRequests: c.minRequests,
    maxErrorRateIncrease: c.maxErrorRateIncrease,
    maxTtftRatio: c.maxTtftRatio,
    maxTpotRatio: c.maxTpotRatio,
    onInconclusive: c.onInconclusive,
  };
}

function roomOf(o: ModelOutcome | undefined): Pick<RolloutPlan, 'room' | 'nodes'> {
  if (!o || o.before.length === 0 || o.desired === 0) return { room: 'nothing-running', nodes: [] };
  if (o.starts.length > 0) return { room: 'surge', nodes: [...new Set(o.starts)].sort() };
  if (o.drains > 0) return { room: 'replace', nodes: [] };
  return { room: 'fits-nowhere', nodes: [] };
}

/** The rollout a definition change runs (null when the model has no rollout), with its sentences for the plan's effects. */
export function rolloutPlan(h: ModelSpec, o: ModelOutcome | undefined): { readonly plan: RolloutPlan; readonly effects: string[] } | null {
  const r = h.rollout;
  if (!r) return null;
  const plan: RolloutPlan = { checks: r.checks.map((c) => c.name), canary: canaryOf(r), ...roomOf(o) };
  const effects: string[] = [];
  effects.push(
    plan.checks.length
      ? `rollout: ${plural(plan.checks.length, 'check')} (${plan.checks.join(', ')}) run on the new revision's first replica before any user request reaches it; a failed check holds the revision back`
      : 'rollout: no checks',
  );
  const c = plan.canary;
  if (c) {
    const steps = c.steps.map((s) => `${pct(s.share)} for ${formatDuration(s.forMs)}`).join(', ');
    const thresholds = `error rate at most +${pct(c.maxErrorRateIncrease)}, TTFT p95 at most ${c.maxTtftRatio}× and time per output token p95 at most ${c.maxTpotRatio}× the stable revision's`;
    effects.push(`canary: ${steps}, then promoted: ≥ ${formatDuration(c.minDurationMs)}; each step judged against the stable revision (${thresholds}); a failed step rolls back`);
    effects.push(`canary: a step with fewer than ${plural(c.minRequests, 'request')} on either revision is inconclusive and ${c.onInconclusive === 'hold' ? 'holds (it waits for `llmgw ctl rollout promote|abort` or a new definition)' : 'rolls back'}`);
  } else if (plan.checks.length) {
    effects.push('no canary: once the checks pass, the new revision takes all the traffic');
  }
  const n = o?.desired ?? 0;
  switch (plan.room) {
    case 'surge':
      effects.push(`room for both revisions: the new revision's first replica starts beside the old on ${plan.nodes.join(', ')}`);
      break;
    case 'replace':
      effects.push(
        `no room for both revisions: the checks run on a replica that replaces one old replica, so the model dips to ${Math.max(0, n - 1)} of ${plural(n, 'replica')} meanwhile${n <= 1 ? ' (no replica serves until the new one is ready and checked)' : ''}`,
      );
      break;
    case 'nothing-running':
      effects.push('no replica runs now: there is no stable revision to compare the new one with');
      break;
    case 'fits-nowhere':
      effects.push('the new revision fits on no node beside or instead of the old (see its placement): nothing rolls out yet');
      break;
  }
  return { plan, effects };
}
