/**
 * Canary windows the routers of an HA cluster publish to the leader (rollout/published-windows.ts),
 * pure: a router's value round-trips, is bounded and holds only the live steps; a malformed value is
 * refused whole with what was wrong; the leader adds up only windows of the same revision and the
 * same `since`; a router no longer read keeps only the windows of the step being judged.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { LATENCY_BOUNDS_MS, latencyIndex, totalOf } from '../../src/rollout/latency.js';
import { decodeWindows, encodeWindows, keptWindows, MAX_PUBLISHED_BYTES, summedWindow, type ModelWindow } from '../../src/rollout/published-windows.js';
import type { ArmSample, ArmWindow, RolloutView } from '../../src/rollout/types.js';
import { emptyWindow, recorded } from '../../src/rollout/window.js';
import { RouterRollouts } from '../../src/router/rollout-figures.js';

const DIGEST = 'sha256:aaaa';
const OTHER = 'sha256:bbbb';
const SINCE = 1_700_000_000_000;

const sample = (s: Partial<ArmSample>): ArmSample => ({ arm: 'canary', outcome: 'ok', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null, ...s });
const view = (canaryDigest: string, since: number): RolloutView => ({ phase: 'canary', stableDigest: 'sha256:stable', canaryDigest, step: 0, share: 0.5, since, until: since + 20_000, verdict: null });
const arm = (samples: readonly ArmSample[]): ArmWindow => samples.reduce(recorded, emptyWindow());
const mw = (since: number, canary: readonly ArmSample[], stable: readonly ArmSample[] = [], canaryDigest = DIGEST): ModelWindow => ({ canaryDigest, window: { since, stable: arm(stable), canary: arm(canary) } });
const oks = (n: number, ms = 40): ArmSample[] => Array.from({ length: n }, () => sample({ ttftMs: ms, tpotMs: 5, promptTokens: 10, cachedTokens: 0 }));

/** A well-formed value, changed by `edit` (on its parsed form). */
function edited(edit: (v: { v: unknown; bounds: unknown; models: Record<string, any> }) => void): string {
  const v = JSON.parse(encodeWindows({ chat: mw(SINCE, [...oks(3), sample({ outcome: 'error' })], oks(2)) }).value!) as { v: unknown; bounds: unknown; models: Record<string, any> };
  edit(v);
  return JSON.stringify(v);
}

