/**
 * Scheduled replica counts, computed at every scrape from the models in force and the clock: the
 * count a schedule puts in force follows time between passes, and an entry's firing shows at the
 * scrape after it, not only after the next pass. Only models with a schedule have these series.
 */
import { Gauge, type Registry } from 'prom-client';
import type { ModelSpec } from '../fleet-spec/types.js';
import { scheduleInForce } from '../schedule/schedule.js';
import { MetricNames as N } from './names.js';

export interface ScheduleMetrics {
  /** The models in force (e.g. from each snapshot: `s.models.map((m) => m.spec)`). */
  setModels(models: readonly ModelSpec[]): void;
}

export function registerScheduleMetrics(registry: Registry, clock: () => number): ScheduleMetrics {
  let models: readonly ModelSpec[] = [];
  const scheduled = (): { name: string; s: ReturnType<typeof scheduleInForce> }[] => {
    const now = clock();
    return models.filter((m) => m.scaling.mode === 'replicas' && m.scaling.schedule).map((m) => ({ name: m.name, s: scheduleInForce(m.scaling, now) }));
  };
  new Gauge({
    name: N.modelScheduledReplicas,
    help: 'Replicas the model\'s schedule puts in force now (the entry that fired last, or replicas: before any did); only models with a schedule.',
    labelNames: ['model'],
    registers: [registry],
    collect() {
      this.reset();
      for (const { name, s } of scheduled()) this.set({ model: name }, s.replicas);
    },
  });
  new Gauge({
    name: N.modelScheduleNextChangeTimestampSeconds,
    help: 'When the model\'s schedule next changes the replicas in force (absent when no entry fires within a year).',
    labelNames: ['model'],
    registers: [registry],
    collect() {
      this.reset();
      for (const { name, s } of scheduled()) if (s.nextChangeAt !== null) this.set({ model: name }, s.nextChangeAt / 1000);
    },
  });
  return {
    setModels(next) {
      models = next;
    },
  };
}
