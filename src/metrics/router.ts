/**
 * The router's metrics (the `RouterMetrics` port) in a prom-client Registry. The per-request series are
 * cells (cells.ts): looked up once per model, then plain number updates on the data path.
 */
import type { Registry } from 'prom-client';
import { CellCounter, CellGauge, CellHistogram, type HistogramCell, type ValueCell } from './cells.js';
import { NO_REASON, type RouterMetrics } from './ports.js';
import { MetricNames as N } from './names.js';

/** Whole requests: from a few milliseconds (errors, cached) to minutes (long generations). */
export const REQUEST_DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600];
/** Time to first token: prompt processing, plus queueing and (on-demand) activation. */
export const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];
/** Waits in a model's queue: none to the longest queue timeouts. */
export const QUEUE_WAIT_BUCKETS = [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Longest model label kept (the router passes canonical names, or "" for unknown ones). */
const MAX_MODEL_LABEL = 128;
const modelLabel = (model: string): string => (model.length <= MAX_MODEL_LABEL ? model : model.slice(0, MAX_MODEL_LABEL));

/** RouterMetrics, plus the desired models whose series exist at 0 before their first request. */
export interface RouterSeries extends RouterMetrics {
  /**
   * The models in the desired state: each gets its request counter (code 200) at 0 now, and its
   * histograms, gauges and token counters at its first request; models no longer listed lose all
   * of theirs (once nothing is in flight or queued for them).
   */
  setModels(names: readonly string[]): void;
}

export function createRouterMetrics(registry: Registry): RouterSeries {
  const registers = [registry];
  const requests = new CellCounter({
    name: N.routerRequestsTotal,
    help: 'Requests the router answered, by model ("" when unknown), HTTP status code and reason (the catalogue code the router refused or cut the request with; "" for the replica\'s own answers).',
    labelNames: ['model', 'code', 'reason'],
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
  const upstreamErrors = new CellCounter({
    name: N.routerUpstreamErrorsTotal,
    help: 'Failed attempts to talk to a replica, by reason (UPSTREAM_CONNECT, UPSTREAM_FIRST_BYTE_TIMEOUT, UPSTREAM_STALLED, UPSTREAM_FAILED, UPSTREAM_AUTH).',
    labelNames: ['model', 'reason'],
    registers,
  });
  const inFlight = new CellGauge({
    name: N.routerInFlightRequests,
    help: 'Requests the router is handling right now.',
    labelNames: ['model'],
    registers,
  });

  const queueDepth = new CellGauge({
    name: N.routerQueueDepth,
    help: 'Requests waiting in the model\'s queue at the router (every slot of its ready replicas busy).',
    labelNames: ['model'],
    registers,
  });
  const queueWait = new CellHistogram({
    name: N.routerQueueWaitSeconds,
    help: 'Time requests waited in the model\'s queue, whether then served, timed out (429 model_overloaded) or gone.',
    labelNames: ['model'],
    buckets: QUEUE_WAIT_BUCKETS,
    registers,
  });
  const promptTokens = new CellCounter({
    name: N.routerPromptTokensTotal,
    help: 'Prompt tokens of the model\'s responses, by source: evaluated by the replica, or reused from its prompt cache (cache); from the responses\' timings or usage.',
    labelNames: ['model', 'source'],
    registers,
  });
  const affinity = new CellCounter({
    name: N.routerAffinityTotal,
    help: 'Requests routed by prefix affinity, by result: hit (the replica that served the key last, or for a new key its own on the ring) or moved (another: that replica over the load bound, down or gone).',
    labelNames: ['model', 'result'],
    registers,
  });

  const ejected = new CellGauge({
    name: N.routerEjectedReplicas,
    help: 'Replicas of the model out of routing at this router: each failed EJECT_AFTER times in a row before the first byte (refused, reset, 503 while loading, gone) and has not passed a health check since.',
    labelNames: ['model'],
    registers,
  });
  const ejections = new CellCounter({
    name: N.routerReplicaEjectionsTotal,
    help: 'Times a replica of the model left routing at this router after failing repeatedly before the first byte.',
    labelNames: ['model'],
    registers,
  });

  // Each model's cells, looked up once. The histograms, gauges and token counters of a model are
  // made at its first request, so a catalogue of models that are rarely asked for costs one
  // request counter each (at 0) until they have traffic.
  interface TrafficCells {
    readonly duration: HistogramCell;
    readonly ttft: HistogramCell;
    readonly inFlight: ValueCell;
    readonly queueDepth: ValueCell;
    readonly queueWait: HistogramCell;
    readonly evaluated: ValueCell;
    readonly cached: ValueCell;
    readonly hits: ValueCell;
    readonly moves: ValueCell;
  }
  interface ModelCells {
    /** Made at the model's first request (null until then). */
    traffic: TrafficCells | null;
    /** Request counters of the replicas' own answers (reason ""), by status code. */
    readonly codes: Map<number, ValueCell>;
    /** Request counters of refused or cut requests, by `${reason} ${code}`. */
    readonly refused: Map<string, { readonly code: string; readonly reason: string; readonly cell: ValueCell }>;
    /** Upstream failure reasons seen (their counters are removed with the model). */
    readonly reasons: Set<string>;
    /** Whether a replica of the model was ever ejected (its two series are removed with the model). */
    ejections: boolean;
    readonly label: string;
  }
  const byModel = new Map<string, ModelCells>();
  // Models kept beyond the fleet's own (names a request gave that are not the fleet's): a bound, so
  // made-up names cannot grow the map without end; a fleet of 10,000 models keeps all of its own.
  let keepAtMost = 10_000;
  const cells = (model: string): ModelCells => {
    let c = byModel.get(model);
    if (!c) {
      c = { traffic: null, codes: new Map(), refused: new Map(), reasons: new Set(), ejections: false, label: modelLabel(model) };
      if (byModel.size < keepAtMost) byModel.set(model, c);
    }
    return c;
  };
  const traffic = (model: string): TrafficCells => {
    const c = cells(model);
    if (c.traffic) return c.traffic;
    const m = c.label;
    const t: TrafficCells = {
      duration: duration.cell(m),
      ttft: ttft.cell(m),
      inFlight: inFlight.cell(m),
      queueDepth: queueDepth.cell(m),
      queueWait: queueWait.cell(m),
      evaluated: promptTokens.cell(m, 'evaluated'),
      cached: promptTokens.cell(m, 'cache'),
      hits: affinity.cell(m, 'hit'),
      moves: affinity.cell(m, 'moved'),
    };
    c.traffic = t;
    return t;
  };

  const counterFor = (c: ModelCells, code: number, reason: string): ValueCell => {
    if (reason === NO_REASON) {
      let counter = c.codes.get(code);
      if (!counter) {
        counter = requests.cell(c.label, String(code), NO_REASON);
        c.codes.set(code, counter);
      }
      return counter;
    }
    const key = `${reason} ${code}`;
    let r = c.refused.get(key);
    if (!r) {
      r = { code: String(code), reason, cell: requests.cell(c.label, String(code), reason) };
      c.refused.set(key, r);
    }
    return r.cell;
  };

  return {
    setModels(names) {
      keepAtMost = names.length + 10_000;
      const keep = new Set(names);
      keep.add(''); // requests naming no known model
      for (const name of names) counterFor(cells(name), 200, NO_REASON);
      for (const [model, c] of byModel) {
        if (keep.has(model) || (c.traffic && (c.traffic.inFlight.value !== 0 || c.traffic.queueDepth.value !== 0))) continue;
        byModel.delete(model);
        if (c.traffic) {
          duration.remove(c.label);
          ttft.remove(c.label);
          inFlight.remove(c.label);
          queueDepth.remove(c.label);
          queueWait.remove(c.label);
          promptTokens.remove(c.label, 'evaluated');
          promptTokens.remove(c.label, 'cache');
          affinity.remove(c.label, 'hit');
          affinity.remove(c.label, 'moved');
        }
        for (const code of c.codes.keys()) requests.remove(c.label, String(code), NO_REASON);
        for (const r of c.refused.values()) requests.remove(c.label, r.code, r.reason);
        for (const reason of c.reasons) upstreamErrors.remove(c.label, reason);
        if (c.ejections) {
          ejected.remove(c.label);
          ejections.remove(c.label);
        }
      }
    },
    request(model, code, durationSeconds, reason) {
      counterFor(cells(model), code, reason).value++;
      duration.observe(traffic(model).duration, durationSeconds > 0 ? durationSeconds : 0);
    },
    timeToFirstToken(model, seconds) {
      ttft.observe(traffic(model).ttft, seconds > 0 ? seconds : 0);
    },
    upstreamError(model, reason) {
      const c = cells(model);
      c.reasons.add(reason);
      upstreamErrors.cell(c.label, reason).value++;
    },
    inFlight(model, delta) {
      traffic(model).inFlight.value += delta;
    },
    queueDepth(model, depth) {
      traffic(model).queueDepth.value = depth;
    },
    queueWait(model, seconds) {
      queueWait.observe(traffic(model).queueWait, seconds > 0 ? seconds : 0);
    },
    promptTokens(model, evaluated, cached) {
      const t = traffic(model);
      t.evaluated.value += evaluated;
      t.cached.value += cached;
    },
    affinity(model, hit) {
      const c = traffic(model);
      if (hit) c.hits.value++;
      else c.moves.value++;
    },
    replicaEjected(model, out) {
      const c = cells(model);
      c.ejections = true;
      ejected.cell(c.label).value += out ? 1 : -1;
      if (out) ejections.cell(c.label).value++;
    },
  };
}
