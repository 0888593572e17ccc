/**
 * A new replica's warm-up before it takes traffic (#38; router/warmer.ts): the prefixes replayed, the
 * prompt tokens the replica evaluated for them, and how long it held the replica back, by outcome
 * (done, timeout, failed). Counted where the warm-up runs (the leader's controller).
 */
import { Counter, Histogram, type Registry } from 'prom-client';
import { MetricNames as N } from './names.js';

/** Warm-up durations: bounded by the profile's warmup.timeout (10 s by default). */
export const WARMUP_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** One warm-up's cost, as the metrics take it. */
export interface WarmupCost {
  readonly prefixes: number;
  readonly tokens: number;
  readonly seconds: number;
  readonly outcome: 'done' | 'timeout' | 'failed';
  /** How the replica was warmed (#38 item 3); absent: replay. */
  readonly via?: 'restore' | 'replay';
  /** Prompt tokens restored from slot files (a warm-up kept as a restore). */
  readonly restored?: number;
}

export type WarmupMetrics = (model: string, cost: WarmupCost) => void;

export function registerWarmupMetrics(registry: Registry): WarmupMetrics {
  const registers = [registry];
  const prefixes = new Counter({ name: N.replicaWarmupPrefixesTotal, help: 'Prompt prefixes replayed whole to new replicas of the model before they took traffic (#38).', labelNames: ['model'], registers });
  const tokens = new Counter({ name: N.replicaWarmupTokensTotal, help: 'Prompt tokens new replicas of the model evaluated for their warm-ups (their timings\' prompt_n).', labelNames: ['model'], registers });
  const seconds = new Histogram({ name: N.replicaWarmupSeconds, help: 'How long warm-ups held new replicas of the model back from traffic, by outcome (done, timeout, failed).', labelNames: ['model', 'outcome'], buckets: WARMUP_BUCKETS, registers });
  const warmups = new Counter({ name: N.replicaWarmupTotal, help: 'Warm-ups of new replicas of the model, by how they were warmed: restore (the old replica\'s slot files, a gain seen) or replay.', labelNames: ['model', 'via'], registers });
  const restored = new Counter({ name: N.replicaWarmupRestoredTokensTotal, help: 'Prompt tokens new replicas of the model restored from an old replica\'s slot files in warm-ups kept as restores.', labelNames: ['model'], registers });
  return (model, c) => {
    warmups.inc({ model, via: c.via ?? 'replay' });
    restored.inc({ model }, c.restored ?? 0);
    prefixes.inc({ model }, c.prefixes);
    tokens.inc({ model }, c.tokens);
    seconds.observe({ model, outcome: c.outcome }, c.seconds);
  };
}
