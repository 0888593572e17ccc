/**
 * Counters, gauges and histograms for the router's data path: plain numbers per label set ("cells"),
 * turned into prom-client's exposition only when scraped.
 *
 * prom-client's own Counter, Gauge and Histogram validate and hash the label set on every update,
 * even through a cached `labels()` child: about a microsecond each, and a proxied request makes five.
 * Here the caller looks a cell up once (per model) and an update is a property write.
 *
 * Each class registers in a prom-client Registry like prom-client's metrics (the registry reads
 * `name`, `help`, `type`, `aggregator`, `get()` and `reset()`), and prints exactly what prom-client's
 * class of the same type prints for the same updates (test/unit/metrics-cells.test.ts compares them).
 */
import type { Metric, Registry } from 'prom-client';

/** One sample as prom-client's registry reads it from `get()`. */
interface Sample {
  readonly labels: Labels;
  readonly value: number;
  readonly metricName?: string;
}

/** What `get()` returns: the shape of prom-client's own metrics' `get()`. */
interface Exposed {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  readonly aggregator: 'sum';
  readonly values: Sample[];
}

export interface CellMetricOptions {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  readonly registers: readonly Registry[];
}

type Labels = Record<string, string | number>;

/** The label-set → cell table shared by the three kinds. */
abstract class CellMetric<C extends { readonly labels: Labels }> {
  readonly name: string;
  readonly help: string;
  abstract readonly type: 'counter' | 'gauge' | 'histogram';
  readonly aggregator = 'sum' as const;
  protected readonly labelNames: readonly string[];
  protected cells = new Map<string, C>();

  constructor(o: CellMetricOptions) {
    this.name = o.name;
    this.help = o.help;
    this.labelNames = o.labelNames;
    for (const r of o.registers) r.registerMetric(this as unknown as Metric);
  }

  /** The cell of these label values (in labelNames order), created at zero on first use. */
  cell(...values: string[]): C {
    const key = values.length === 1 ? values[0]! : values.join('\u0000');
    let c = this.cells.get(key);
    if (!c) {
      if (values.length !== this.labelNames.length) throw new Error(`${this.name}: expected ${this.labelNames.length} label values, got ${values.length}`);
      const labels: Labels = {};
      this.labelNames.forEach((n, i) => (labels[n] = values[i]!));
      c = this.create(labels);
      this.cells.set(key, c);
    }
    return c;
  }

  /** Drops a label set (its series leaves the exposition). */
  remove(...values: string[]): void {
    this.cells.delete(values.length === 1 ? values[0]! : values.join('\u0000'));
  }

  reset(): void {
    this.cells = new Map();
  }

  protected abstract create(labels: Labels): C;
  protected abstract values(): Sample[];

  async get(): Promise<Exposed> {
    return { name: this.name, help: this.help, type: this.type, values: this.values(), aggregator: this.aggregator };
  }
}

export interface ValueCell {
  readonly labels: Labels;
  value: number;
}

/** One number per label set: the storage of counters and gauges. */
abstract class ValueCells extends CellMetric<ValueCell> {
  protected create(labels: Labels): ValueCell {
    return { labels, value: 0 };
  }
  protected values(): Sample[] {
    return [...this.cells.values()].map((c) => ({ labels: c.labels, value: c.value }));
  }
}

/** A counter: `cell(...).value += n` (never decrease it). */
export class CellCounter extends ValueCells {
  readonly type = 'counter' as const;
}

/** A gauge: `cell(...).value` set, increased or decreased freely. */
export class CellGauge extends ValueCells {
  readonly type = 'gauge' as const;
}

export interface HistogramCell {
  readonly labels: Labels;
  /** Observations per bucket (not cumulative); the last slot counts those above every bound. */
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

/** A histogram: `observe(cell, value)`. */
export class CellHistogram extends CellMetric<HistogramCell> {
  readonly type = 'histogram' as const;
  readonly bounds: readonly number[];

  constructor(o: CellMetricOptions & { readonly buckets: readonly number[] }) {
    super(o);
    this.bounds = [...o.buckets].sort((a, b) => a - b);
  }

  protected create(labels: Labels): HistogramCell {
    return { labels, counts: new Float64Array(this.bounds.length + 1), sum: 0, count: 0 };
  }

  observe(c: HistogramCell, value: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    c.counts[i]!++;
    c.sum += value;
    c.count++;
  }

  protected values(): Sample[] {
    const out: Sample[] = [];
    const bucket = `${this.name}_bucket`;
    for (const c of this.cells.values()) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += c.counts[i]!;
        out.push({ labels: { le, ...c.labels }, value: acc, metricName: bucket });
      });
      out.push({ labels: { le: '+Inf', ...c.labels }, value: c.count, metricName: bucket });
      out.push({ labels: { ...c.labels }, value: c.sum, metricName: `${this.name}_sum` });
      out.push({ labels: { ...c.labels }, value: c.count, metricName: `${this.name}_count` });
    }
    return out;
  }
}
