import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { CellCounter, CellGauge, CellHistogram } from '../../src/metrics/cells.js';

const BUCKETS = [0.01, 0.1, 1, 10];

/** The same updates on prom-client's classes and on the cells, in two registries. */
function both(): { prom: Registry; cells: Registry; apply: (f: (m: Ops) => void) => void } {
  const prom = new Registry();
  const cells = new Registry();
  const pc = new Counter({ name: 't_requests_total', help: 'Requests, "quoted" \\ help.', labelNames: ['model', 'code'], registers: [prom] });
  const pg = new Gauge({ name: 't_in_flight', help: 'In flight.', labelNames: ['model'], registers: [prom] });
  const ph = new Histogram({ name: 't_duration_seconds', help: 'Duration.', labelNames: ['model'], buckets: BUCKETS, registers: [prom] });
  const cc = new CellCounter({ name: 't_requests_total', help: 'Requests, "quoted" \\ help.', labelNames: ['model', 'code'], registers: [cells] });
  const cg = new CellGauge({ name: 't_in_flight', help: 'In flight.', labelNames: ['model'], registers: [cells] });
  const ch = new CellHistogram({ name: 't_duration_seconds', help: 'Duration.', labelNames: ['model'], buckets: BUCKETS, registers: [cells] });
  const ops: Ops[] = [
    {
      count: (m, code) => pc.inc({ model: m, code }),
      gauge: (m, d) => pg.inc({ model: m }, d),
      observe: (m, v) => ph.observe({ model: m }, v),
    },
    {
      count: (m, code) => cc.cell(m, code).value++,
      gauge: (m, d) => (cg.cell(m).value += d),
      observe: (m, v) => ch.observe(ch.cell(m), v),
    },
  ];
  return { prom, cells, apply: (f) => ops.forEach(f) };
}

interface Ops {
  count(model: string, code: string): void;
  gauge(model: string, delta: number): void;
  observe(model: string, value: number): void;
}

describe('metrics: cells print what prom-client prints', () => {
  it('counters, gauges and histograms, with label values that need escaping and values on bucket bounds', async () => {
    const { prom, cells, apply } = both();
    apply((m) => {
      m.count('chat', '200');
      m.count('chat', '200');
      m.count('chat', '503');
      m.count('', '404');
      m.count('we"ird\\name\nx', '200');
      m.gauge('chat', 1);
      m.gauge('chat', 1);
      m.gauge('chat', -1);
      m.gauge('embed', 0);
      for (const v of [0, 0.005, 0.01, 0.0100001, 0.1, 0.5, 1, 9.99, 10, 11, 1e6]) m.observe('chat', v);
      m.observe('embed', 0.2);
    });
    const expected = await prom.metrics();
    assert.equal(await cells.metrics(), expected);
    // and the same JSON form (getMetricsAsJSON), label order aside
    const norm = (j: unknown): string => JSON.stringify(j, (_k, v: unknown) => (v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort()) : v));
    const strip = (arr: Awaited<ReturnType<Registry['getMetricsAsJSON']>>) => arr.map(({ name, help, type, values }) => ({ name, help, type, values: values.map((v) => ({ labels: v.labels, value: v.value, metricName: (v as { metricName?: string }).metricName })) }));
    assert.equal(norm(strip(await cells.getMetricsAsJSON())), norm(strip(await prom.getMetricsAsJSON())));
  });

  it('resetMetrics empties them; a second registration under the same name is refused', async () => {
    const { prom, cells, apply } = both();
    apply((m) => m.observe('chat', 1));
    prom.resetMetrics();
    cells.resetMetrics();
    assert.equal(await cells.metrics(), await prom.metrics());
    assert.throws(() => new CellGauge({ name: 't_in_flight', help: 'x', labelNames: ['model'], registers: [cells] }), /already been registered/);
  });

  it('refuses a wrong number of label values', () => {
    const c = new CellCounter({ name: 'x_total', help: 'x', labelNames: ['a', 'b'], registers: [] });
    assert.throws(() => c.cell('only-one'), /expected 2 label values, got 1/);
  });
});
