/** The router's pure queue parts: the bounded FIFO, Retry-After, and reading prompt tokens off a response's end. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { WaitQueue, retryAfterSeconds } from '../../src/router/queue.js';
import { readSlots } from '../../src/router/slots.js';
import { promptTokensOf, slotTimesOf } from '../../src/router/usage.js';

describe('WaitQueue', () => {
  test('FIFO up to max; beyond it push refuses', () => {
    const q = new WaitQueue<string>();
    assert.ok(q.push('a', 1, 3));
    assert.ok(q.push('b', 2, 3));
    assert.ok(q.push('c', 3, 3));
    assert.equal(q.push('d', 4, 3), null);
    assert.equal(q.length, 3);
    assert.deepEqual([q.shift()?.value, q.shift()?.value], ['a', 'b']);
    assert.ok(q.push('e', 5, 3));
    assert.deepEqual(q.values(), ['c', 'e']);
  });

  test('max 0 refuses everything', () => assert.equal(new WaitQueue<string>().push('a', 0, 0), null));

  // remove the entry at each position of a 3-long queue, then the order of the rest
  for (const [at, rest] of [[0, 'bc'], [1, 'ac'], [2, 'ab']] as const) {
    test(`removing entry ${at} keeps the others in order`, () => {
      const q = new WaitQueue<string>();
      const e = ['a', 'b', 'c'].map((v, i) => q.push(v, i, 10)!);
      assert.equal(q.remove(e[at]!), true);
      assert.equal(q.remove(e[at]!), false, 'a second removal is a no-op');
      assert.equal(q.values().join(''), rest);
      assert.equal(q.length, 2);
      q.push('d', 9, 10);
      assert.equal(q.values().join(''), rest + 'd');
    });
  }

  test('a shifted entry cannot be removed again; an emptied queue takes new entries', () => {
    const q = new WaitQueue<string>();
    const a = q.push('a', 0, 1)!;
    assert.equal(q.shift(), a);
    assert.equal(q.remove(a), false);
    assert.equal(q.length, 0);
    assert.equal(q.peek(), null);
    assert.equal(q.shift(), null);
    q.push('b', 1, 1);
    assert.deepEqual(q.values(), ['b']);
  });
});

describe('retryAfterSeconds', () => {
  // [waiting, slots, service s, max s, expected]
  const rows: [number, number, number, number, number][] = [
    [0, 6, 1, 60, 1],
    [11, 6, 3, 60, 6],
    [100, 2, 10, 30, 30],
    [100, 2, 10, 600, 60],
    [5, Infinity, 2, 60, 12],
    [0, 6, 0, 60, 1],
    [3, 1, 1, 0.5, 1],
  ];
  for (const [waiting, slots, service, max, expected] of rows) {
    test(`${waiting} waiting, ${slots} slots, ${service} s each, at most ${max} s → ${expected}`, () => assert.equal(retryAfterSeconds(waiting, slots, service, max), expected));
  }
});

describe('promptTokensOf', () => {
  const rows: [string, string, { evaluated: number; cached: number } | null][] = [
    ['llama-server JSON: timings last', '{"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":300,"total_tokens":304,"prompt_tokens_details":{"cached_tokens":280}},"id":"x","timings":{"cache_n":280,"prompt_n":20,"prompt_ms":10.5,"predicted_n":4}}', { evaluated: 20, cached: 280 }],
    ['llama-server stream: the last event', 'data: {"choices":[{"delta":{}}],"timings":{"cache_n":0,"prompt_n":12}}\n\ndata: {"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":512},"timings":{"cache_n":500,"prompt_n":12}}\n\ndata: [DONE]\n\n', { evaluated: 12, cached: 500 }],
    ['OpenAI usage with cached tokens', '{"usage":{"prompt_tokens":100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":64}}}', { evaluated: 36, cached: 64 }],
    ['OpenAI usage without details', '{"usage":{"prompt_tokens":100,"completion_tokens":3}}', { evaluated: 100, cached: 0 }],
    ['timings without prompt_n fall back to usage', '{"usage":{"prompt_tokens":9},"timings":{"predicted_n":3}}', { evaluated: 9, cached: 0 }],
    ['neither', '{"choices":[]}', null],
    ['a cut-off tail', 'n":12}}\n\ndata: [DONE]\n\n', null],
  ];
  for (const [what, tail, expected] of rows) test(what, () => assert.deepEqual(promptTokensOf(tail), expected));
});

describe('slotTimesOf', () => {
  const rows: [string, string, { promptN: number; promptMs: number; predictedMs: number } | null][] = [
    ['llama-server JSON', '{"usage":{"prompt_tokens":300},"timings":{"cache_n":280,"prompt_n":20,"prompt_ms":10.5,"prompt_per_token_ms":0.525,"predicted_n":4,"predicted_ms":31.25,"predicted_per_token_ms":7.8}}', { promptN: 20, promptMs: 10.5, predictedMs: 31.25 }],
    ['the last event of a stream', 'data: {"timings":{"prompt_n":1,"prompt_ms":1,"predicted_ms":1}}\n\ndata: {"timings":{"cache_n":500,"prompt_n":12,"prompt_ms":3e1,"predicted_ms":7}}\n\ndata: [DONE]\n\n', { promptN: 12, promptMs: 30, predictedMs: 7 }],
    ['no predicted_ms', '{"timings":{"prompt_n":12,"prompt_ms":3}}', null],
    ['usage only', '{"usage":{"prompt_tokens":9}}', null],
  ];
  for (const [what, tail, expected] of rows) test(what, () => assert.deepEqual(slotTimesOf(tail), expected));
});

describe('readSlots', () => {
  test('counts the slots processing', () => {
    assert.deepEqual(readSlots([{ id: 0, is_processing: true }, { id: 1, is_processing: false }, { id: 2, is_processing: true }]), { busy: 2, total: 3 });
    assert.deepEqual(readSlots([]), { busy: 0, total: 0 });
    assert.equal(readSlots({ error: 'x' }), null);
  });
});
