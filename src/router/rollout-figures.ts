/**
 * What this router saw of each arm of a model's canary step (#34): `RolloutFigures`, the object the
 * controller reads (serve hands it over; app.ts `rolloutFiguresOf`). The router records each request
 * of a canary-phase model as it ends (proxy.ts → canary.ts `armSampleOf`); the verdict reads the window.
 *
 * A model's window belongs to one canary revision (its digest) and began at `since` (epoch ms):
 * - it begins at the step's start as the model's view says (RolloutView.since) when the router first
 *   records for that revision, and again whenever the view shows a later step (a newer `since`);
 * - `restart(model, digest, since)` drops the figures and begins again at `since` (a new step, or the
 *   controller's figures were lost: a window never carries figures across);
 * - a request that started before the window began is not counted in it.
 * Figures are kept in place (window.ts ArmRecorder) and copied out only when read.
 */
import type { ArmSample, CanaryWindow, RolloutFigures, RolloutView } from '../rollout/types.js';
import { ArmRecorder } from '../rollout/window.js';

export type { RolloutFigures } from '../rollout/types.js';

interface ModelWindow {
  readonly canaryDigest: string;
  readonly since: number;
  readonly stable: ArmRecorder;
  readonly canary: ArmRecorder;
}

const fresh = (canaryDigest: string, since: number): ModelWindow => ({ canaryDigest, since, stable: new ArmRecorder(), canary: new ArmRecorder() });

const snapshotOf = (w: ModelWindow): CanaryWindow => ({ since: w.since, stable: w.stable.snapshot(), canary: w.canary.snapshot() });

export class RouterRollouts implements RolloutFigures {
  private readonly models = new Map<string, ModelWindow>();

  /**
   * One request (or a failed attempt) of `model` under the canary view `view`, on the arm of the
   * replica it went to; `startedAt`: the request's arrival (epoch ms).
   */
  record(model: string, view: RolloutView, sample: ArmSample, startedAt: number): void {
    let w = this.models.get(model);
    if (w === undefined || w.canaryDigest !== view.canaryDigest || w.since < view.since) {
      w = fresh(view.canaryDigest, view.since);
      this.models.set(model, w);
    }
    if (startedAt < w.since) return;
    (sample.arm === 'canary' ? w.canary : w.stable).add(sample);
  }

  window(model: string, canaryDigest: string): CanaryWindow | null {
    const w = this.models.get(model);
    return w === undefined || w.canaryDigest !== canaryDigest ? null : snapshotOf(w);
  }

  restart(model: string, canaryDigest: string, since: number): void {
    this.models.set(model, fresh(canaryDigest, since));
  }

  all(): Record<string, { readonly canaryDigest: string; readonly window: CanaryWindow }> {
    const out: Record<string, { readonly canaryDigest: string; readonly window: CanaryWindow }> = {};
    for (const [model, w] of this.models) out[model] = { canaryDigest: w.canaryDigest, window: snapshotOf(w) };
    return out;
  }
}
