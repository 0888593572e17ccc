/**
 * How long waitReady waits before its next GET /health (pure): every 5 ms for the first 100 polls
 * (about the first half second, where a tiny or cached model turns healthy: ~100 ms after its
 * exec), then doubling from 10 ms to 250 ms. A doubling from the launch (5, 10, 20, 40, 80 ms) saw a
 * replica healthy at 90 ms only at 155 ms (#38). A model that loads for seconds is polled 4 times a
 * second from its first second on, as before; a poll of a loading engine is a refused connection or
 * a 503, answered at once.
 */
const TIGHT_POLLS = 100;

export function healthPollDelayMs(polls: number): number {
  return polls < TIGHT_POLLS ? 5 : Math.min(250, 5 * 2 ** Math.min(polls - TIGHT_POLLS + 1, 6));
}
