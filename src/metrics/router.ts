/**
 * The router's metrics (the `RouterMetrics` port) in a prom-client Registry. The per-request series are
 * cells (cells.ts): looked up once per model, then plain number updates on the data path.
 */
import { Counter, type Registry } from 'prom-client';
import { CellCounter, CellGauge, CellHistogram, type HistogramCell, type ValueCell } from './cells.js';
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
  const requests = new CellCounter({
    name: N.routerRequestsTotal,
    help: 'Requests the router answered, by model ("" when unknown) and HTTP status code.',
    labelNames: ['model', 'code'],
    registers,
  });
  const duration = new CellHistogram({
    name: N.routerRequestDurationSeconds,
    help: 'Duration of router requests, from arrival to the end of the response.',
    labelNames: ['model'],
    buckets: REQUEST_DURATION_BUCKETS,
    registers,
  });
  const ttft = new CellHistogram({
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
  const inFlight = new CellGauge({
    name: N.routerInFlightRequests,
    help: 'Requests the router is handling right now.',
    labelNames: ['model'],
    registers,
  });

  // each model's cells, looked up once
  interface ModelCells {
    readonly duration: HistogramCell;
    readonly ttft: HistogramCell;
    readonly inFlight: ValueCell;
    readonly codes: Map<number, ValueCell>;
    readonly label: string;
  }
  const byModel = new Map<string, ModelCells>();
  const cells = (model: string): ModelCells => {
    let c = byModel.get(model);
    if (!c) {
      const m = modelLabel(model);
      c = { duration: duration.cell(m), ttft: ttft.cell(m), inFlight: inFlight.cell(m), codes: new Map(), label: m };
      if (byModel.size < 10_000) byModel.set(model, c);
    }
    return c;
  };

  return {
    request(model, code, durationSeconds) {
      const c = cells(model);
      let counter = c.codes.get(code);
      if (!counter) {
        counter = requests.cell(c.label, String(code));
        c.codes.set(code, counter);
      }
      counter.value++;
      duration.observe(c.duration, durationSeconds > 0 ? durationSeconds : 0);
    },
    timeToFirstToken(model, seconds) {
      ttft.observe(cells(model).ttft, seconds > 0 ? seconds : 0);
    },
    upstreamError(model, reason) {
      upstreamErrors.inc({ model: modelLabel(model), reason });
    },
    inFlight(model, delta) {
      cells(model).inFlight.value += delta;
    },
  };
}
