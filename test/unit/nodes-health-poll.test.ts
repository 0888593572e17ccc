/** waitReady's GET /health schedule (nodes/health-poll.ts): every 5 ms for 100 polls after the launch, then doubling to 250 ms. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { healthPollDelayMs } from '../../src/nodes/health-poll.js';

describe('healthPollDelayMs', () => {
  const table: [polls: number, ms: number][] = [
    [0, 5],
    [1, 5],
    [99, 5],
    [100, 10],
    [101, 20],
    [102, 40],
    [103, 80],
    [104, 160],
    [105, 250],
    [106, 250],
    [100_000, 250], // no overflow however long a model loads
  ];
  for (const [polls, ms] of table) it(`after ${polls} polls: ${ms} ms`, () => assert.equal(healthPollDelayMs(polls), ms));

  it('a replica healthy 90 ms after its launch is seen within 5 ms of it; a minute of loading is polled at most ~110 times more than at a fixed 250 ms', () => {
    let t = 0;
    let n = 0;
    while (t < 90) t += healthPollDelayMs(n++);
    assert.ok(t - 90 < 5, `seen at ${t} ms`);
    while (t < 60_000) t += healthPollDelayMs(n++);
    assert.ok(n <= 60_000 / 250 + 110, `${n} polls in a minute`);
  });
});
