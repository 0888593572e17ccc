/** waitReady's GET /health schedule (nodes/health-poll.ts): tight after the launch, 250 ms from the seventh poll on. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { healthPollDelayMs } from '../../src/nodes/health-poll.js';

describe('healthPollDelayMs', () => {
  const table: [polls: number, ms: number][] = [
    [0, 5],
    [1, 10],
    [2, 20],
    [3, 40],
    [4, 80],
    [5, 160],
    [6, 250],
    [7, 250],
    [1000, 250], // no overflow however long a model loads
  ];
  for (const [polls, ms] of table) it(`after ${polls} polls: ${ms} ms`, () => assert.equal(healthPollDelayMs(polls), ms));

  it('the first half second holds 7 polls where a fixed 250 ms held 2; a minute of loading about as many as before', () => {
    let t = 0;
    let n = 0;
    while (t < 500) t += healthPollDelayMs(n++);
    assert.equal(n, 7);
    while (t < 60_000) t += healthPollDelayMs(n++);
    assert.ok(n <= 60_000 / 250 + 6, `${n} polls in a minute`);
  });
});
