/**
 * The controller's event-loop delay (llmgw_event_loop_delay_p99_seconds / _max_seconds): how late
 * the loop ran a timer, as `perf_hooks.monitorEventLoopDelay` samples it. The router, the admin API
 * and the reconciler share this one loop, so a long synchronous step anywhere (a scrape, a pass, a
 * spec load) shows here as the time a proxied request waited behind it.
 *
 * The figures cover a window of the last 30–60 s, the same for every scraper (nothing is reset by
 * a scrape): two monitors run staggered by half a window, each is reset every window, and a read
 * takes the one that has run longer.
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { Gauge, type Registry } from 'prom-client';
import { MetricNames } from './names.js';

/** What a read needs of a delay histogram (values in nanoseconds, as perf_hooks gives them). */
export interface DelayHistogram {
  percentile(p: number): number;
  readonly max: number;
  readonly count: number;
  reset(): void;
}

export interface DelayFigures {
  readonly p99Seconds: number;
  readonly maxSeconds: number;
}

/**
 * Two histograms, reset in turn every half window: the older one always holds between half a
 * window and a whole one. Pure bookkeeping; the caller calls rotate() every half window.
 */
export class StaggeredDelay {
  private older: DelayHistogram;
  private newer: DelayHistogram;

  constructor(a: DelayHistogram, b: DelayHistogram) {
    this.older = a;
    this.newer = b;
  }

  /** Half a window passed: the older histogram has run a whole window; it starts again as the newer. */
  rotate(): void {
    const full = this.older;
    full.reset();
    this.older = this.newer;
    this.newer = full;
  }

  read(): DelayFigures {
    // before the first rotation both ran equally long; an empty histogram reads 0, not its sentinels
    const h = this.older.count > 0 ? this.older : this.newer;
    if (h.count === 0) return { p99Seconds: 0, maxSeconds: 0 };
    return { p99Seconds: h.percentile(99) / 1e9, maxSeconds: h.max / 1e9 };
  }
}

export interface EventLoopDelayMetrics {
  /** Stops the monitors and the rotation timer. */
  close(): void;
}

/** Window of the figures: they cover the last WINDOW_MS / 2 to WINDOW_MS. */
export const EVENT_LOOP_WINDOW_MS = 60_000;
/** Sampling period of the monitors (perf_hooks' default). */
const RESOLUTION_MS = 10;

export function registerEventLoopDelayMetrics(registry: Registry, windowMs = EVENT_LOOP_WINDOW_MS): EventLoopDelayMetrics {
  const monitors: IntervalHistogram[] = [monitorEventLoopDelay({ resolution: RESOLUTION_MS }), monitorEventLoopDelay({ resolution: RESOLUTION_MS })];
  for (const m of monitors) m.enable();
  const delay = new StaggeredDelay(monitors[0]!, monitors[1]!);
  const timer = setInterval(() => delay.rotate(), windowMs / 2);
  timer.unref();
  new Gauge({
    name: MetricNames.eventLoopDelayP99Seconds,
    help: 'p99 of how late the event loop ran a timer over the last 30-60 s (the router, admin API and reconciler share the loop).',
    registers: [registry],
    collect() {
      this.set(delay.read().p99Seconds);
    },
  });
  new Gauge({
    name: MetricNames.eventLoopDelayMaxSeconds,
    help: 'Longest the event loop ran a timer late over the last 30-60 s: the longest a request waited behind synchronous work.',
    registers: [registry],
    collect() {
      this.set(delay.read().maxSeconds);
    },
  });
  return {
    close() {
      clearInterval(timer);
      for (const m of monitors) m.disable();
    },
  };
}
