/**
 * A pass when a schedule changes a model's count, not at the next poll: after each snapshot, a
 * timer for the earliest next change (nextScheduleChange) asks for a pass. Uses only the loop's
 * public surface (snapshots, requestPass), so it sits beside the reconciler; once the reconciler's
 * own wake timer considers nextScheduleChange, this goes.
 */
import type { FleetSpec } from '../fleet-spec/types.js';
import { nextScheduleChange } from './schedule.js';

export interface ScheduleLoop {
  spec(): FleetSpec | null;
  onSnapshot(listener: () => void): () => void;
  requestPass(trigger: string): Promise<void>;
}

/** Longest single timer (setTimeout's limit is about 24.8 days); a longer wait is re-armed. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export function wakeOnSchedule(loop: ScheduleLoop, clock: () => number = Date.now): { stop(): void } {
  let timer: NodeJS.Timeout | null = null;
  let armedFor: number | null = null;
  let stopped = false;
  const arm = (): void => {
    const spec = loop.spec();
    const now = clock();
    const at = spec ? nextScheduleChange(spec, now) : null;
    if (at === armedFor && timer) return;
    if (timer) clearTimeout(timer);
    timer = null;
    armedFor = at;
    if (at === null || stopped) return;
    timer = setTimeout(() => {
      timer = null;
      armedFor = null;
      if (clock() >= at) void loop.requestPass('schedule');
      else arm();
    }, Math.min(MAX_TIMER_MS, Math.max(0, at - now) + 5));
    timer.unref();
  };
  const off = loop.onSnapshot(arm);
  arm();
  return {
    stop() {
      stopped = true;
      off();
      if (timer) clearTimeout(timer);
      timer = null;
    },
  };
}
