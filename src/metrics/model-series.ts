/**
 * The per-model fleet gauges (desired, ready, state, …), computed from the latest snapshot's models
 * when the registry renders them, instead of being stored series by series. At 1,000 models they are
 * 16,000 series: kept in prom-client gauges (and a map beside each to find the stale ones) they held
 * ~50 objects and ~1 KB of key strings per model for as long as the model existed, and a steady pass
 * re-keyed them all. Here nothing is held per model but the snapshot the controller holds anyway,
 * and the rows are made only when the text is rendered (once per change: see registry.ts).
 *
 * That render is `text()`: the exposition lines are written here, as prom-client writes them (a test
 * holds the two equal), without its per-row objects, and the loop gets a turn every RENDER_SLICE
 * models. Through prom-client the first scrape after a change held the event loop for 100–170 ms at
 * 1,000 models (every request the router was serving waited behind it) and for seconds at 10,000.
 */
import { createHash } from 'node:crypto';
import type { Registry } from 'prom-client';
import type { ModelView } from '../reconciler/view.js';

type Labels = Record<string, string>;
export type Row = readonly [labels: Labels, value: number | boolean];

/** Models whose lines of one gauge are rendered between two turns of the event loop. */
export const RENDER_SLICE = 200;
/** About how much text a part of the rendered text holds (the scrape sends 64 KiB slices). */
const PART_CHARS = 64 * 1024;

/** As prom-client escapes HELP text and label values. */
const escapeText = (s: string): string => s.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const escapeLabel = (s: string): string => escapeText(s).replace(/"/g, '\\"');
/** As prom-client writes a sample's value. */
function valueText(v: number): string {
  if (Number.isNaN(v)) return 'Nan';
  if (!Number.isFinite(v)) return v < 0 ? '-Inf' : '+Inf';
  return `${v}`;
}
const numeric = (v: number | boolean): number => (typeof v === 'boolean' ? (v ? 1 : 0) : v);

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
    for (const m of this.models()) for (const [labels, v] of this.rows(m)) values.push({ labels, value: numeric(v) });
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** The name as the exposition writes it. */
  private get exposed(): string {
    return escapeText(this.name);
  }

  /** The HELP and TYPE lines. */
  head(): string[] {
    return [`# HELP ${this.exposed} ${escapeText(this.help)}`, `# TYPE ${this.exposed} ${this.type}`];
  }

  /** A model's sample lines. */
  lines(m: ModelView, into: string[]): void {
    const name = this.exposed;
    for (const [labels, v] of this.rows(m)) {
      let l = '';
      for (const k in labels) l += `${l === '' ? '' : ','}${k}="${escapeLabel(labels[k]!)}"`;
      into.push(`${name}${l === '' ? '' : `{${l}}`} ${valueText(numeric(v))}`);
    }
  }

  reset(): void {}
}

/** The gauges, their models and whether an update changed what they show. */
export class ModelSeries {
  private models: readonly ModelView[] = [];
  private inputsDigest: string | null = null;
  private readonly gauges: SnapshotGauge[] = [];

  constructor(
    private readonly registry: Registry,
    /** Everything of a model its rows read, as one string: equal strings, equal rows. */
    private readonly inputs: (m: ModelView) => string,
  ) {}

  gauge(name: string, help: string, labelNames: readonly string[], rows: (m: ModelView) => readonly Row[]): void {
    const g = new SnapshotGauge(name, help, labelNames, () => this.models, rows);
    this.gauges.push(g);
    this.registry.registerMetric(g as never);
  }

  /**
   * The exposition text of every gauge as UTF-8 parts of about PART_CHARS: together what the
   * registry would render (in the order registered) of the models at the call. The loop gets a turn
   * after each RENDER_SLICE models of a gauge, so no turn holds it for long at any fleet size.
   */
  async text(): Promise<Buffer[]> {
    const models = this.models;
    const parts: Buffer[] = [];
    let pending = '';
    const add = (text: string): void => {
      pending += text;
      if (pending.length >= PART_CHARS) {
        parts.push(Buffer.from(pending));
        pending = '';
      }
    };
    for (let gi = 0; gi < this.gauges.length; gi++) {
      add(`${gi === 0 ? '' : '\n\n'}${this.gauges[gi]!.head().join('\n')}`);
      for (let from = 0; from < models.length; from += RENDER_SLICE) {
        const lines: string[] = [];
        for (const m of models.slice(from, from + RENDER_SLICE)) this.gauges[gi]!.lines(m, lines);
        if (lines.length > 0) add(`\n${lines.join('\n')}`);
        await new Promise<void>((r) => setImmediate(r));
      }
    }
    add('\n');
    if (pending !== '') parts.push(Buffer.from(pending));
    return parts;
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
