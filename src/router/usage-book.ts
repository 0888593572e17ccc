/**
 * Usage per key × model in memory, for GET /admin/v1/usage and `llmgw ctl usage`: a UsageSink that
 * keeps one aggregate per key × model per minute for the last `retainMinutes` (default 24 h), so a
 * query `since` a time sums the minutes from that one on. Requests, errors (status ≥ 400, the client
 * going away — 499 — not counted as one), tokens by kind, and latencies in log-spaced buckets (10 %
 * apart) for the p50. The clock is injected. Counts restart with the process (the usage log,
 * usage-log.ts, is what survives it).
 */
import type { UsageRow } from '../wire/usage.js';
import type { UsageRecord, UsageSink } from './usage.js';

export const MINUTE_MS = 60_000;

/** Latency buckets: bucket i holds durations in [B^i, B^(i+1)) milliseconds. */
const B = 1.1;
const LOG_B = Math.log(B);

interface Agg {
  requests: number;
  errors: number;
  prompt: number;
  cached: number;
  completion: number;
  /** Requests that ended before their response did (their tokens: what was seen). */
  endedEarly: number;
  /** latency bucket → count */
  readonly latency: Map<number, number>;
}

export interface UsageQuery {
  /** Date.now() of the first minute counted (its minute included); 0 for everything kept. */
  readonly since?: number;
  readonly key?: string;
  readonly model?: string;
}

const newAgg = (): Agg => ({ requests: 0, errors: 0, prompt: 0, cached: 0, completion: 0, endedEarly: 0, latency: new Map() });

function bucketOf(seconds: number): number {
  const ms = seconds * 1000;
  return ms < 1 ? -1 : Math.floor(Math.log(ms) / LOG_B);
}

/** The middle of a bucket, in seconds. */
function bucketSeconds(b: number): number {
  return b < 0 ? 0.0005 : (Math.pow(B, b) * Math.sqrt(B)) / 1000;
}

export function p50(latency: ReadonlyMap<number, number>): number | null {
  let total = 0;
  for (const n of latency.values()) total += n;
  if (total === 0) return null;
  const half = total / 2;
  let seen = 0;
  for (const b of [...latency.keys()].sort((x, y) => x - y)) {
    seen += latency.get(b)!;
    if (seen >= half) return bucketSeconds(b);
  }
  return null;
}

export class UsageBook implements UsageSink {
  /** minute (Date.now() / 60 s, floored) → "key\0model" → aggregate */
  private readonly minutes = new Map<number, Map<string, Agg>>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly retainMinutes = 24 * 60,
  ) {}

  record(r: UsageRecord): void {
    const minute = Math.floor(r.time / MINUTE_MS);
    let m = this.minutes.get(minute);
    if (m === undefined) {
      m = new Map();
      this.minutes.set(minute, m);
      this.expire(minute);
    }
    const id = `${r.key}\u0000${r.model}`;
    let a = m.get(id);
    if (a === undefined) {
      a = newAgg();
      m.set(id, a);
    }
    a.requests++;
    if (r.status >= 400 && r.status !== 499) a.errors++;
    a.prompt += r.tokens.prompt;
    a.cached += r.tokens.cached;
    a.completion += r.tokens.completion;
    if (r.endedEarly === true) a.endedEarly++;
    const b = bucketOf(r.durationSeconds);
    a.latency.set(b, (a.latency.get(b) ?? 0) + 1);
  }

  /** Rows per key × model, sorted by key then model. */
  query(q: UsageQuery = {}): UsageRow[] {
    const from = Math.floor((q.since ?? 0) / MINUTE_MS);
    const sums = new Map<string, Agg>();
    for (const [minute, m] of this.minutes) {
      if (minute < from) continue;
      for (const [id, a] of m) {
        const sep = id.indexOf('\u0000');
        if (q.key !== undefined && id.slice(0, sep) !== q.key) continue;
        if (q.model !== undefined && id.slice(sep + 1) !== q.model) continue;
        let s = sums.get(id);
        if (s === undefined) {
          s = newAgg();
          sums.set(id, s);
        }
        s.requests += a.requests;
        s.errors += a.errors;
        s.prompt += a.prompt;
        s.cached += a.cached;
        s.completion += a.completion;
        s.endedEarly += a.endedEarly;
        for (const [b, n] of a.latency) s.latency.set(b, (s.latency.get(b) ?? 0) + n);
      }
    }
    const rows: UsageRow[] = [];
    for (const [id, s] of sums) {
      const sep = id.indexOf('\u0000');
      rows.push({ key: id.slice(0, sep), model: id.slice(sep + 1), requests: s.requests, errors: s.errors, promptTokens: s.prompt, cachedTokens: s.cached, completionTokens: s.completion, endedEarly: s.endedEarly, p50LatencySeconds: p50(s.latency) });
    }
    return rows.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.model < b.model ? -1 : a.model > b.model ? 1 : 0));
  }

  private expire(latest: number): void {
    const oldest = Math.min(latest, Math.floor(this.now() / MINUTE_MS)) - this.retainMinutes;
    for (const minute of this.minutes.keys()) if (minute < oldest) this.minutes.delete(minute);
  }
}

/** Several sinks as one. */
export function fanOut(sinks: readonly UsageSink[]): UsageSink {
  return { record: (r) => { for (const s of sinks) s.record(r); } };
}
