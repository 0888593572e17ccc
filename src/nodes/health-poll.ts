/**
 * How long waitReady waits before its next GET /health (pure): 5 ms after the launch, doubling to
 * 250 ms. A tiny model is healthy within ~100 ms of its exec; a poll every 250 ms from the start
 * added half of that on average to every activation (#38). A model that loads for seconds is
 * polled 4 times a second after the first half second, as before.
 */
export function healthPollDelayMs(polls: number): number {
  return Math.min(250, 5 * 2 ** Math.min(polls, 6));
}
