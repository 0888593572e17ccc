/**
 * An admin backend whose models have rollouts, for tests of the rollout routes and `ctl rollout`
 * (admin-rollout.test.ts, cli-ctl-rollout.test.ts). Its records are RolloutRecords; overrides apply
 * the real pure transition (rollout-life.ts rolloutOverridden) and the snapshot shows them through
 * the real view (summarize.ts rolloutView), at a fixed time. Models:
 * - chat (alias chat-alias): a canary at step 1 of 2 (10%), 40 s into a 2-minute step, with both arms' figures;
 * - embed: held at step 1 (inconclusive, on_inconclusive: hold);
 * - plain: no rollout.
 */
import { LlmgwError, Reasons } from '../../src/errors/catalogue.js';
import type { AdminBackend, RestartRequest, RolloutOverride, RolloutOverridden } from '../../src/admin/backend.js';
import type { FleetSpec, ModelSpec } from '../../src/fleet-spec/types.js';
import { rolloutOverridden, type RolloutRecord } from '../../src/reconciler/rollout-life.js';
import { rolloutView } from '../../src/reconciler/summarize.js';
import type { FleetSnapshot, ModelView } from '../../src/reconciler/view.js';
import type { CanarySpec, RolloutView } from '../../src/rollout/types.js';
import { fakeSpec } from './fake-fleet-view.js';
import { modelView, snapshot } from './views.js';

export const ROLLOUT_AT = Date.parse('2025-03-01T12:00:00.000Z');

export const CANARY: CanarySpec = { steps: [0.1, 0.5], intervalMs: 120_000, minRequests: 30, maxErrorRateIncrease: 0.02, maxTtftRatio: 1.5, maxTpotRatio: 1.5, onInconclusive: 'hold' };

const base = fakeSpec({ models: { chat: { aliases: ['chat-alias'] }, embed: {}, plain: {} } });
const withCanary = (m: ModelSpec): ModelSpec => ({ ...m, rollout: { checks: [], canary: CANARY } });
export const ROLLOUT_SPEC: FleetSpec = { ...base, revision: 'feed0000cafe1234', models: { ...base.models, chat: withCanary(base.models.chat!), embed: withCanary(base.models.embed!) } };

const digest = (name: string): string => ROLLOUT_SPEC.models[name]!.digest;

/** Live figures of chat's step: the canary fails on its error rate so far. */
export const CHAT_FIGURES: NonNullable<RolloutView['figures']> = {
  stable: { requests: 380, errors: 0, errorRate: 0, ttftP95Ms: 338, tpotP95Ms: 21.4 },
  canary: { requests: 42, errors: 13, errorRate: 13 / 42, ttftP95Ms: 812, tpotP95Ms: 23 },
  verdict: 'fail',
};

export function initialRollouts(): Record<string, RolloutRecord> {
  return {
    chat: { digest: digest('chat'), stable: 'a'.repeat(64), phase: 'canary', since: ROLLOUT_AT - 40_000, step: 0 },
    embed: { digest: digest('embed'), stable: 'b'.repeat(64), phase: 'held', since: ROLLOUT_AT - 300_000, step: 0, verdict: { code: Reasons.ROLLOUT_HELD.code, message: 'held at 10%: 12 of 30 requests on the canary' } },
  };
}

export class RolloutBackend implements AdminBackend {
  records: Record<string, RolloutRecord> = initialRollouts();
  readonly calls: { model: string; how: RolloutOverride; by: string }[] = [];

  snapshot(): FleetSnapshot {
    const models: ModelView[] = Object.values(ROLLOUT_SPEC.models).map((m) => {
      const r = this.records[m.name];
      return modelView(m, { ready: 1, ...(r ? { rollout: rolloutView(r, CANARY, m.name === 'chat' ? CHAT_FIGURES : undefined) } : {}) });
    });
    return snapshot({ at: ROLLOUT_AT, appliedRevision: ROLLOUT_SPEC.revision, models });
  }
  spec(): FleetSpec {
    return ROLLOUT_SPEC;
  }
  async overrideRollout(model: string, how: RolloutOverride, by: string): Promise<RolloutOverridden> {
    this.calls.push({ model, how, by });
    if (!ROLLOUT_SPEC.models[model]) throw new LlmgwError('NOT_FOUND', `no model named "${model}"`);
    const o = rolloutOverridden(this.records[model], how, ROLLOUT_AT, CANARY, by);
    if (o.outcome === 'no-rollout' || !o.rollout) throw new LlmgwError('ROLLOUT_NONE', `${model} has no rollout to ${how}`, { model });
    this.records[model] = o.rollout;
    return { model, outcome: o.outcome, rollout: rolloutView(o.rollout, CANARY) };
  }
  async retry(model: string): Promise<{ model: string; outcome: 'unparked' | 'backoff-cleared' }> {
    return { model, outcome: 'backoff-cleared' };
  }
  async restart(_req: RestartRequest): Promise<readonly string[]> {
    return [];
  }
  restartDone(): boolean {
    return true;
  }
  async logs(): Promise<string> {
    return '';
  }
  async requestPass(): Promise<void> {}
}
