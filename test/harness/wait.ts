/**
 * Waiting in tests for something to become true, instead of sleeping a guessed time: `until` polls
 * a probe (for states with no event to listen to: a process gone from `ps`, a counter reached, a
 * log line written, an HTTP answer) and fails, naming what it waited for, after a timeout.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/** Thrown by a probe to end the wait at once: what it waits on can no longer happen (the process exited). */
export class GiveUp extends Error {}

/** What a probe answers: a value once the wait is over, a falsy "not yet" before. */
export type Probe<T> = () => T | null | undefined | false | Promise<T | null | undefined | false>;

/**
 * Polls `probe` until it returns something truthy and resolves to that value. A probe that throws
 * counts as "not yet" (a server not listening yet; the last error is in the failure message),
 * unless it throws `GiveUp`, which fails the wait at once. The probe runs at once, then after
 * pauses growing from 5 ms to 200 ms, so a wait on something in the process ends within a tick and
 * a wait on a slow real component does not hammer it; `o.everyMs` fixes the pause instead, for a
 * window a test must not miss. After `timeoutMs` it fails with `what`, the last error and
 * `o.diag()` (say, the tail of a process's log).
 */
export async function until<T>(what: string, timeoutMs: number, probe: Probe<T>, o: { diag?: () => string; everyMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let pause = o.everyMs ?? 5;
  let last: unknown = null;
  for (;;) {
    try {
      const v = await probe();
      if (v) return v;
    } catch (e) {
      if (e instanceof GiveUp) throw new Error(`gave up waiting for ${what}: ${e.message}${o.diag ? `\n${o.diag()}` : ''}`);
      last = e;
    }
    if (Date.now() > deadline) {
      const extra = o.diag?.() ?? '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}${extra ? `\n${extra}` : ''}`);
    }
    await sleep(pause);
    if (o.everyMs === undefined) pause = Math.min(pause * 2, 200);
  }
}
