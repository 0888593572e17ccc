/**
 * A router's load report holds each model's peak since the reader's last report (router/load-report.ts,
 * #42): a burst that came and went between two reports is seen. Table tests of the pure merge
 * (`higher`, `peakReport`), then RouterLoad on a fake clock and a fake figures source (pure logic):
 * the burst between two reports, a report clearing its reader's peaks, two readers (the pass, the
 * etcd refresh) that do not take each other's, and countingInFlight sampling a model before a
 * request leaves and after one comes. Last, what it changes for the decision: bursts between the
 * passes' looks hold a scale-in off.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { noRouterMetrics } from '../../src/metrics/ports.js';
import { countingInFlight, higher, peakReport, RouterLoad, type ModelLoad } from '../../src/router/load-report.js';
import { decideScale, loadOf, type ScaleRecord } from '../../src/scale/decide.js';

const l = (busy: number, queued: number, waitMs?: number): ModelLoad => ({ busy, queued, ...(waitMs === undefined ? {} : { waitMs }) });

describe('the higher of two samples', () => {
  const table: [name: string, a: ModelLoad | undefined, b: ModelLoad, want: ModelLoad][] = [
    ['no peak yet: the sample', undefined, l(1, 2, 300), l(1, 2, 300)],
    ['more requests win', l(1, 0), l(1, 4, 900), l(1, 4, 900)],
    ['fewer requests lose', l(3, 3, 2000), l(1, 0), l(3, 3, 2000)],
    ['a tie: the one with more busy', l(1, 2), l(3, 0), l(3, 0)],
    ['never a mix of two instants: 3 busy then 1 busy + 1 queued is 3 requests, not 4', l(3, 0), l(1, 1), l(3, 0)],
    ['the wait the longer of the two, whichever sample is higher', l(1, 1, 5000), l(2, 3, 200), l(2, 3, 5000)],
    ['no wait in either: none', l(1, 0), l(2, 0), l(2, 0)],
  ];
  for (const [name, a, b, want] of table) {
    it(name, () => assert.deepEqual(higher(a, b), want));
  }
});

describe('a report\'s figures: the peaks with the figures now', () => {
  const table: [name: string, peaks: [string, ModelLoad][], now: Record<string, ModelLoad>, want: Record<string, ModelLoad>][] = [
    ['nothing: nothing', [], {}, {}],
    ['no peak: the figures now', [], { m: l(1, 2) }, { m: l(1, 2) }],
    ['a burst that has ended: its peak', [['m', l(1, 5, 800)]], {}, { m: l(1, 5, 800) }],
    ['now higher than the peak: now', [['m', l(1, 0)]], { m: l(1, 3, 400) }, { m: l(1, 3, 400) }],
    ['one model each way', [['a', l(2, 2)]], { b: l(1, 0) }, { a: l(2, 2), b: l(1, 0) }],
  ];
  for (const [name, peaks, now, want] of table) {
    it(name, () => assert.deepEqual(peakReport(new Map(peaks), now), want));
  }
});

/** A RouterLoad on a fake clock over figures the test sets. */
function fakeRouter(): { load: RouterLoad; set: (model: string, f: ModelLoad | null) => void; tick: (ms: number) => void } {
  let t = 1_700_000_000_000;
  const figures = new Map<string, ModelLoad>();
  const load = new RouterLoad('r1', () => t);
  load.attach(() => Object.fromEntries(figures));
  return {
    load,
    set: (model, f) => {
      if (f === null) figures.delete(model);
      else figures.set(model, f);
      load.sample(model);
    },
    tick: (ms) => void (t += ms),
  };
}

