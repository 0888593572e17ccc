/**
 * A model's rollout as gauges (#34), applied from each snapshot: its phase while it has one, and in a
 * canary step the step, the canary's share and both arms' figures as the controller last judged them
 * (RolloutView.figures). The step's and the arms' series exist only in the canary phase: when the
 * rollout leaves it (promoted, rolled back, held, replaced, gone) they are removed, so no series
 * outlives the step it describes.
 */
import type { ModelView } from '../reconciler/view.js';
import type { ArmFigures } from '../rollout/types.js';
import { MetricNames as N } from './names.js';
import type { GaugeSeries } from './series.js';

type MakeGauge = <T extends string>(name: string, help: string, labelNames: readonly T[]) => GaugeSeries<T>;
type ModelArm = { model: string; arm: string };
type Entry<L> = [L, number];

const ARMS = ['stable', 'canary'] as const;

/** One value per arm (absent where the arm has none: a p95 with no sample). */
function perArm(model: string, figures: { readonly stable: ArmFigures; readonly canary: ArmFigures }, value: (f: ArmFigures) => number | null): Entry<ModelArm>[] {
  const out: Entry<ModelArm>[] = [];
  for (const arm of ARMS) {
    const v = value(figures[arm]);
    if (v !== null && Number.isFinite(v)) out.push([{ model, arm }, v]);
  }
  return out;
}

const seconds = (ms: number | null): number | null => (ms === null ? null : ms / 1000);

export class RolloutMetrics {
  private readonly phase: GaugeSeries<'model' | 'phase'>;
  private readonly step: GaugeSeries<'model'>;
  private readonly share: GaugeSeries<'model'>;
  private readonly requests: GaugeSeries<'model' | 'arm'>;
  private readonly errors: GaugeSeries<'model' | 'arm'>;
  private readonly errorRatio: GaugeSeries<'model' | 'arm'>;
  private readonly ttftP95: GaugeSeries<'model' | 'arm'>;
  private readonly tpotP95: GaugeSeries<'model' | 'arm'>;

  constructor(gauge: MakeGauge) {
    this.phase = gauge(N.rolloutPhase, "A model's rollout (always 1; present while it has one): checking (the new revision runs its checks and takes no request), canary (it takes a step's share of the requests beside the stable revision), held (a check failed, or a step was inconclusive with on_inconclusive: hold), rolled_back (a step failed, was inconclusive with on_inconclusive: rollback, or was aborted), promoted (the stable replicas are being replaced). Alert LlmgwRolloutRolledBack.", ['model', 'phase']);
    this.step = gauge(N.rolloutStep, "The canary step a model's new revision is at, counted from 1 (present only in the canary phase).", ['model']);
    this.share = gauge(N.rolloutShare, "The share of a model's requests the canary step sends to its new revision, 0 to 1 (present only in the canary phase).", ['model']);
    const arm = (name: string, what: string): GaugeSeries<'model' | 'arm'> =>
      gauge(name, `${what}, per arm (stable: the serving revision, canary: the new one), over the canary step's window so far as the controller last judged it (present only in the canary phase, from its first judgement).`, ['model', 'arm']);
    this.requests = arm(N.rolloutRequests, 'Requests counted in the canary step (answered, or failed by the replica; not the client\'s own 4xx or aborts)');
    this.errors = arm(N.rolloutErrors, 'Requests of the canary step the replica failed (5xx, an engine error, a stream cut mid-way)');
    this.errorRatio = arm(N.rolloutErrorRatio, 'Errors over requests in the canary step, 0 to 1');
    this.ttftP95 = arm(N.rolloutTtftP95Seconds, 'Time to first token p95 of the prompt-length and cache bucket the verdict compares (absent without one)');
    this.tpotP95 = arm(N.rolloutTpotP95Seconds, 'Time per output token p95 (absent without a request of 2 tokens or more)');
  }

  apply(models: readonly ModelView[]): void {
    const phase: Entry<{ model: string; phase: string }>[] = [];
    const step: Entry<{ model: string }>[] = [];
    const share: Entry<{ model: string }>[] = [];
    const requests: Entry<ModelArm>[] = [];
    const errors: Entry<ModelArm>[] = [];
    const errorRatio: Entry<ModelArm>[] = [];
    const ttft: Entry<ModelArm>[] = [];
    const tpot: Entry<ModelArm>[] = [];
    for (const m of models) {
      const r = m.rollout;
      if (!r) continue;
      phase.push([{ model: m.name, phase: r.phase }, 1]);
      if (r.phase !== 'canary') continue;
      step.push([{ model: m.name }, r.step + 1]);
      share.push([{ model: m.name }, r.share]);
      const f = r.figures;
      if (!f) continue;
      requests.push(...perArm(m.name, f, (a) => a.requests));
      errors.push(...perArm(m.name, f, (a) => a.errors));
      errorRatio.push(...perArm(m.name, f, (a) => a.errorRate));
      ttft.push(...perArm(m.name, f, (a) => seconds(a.ttftP95Ms)));
      tpot.push(...perArm(m.name, f, (a) => seconds(a.tpotP95Ms)));
    }
    this.phase.replace(phase);
    this.step.replace(step);
    this.share.replace(share);
    this.requests.replace(requests);
    this.errors.replace(errors);
    this.errorRatio.replace(errorRatio);
    this.ttftP95.replace(ttft);
    this.tpotP95.replace(tpot);
  }
}
