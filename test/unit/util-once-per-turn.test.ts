/** oncePerTurn: a burst of calls in one turn of the loop runs the function once, at the next turn. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { oncePerTurn } from '../../src/util/once-per-turn.js';
import { ticks } from '../harness/fake-node.js';

describe('oncePerTurn', () => {
  it('400 calls in one turn: one run, at the next turn; a call after that run: one more', async () => {
    let runs = 0;
    const publish = oncePerTurn(() => void runs++);
    for (let i = 0; i < 400; i++) publish();
    assert.equal(runs, 0, 'not run in the turn that asked');
    await ticks(1);
    assert.equal(runs, 1);
    await ticks(3);
    assert.equal(runs, 1, 'nothing asked since');
    publish();
    await ticks(1);
    assert.equal(runs, 2);
  });

  it('a call made while it runs (the run asks again) runs at the turn after', async () => {
    let runs = 0;
    const again: () => void = oncePerTurn(() => {
      runs++;
      if (runs === 1) again();
    });
    again();
    await ticks(1);
    assert.equal(runs, 1);
    await ticks(1);
    assert.equal(runs, 2);
  });
});
