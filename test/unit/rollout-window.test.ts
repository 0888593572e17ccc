/** One arm's window (rollout/window.ts), pure: what each sample adds, the in-place recorder, and adding windows up. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { latencyIndex, LATENCY_BOUNDS_MS, percentile, totalOf } from '../../src/rollout/latency.js';
import type { ArmSample, ArmWindow } from '../../src/rollout/types.js';
import { ArmRecorder, emptyWindow, mergeWindows, recorded } from '../../src/rollout/window.js';

const sample = (s: Partial<ArmSample>): ArmSample => ({ arm: 'canary', outcome: 'ok', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null, laterTurn: false, ...s });

/** A window as plain numbers: requests, errors, counts per ttft bucket, tpot count. */
const shape = (w: ArmWindow) => ({
  requests: w.requests,
  errors: w.errors,
  ttft: Object.fromEntries(Object.entries(w.ttft).map(([k, c]) => [k, totalOf(c)])),
  tpot: totalOf(w.tpot),
});

describe('recorded: what one sample adds', () => {
  const rows: [string, ArmSample, ReturnType<typeof shape>][] = [
    ['ok with nothing measured: a request', sample({}), { requests: 1, errors: 0, ttft: {}, tpot: 0 }],
    ['ok, short prompt, no cache: p0:miss', sample({ ttftMs: 40, tpotMs: 8, promptTokens: 100, cachedTokens: 0 }), { requests: 1, errors: 0, ttft: { 'p0:miss': 1 }, tpot: 1 }],
    ['ok, tokens unknown: p0:miss', sample({ ttftMs: 40 }), { requests: 1, errors: 0, ttft: { 'p0:miss': 1 }, tpot: 0 }],
    ['ok, 600 tokens, 300 cached: p512:hit (half counts as a hit)', sample({ ttftMs: 40, promptTokens: 600, cachedTokens: 300 }), { requests: 1, errors: 0, ttft: { 'p512:hit': 1 }, tpot: 0 }],
    ['ok, 600 tokens, 299 cached: p512:miss', sample({ ttftMs: 40, promptTokens: 600, cachedTokens: 299 }), { requests: 1, errors: 0, ttft: { 'p512:miss': 1 }, tpot: 0 }],
    ['ok, 2048 tokens: p2k', sample({ ttftMs: 40, promptTokens: 2048, cachedTokens: 0 }), { requests: 1, errors: 0, ttft: { 'p2k:miss': 1 }, tpot: 0 }],
    ['a later turn, 600 tokens, 299 cached: p512:resumed (its history evaluated again)', sample({ ttftMs: 40, promptTokens: 600, cachedTokens: 299, laterTurn: true }), { requests: 1, errors: 0, ttft: { 'p512:resumed': 1 }, tpot: 0 }],
    ['a later turn, 600 tokens, 300 cached: p512:hit (a hit is a hit, whatever the turn)', sample({ ttftMs: 40, promptTokens: 600, cachedTokens: 300, laterTurn: true }), { requests: 1, errors: 0, ttft: { 'p512:hit': 1 }, tpot: 0 }],
    ['no later-turn flag (a sample made where the body is not known): p0:miss', { arm: 'canary', outcome: 'ok', ttftMs: 40, tpotMs: null, promptTokens: 100, cachedTokens: 0 }, { requests: 1, errors: 0, ttft: { 'p0:miss': 1 }, tpot: 0 }],
    ['a later turn, tokens unknown: p0:resumed', sample({ ttftMs: 40, laterTurn: true }), { requests: 1, errors: 0, ttft: { 'p0:resumed': 1 }, tpot: 0 }],
    ['ok, 9000 tokens all cached: p8k:hit', sample({ ttftMs: 40, promptTokens: 9000, cachedTokens: 9000 }), { requests: 1, errors: 0, ttft: { 'p8k:hit': 1 }, tpot: 0 }],
    ['ok, tpot only (ttft unknown)', sample({ tpotMs: 12 }), { requests: 1, errors: 0, ttft: {}, tpot: 1 }],
    ['error: a request and an error, no latency even when measured', sample({ outcome: 'error', ttftMs: 40, tpotMs: 8, promptTokens: 10 }), { requests: 1, errors: 1, ttft: {}, tpot: 0 }],
    ["client: nothing (the client's own doing)", sample({ outcome: 'client', ttftMs: 40, tpotMs: 8 }), { requests: 0, errors: 0, ttft: {}, tpot: 0 }],
  ];
  for (const [what, s, want] of rows) {
    test(what, () => {
      assert.deepEqual(shape(recorded(emptyWindow(), s)), want);
      const r = new ArmRecorder();
      r.add(s);
      assert.deepEqual(shape(r.snapshot()), want, 'the recorder agrees');
    });
  }

  test('the latency goes in the bucket of its value', () => {
    const w = recorded(emptyWindow(), sample({ ttftMs: 123, tpotMs: 7.5 }));
    assert.equal(w.ttft['p0:miss']![latencyIndex(123)], 1);
    assert.equal(w.tpot[latencyIndex(7.5)], 1);
    assert.equal(w.tpot.length, LATENCY_BOUNDS_MS.length + 1);
  });

  test('recorded leaves its input as it was', () => {
    const a = recorded(emptyWindow(), sample({ ttftMs: 10, tpotMs: 5 }));
    const before = JSON.stringify(a);
    recorded(a, sample({ ttftMs: 20, tpotMs: 6 }));
    recorded(a, sample({ outcome: 'error' }));
    assert.equal(JSON.stringify(a), before);
    assert.equal(recorded(a, sample({ outcome: 'client' })), a, 'a client sample returns the same window');
    assert.deepEqual(shape(emptyWindow()), { requests: 0, errors: 0, ttft: {}, tpot: 0 });
  });
});

