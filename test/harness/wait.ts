/**
 * Waiting in tests for something to become true, instead of sleeping a guessed time: `until` polls
 * a condition (for states with no event to listen to: a process gone from `ps`, a counter reached,
 * a log line written) and fails, naming what it waited for, after a timeout.
 */
import { strict as assert } from 'node:assert';
import { setTimeout as sleep } from 'node:timers/promises';

/** Resolves once `cond` holds (checked at once, then every `intervalMs`); fails after `timeoutMs`. */
export async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 5_000, intervalMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}
