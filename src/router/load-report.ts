/**
 * What this router reports of each model's load to the controller (#42): its requests on the model's
 * replicas (slots busy) and those waiting in its queue for a slot. serve hands the same object to the
 * router (which attaches its counters: app.ts) and to the controller (which reads a report each pass
 * and scales on it: reconciler/scale-life.ts). A report carries the time it was taken: under HA a
 * report that stops coming counts as zero after scale/decide.ts LOAD_TTL_MS.
 *
 * A report carries each model's peak since the reader's last report, not only the figures at the
 * instant it is taken: a burst that came and went between two reports (a pass every few seconds,
 * an etcd refresh) is seen. The router samples a model's figures as its count of requests changes
 * (countingInFlight's `onChange`, before a request leaves and after one comes: the highest of each
 * step). Each reader (`reporter()`) keeps its own peaks, so the pass and the etcd refresh do not
 * take each other's; `report()` is the default reader's.
 */
import type { RouterMetrics } from '../metrics/ports.js';
import type { LoadReport, ModelLoad } from '../scale/decide.js';

export type { LoadReport, ModelLoad } from '../scale/decide.js';

export class RouterLoad {
  private read: (() => Readonly<Record<string, ModelLoad>>) | null = null;
  private readOne: ((model: string) => ModelLoad | undefined) | null = null;
  /** Each reader's peaks since its last report, per model. */
  private readonly peaks: Map<string, ModelLoad>[] = [];
  private readonly own: () => LoadReport;

  constructor(
    /** The router's id in its reports (its instance). */
    readonly router: string,
    private readonly clock: () => number = Date.now,
  ) {
    this.own = this.reporter();
  }

  /** The router's figures per model, read at each report, and one model's, read at each sample (app.ts buildRouter; without `readOne`, `read`'s). */
  attach(read: () => Readonly<Record<string, ModelLoad>>, readOne?: (model: string) => ModelLoad | undefined): void {
    this.read = read;
    this.readOne = readOne ?? ((model) => read()[model]);
  }

  /** The default reader's report: each model's peak since its last report with the figures now (none before a router is attached). */
  report(): LoadReport {
    return this.own();
  }

  /** A reader of its own: each of its reports holds the peaks since its previous one. */
  reporter(): () => LoadReport {
    const peaks = new Map<string, ModelLoad>();
    this.peaks.push(peaks);
    return () => {
      const models = peakReport(peaks, this.read?.() ?? {});
      peaks.clear();
      return { router: this.router, at: this.clock(), models };
    };
  }

  /** A model's count of requests in the router changes: every reader's peak takes its figures in. */
  sample(model: string): void {
    const m = this.readOne?.(model);
    if (m === undefined) return;
    for (const p of this.peaks) p.set(model, higher(p.get(model), m));
  }
}

/**
 * The higher of two samples of one model: the one with more requests (busy + queued; on a tie the
 * one with more busy), never a mix of two instants (a busy peak and a queue peak apart would add to
 * more requests than the router ever had); the wait the longer of the two (the oldest request's
 * wait grows while it waits, and is highest just before it leaves the queue).
 */
export function higher(a: ModelLoad | undefined, b: ModelLoad): ModelLoad {
  if (a === undefined) return b;
  const ta = a.busy + a.queued;
  const tb = b.busy + b.queued;
  const bTop = tb > ta || (tb === ta && b.busy > a.busy);
  const aw = a.waitMs ?? 0;
  const bw = b.waitMs ?? 0;
  // one of the two as it is where it also has the longer wait (no allocation: a sample per request)
  if (bTop ? bw >= aw : aw >= bw) return bTop ? b : a;
  const top = bTop ? b : a;
  return { busy: top.busy, queued: top.queued, waitMs: Math.max(aw, bw) };
}

/** A report's figures: each model's peak since the last report with its figures now (a model with neither is absent). */
export function peakReport(peaks: ReadonlyMap<string, ModelLoad>, now: Readonly<Record<string, ModelLoad>>): Record<string, ModelLoad> {
  const out: Record<string, ModelLoad> = {};
  for (const [model, p] of peaks) out[model] = higher(p, now[model] ?? { busy: 0, queued: 0 });
  for (const [model, m] of Object.entries(now)) if (!(model in out)) out[model] = m;
  return out;
}

/**
 * The router's metrics port, counting each model's requests in the router as they pass (the port's
 * in-flight figure: waiting for activation, queued or proxied) into `counts`, then as before.
 * `onChange` (RouterLoad.sample) sees the model before a request leaves and after one comes: the
 * higher count of each step.
 */
export function countingInFlight(base: RouterMetrics, counts: Map<string, number>, onChange?: (model: string) => void): RouterMetrics {
  const out = Object.create(base) as RouterMetrics & { inFlight: RouterMetrics['inFlight'] };
  out.inFlight = (model: string, delta: number): void => {
    if (delta < 0) onChange?.(model);
    const n = (counts.get(model) ?? 0) + delta;
    if (n > 0) counts.set(model, n);
    else counts.delete(model);
    if (delta > 0) onChange?.(model);
    base.inFlight(model, delta);
  };
  return out;
}
