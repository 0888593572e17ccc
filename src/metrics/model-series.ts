/**
 * The per-model fleet gauges (desired, ready, state, …), computed from the latest snapshot's models
 * when the registry renders them, instead of being stored series by series. At 1,000 models they are
 * 16,000 series: kept in prom-client gauges (and a map beside each to find the stale ones) they held
 * ~50 objects and ~1 KB of key strings per model for as long as the model existed, and a steady pass
 * re-keyed them all. Here nothing is held per model but the snapshot the controller holds anyway,
 * and the rows are made only when the text is rendered (once per change: see registry.ts).
 */
import { createHash } from 'node:crypto';
import type { Registry } from 'prom-client';
import type { ModelView } from '../reconciler/view.js';

type Labels = Record<string, string>;
export type Row = readonly [labels: Labels, value: number | boolean];

/** What prom-client's registry needs of a metric to render, list and merge it. */
class SnapshotGauge {
  readonly type = 'gauge';
  readonly aggregator = 'sum';

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    private readonly models: () => readonly ModelView[],
    private readonly rows: (m: ModelView) => readonly Row[],
  ) {}

  async get(): Promise<{ name: string; help: string; type: 'gauge'; aggregator: 'sum'; values: { labels: Labels; value: number }[] }> {
    const values: { labels: Labels; value: number }[] = [];
    for (const m of this.models()) for (const [labels, v] of this.rows(m)) values.push({ labels, value: typeof v === 'boolean' ? (v ? 1 : 0) : v });
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {}
}

/** The gauges, their models and whether an update changed what they show. */
export class ModelSeries {
  private models: readonly ModelView[] = [];
  private inputsDigest: string | null = null;

  constructor(
    private readonly registry: Registry,
    /** Everything of a model its rows read, as one string: equal strings, equal rows. */
    private readonly inputs: (m: ModelView) => string,
  ) {}

  gauge(name: string, help: string, labelNames: readonly string[], rows: (m: ModelView) => readonly Row[]): void {
    this.registry.registerMetric(new SnapshotGauge(name, help, labelNames, () => this.models, rows) as never);
  }

  /** Takes the snapshot's models (always: an older array is not kept alive); true when a row may differ from the last update's. */
  update(models: readonly ModelView[]): boolean {
    this.models = models;
    const h = createHash('sha1');
    for (const m of models) h.update(this.inputs(m)).update('\u0001');
    const digest = h.digest('hex');
    if (digest === this.inputsDigest) return false;
    this.inputsDigest = digest;
    return true;
  }
}
