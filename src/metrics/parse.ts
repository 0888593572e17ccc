/**
 * A small parser for the Prometheus text exposition format — enough to read llmgw's own /metrics
 * back (tests, `llmgw ctl` diagnostics). Not a general OpenMetrics parser.
 */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const LINE_RE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/;
const LABEL_RE = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/gy;

function unescape(v: string): string {
  return v.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
}

function parseValue(v: string): number {
  if (v === '+Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  return Number(v);
}

export function parseExposition(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = LINE_RE.exec(line);
    if (!m || m[1] === undefined || m[3] === undefined) throw new Error(`unparseable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    if (m[2] !== undefined && m[2] !== '') {
      LABEL_RE.lastIndex = 0;
      let consumed = 0;
      for (let l = LABEL_RE.exec(m[2]); l; l = LABEL_RE.exec(m[2])) {
        labels[l[1] as string] = unescape(l[2] as string);
        consumed = LABEL_RE.lastIndex;
      }
      if (consumed !== m[2].length) throw new Error(`unparseable labels: ${line}`);
    }
    out.push({ name: m[1], labels, value: parseValue(m[3]) });
  }
  return out;
}

/** Samples of a metric whose labels include every given label (exact values). */
export function findSamples(samples: readonly Sample[], name: string, labels: Readonly<Record<string, string>> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** The value of the one sample matching, or undefined when there is none (throws when several match). */
export function sampleValue(samples: readonly Sample[], name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  const found = findSamples(samples, name, labels);
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}