describe('encodeWindows / decodeWindows: one router\'s value', () => {
  test('round trip: what a router recorded comes back as it was', () => {
    const r = new RouterRollouts();
    for (let i = 0; i < 50; i++) r.record('chat', view(DIGEST, SINCE), sample({ arm: i % 2 ? 'canary' : 'stable', outcome: i % 7 === 0 ? 'error' : 'ok', ttftMs: 10 + i, tpotMs: 3, promptTokens: i * 40, cachedTokens: i % 3 === 0 ? i * 40 : 0 }), SINCE + i);
    r.record('other', view(OTHER, SINCE + 5), sample({ ttftMs: 80 }), SINCE + 6);
    const { value, dropped } = encodeWindows(r.all());
    assert.deepEqual(dropped, []);
    const d = decodeWindows(value!);
    assert.ok(d.ok, d.ok ? '' : d.problem);
    assert.deepEqual(Object.fromEntries(d.windows), JSON.parse(JSON.stringify(r.all())));
    assert.equal(d.windows.get('chat')!.window.canary.requests + d.windows.get('chat')!.window.stable.requests, 50);
  });

  test('only the live windows; none: no value (the key goes)', () => {
    const all = { chat: mw(SINCE, oks(1)), old: mw(SINCE - 60_000, oks(1)) };
    const { value } = encodeWindows(all, (m) => m === 'chat');
    const d = decodeWindows(value!);
    assert.ok(d.ok);
    assert.deepEqual([...d.windows.keys()], ['chat']);
    assert.deepEqual(encodeWindows(all, () => false), { value: null, dropped: [] });
    assert.deepEqual(encodeWindows({}), { value: null, dropped: [] });
  });

  test(`bounded: past ${MAX_PUBLISHED_BYTES} bytes the oldest windows are left out, the value still reads`, () => {
    // every TTFT bucket and tpot filled: the largest a window gets
    const full = (since: number): ModelWindow => {
      // hit, miss and the miss of a later turn (resumed) in every band
      const samples = ['p0', 'p512', 'p2k', 'p8k'].flatMap((_, i) => [0, 1, 2].map((c) => sample({ ttftMs: 12_345, tpotMs: 123, promptTokens: [10, 600, 3000, 9000][i]!, cachedTokens: c === 1 ? 9000 : 0, laterTurn: c === 2 })));
      return mw(since, samples, samples);
    };
    const all: Record<string, ModelWindow> = {};
    for (let i = 0; i < 400; i++) all[`m${i}`] = full(SINCE + i);
    const { value, dropped } = encodeWindows(all);
    assert.ok(dropped.length > 0, 'some left out');
    assert.ok(new TextEncoder().encode(value!).length <= MAX_PUBLISHED_BYTES);
    const d = decodeWindows(value!);
    assert.ok(d.ok, d.ok ? '' : d.problem);
    assert.equal(d.windows.size + dropped.length, 400);
    assert.equal(Object.keys([...d.windows.values()][0]!.window.canary.ttft).length, 12, 'every bucket, resumed ones too, read back');
    const keptSince = [...d.windows.values()].map((w) => w.window.since);
    const droppedSince = dropped.map((m) => all[m]!.window.since);
    assert.ok(Math.min(...keptSince) > Math.max(...droppedSince), 'the newest are kept');
  });

  const bad: [string, string, RegExp][] = [
    ['not JSON', '{"v":1,', /not JSON/],
    ['not an object', '[1,2]', /not an object/],
    ['another format', edited((v) => (v.v = 2)), /format 2; this llmgw reads 1/],
    ['other latency bounds (another llmgw version)', edited((v) => (v.bounds = 12)), /over 12 bounds/],
    ['models an array', edited((v) => (v.models = [] as unknown as Record<string, unknown>)), /models is not an object/],
    ['a model name past any model\'s', edited((v) => (v.models['m'.repeat(129)] = v.models.chat)), /a model name of 129 characters/],
    ['an empty model name', edited((v) => (v.models[''] = v.models.chat)), /a model name of 0 characters/],
    ['a model entry not an object', edited((v) => (v.models.chat = 3)), /chat: not an object/],
    ['a digest that is not one', edited((v) => (v.models.chat.canaryDigest = 'a b')), /canaryDigest/],
    ['since not a time', edited((v) => (v.models.chat.window.since = 'yesterday')), /since/],
    ['since negative', edited((v) => (v.models.chat.window.since = -1)), /since/],
    ['since fractional', edited((v) => (v.models.chat.window.since = 1.5)), /since/],
    ['an arm missing', edited((v) => delete v.models.chat.window.stable), /stable is not an object/],
    ['errors above requests', edited((v) => (v.models.chat.window.canary.errors = 9)), /errors ≤ requests/],
    ['a negative count', edited((v) => (v.models.chat.window.canary.requests = -1)), /requests and errors/],
    ['a fractional count', edited((v) => (v.models.chat.window.canary.requests = 4.5)), /requests and errors/],
    ['a count past any window', edited((v) => (v.models.chat.window.canary.requests = 1e15)), /requests and errors/],
    ['an unknown TTFT bucket', edited((v) => (v.models.chat.window.canary.ttft['p1:hit'] = v.models.chat.window.canary.tpot)), /"p1:hit" is not a TTFT bucket/],
    ['a __proto__ TTFT bucket', edited((v) => Object.defineProperty(v.models.chat.window.canary.ttft, '__proto__', { value: [1], enumerable: true })), /"__proto__" is not a TTFT bucket/],
    ['TTFT counts of another length', edited((v) => (v.models.chat.window.canary.ttft['p0:miss'] = [1, 2])), /ttft p0:miss is not/],
    ['a negative latency count', edited((v) => (v.models.chat.window.canary.tpot[0] = -1)), /tpot is not/],
    ['more TTFT counts than answered requests', edited((v) => (v.models.chat.window.canary.ttft['p0:miss'][0] += 5)), /TTFT counts for 3 answered/],
    ['more time-per-token counts than answered requests', edited((v) => (v.models.chat.window.stable.tpot[3] += 1)), /time-per-token counts for 2 answered/],
    ['larger than the bound', ' '.repeat(MAX_PUBLISHED_BYTES + 1), /larger than/],
  ];
  for (const [what, raw, problem] of bad) {
    test(`refused whole: ${what}`, () => {
      const d = decodeWindows(raw);
      assert.equal(d.ok, false);
      assert.match(d.ok ? '' : d.problem, problem);
    });
  }

  test('the value edited by nothing reads (the table above changes one thing each)', () => {
    assert.ok(decodeWindows(edited(() => undefined)).ok);
  });
});

