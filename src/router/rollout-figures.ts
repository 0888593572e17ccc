/**
 * What this router saw of each arm of a model's canary step (#34): `RolloutFigures`, the object the
 * controller reads (serve hands it over; app.ts `rolloutFiguresOf`). The router records each request
 * of a canary-phase model as it ends (proxy.ts → canary.ts `armSampleOf`); the verdict reads the window.
 *
 * A model's window belongs to one canary revision (its digest) and began at `since` (epoch ms):
 * - it begins at the step's start as the model's view says (RolloutView.since) when the router first
 *   records for that revision, and again whenever the view shows a later step (a newer `since`); a
 *   request routed on an older view (another revision, an earlier window) is not counted;
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
    if (w === undefined || w.since < view.since) {
      w = fresh(view.canaryDigest, view.since);
      this.models.set(model, w);
    }
    // a request routed on an older view (another revision's step, or before the window's restart)
    // never counts in this window, nor replaces it
    if (w.canaryDigest !== view.canaryDigest || startedAt < w.since) return;
    (sample.arm === 'canary' ? w.canary : w.stable).add(sample);
  }

  window(model: string, canaryDigest: string): CanaryWindow | null {
    const w = this.models.get(model);
    return w === undefined || w.canaryDigest !== canaryDigest ? null : snapshotOf(w);
  }

  restart(model: string, canaryDigest: string, since: number): void {
    this.models.set(model, fresh(canaryDigest, since));
  }

  /**
   * Drops the windows of models not in `keep` (a snapshot's models in a canary step: the others'
   * canary ended) that began before `asOf` (the snapshot's time; a window begun since is kept), so
   * the figures never outgrow the live steps.
   */
  retain(keep: ReadonlySet<string>, asOf: number): void {
    for (const [model, w] of this.models) if (!keep.has(model) && w.since < asOf) this.models.delete(model);
  }

  all(): Record<string, { readonly canaryDigest: string; readonly window: CanaryWindow }> {
    const out: Record<string, { readonly canaryDigest: string; readonly window: CanaryWindow }> = {};
    for (const [model, w] of this.models) out[model] = { canaryDigest: w.canaryDigest, window: snapshotOf(w) };
    return out;
  }
}
