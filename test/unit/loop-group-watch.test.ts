/**
 * The RPC groups' watch on the single-flight loop (#40): while on, a GROUP_WATCH pass every
 * GROUP_WATCH_MS (a dead worker is seen within 10 s whatever the poll interval); off, none; stop()
 * ends it. Fake timers: the intervals are counted, not waited for.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { GROUP_WATCH, GROUP_WATCH_MS, PassLoop, type LoopTimers } from '../../src/reconciler/loop.js';

class FakeTimers implements LoopTimers {
  readonly intervals = new Map<number, { fn: () => void; ms: number }>();
  private id = 0;
  setTimeout(): unknown {
    return ++this.id;
  }
  clearTimeout(): void {}
  setInterval(fn: () => void, ms: number): unknown {
    this.intervals.set(++this.id, { fn, ms });
    return this.id;
  }
  clearInterval(t: unknown): void {
    this.intervals.delete(t as number);
  }
  /** Every interval of `ms` fires once. */
  fire(ms: number): void {
    for (const i of [...this.intervals.values()]) if (i.ms === ms) i.fn();
  }
}

describe('the groups\' watch', () => {
  it('on: a GROUP_WATCH pass every GROUP_WATCH_MS, beside the poll; off: none; asked twice: one timer', async () => {
    const timers = new FakeTimers();
    const triggers: string[] = [];
    const loop = new PassLoop(async (t) => void triggers.push(t), () => 0, timers);
    loop.pollEvery(3_600_000);
    loop.watchGroups(true);
    loop.watchGroups(true);
    assert.equal([...timers.intervals.values()].filter((i) => i.ms === GROUP_WATCH_MS).length, 1);
    assert.ok(GROUP_WATCH_MS < 10_000, 'within 10 s');
    timers.fire(GROUP_WATCH_MS);
    await new Promise((r) => setImmediate(r)); // the watch's pass ends
    await loop.request('flush');
    assert.deepEqual(triggers, [GROUP_WATCH, 'flush']);
    loop.watchGroups(false);
    timers.fire(GROUP_WATCH_MS);
    assert.equal([...timers.intervals.values()].filter((i) => i.ms === GROUP_WATCH_MS).length, 0);
    loop.watchGroups(true);
    await loop.stop();
    assert.equal(timers.intervals.size, 0, 'stop() ends the watch and the poll');
  });
});
