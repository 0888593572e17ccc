/**
 * What this router reports of each model's load to the controller (#42): its requests on the model's
 * replicas (slots busy) and those waiting in its queue for a slot. serve hands the same object to the
 * router (which attaches its counters: app.ts) and to the controller (which reads a report each pass
 * and scales on it: reconciler/scale-life.ts). A report carries the time it was taken: under HA a
 * report that stops coming counts as zero after scale/decide.ts LOAD_TTL_MS.
 */
import type { RouterMetrics } from '../metrics/ports.js';
import type { LoadReport, ModelLoad } from '../scale/decide.js';

export type { LoadReport, ModelLoad } from '../scale/decide.js';

export class RouterLoad {
  private read: (() => Readonly<Record<string, ModelLoad>>) | null = null;

  constructor(
    /** The router's id in its reports (its instance). */
    readonly router: string,
    private readonly clock: () => number = Date.now,
  ) {}

  /** The router's figures per model, read at each report (app.ts buildRouter). */
  attach(read: () => Readonly<Record<string, ModelLoad>>): void {
    this.read = read;
  }

  /** The figures now (none before a router is attached). */
  report(): LoadReport {
    return { router: this.router, at: this.clock(), models: this.read?.() ?? {} };
  }
}

/**
 * The router's metrics port, counting each model's requests in the router as they pass (the port's
 * in-flight figure: waiting for activation, queued or proxied) into `counts`, then as before.
 */
export function countingInFlight(base: RouterMetrics, counts: Map<string, number>): RouterMetrics {
  const out = Object.create(base) as RouterMetrics & { inFlight: RouterMetrics['inFlight'] };
  out.inFlight = (model: string, delta: number): void => {
    const n = (counts.get(model) ?? 0) + delta;
    if (n > 0) counts.set(model, n);
    else counts.delete(model);
    base.inFlight(model, delta);
  };
  return out;
}
