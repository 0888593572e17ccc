/**
 * The router's side of a canary step, pure parts (router/canary.ts, router/rollout-figures.ts): the
 * sticky draw and the arm it picks, the fallback to the other arm, what a request's end counts, and
 * the figures the controller reads.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { ReplicaView } from '../../src/reconciler/view.js';
import { totalOf } from '../../src/rollout/latency.js';
import type { RolloutView } from '../../src/rollout/types.js';
import { affinityKey } from '../../src/router/affinity.js';
import { armOfDraw, armReplicas, armSampleOf, CanarySplitter, canaryOf, drawOf, laterTurnOf, outcomeOf, Split, tpotOf, type CallEnd } from '../../src/router/canary.js';
import { RouterRollouts } from '../../src/router/rollout-figures.js';
import { modelView } from '../harness/views.js';
import { FakeFleetView, fakeSpec } from '../harness/fake-fleet-view.js';

const STABLE = 'sha256:stable';
const CANARY = 'sha256:canary';
const rollout = (share: number, over: Partial<RolloutView> = {}): RolloutView => ({ phase: 'canary', stableDigest: STABLE, canaryDigest: CANARY, step: 0, share, since: 1_000, until: 121_000, verdict: null, ...over });
const replica = (id: string, digest: string): ReplicaView => ({ id, model: 'm', node: 'n', endpoint: `http://127.0.0.1:1/${id}`, phase: 'ready', digest, startedAt: 0 });
const S1 = replica('s1', STABLE);
const S2 = replica('s2', STABLE);
const C1 = replica('c1', CANARY);
const C2 = replica('c2', CANARY);
const conversation = (n: number) => affinityKey('/v1/chat/completions', { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: `conversation ${n}` }] })!;

describe('canaryOf: the split runs only in phase canary', () => {
  const spec = fakeSpec({ models: { m: {} } }).models['m']!;
  const base = modelView(spec, {});
  for (const phase of ['checking', 'promoted', 'rolled_back', 'held'] as const) {
    test(`phase ${phase}: no split`, () => assert.equal(canaryOf({ ...base, rollout: rollout(0.5, { phase }) }), null));
  }
  test('phase canary: the rollout', () => assert.equal(canaryOf({ ...base, rollout: rollout(0.5) })?.canaryDigest, CANARY));
  test('no rollout, no model: no split', () => {
    assert.equal(canaryOf(base), null);
    assert.equal(canaryOf(null), null);
  });
});

describe('drawOf: sticky by key and prefix', () => {
  test('the same key and prefix draw the same, 1,000 times', () => {
    for (let n = 0; n < 20; n++) {
      const first = drawOf('alice', conversation(n), CANARY);
      for (let i = 0; i < 1000; i++) assert.equal(drawOf('alice', conversation(n), CANARY), first);
    }
  });

  test('draws are in [0, 1)', () => {
    for (let n = 0; n < 2000; n++) {
      const d = drawOf(`k${n % 7}`, conversation(n), CANARY);
      assert.ok(d >= 0 && d < 1, String(d));
    }
  });

  test('another key, another prefix or another canary revision draws otherwise', () => {
    const d = drawOf('alice', conversation(1), CANARY);
    assert.notEqual(drawOf('bob', conversation(1), CANARY), d);
    assert.notEqual(drawOf('alice', conversation(2), CANARY), d);
    assert.notEqual(drawOf('alice', conversation(1), 'sha256:other'), d);
  });

  test('no prefix: a draw at random (nothing to keep sticky), still in [0, 1) and spread', () => {
    const draws = Array.from({ length: 2000 }, () => drawOf('alice', null, CANARY));
    assert.ok(draws.every((d) => d >= 0 && d < 1));
    const below = draws.filter((d) => d < 0.5).length;
    assert.ok(below > 800 && below < 1200, `${below} of 2000 below 0.5`);
  });

  test('share 0: never canary; share 1: always canary', () => {
    for (let n = 0; n < 1000; n++) {
      const d = drawOf('alice', conversation(n), CANARY);
      assert.equal(armOfDraw(d, 0), 'stable');
      assert.equal(armOfDraw(d, 1), 'canary');
    }
  });

  for (const share of [0.1, 0.5, 0.9]) {
    test(`share ${share}: about that share of 4,000 distinct conversations on the canary (over 4 keys)`, () => {
      let canary = 0;
      for (let n = 0; n < 4000; n++) if (armOfDraw(drawOf(`key-${n % 4}`, conversation(n), CANARY), share) === 'canary') canary++;
      // binomial sd at 4,000 is at most 32: ±4 sd
      assert.ok(Math.abs(canary - share * 4000) < 130, `${canary} of 4000 at share ${share}`);
    });
  }

  test('a larger step keeps every conversation the smaller one sent to the canary', () => {
    for (let n = 0; n < 2000; n++) {
      const d = drawOf('alice', conversation(n), CANARY);
      if (armOfDraw(d, 0.1) === 'canary') assert.equal(armOfDraw(d, 0.5), 'canary');
    }
  });

  test('the draw does not follow the affinity key (canary conversations spread over the whole key space)', () => {
    let low = 0;
    let canary = 0;
    for (let n = 0; n < 4000; n++) {
      const key = conversation(n);
      if (armOfDraw(drawOf('alice', key, CANARY), 0.5) !== 'canary') continue;
      canary++;
      if (key < 2 ** 31) low++;
    }
    assert.ok(Math.abs(low - canary / 2) < 130, `${low} of ${canary} canary keys in the lower half`);
  });
});

describe('armReplicas: the arm, or the other when it has none', () => {
  const r = rollout(0.5);
  const rows: [string, readonly ReplicaView[], 'stable' | 'canary', string[]][] = [
    ['stable arm', [S1, C1, S2], 'stable', ['s1', 's2']],
    ['canary arm', [S1, C1, S2], 'canary', ['c1']],
    ['canary arm of two', [C2, S1, C1], 'canary', ['c2', 'c1']],
    ['canary arm empty: the stable replicas', [S1, S2], 'canary', ['s1', 's2']],
    ['stable arm empty: the canary replicas', [C1, C2], 'stable', ['c1', 'c2']],
    ['no replicas at all', [], 'canary', []],
  ];
  for (const [what, ready, arm, want] of rows) test(what, () => assert.deepEqual(armReplicas(ready, r, arm).map((x) => x.id), want));

  test('every replica on the arm: the same array (no copy)', () => {
    const ready = [S1, S2];
    assert.equal(armReplicas(ready, r, 'stable'), ready);
  });

  test('Split: share 1 always goes to the canary replica while there is one, else to stable', () => {
    const figures = new RouterRollouts();
    for (let n = 0; n < 1000; n++) {
      const s = new Split('m', rollout(1), drawOf('alice', conversation(n), CANARY), false, figures, Date.now);
      assert.deepEqual(s.replicas([S1, C1, S2]).map((x) => x.id), ['c1']);
      assert.deepEqual(s.replicas([S1, S2]).map((x) => x.id), ['s1', 's2']);
    }
  });

  test('Split: share 0 never goes to the canary replica while stable has one', () => {
    const figures = new RouterRollouts();
    for (let n = 0; n < 1000; n++) {
      const s = new Split('m', rollout(0), drawOf('alice', conversation(n), CANARY), false, figures, Date.now);
      assert.deepEqual(s.replicas([S1, C1]).map((x) => x.id), ['s1']);
      assert.deepEqual(s.replicas([C1]).map((x) => x.id), ['c1']);
    }
  });

  test("Split.scope: the stable arm keeps the model's affinity scope, the canary arm has its own", () => {
    const s = new Split('m', rollout(0.5), 0.1, false, new RouterRollouts(), Date.now);
    assert.equal(s.scope([S1, S2]), 'm');
    assert.notEqual(s.scope([C1, C2]), 'm');
    assert.equal(s.scope([C1]), s.scope([C2]));
  });
});

describe('outcomeOf: what a request end counts as', () => {
  const ctx = '{"error":{"code":400,"message":"request (300 tokens) exceeds the available context size (64 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":300,"n_ctx":64}}';
  const rows: [string, number, string, string | null, 'ok' | 'error' | 'client'][] = [
    ['200', 200, '', '{"choices":[]}', 'ok'],
    ['200, no tail kept', 200, '', null, 'ok'],
    ['the replica\'s 500', 500, '', '{"error":{"code":500}}', 'error'],
    ['the replica\'s 503 passed on', 503, '', null, 'error'],
    ['no replica answered (the router\'s 502)', 502, 'UPSTREAM_CONNECT', null, 'error'],
    ['stream cut mid-way (status 200 already sent)', 200, 'UPSTREAM_FAILED', 'data: {"choices":[]}\n\n', 'error'],
    ['stalled stream', 200, 'UPSTREAM_STALLED', null, 'error'],
    ['first-byte timeout', 504, 'UPSTREAM_FIRST_BYTE_TIMEOUT', null, 'error'],
    ['the replica refused the engine key', 502, 'UPSTREAM_AUTH', null, 'error'],
    ["llama-server's 400 for a prompt over its context: the revision's", 400, '', ctx, 'error'],
    ['error event inside a 200 stream', 200, '', 'data: {"choices":[]}\n\ndata: {"error":{"code":500,"message":"x","type":"server_error"}}\n\n', 'error'],
    ['anthropic error event inside a 200 stream', 200, '', 'event: error\ndata: {"type":"error","error":{}}\n\n', 'error'],
    ["the client's own 400", 400, '', '{"error":{"code":400,"message":"bad grammar","type":"invalid_request_error"}}', 'client'],
    ["the client's 404", 404, '', null, 'client'],
    ['the client went away', 499, '', null, 'client'],
    ["the router's own shutdown cut it", 200, 'ROUTER_SHUTTING_DOWN', null, 'client'],
  ];
  for (const [what, status, reason, tail, want] of rows) test(what, () => assert.equal(outcomeOf(status, reason, tail), want));
});

describe('tpotOf: time per output token', () => {
  const rows: [string, string | null, number, number | null][] = [
    ["llama-server's timings", '"timings":{"prompt_n":5,"predicted_n":9,"predicted_ms":80,"predicted_per_token_ms":8.9,"predicted_per_second":112}}', 1000, 8.9],
    ['timings with one token predicted: none', '"timings":{"predicted_n":1,"predicted_per_token_ms":30.5}}', 1000, null],
    ['timings without per-token, with predicted_n: none', '"timings":{"predicted_n":1}}', 1000, null],
    ['OpenAI usage: (end − first byte) / (completion − 1)', '"usage":{"prompt_tokens":10,"completion_tokens":11,"total_tokens":21}}', 500, 50],
    ['usage with one completion token: none', '"usage":{"prompt_tokens":10,"completion_tokens":1}}', 500, null],
    ['nothing in the tail', '{"choices":[]}', 500, null],
    ['no tail', null, 500, null],
    ['an exponent', '"timings":{"predicted_n":3,"predicted_per_token_ms":1.5e1}', 0, 15],
  ];
  for (const [what, tail, genMs, want] of rows) test(what, () => assert.equal(tpotOf(tail, genMs), want));
});

describe('armSampleOf: a request end as a sample', () => {
  const end = (e: Partial<CallEnd>): CallEnd => ({ status: 200, reason: '', tail: null, tokens: null, t0: 1000, firstByteAt: 0, now: 2000, ...e });
  test('ok: ttft from arrival to first byte, tpot, prompt and cached tokens, the later-turn flag as given', () => {
    const tail = '"timings":{"cache_n":30,"prompt_n":70,"predicted_n":5,"predicted_per_token_ms":12.5}}';
    const s = armSampleOf('canary', end({ firstByteAt: 1250, tail, tokens: { evaluated: 70, cached: 30 } }), false);
    assert.deepEqual(s, { arm: 'canary', outcome: 'ok', ttftMs: 250, tpotMs: 12.5, promptTokens: 100, cachedTokens: 30, laterTurn: false });
    assert.equal(armSampleOf('canary', end({ firstByteAt: 1250, tail, tokens: { evaluated: 70, cached: 30 } }), true).laterTurn, true);
  });
  test('no first byte: no ttft, no tpot', () => {
    assert.deepEqual(armSampleOf('stable', end({ status: 502, reason: 'UPSTREAM_CONNECT' }), false), { arm: 'stable', outcome: 'error', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null, laterTurn: false });
  });
  test('an error with a first byte keeps its ttft (the window ignores it) but no tpot', () => {
    const s = armSampleOf('canary', end({ status: 200, reason: 'UPSTREAM_FAILED', firstByteAt: 1100, tail: '"timings":{"predicted_n":5,"predicted_per_token_ms":9}' }), false);
    assert.equal(s.outcome, 'error');
    assert.equal(s.tpotMs, null);
  });
});

describe('laterTurnOf: a later turn of a conversation (its misses count as resumed)', () => {
  const u = (content = 'q') => ({ role: 'user', content });
  const a = (content = 'a') => ({ role: 'assistant', content });
  const rows: [string, Record<string, unknown>, boolean][] = [
    ['a first turn: system and user', { messages: [{ role: 'system', content: 's' }, u()] }, false],
    ['a first turn: user only', { messages: [u()] }, false],
    ['a second turn: user, assistant, user', { messages: [u(), a(), u()] }, true],
    ['a later turn after a system prompt', { messages: [{ role: 'system', content: 's' }, u(), a(), u(), a(), u()] }, true],
    ['a first turn with an assistant prefill at the end', { messages: [u(), a('Sure,')] }, false],
    ['a later turn with an assistant prefill at the end', { messages: [u(), a(), u(), a('Sure,')] }, true],
    ["a tool's result after the assistant's call", { messages: [u(), { role: 'assistant', tool_calls: [{ id: 't' }] }, { role: 'tool', tool_call_id: 't', content: '42' }] }, true],
    ["Anthropic's /v1/messages body (system apart)", { system: 's', messages: [u(), a(), u()] }, true],
    ['an assistant message alone', { messages: [a()] }, false],
    ['a completion prompt', { prompt: 'Once upon a time' }, false],
    ['no messages', {}, false],
    ['messages not an array', { messages: 'hello' }, false],
    ['empty messages', { messages: [] }, false],
  ];
  for (const [what, body, want] of rows) test(what, () => assert.equal(laterTurnOf(body), want));
});

describe('CanarySplitter: a later turn that misses the cache counts in its own bucket', () => {
  const spec = fakeSpec({ models: { m: {} } });
  const fleet = new FakeFleetView(spec);
  const base = modelView(spec.models['m']!, {});
  const view = { ...base, rollout: rollout(1, { since: Date.now() - 60_000 }) };
  fleet.model = () => view;
  const end = (evaluated: number, cached: number): CallEnd => {
    const t = performance.now();
    return { status: 200, reason: '', tail: null, tokens: { evaluated, cached }, t0: t - 50, firstByteAt: t - 10, now: t };
  };
  test('first turn miss, later turn miss (resumed), later turn hit', () => {
    const figures = new RouterRollouts();
    const splitter = new CanarySplitter(fleet, figures, Date.now);
    const first = { messages: [{ role: 'user', content: 'conversation x' }] };
    const later = { messages: [...first.messages, { role: 'assistant', content: 'a' }, { role: 'user', content: 'and?' }] };
    const ended = (body: Record<string, unknown>, e: CallEnd) => {
      const s = splitter.of('m', 'alice', null, '/v1/chat/completions', body)!;
      assert.equal(s.laterTurn, body === later);
      s.ended(C1, e);
    };
    ended(first, end(100, 0));
    ended(later, end(140, 0));
    ended(later, end(40, 100));
    const w = figures.window('m', CANARY)!;
    assert.deepEqual(Object.fromEntries(Object.entries(w.canary.ttft).map(([k, c]) => [k, totalOf(c)])), { 'p0:miss': 1, 'p0:resumed': 1, 'p0:hit': 1 });
  });
});

describe('RouterRollouts: the figures the controller reads', () => {
  const ok = (arm: 'stable' | 'canary') => armSampleOf(arm, { status: 200, reason: '', tail: '"timings":{"predicted_n":4,"predicted_per_token_ms":10}}', tokens: { evaluated: 10, cached: 0 }, t0: 0, firstByteAt: 30, now: 100 }, false);
  const err = (arm: 'stable' | 'canary') => armSampleOf(arm, { status: 500, reason: '', tail: null, tokens: null, t0: 0, firstByteAt: 0, now: 100 }, false);

  test('a window per model and canary revision, from the step the view says', () => {
    const f = new RouterRollouts();
    assert.equal(f.window('m', CANARY), null, 'nothing recorded yet');
    f.record('m', rollout(0.5), ok('stable'), 2_000);
    f.record('m', rollout(0.5), ok('canary'), 2_000);
    f.record('m', rollout(0.5), err('canary'), 2_000);
    f.record('m', rollout(0.5), armSampleOf('canary', { status: 499, reason: '', tail: null, tokens: null, t0: 0, firstByteAt: 10, now: 20 }, false), 2_000);
    const w = f.window('m', CANARY)!;
    assert.equal(w.since, 1_000);
    assert.deepEqual([w.stable.requests, w.stable.errors, w.canary.requests, w.canary.errors], [1, 0, 2, 1]);
    assert.equal(totalOf(w.canary.ttft['p0:miss']), 1);
    assert.equal(totalOf(w.canary.tpot), 1);
    assert.equal(f.window('m', 'sha256:other'), null, 'another revision: none');
    assert.equal(f.window('other', CANARY), null);
  });

  test('a request that started before the window began is not counted', () => {
    const f = new RouterRollouts();
    f.record('m', rollout(0.5, { since: 5_000 }), ok('canary'), 4_999);
    f.record('m', rollout(0.5, { since: 5_000 }), ok('canary'), 5_000);
    assert.equal(f.window('m', CANARY)!.canary.requests, 1);
  });

  test('the view showing a later step begins a new window; a new canary revision too', () => {
    const f = new RouterRollouts();
    f.record('m', rollout(0.1, { since: 1_000 }), ok('canary'), 1_500);
    f.record('m', rollout(0.5, { since: 9_000, step: 1 }), ok('stable'), 9_500);
    let w = f.window('m', CANARY)!;
    assert.deepEqual([w.since, w.stable.requests, w.canary.requests], [9_000, 1, 0]);
    f.record('m', rollout(0.1, { since: 10_000, canaryDigest: 'sha256:next' }), ok('canary'), 10_500);
    assert.equal(f.window('m', CANARY), null);
    w = f.window('m', 'sha256:next')!;
    assert.deepEqual([w.since, w.canary.requests], [10_000, 1]);
  });

  test('restart drops the figures and begins at its own time; a view with an older step does not undo it', () => {
    const f = new RouterRollouts();
    f.record('m', rollout(0.5), ok('canary'), 2_000);
    f.restart('m', CANARY, 50_000);
    assert.equal(f.window('m', CANARY)!.since, 50_000);
    assert.equal(f.window('m', CANARY)!.canary.requests, 0);
    f.record('m', rollout(0.5), ok('canary'), 40_000);
    f.record('m', rollout(0.5), ok('canary'), 60_000);
    const w = f.window('m', CANARY)!;
    assert.deepEqual([w.since, w.canary.requests], [50_000, 1]);
  });

  test('a request routed on a stale view (the revision before, same or older step start) neither counts nor replaces the restarted window', () => {
    const f = new RouterRollouts();
    f.restart('m', 'sha256:next', 50_000);
    f.record('m', rollout(0.5, { since: 40_000 }), ok('canary'), 55_000);
    f.record('m', rollout(0.5, { since: 50_000 }), ok('canary'), 55_000);
    const w = f.window('m', 'sha256:next')!;
    assert.deepEqual([w.since, w.canary.requests, w.stable.requests], [50_000, 0, 0]);
    assert.equal(f.window('m', CANARY), null);
  });

  test('retain: windows of models whose canary ended go, unless begun after the snapshot', () => {
    const f = new RouterRollouts();
    f.restart('a', CANARY, 1_000);
    f.restart('b', CANARY, 1_000);
    f.restart('c', CANARY, 9_000);
    f.retain(new Set(['a']), 5_000);
    assert.deepEqual(Object.keys(f.all()).sort(), ['a', 'c']);
  });

  test('all(): every model, as plain data', () => {
    const f = new RouterRollouts();
    f.record('a', rollout(0.5), ok('canary'), 2_000);
    f.record('b', rollout(0.5, { canaryDigest: 'sha256:b' }), err('stable'), 2_000);
    const all = f.all();
    assert.deepEqual(Object.keys(all).sort(), ['a', 'b']);
    assert.equal(all['b']!.canaryDigest, 'sha256:b');
    assert.equal(all['b']!.window.stable.errors, 1);
    assert.deepEqual(JSON.parse(JSON.stringify(all)), all, 'survives JSON');
  });

  test('Split records on the arm of the replica the request really went to', () => {
    const f = new RouterRollouts();
    const now = Date.now();
    const s = new Split('m', rollout(1, { since: now - 60_000 }), 0.2, false, f, Date.now);
    assert.equal(s.arm, 'canary');
    s.ended(S1, { status: 200, reason: '', tail: null, tokens: null, t0: performance.now(), firstByteAt: performance.now(), now: performance.now() });
    s.failedAttempt(C1, performance.now());
    const w = f.window('m', CANARY)!;
    assert.deepEqual([w.stable.requests, w.stable.errors, w.canary.requests, w.canary.errors], [1, 0, 1, 1]);
  });
});