describe('summedWindow: the leader\'s window is its own plus the same step\'s elsewhere', () => {
  const local = mw(SINCE, oks(4), oks(6)).window;
  const rows: [string, (ModelWindow | undefined)[], { canary: number; stable: number; routers: number }][] = [
    ['no other router', [], { canary: 4, stable: 6, routers: 1 }],
    ['a router without a window for the model', [undefined], { canary: 4, stable: 6, routers: 1 }],
    ['a router of the same step', [mw(SINCE, oks(5), oks(1))], { canary: 9, stable: 7, routers: 2 }],
    ['two of the same step', [mw(SINCE, oks(5)), mw(SINCE, oks(2), oks(2))], { canary: 11, stable: 8, routers: 3 }],
    ['an older step (another since) is not counted', [mw(SINCE - 20_000, oks(50), oks(50))], { canary: 4, stable: 6, routers: 1 }],
    ['a window begun again later elsewhere is not counted', [mw(SINCE + 1, oks(50), oks(50))], { canary: 4, stable: 6, routers: 1 }],
    ['another revision is not counted', [mw(SINCE, oks(50), oks(50), OTHER)], { canary: 4, stable: 6, routers: 1 }],
    ['a mix', [mw(SINCE, oks(1)), mw(SINCE - 1, oks(50)), undefined, mw(SINCE, [sample({ outcome: 'error' })], [], OTHER)], { canary: 5, stable: 6, routers: 2 }],
  ];
  for (const [what, others, want] of rows) {
    test(what, () => {
      const s = summedWindow(local, DIGEST, others)!;
      assert.deepEqual({ canary: s.window.canary.requests, stable: s.window.stable.requests, routers: s.routers }, want);
      assert.equal(s.window.since, SINCE, 'the step\'s since');
    });
  }

  test('errors and latency counts add up by index', () => {
    const s = summedWindow(mw(SINCE, [sample({ outcome: 'error' }), ...oks(1, 40)]).window, DIGEST, [mw(SINCE, [sample({ outcome: 'error' }), ...oks(2, 900)])])!.window;
    assert.equal(s.canary.errors, 2);
    assert.equal(s.canary.requests, 5);
    assert.equal(s.canary.ttft['p0:miss']![latencyIndex(40)], 1);
    assert.equal(s.canary.ttft['p0:miss']![latencyIndex(900)], 2);
    assert.equal(totalOf(s.canary.tpot), 3);
    assert.equal(s.canary.tpot.length, LATENCY_BOUNDS_MS.length + 1);
  });

  test('no window kept by the leader: null (the step is judged empty from its start)', () => {
    assert.equal(summedWindow(null, DIGEST, [mw(SINCE, oks(30), oks(30))]), null);
  });
});

describe('keptWindows: what the leader keeps of the other routers after a read', () => {
  const local = { chat: mw(SINCE, oks(1)), code: mw(SINCE + 7, oks(1), [], OTHER) };
  test('a router read now is taken as read; one no longer read keeps only the windows of the step being judged', () => {
    const before = new Map([
      ['b', new Map([['chat', mw(SINCE, oks(3))]])],
      ['c', new Map([['chat', mw(SINCE, oks(9))], ['code', mw(SINCE, oks(2), [], OTHER)], ['gone', mw(SINCE, oks(2))]])],
      ['d', new Map([['chat', mw(SINCE - 1, oks(9))]])],
    ]);
    const read = new Map([['b', new Map([['chat', mw(SINCE, oks(5))]])]]);
    const kept = keptWindows(before, read, local);
    assert.deepEqual([...kept.keys()].sort(), ['b', 'c']);
    assert.equal(kept.get('b')!.get('chat')!.window.canary.requests, 5, 'b as read now');
    assert.deepEqual([...kept.get('c')!.keys()], ['chat'], 'c keeps its window of the step being judged only (code: another since; gone: no such step)');
    assert.equal(kept.get('c')!.get('chat')!.window.canary.requests, 9);
  });

  test('nothing before, nothing read: nothing', () => {
    assert.equal(keptWindows(new Map(), new Map(), local).size, 0);
  });
});
