/**
 * The clock and the timers of an HA shell (controller.ts, standby.ts, channel.ts's Requests,
 * etcd-leader-io.ts, router-shares.ts), injected as one small value: the real one is made at the
 * composition root (src/serve/serve.ts), tests pass a FakeClock's. No file of src/ha reads the clock
 * or sets a timer of its own (test/unit/ha-no-clock.test.ts greps for it); election.ts takes the
 * same three things as options of its own (clock, monotonic, timers).
 */
import type { LoopTimers } from '../reconciler/loop.js';

export type { LoopTimers } from '../reconciler/loop.js';

export interface ShellTime {
  /** Wall clock, epoch ms (the `since` and `at` an operator reads; gRPC deadlines). */
  readonly now: () => number;
  readonly timers: LoopTimers;
}

/** Resolves after `ms` on these timers (a wait between tries). */
export function sleep(timers: LoopTimers, ms: number): Promise<void> {
  return new Promise((r) => void timers.setTimeout(r, ms));
}