describe('ArmRecorder: in place, snapshots immutable', () => {
  /** A mixed run of samples. */
  const run: ArmSample[] = [];
  for (let i = 0; i < 200; i++) {
    const outcome = i % 10 === 0 ? 'error' : i % 17 === 0 ? 'client' : 'ok';
    run.push(sample({ outcome, ttftMs: 10 + i, tpotMs: i % 3 === 0 ? null : 5 + (i % 7), promptTokens: (i * 97) % 10_000, cachedTokens: i % 2 === 0 ? (i * 97) % 10_000 : 0, laterTurn: i % 3 === 1 }));
  }

  test('the recorder and a fold of recorded give the same window', () => {
    const r = new ArmRecorder();
    let w = emptyWindow();
    for (const s of run) {
      r.add(s);
      w = recorded(w, s);
    }
    assert.deepEqual(r.snapshot(), w);
    const counted = run.filter((s) => s.outcome !== 'client').length;
    assert.equal(w.requests, counted);
    assert.equal(w.errors, run.filter((s) => s.outcome === 'error').length);
    const okWithTtft = run.filter((s) => s.outcome === 'ok').length;
    assert.equal(Object.values(w.ttft).reduce((n, c) => n + totalOf(c), 0), okWithTtft);
    assert.ok(totalOf(w.ttft['p0:resumed']) > 0 && totalOf(w.ttft['p0:miss']) > 0 && totalOf(w.ttft['p0:hit']) > 0, 'the run fills all three cache states');
  });

  test('a snapshot does not move when more is recorded, and cannot be changed', () => {
    const r = new ArmRecorder();
    r.add(run[1]!);
    const snap = r.snapshot();
    const before = JSON.stringify(snap);
    for (const s of run) r.add(s);
    assert.equal(JSON.stringify(snap), before);
    assert.throws(() => {
      (snap.tpot as number[])[0] = 99;
    }, TypeError);
  });

  test('percentiles read from a window are those of its values', () => {
    const r = new ArmRecorder();
    for (let ms = 1; ms <= 1000; ms++) r.add(sample({ ttftMs: ms, tpotMs: ms / 10 }));
    const w = r.snapshot();
    const p95 = percentile(w.ttft['p0:miss'], 0.95)!;
    assert.ok(Math.abs(p95 - 950) / 950 < 0.1, `p95 ${p95} ≈ 950`);
    const t95 = percentile(w.tpot, 0.95)!;
    assert.ok(Math.abs(t95 - 95) / 95 < 0.1, `tpot p95 ${t95} ≈ 95`);
  });
});

describe('mergeWindows: windows from several routers add up', () => {
  const fold = (samples: readonly ArmSample[]): ArmWindow => samples.reduce(recorded, emptyWindow());
  const a = [sample({ ttftMs: 30, promptTokens: 10 }), sample({ outcome: 'error' }), sample({ ttftMs: 900, tpotMs: 20, promptTokens: 700, cachedTokens: 700 }), sample({ ttftMs: 700, promptTokens: 900, laterTurn: true })];
  const b = [sample({ ttftMs: 31, tpotMs: 4, promptTokens: 20 }), sample({ ttftMs: 5000, promptTokens: 3000 }), sample({ outcome: 'client', ttftMs: 1 }), sample({ ttftMs: 650, promptTokens: 800, laterTurn: true }), sample({ ttftMs: 90, promptTokens: 300, laterTurn: true })];

  const rows: [string, ArmSample[], ArmSample[]][] = [
    ['both empty', [], []],
    ['one side empty', a, []],
    ['the other side empty', [], b],
    ['buckets on one side only and on both', a, b],
  ];
  for (const [what, x, y] of rows) {
    test(`${what}: merge(x, y) = the window of all their samples`, () => {
      const m = mergeWindows(fold(x), fold(y));
      assert.deepEqual(shape(m), shape(fold([...x, ...y])));
      assert.deepEqual(m.tpot, fold([...x, ...y]).tpot);
      for (const [k, c] of Object.entries(fold([...x, ...y]).ttft)) assert.deepEqual(m.ttft[k as keyof typeof m.ttft], c, k);
    });
  }

  test('merge is commutative and leaves its inputs', () => {
    const x = fold(a);
    const y = fold(b);
    const xs = JSON.stringify(x);
    assert.deepEqual(shape(mergeWindows(x, y)), shape(mergeWindows(y, x)));
    assert.equal(JSON.stringify(x), xs);
  });

  test('windows from recorders (as routers hand them) merge like any', () => {
    const r1 = new ArmRecorder();
    const r2 = new ArmRecorder();
    for (const s of a) r1.add(s);
    for (const s of b) r2.add(s);
    assert.deepEqual(shape(mergeWindows(r1.snapshot(), r2.snapshot())), shape(fold([...a, ...b])));
  });
});
