/**
 * The scaling decision looked at only when it asks to be (scale/decide.ts nextAt, the reconciler's
 * wake) and when a request comes for a model below its max with no look due (reconciler-acts.ts
 * watchLoad) — not every few seconds as scale-decide.test.ts's steps do. A load that comes and goes
 * with gaps shorter than down_after must never scale in, whatever the phase of the looks: a look at
 * the window's end alone sees only that instant, so the load's return in between must be seen too.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { ScaleSpec } from '../../src/fleet-spec/types.js';
import { decideScale, withLook, type ModelLoad, type ScaleRecord } from '../../src/scale/decide.js';

const S = 1000;
const T0 = 1_700_000_000_000;
const RANGE = { min: 1, max: 3 };
/** Seconds from a scale-out to the pass that sees the new replicas ready. */
const READY_S = 5;

/**
 * From T0 to T0 + `untilS`, the decision taken at each time it asked for; at a request's arrival
 * (a load rising from zero) when the model is below its max and no look is due; and once more
 * READY_S after a scale-out (the pass that sees its replicas ready); `loadAt` the load then. Returns
 * the changes ("12s up 1→3").
 */
function looked(scale: ScaleSpec, untilS: number, loadAt: (s: number) => ModelLoad): { changes: string[]; looks: number } {
  let record: ScaleRecord | undefined;
  const changes: string[] = [];
  let looks = 0;
  const decide = (t: number): void => {
    looks++;
    const d = decideScale({ range: RANGE, slots: 1, scale, load: loadAt((t - T0) / S), record, now: t });
    record = withLook(d);
    if (d.change) changes.push(`${Math.round((t - T0) / S)}s ${d.change.direction} ${d.change.from}→${d.change.to}`);
    if (d.change?.direction === 'up') readyPass = t + READY_S * S;
  };
  let readyPass = Infinity;
  decide(T0);
  // the arrivals: each second at which the load rises from zero
  for (let t = T0 + S; t <= T0 + untilS * S; ) {
    const next = record?.lookAt;
    const arrival = (() => {
      for (let a = t; a <= T0 + untilS * S; a += S) if (busy(loadAt((a - T0) / S)) && !busy(loadAt((a - T0) / S - 1))) return a;
      return Infinity;
    })();
    const due = Math.min(next !== undefined && next >= t ? next : Infinity, readyPass >= t ? readyPass : Infinity);
    if (due === readyPass) readyPass = Infinity;
    if (due === Infinity && arrival === Infinity) break;
    if (due <= arrival) {
      decide(due);
      t = due + 1;
    } else {
      const rec = record;
      if ((rec?.lookAt ?? -Infinity) <= arrival && (rec?.count ?? 0) < RANGE.max) decide(arrival);
      t = arrival + S;
    }
  }
  return { changes, looks };
}

const busy = (l: ModelLoad): boolean => l.busy + l.queued > 0;
const onOff = (onS: number, offS: number, endS: number) => (s: number): ModelLoad => (s < endS && s % (onS + offS) < onS ? { busy: 3, queued: 3 } : { busy: 0, queued: 0 });

describe('the scaling decision on the looks it asks for', () => {
  const scale: ScaleSpec = { target: 0.8, upAfterMs: 10 * S, downAfterMs: 60 * S };

  for (const period of [15, 20, 25, 30, 40, 45]) {
    it(`${period} s on, ${period} s off under down_after 60 s: one scale-out, no scale-in while it lasts`, () => {
      const end = 10 * 2 * period;
      const { changes } = looked(scale, end, onOff(period, period, end));
      assert.deepEqual(changes, ['10s up 1→3'], `changes: ${changes.join(', ')}`);
    });
  }

  it('a load that stops for good: one step down per down_after, from when it stopped', () => {
    const { changes } = looked(scale, 400, onOff(30, 0, 60));
    assert.deepEqual(changes, ['10s up 1→3', `${changes[1]?.split('s')[0]}s down 3→2`, `${changes[2]?.split('s')[0]}s down 2→1`]);
    const [d1, d2] = [Number(changes[1]!.split('s')[0]), Number(changes[2]!.split('s')[0])];
    // a whole down_after below, and the window opened at most a sample (a tenth of down_after) after the fall
    assert.ok(d1 >= 60 + 60 && d1 <= 60 + 60 + 6, `first step down at ${d1} s`);
    assert.ok(d2 - d1 >= 60 && d2 - d1 <= 60 + 6, `second step down ${d2 - d1} s after the first`);
  });

  it('while a down window is open the load is looked at every tenth of down_after, not only at its end', () => {
    const d = decideScale({ range: RANGE, slots: 1, scale, load: { busy: 0, queued: 0 }, record: { count: 3 }, now: T0 });
    assert.equal(d.record.downSince, T0);
    assert.equal(d.nextAt, T0 + 6 * S);
    // the window's end when it comes first (down_after shorter than ten of its tenths: never; a late look)
    const late = decideScale({ range: RANGE, slots: 1, scale, load: { busy: 0, queued: 0 }, record: { count: 3, downSince: T0 - 58 * S }, now: T0 });
    assert.equal(late.nextAt, T0 + 2 * S);
  });
});
