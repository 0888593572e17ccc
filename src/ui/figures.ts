/**
 * The router's figures per model for the status page, from the controller's own counters (the
 * metrics registry /metrics exposes): requests per second and the median latency over the last
 * window, queue depth now, and the share of prompt tokens served from the replicas' prompt cache.
 * `routerFigures` is pure (two readings → figures); `FiguresWindow` keeps the readings of the
 * last window (pure); `readRouterCounters` reads the registry.
 */
import type { Registry } from 'prom-client';
import { MetricNames as N } from '../metrics/names.js';

export interface RouterCounters {
  /** Epoch ms of the reading. */
  readonly at: number;
  readonly requests: ReadonlyMap<string, number>;
  /** Cumulative duration histogram per model: upper bound (s) → count. */
  readonly buckets: ReadonlyMap<string, ReadonlyMap<number, number>>;
  readonly queue: ReadonlyMap<string, number>;
  readonly promptEvaluated: ReadonlyMap<string, number>;
  readonly promptCached: ReadonlyMap<string, number>;
}

export interface RouterFigures {
  readonly requestsPerSecond: number;
  /** Median request duration (upper bound of its bucket) over the window; null without requests. */
  readonly p50Seconds: number | null;
  readonly queueDepth: number;
  /** Prompt tokens from the cache over all prompt tokens, over the window; null without any. */
  readonly cacheShare: number | null;
}

type Sample = { labels: Record<string, string | number>; value: number; metricName?: string };

async function samples(r: Registry, name: string): Promise<Sample[]> {
  const m = r.getSingleMetric(name);
  if (!m) return [];
  return ((await m.get()) as { values: Sample[] }).values;
}

const add = (m: Map<string, number>, k: string, v: number): void => void m.set(k, (m.get(k) ?? 0) + v);

export async function readRouterCounters(r: Registry, at: number): Promise<RouterCounters> {
  const requests = new Map<string, number>();
  for (const s of await samples(r, N.routerRequestsTotal)) add(requests, String(s.labels.model), s.value);
  const buckets = new Map<string, Map<number, number>>();
  for (const s of await samples(r, N.routerRequestDurationSeconds)) {
    if (!s.metricName?.endsWith('_bucket')) continue;
    const model = String(s.labels.model);
    const le = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
    const b = buckets.get(model) ?? new Map<number, number>();
    b.set(le, s.value);
    buckets.set(model, b);
  }
  const queue = new Map<string, number>();
  for (const s of await samples(r, N.routerQueueDepth)) add(queue, String(s.labels.model), s.value);
  const promptEvaluated = new Map<string, number>();
  const promptCached = new Map<string, number>();
  for (const s of await samples(r, N.routerPromptTokensTotal)) add(s.labels.source === 'cache' ? promptCached : promptEvaluated, String(s.labels.model), s.value);
  return { at, requests, buckets, queue, promptEvaluated, promptCached };
}

/** Figures per model between two readings (a counter that went down — a restart — counts from 0). */
export function routerFigures(prev: RouterCounters | null, next: RouterCounters): Map<string, RouterFigures> {
  const out = new Map<string, RouterFigures>();
  const dt = prev ? Math.max(0.001, (next.at - prev.at) / 1000) : 0;
  const delta = (a: number | undefined, b: number): number => (a === undefined || a > b ? b : b - a);
  const models = new Set([...next.requests.keys(), ...next.queue.keys()]);
  for (const m of models) {
    if (m === '') continue;
    const reqs = prev ? delta(prev.requests.get(m), next.requests.get(m) ?? 0) : 0;
    let p50: number | null = null;
    const nb = next.buckets.get(m);
    if (nb) {
      const pb = prev?.buckets.get(m);
      const les = [...nb.keys()].sort((a, b) => a - b);
      const counts = les.map((le) => delta(pb?.get(le), nb.get(le)!));
      const total = counts.at(-1) ?? 0;
      if (total > 0) p50 = les[counts.findIndex((c) => c >= total / 2)] ?? null;
    }
    const ev = delta(prev?.promptEvaluated.get(m), next.promptEvaluated.get(m) ?? 0);
    const ca = delta(prev?.promptCached.get(m), next.promptCached.get(m) ?? 0);
    out.set(m, { requestsPerSecond: prev ? reqs / dt : 0, p50Seconds: p50, queueDepth: next.queue.get(m) ?? 0, cacheShare: ev + ca > 0 ? ca / (ev + ca) : null });
  }
  return out;
}

/**
 * The readings of a sliding window, oldest first: each new reading gives the figures from the
 * newest reading at least `windowMs` older than it (the window's start) to it; before a reading
 * that old exists, from the first one (the window is as long as the readings go back). The first
 * reading gives none: a rate needs two. `clear` forgets them all (nobody looks: a later window must
 * not span the time nobody read).
 */
export class FiguresWindow {
  private readings: RouterCounters[] = [];

  constructor(readonly windowMs: number) {}

  add(next: RouterCounters): Map<string, RouterFigures> | null {
    const last = this.readings.at(-1);
    // a reading older than the newest one (an earlier read that finished late) is not a window's end
    if (last && next.at < last.at) return null;
    this.readings.push(next);
    let start = 0;
    for (let i = 1; i < this.readings.length - 1; i++) if (this.readings[i]!.at <= next.at - this.windowMs) start = i;
    if (start > 0) this.readings = this.readings.slice(start);
    return this.readings.length < 2 ? null : routerFigures(this.readings[0]!, next);
  }

  clear(): void {
    this.readings = [];
  }

  get size(): number {
    return this.readings.length;
  }
}
