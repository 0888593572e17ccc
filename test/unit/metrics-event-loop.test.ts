/** The event-loop delay gauges (#28): the staggered windows (fakes) and the real monitor on this process's loop. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { StaggeredDelay, registerEventLoopDelayMetrics, type DelayHistogram } from '../../src/metrics/event-loop.js';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { until } from '../harness/wait.js';

/** A histogram of recorded delays (ms), read as perf_hooks gives them (ns). */
class FakeHistogram implements DelayHistogram {
  values: number[] = [];
  record(...ms: number[]): void {
    this.values.push(...ms);
  }
  get count(): number {
    return this.values.length;
  }
  get max(): number {
    return Math.max(0, ...this.values) * 1e6;
  }
  percentile(p: number): number {
    const s = [...this.values].sort((a, b) => a - b);
    return (s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? 0) * 1e6;
  }
  reset(): void {
    this.values = [];
  }
}

describe('StaggeredDelay', () => {
  it('reads 0 before any sample, not the empty histogram sentinels', () => {
    const d = new StaggeredDelay(new FakeHistogram(), new FakeHistogram());
    assert.deepEqual(d.read(), { p99Seconds: 0, maxSeconds: 0 });
  });

  it('reads the histogram that has run longer, and a rotation resets the one that ran a whole window', () => {
    const [a, b] = [new FakeHistogram(), new FakeHistogram()];
    const d = new StaggeredDelay(a, b);
    const both = (...ms: number[]): void => {
      a.record(...ms);
      b.record(...ms);
    };
    both(...Array<number>(99).fill(1), 200); // first half window: both see it
    assert.deepEqual(d.read(), { p99Seconds: 0.001, maxSeconds: 0.2 });
    d.rotate(); // a ran a whole window: reset; b (which saw the 200 ms) is now the older
    both(...Array<number>(100).fill(2));
    assert.equal(a.count, 100);
    assert.equal(d.read().maxSeconds, 0.2, 'the 200 ms stall is still in the window (b has run 1–1.5 windows)');
    d.rotate(); // b reset: the stall leaves the figures; a holds the last window (100 × 2 ms, then 3 ms)
    both(3);
    assert.deepEqual(d.read(), { p99Seconds: 0.002, maxSeconds: 0.003 });
    assert.equal(b.count, 1);
  });

  it('falls back to the newer histogram while the older one is empty (just after a rotation)', () => {
    const [a, b] = [new FakeHistogram(), new FakeHistogram()];
    const d = new StaggeredDelay(a, b);
    b.record(5);
    assert.deepEqual(d.read(), { p99Seconds: 0.005, maxSeconds: 0.005 });
  });
});

describe('llmgw_event_loop_delay_*_seconds on the real loop', () => {
  it('a 150 ms synchronous stall shows in the max gauge; the p99 of mostly idle ticks stays below it', async () => {
    const registry = new Registry();
    const m = registerEventLoopDelayMetrics(registry);
    try {
      const gauges = async (): Promise<{ max: number | undefined; p99: number | undefined }> => {
        const samples = parseExposition(await registry.metrics());
        return { max: sampleValue(samples, 'llmgw_event_loop_delay_max_seconds'), p99: sampleValue(samples, 'llmgw_event_loop_delay_p99_seconds') };
      };
      // the monitors have taken samples of the idle loop first (a sample is how late a 10 ms tick ran: above 0)
      await until('the monitors\' first samples', 10_000, async () => ((await gauges()).max ?? 0) > 0);
      const end = performance.now() + 150;
      while (performance.now() < end); // the loop is held: no timer runs
      // the monitor's next tick records how late it ran
      const { max, p99 } = await until('the 150 ms stall in the max gauge', 10_000, async () => {
        const g = await gauges();
        return g.max !== undefined && g.max >= 0.14 && { max: g.max, p99: g.p99 };
      });
      assert.ok(p99 !== undefined && p99 >= 0 && p99 <= max, `p99 ${p99} s within [0, max]`);
    } finally {
      m.close();
    }
  });
});