describe('RouterLoad: the peak since the reader\'s last report', () => {
  it('a burst between two reports is in the second; the one after has only the figures then', () => {
    const r = fakeRouter();
    assert.deepEqual(r.load.report().models, {});
    r.tick(1000);
    r.set('m', l(1, 0));
    r.set('m', l(1, 5, 1200));
    r.set('m', l(1, 1, 2500));
    r.set('m', null); // over before the next report
    r.tick(4000);
    const second = r.load.report();
    assert.deepEqual(second.models, { m: l(1, 5, 2500) });
    assert.equal(second.at, 1_700_000_005_000);
    assert.deepEqual(r.load.report().models, {}, 'the burst is reported once');
  });

  it('a steady load: each report has it, with no sample in between', () => {
    const r = fakeRouter();
    r.set('m', l(2, 1, 300));
    assert.deepEqual(r.load.report().models, { m: l(2, 1, 300) });
    assert.deepEqual(r.load.report().models, { m: l(2, 1, 300) });
  });

  it('two readers: each sees every peak, neither takes the other\'s', () => {
    const r = fakeRouter();
    const pass = r.load.reporter();
    const refresh = r.load.reporter();
    r.set('m', l(1, 4));
    r.set('m', null);
    assert.deepEqual(refresh().models, { m: l(1, 4) });
    assert.deepEqual(pass().models, { m: l(1, 4) });
    assert.deepEqual(r.load.report().models, { m: l(1, 4) }, 'the default reader too');
    assert.deepEqual(pass().models, {});
  });

  it('a router that gives one model\'s figures: a sample reads that model only', () => {
    const asked: string[] = [];
    const load = new RouterLoad('r1', () => 5);
    load.attach(() => ({ a: l(1, 0), b: l(1, 0) }), (m) => (asked.push(m), m === 'a' ? l(1, 3) : undefined));
    load.sample('a');
    load.sample('b');
    assert.deepEqual(asked, ['a', 'b']);
    assert.deepEqual(load.report().models, { a: l(1, 3), b: l(1, 0) });
  });

  it('no router attached: no figures, and a sample is a no-op', () => {
    const load = new RouterLoad('r1', () => 5);
    load.sample('m');
    assert.deepEqual(load.report(), { router: 'r1', at: 5, models: {} });
  });
});

describe('countingInFlight samples a model before a request leaves and after one comes', () => {
  it('the count the sample reads is the higher of each step', () => {
    const counts = new Map<string, number>();
    const seen: [string, number][] = [];
    const base = Object.assign(Object.create(noRouterMetrics) as typeof noRouterMetrics, { inFlight: (m: string, d: number) => void seen.push([`base ${m} ${d}`, counts.get(m) ?? 0]) });
    const port = countingInFlight(base, counts, (m) => seen.push([`sample ${m}`, counts.get(m) ?? 0]));
    port.inFlight('m', 1);
    port.inFlight('m', 1);
    port.inFlight('m', -1);
    port.inFlight('m', -1);
    assert.deepEqual(seen, [
      ['sample m', 1], ['base m 1', 1],
      ['sample m', 2], ['base m 1', 2],
      ['sample m', 2], ['base m -1', 1],
      ['sample m', 1], ['base m -1', 0],
    ]);
    assert.equal(counts.has('m'), false, 'a model with none in the router leaves the map');
  });
});

describe('what the peaks change for the decision', () => {
  // 3 one-slot replicas; bursts of 3 requests come between the passes' looks, which find none in flight
  const scale = { target: 0.8, upAfterMs: 10_000, downAfterMs: 60_000 };
  const run = (withPeaks: boolean): ScaleRecord => {
    const r = fakeRouter();
    const read = withPeaks ? () => r.load.report() : () => ({ router: 'r1', at: r.load.report().at, models: {} });
    let record: ScaleRecord = { count: 3 };
    for (let pass = 0; pass < 20; pass++) {
      r.tick(2000);
      r.set('m', l(3, 0)); // a burst between two looks
      r.set('m', null);
      r.tick(3000);
      const report = read();
      const d = decideScale({ range: { min: 0, max: 3 }, slots: 1, scale, load: loadOf([report], 'm', report.at), record, now: report.at });
      record = d.record;
    }
    return record;
  };
  it('instant figures read idle at every look and step down after down_after; the peaks hold the count', () => {
    assert.ok(run(false).count < 3, 'the looks alone miss the bursts');
    assert.equal(run(true).count, 3);
  });
});
