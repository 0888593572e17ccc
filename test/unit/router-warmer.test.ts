/** The warm-up's plan (pure): which prefixes, in which order, into which slot, and the replay body. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { HotEntry } from '../../src/router/hot-prefixes.js';
import { estimateTokens, planWarmup, replayBody } from '../../src/router/warmer.js';

const C = '/v1/chat/completions';
const entry = (key: number, tokens: number): HotEntry => {
  const e = new HotEntry(key, C, Buffer.from(JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, max_tokens: 200, id_slot: 3, messages: [{ role: 'user', content: `p${key}` }] })), 0);
  e.tokens = tokens;
  return e;
};
const keysOf = (r: { body: Buffer }[]): string[] => r.map((x) => (JSON.parse(x.body.toString()) as { messages: { content: string }[] }).messages[0]!.content);

describe('replayBody', () => {
  test('no tokens generated, not streamed, the prompt cached; the client\'s messages and other fields kept', () => {
    const b = JSON.parse(replayBody(Buffer.from(JSON.stringify({ model: 'm', stream: true, stream_options: {}, max_completion_tokens: 9, n: 2, id_slot: 1, tools: [{ type: 'function' }], messages: [{ role: 'user', content: 'hi' }] })), null)!.toString()) as Record<string, unknown>;
    assert.deepEqual(b, { model: 'm', tools: [{ type: 'function' }], messages: [{ role: 'user', content: 'hi' }], max_tokens: 0, n_predict: 0, cache_prompt: true });
    assert.equal((JSON.parse(replayBody(Buffer.from('{"prompt":"x"}'), 2)!.toString()) as { id_slot: number }).id_slot, 2);
  });
  test('a body that is not a JSON object is not replayed', () => {
    assert.equal(replayBody(Buffer.from('[1]'), null), null);
    assert.equal(replayBody(Buffer.from('{'), null), null);
  });
});

describe('planWarmup', () => {
  const hottest = [entry(1, 100), entry(2, 100), entry(3, 100), entry(4, 100)];
  const bounds = { prefixes: 16, maxTokens: 65_536, timeoutMs: 30_000 };
  test('with the prompt cache: every prefix within the bounds, the hottest sent last, no slot pinned', () => {
    const r = planWarmup(hottest, bounds, 1, true);
    assert.deepEqual(keysOf(r), ['p4', 'p3', 'p2', 'p1']);
    assert.ok(r.every((x) => x.slot === null && x.path === C));
  });
  test('at most `prefixes`', () => {
    assert.deepEqual(keysOf(planWarmup(hottest, { ...bounds, prefixes: 2 }, 1, true)), ['p2', 'p1']);
  });
  test('at most `maxTokens` by estimate: one too large is skipped, a smaller one after it still fits', () => {
    const list = [entry(1, 100), entry(2, 1000), entry(3, 50)];
    assert.deepEqual(keysOf(planWarmup(list, { ...bounds, maxTokens: 200 }, 1, true)), ['p3', 'p1']);
    const unknown = entry(5, 0);
    assert.equal(estimateTokens(unknown), Math.ceil(unknown.body.length / 4));
  });
  test('without the prompt cache: one prefix a slot, at most the slots, each pinned to its own', () => {
    const r = planWarmup(hottest, bounds, 2, false);
    assert.deepEqual(keysOf(r), ['p2', 'p1']);
    assert.deepEqual(r.map((x) => x.slot), [0, 1]);
  });
  test('nothing known: nothing to replay', () => {
    assert.deepEqual(planWarmup([], bounds, 4, true), []);
    assert.deepEqual(planWarmup(hottest, { ...bounds, prefixes: 0 }, 4, true), []);
  });
});
