/** Weighing a move off a busy replica, pure: the wait for a slot against evaluating the cached tokens again. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { affinityKey } from '../../src/router/affinity.js';
import { Ring, type ReplicaLoads } from '../../src/router/ring.js';
import { moveSeconds, ReplicaTimes, TIMES_WEIGHT, waitSeconds, weighMove } from '../../src/router/move.js';

describe('waitSeconds', () => {
  // [load, slots, slot seconds, expected]
  const rows: [number, number, number, number][] = [
    [0, 2, 1, 0],
    [1, 2, 1, 0],
    [2, 2, 1, 0.5],
    [3, 2, 1, 1],
    [4, 2, 0.4, 0.6000000000000001],
    [1, 1, 2, 2],
    [9, 8, 4, 1],
  ];
  for (const [load, slots, s, expected] of rows) {
    test(`${load} on ${slots} slots of ${s} s each → ${expected} s`, () => assert.equal(waitSeconds(load, slots, s), expected));
  }
  test('moveSeconds: tokens × seconds per token, for the moved request and each one running beside it', () => {
    assert.equal(moveSeconds(2000, 0.001, 0), 2);
    assert.equal(moveSeconds(2000, 0.001, 1), 4);
  });
});

describe('weighMove', () => {
  const ring = new Ring(['a', 'b', 'c']);
  const key = affinityKey('/v1/completions', { prompt: 'a weighed conversation' })!;
  const [first, second, third] = ring.order(key) as [number, number, number];
  // the key's replica is the third on its ring, so the ring order picks the alternative
  const last = third;
  const view = (load: number[], o: { slotSeconds?: number[]; perToken?: number[]; down?: number[]; slots?: number } = {}): ReplicaLoads => ({
    usable: (i) => !(o.down ?? []).includes(i),
    load: (i) => load[i]!,
    slots: () => o.slots ?? 2,
    slotSeconds: (i) => (o.slotSeconds ?? [0.5, 0.5, 0.5])[i]!,
    secondsPerToken: (i) => (o.perToken ?? [0.001, 0.001, 0.001])[i]!,
  });
  const loads = (l: number, f: number, s: number): number[] => {
    const a = [0, 0, 0];
    a[last] = l;
    a[first] = f;
    a[second] = s;
    return a;
  };
  const per = (l: number, f: number, s: number) => loads(l, f, s);

  // [what, loads (last, first, second), options, tokens, expected: 'stay' | 'first' | 'second' | null]
  const rows: [string, number[], Parameters<typeof view>[1], number, 'stay' | 'first' | 'second' | null][] = [
    ['waiting (1 ahead, 0.25 s) beats evaluating 1,000 tokens (1 s)', loads(2, 0, 0), {}, 1000, 'stay'],
    ['equal costs: stays (a move is not free for the other requests)', loads(5, 0, 0), {}, 1000, 'stay'],
    ['a deep queue (5 ahead, 1.25 s) costs more than 1,000 tokens: moves to the first on the ring', loads(6, 0, 0), {}, 1000, 'first'],
    ['a short prompt (100 tokens, 0.1 s) moves at once', loads(2, 0, 0), {}, 100, 'first'],
    ['the first on the ring full: the next with a free slot', loads(2, 2, 0), {}, 100, 'second'],
    ['nothing running on the target: a 1.25 s wait against 0.7 s of evaluation moves', loads(6, 0, 0), {}, 700, 'first'],
    ['the same with one request running on the target (0.7 s × 2 = 1.4 s): stays', loads(6, 1, 0), {}, 700, 'stay'],
    ['the first on the ring down: the next', loads(2, 0, 0), { down: [first] }, 100, 'second'],
    ['the target evaluates fast: its speed counts, not the busy replica\'s', loads(2, 0, 0), { perToken: per(0.01, 0.0001, 0.01) }, 1000, 'first'],
    ['the target never served (speed not known): the busy replica\'s speed stands in', loads(2, 0, 0), { perToken: per(0.0001, 0, 0.0001) }, 1000, 'first'],
    ['no free slot anywhere else: nothing to weigh', loads(2, 2, 2), {}, 100, null],
    ['no token count for the key: nothing to weigh', loads(2, 0, 0), {}, 0, null],
    ['no slot time for its replica: nothing to weigh', loads(2, 0, 0), { slotSeconds: per(0, 0.5, 0.5) }, 100, null],
    ['no speed known anywhere: nothing to weigh', loads(2, 0, 0), { perToken: [0, 0, 0] }, 100, null],
  ];
  const idx = { first, second } as const;
  for (const [what, l, o, tokens, expected] of rows) {
    test(what, () => {
      const c = weighMove(ring, key, last, view(l, o), tokens);
      if (expected === null) assert.equal(c, null);
      else if (expected === 'stay') assert.deepEqual(c, { index: last, home: true });
      else assert.deepEqual(c, { index: idx[expected], home: false });
    });
  }
});

describe('ReplicaTimes', () => {
  test('nothing known before the first response', () => {
    const t = new ReplicaTimes();
    assert.equal(t.slotSeconds, 0);
    assert.equal(t.secondsPerToken, 0);
  });

  test('the first response sets the slot time; later ones move it by TIMES_WEIGHT', () => {
    const t = new ReplicaTimes();
    t.observe(100, 300, 100);
    assert.equal(t.slotSeconds, 0.4);
    t.observe(100, 1300, 100);
    assert.ok(Math.abs(t.slotSeconds - (0.4 + TIMES_WEIGHT * (1.4 - 0.4))) < 1e-12);
  });

  test('seconds per token weigh evaluations by their size: a short one\'s overhead barely counts', () => {
    const t = new ReplicaTimes();
    t.observe(2000, 2000, 10); // 1 ms a token
    t.observe(10, 50, 10); // 5 ms a token, mostly fixed overhead
    const spt = t.secondsPerToken;
    assert.ok(spt > 0.001 && spt < 0.00103, `${spt}`);
  });

  test('a response that evaluated nothing (all from cache) updates the slot time only', () => {
    const t = new ReplicaTimes();
    t.observe(0, 5, 100);
    assert.equal(t.secondsPerToken, 0);
    assert.equal(t.slotSeconds, 0.105);
  });

  test('negative or missing figures are ignored', () => {
    const t = new ReplicaTimes();
    t.observe(-1, 10, 10);
    t.observe(10, Number.NaN, 10);
    assert.equal(t.slotSeconds, 0);
    assert.equal(t.secondsPerToken, 0);
  });
});
