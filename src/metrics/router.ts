/** The router's metrics (the `RouterMetrics` port) on prom-client. */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { RouterMetrics } from './ports.js';
import { MetricNames as N } from './names.js';

/** Whole requests: from a few milliseconds (errors, cached) to minutes (long generations). */
export const REQUEST_DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600];
/** Time to first token: prompt processing, plus queueing and (on-demand) activation. */
export const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];

/** Longest model label kept (the router passes canonical names, or "" for unknown ones). */
const MAX_MODEL_LABEL = 128;
const modelLabel = (model: string): string => (model.length <= MAX_MODEL_LABEL ? model : model.slice(0, MAX_MODEL_LABEL));

export function createRouterMetrics(registry: Registry): RouterMetrics {
  const registers = [registry];
  const requests = new Counter({
    name: N.routerRequestsTotal,
    help: 'Requests the router answered, by model ("" when unknown) and HTTP status code.',
    labelNames: ['model', 'code'],
    registers,
  });
  const duration = new Histogram({
    name: N.routerRequestDurationSeconds,
    help: 'Duration of router requests, from arrival to the end of the response.',
    labelNames: ['model'],
    buckets: REQUEST_DURATION_BUCKETS,
    registers,
  });
  const ttft = new Histogram({
    name: N.routerTimeToFirstTokenSeconds,
    help: 'Time from a request\'s arrival to the first response byte from upstream.',
    labelNames: ['model'],
    buckets: TTFT_BUCKETS,
    registers,
  });
  const upstreamErrors = new Counter({
    name: N.routerUpstreamErrorsTotal,
    help: 'Failures talking to a replica, by reason (connect, first_byte_timeout, stall_timeout, reset, …).',
    labelNames: ['model', 'reason'],
    registers,
  });
  const inFlight = new Gauge({
    name: N.routerInFlightRequests,
    help: 'Requests the router is handling right now.',
    labelNames: ['model'],
    registers,
  });

  // The hot path: resolve each model's labelled children once, not on every request.
  interface Children {
    readonly duration: ReturnType<typeof duration.labels>;
    readonly ttft: ReturnType<typeof ttft.labels>;
    readonly inFlight: ReturnType<typeof inFlight.labels>;
    readonly codes: Map<number, ReturnType<typeof requests.labels>>;
  }
  const byModel = new Map<string, Children>();
  const children = (model: string): Children => {
    let c = byModel.get(model);
    if (!c) {
      const m = modelLabel(model);
      c = { duration: duration.labels(m), ttft: ttft.labels(m), inFlight: inFlight.labels(m), codes: new Map() };
      if (byModel.size < 10_000) byModel.set(model, c);
    }
    return c;
  };

  return {
    request(model, code, durationSeconds) {
      const c = children(model);
      let counter = c.codes.get(code);
      if (!counter) {
        counter = requests.labels(modelLabel(model), String(code));
        c.codes.set(code, counter);
      }
      counter.inc();
      c.duration.observe(Math.max(0, durationSeconds));
    },
    timeToFirstToken(model, seconds) {
      children(model).ttft.observe(Math.max(0, seconds));
    },
    upstreamError(model, reason) {
      upstreamErrors.inc({ model: modelLabel(model), reason });
    },
    inFlight(model, delta) {
      const g = children(model).inFlight;
      if (delta >= 0) g.inc(delta);
      else g.dec(-delta);
    },
  };
}
