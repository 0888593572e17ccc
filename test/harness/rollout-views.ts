/**
 * A model's rollout as the reconciler publishes it (RolloutView, src/rollout/types.ts), built for
 * tests of its readers (metrics, the status page): a canary step with both arms' figures, and a
 * model spec whose rollout: block has a canary of the given steps. Quiet defaults; a test overrides
 * only what its case is about.
 */
import type { ModelSpec } from '../../src/fleet-spec/types.js';
import type { ArmFigures, CanarySpec, RolloutView } from '../../src/rollout/types.js';

export const STABLE_DIGEST = 'aaaaaaaaaaaa1111111111111111111111111111111111111111111111111111';
export const CANARY_DIGEST = 'bbbbbbbbbbbb2222222222222222222222222222222222222222222222222222';

/** One arm's figures: `requests` and `errors` given, the rate from them. */
export function arm(requests: number, errors: number, ttftP95Ms: number | null, tpotP95Ms: number | null): ArmFigures {
  return { requests, errors, errorRate: requests === 0 ? 0 : errors / requests, ttftP95Ms, tpotP95Ms };
}

/** Step 0 (10%) of a canary since `since`, two minutes long, both arms judged (passing). */
export function canaryRollout(since: number, over: Partial<RolloutView> = {}): RolloutView {
  return {
    phase: 'canary',
    stableDigest: STABLE_DIGEST,
    canaryDigest: CANARY_DIGEST,
    step: 0,
    share: 0.1,
    since,
    until: since + 120_000,
    verdict: null,
    figures: { stable: arm(380, 0, 338, 41), canary: arm(42, 1, 401, 44), verdict: 'pass' },
    ...over,
  };
}

export const CANARY: CanarySpec = Object.freeze({
  steps: [0.1, 0.5],
  intervalMs: 120_000,
  minRequests: 30,
  maxErrorRateIncrease: 0.02,
  maxTtftRatio: 1.5,
  maxTpotRatio: 1.5,
  onInconclusive: 'hold',
});

/** The spec with a rollout: block of no checks and this canary (its digest the canary's). */
export function withCanary(spec: ModelSpec, canary: CanarySpec = CANARY): ModelSpec {
  return { ...spec, digest: CANARY_DIGEST, rollout: { checks: [], canary } };
}
