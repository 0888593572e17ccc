/**
 * A rollout check's pure parts, as tables: judgeAnswer (status, matches, contains, not_matches,
 * json_schema, max_ttft, the order they are tried in, `got` capped at 512 characters), the streamed
 * answer put back together (answer-stream.ts), and the body and reason a check sends and gives
 * (check.ts). The runner itself is tested against a real llama-server in
 * test/integration/rollout-check.test.ts.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { AnswerStream, MAX_ANSWER_CHARS, contentOf } from '../../src/rollout/answer-stream.js';
import { CAP_CHARS, cap, checkBody, checkFailure, checkUrl, judgeAnswer, type Answer } from '../../src/rollout/check.js';
import type { CheckExpect, RolloutCheck } from '../../src/rollout/types.js';

const EXPECT: CheckExpect = { status: 200, matches: null, contains: null, notMatches: null, jsonSchema: null, maxTtftMs: null };
const ANSWER: Answer = { status: 200, text: 'The answer is 4.', ttftMs: 120 };
const SCHEMA = { type: 'object', required: ['answer'], properties: { answer: { type: 'number' } } };

describe('judgeAnswer', () => {
  const cases: { name: string; expect: Partial<CheckExpect>; answer?: Partial<Answer>; expected?: string; got?: RegExp }[] = [
    { name: 'status only, 200', expect: {} },
    { name: 'status 404 expected, 404 came', expect: { status: 404 }, answer: { status: 404, text: '{"error":"nope"}' } },
    { name: 'status differs: the body shows', expect: {}, answer: { status: 400, text: '{"error":{"message":"context too long"}}' }, expected: 'status 200', got: /^status 400: \{"error":\{"message":"context too long"\}\}$/ },
    { name: 'status differs, empty body', expect: {}, answer: { status: 503, text: '' }, expected: 'status 200', got: /^status 503: \(empty answer\)$/ },
    { name: 'matches', expect: { matches: '\\b4\\b' } },
    { name: 'matches fails', expect: { matches: '^this will never match$' }, expected: 'text matching /^this will never match$/', got: /^The answer is 4\.$/ },
    { name: 'matches, empty answer', expect: { matches: '4' }, answer: { text: '' }, expected: 'text matching /4/', got: /^\(empty answer\)$/ },
    { name: 'an invalid pattern says so', expect: { matches: '(' }, expected: 'text matching /(/', got: /not a valid regular expression/ },
    { name: 'contains', expect: { contains: 'is 4' } },
    { name: 'contains fails', expect: { contains: 'five' }, expected: 'text containing "five"', got: /^The answer is 4\.$/ },
    { name: 'not_matches', expect: { notMatches: 'error|sorry' } },
    { name: 'not_matches fails', expect: { notMatches: 'answer' }, expected: 'text not matching /answer/', got: /^The answer is 4\.$/ },
    { name: 'json_schema holds', expect: { jsonSchema: SCHEMA }, answer: { text: ' {"answer": 4}\n' } },
    { name: 'json_schema: not JSON, saying so', expect: { jsonSchema: SCHEMA }, expected: "text that is JSON satisfying the check's json_schema", got: /^not JSON \(.+\): The answer is 4\.$/ },
    { name: 'json_schema: JSON of the wrong shape', expect: { jsonSchema: SCHEMA }, answer: { text: '{"answer":"four"}' }, got: /^JSON not satisfying the schema \(\/answer must be number\): \{"answer":"four"\}$/ },
    { name: 'json_schema: a missing property', expect: { jsonSchema: SCHEMA }, answer: { text: '{}' }, got: /^JSON not satisfying the schema \(\(the value\) must have required property 'answer'\)/ },
    { name: 'json_schema that does not compile', expect: { jsonSchema: { type: 'nonsense' } }, answer: { text: '{}' }, got: /^the check's json_schema does not compile/ },
    { name: 'max_ttft holds', expect: { maxTtftMs: 500 } },
    { name: 'max_ttft exactly at the bound holds', expect: { maxTtftMs: 120 } },
    { name: 'max_ttft late', expect: { maxTtftMs: 100 }, answer: { ttftMs: 812 }, expected: 'the first token within 100 ms', got: /^the first token after 812 ms$/ },
    { name: 'max_ttft in seconds', expect: { maxTtftMs: 2000 }, answer: { ttftMs: 2500 }, expected: 'the first token within 2 s', got: /^the first token after 2\.5 s$/ },
    { name: 'max_ttft, no token at all', expect: { maxTtftMs: 100 }, answer: { text: '', ttftMs: null }, expected: 'the first token within 100 ms', got: /^no token came$/ },
    { name: 'every clause holding', expect: { matches: '4', contains: 'answer', notMatches: 'sorry', maxTtftMs: 1000 } },
    // the order: status, matches, contains, not_matches, json_schema, max_ttft — the first failing one is reported
    { name: 'status before the text', expect: { matches: 'x' }, answer: { status: 500 }, expected: 'status 200' },
    { name: 'matches before contains', expect: { matches: 'x', contains: 'y' }, expected: 'text matching /x/' },
    { name: 'contains before not_matches', expect: { contains: 'y', notMatches: 'answer' }, expected: 'text containing "y"' },
    { name: 'not_matches before json_schema', expect: { notMatches: 'answer', jsonSchema: SCHEMA }, expected: 'text not matching /answer/' },
    { name: 'json_schema before max_ttft', expect: { jsonSchema: SCHEMA, maxTtftMs: 1 }, expected: "text that is JSON satisfying the check's json_schema" },
  ];
  for (const c of cases) {
    test(`${c.name}: ${c.expected === undefined && c.got === undefined ? 'ok' : 'fails'}`, () => {
      const j = judgeAnswer({ ...EXPECT, ...c.expect }, { ...ANSWER, ...c.answer });
      if (c.expected === undefined && c.got === undefined) {
        assert.deepEqual(j, { ok: true });
        return;
      }
      assert.equal(j.ok, false, 'expected a failure');
      assert.ok(!j.ok);
      if (c.expected !== undefined) assert.equal(j.expected, c.expected);
      if (c.got !== undefined) assert.match(j.got, c.got);
    });
  }

  test('got is capped at 512 characters, saying how many more there were', () => {
    const long = 'x'.repeat(5000);
    const j = judgeAnswer({ ...EXPECT, matches: '^y' }, { ...ANSWER, text: long });
    assert.ok(!j.ok);
    assert.ok(j.got.length <= CAP_CHARS, String(j.got.length));
    const m = /^(x+)… \((\d+) more\)$/.exec(j.got);
    assert.ok(m, j.got.slice(-40));
    assert.equal(m[1]!.length + Number(m[2]), 5000);
  });

  test('cap: short text unchanged; a surrogate pair is never cut in half; exactly 512 kept whole', () => {
    assert.equal(cap('short'), 'short');
    assert.equal(cap('y'.repeat(512)), 'y'.repeat(512));
    const emoji = '😀'.repeat(400); // 800 UTF-16 units
    const c = cap(emoji);
    assert.ok(c.length <= CAP_CHARS);
    assert.doesNotMatch(c, /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
    const m = /… \((\d+) more\)$/.exec(c)!;
    assert.equal(c.length - m[0].length + Number(m[1]), emoji.length);
  });
});

describe('AnswerStream: an OpenAI stream put back together', () => {
  const chat = (content: string | null, extra = ''): string => `data: {"choices":[{"index":0,"delta":{${content === null ? '"role":"assistant"' : `"content":${JSON.stringify(content)}`}}}]${extra}}\n\n`;

  test('chat deltas in pieces split anywhere; the first content is flagged once; [DONE] ends it', () => {
    const body = chat(null) + chat('Hel') + chat('lo, ') + chat('world') + 'data: [DONE]\n\n';
    for (let cut = 1; cut < body.length; cut += 7) {
      const s = new AnswerStream();
      const firsts = [s.push(body.slice(0, cut)), s.push(body.slice(cut)), s.end()].filter(Boolean);
      assert.equal(s.text, 'Hello, world');
      assert.equal(firsts.length, 1);
      assert.equal(s.done, true);
      assert.equal(s.error, null);
    }
  });

  test('the role-only first chunk is not the first content', () => {
    const s = new AnswerStream();
    assert.equal(s.push(chat(null)), false);
    assert.equal(s.push(chat('')), false);
    assert.equal(s.push(chat('a')), true);
    assert.equal(s.push(chat('b')), false);
  });

  test('completions (choices[0].text), CRLF framing, "data:" without a space, comments', () => {
    const s = new AnswerStream();
    s.push(': keep-alive\r\n\r\ndata:{"choices":[{"text":"2+2"}]}\r\n\r\ndata: {"choices":[{"text":"=4"}]}\r\n\r\n');
    s.push('data: [DONE]\r\n\r\n');
    assert.equal(s.text, '2+2=4');
    assert.equal(s.done, true);
  });

  test('an error event is the stream\'s error; no [DONE] is seen as not done', () => {
    const s = new AnswerStream();
    s.push(chat('par') + 'data: {"error":{"code":500,"message":"the context is full","type":"server_error"}}\n\n');
    s.end();
    assert.equal(s.text, 'par');
    assert.equal(s.error, 'the context is full');
    assert.equal(s.done, false);
  });

  test('an event without its blank line at the end is still read', () => {
    const s = new AnswerStream();
    s.push(chat('x').trimEnd());
    assert.equal(s.text, '');
    assert.equal(s.end(), true);
    assert.equal(s.text, 'x');
  });

  test('beyond MAX_ANSWER_CHARS nothing more is kept', () => {
    const s = new AnswerStream();
    const piece = 'y'.repeat(1 << 16);
    for (let i = 0; i < 17; i++) s.push(chat(piece));
    assert.equal(s.tooLarge, true);
    assert.equal(s.text.length, MAX_ANSWER_CHARS);
  });

  test('contentOf: chat message, chat delta, completion text, nothing', () => {
    assert.equal(contentOf({ choices: [{ message: { content: 'm' } }] }), 'm');
    assert.equal(contentOf({ choices: [{ delta: { content: 'd' } }] }), 'd');
    assert.equal(contentOf({ choices: [{ text: 't' }] }), 't');
    assert.equal(contentOf({ choices: [] }), null);
    assert.equal(contentOf({ data: [] }), null);
  });
});

describe('a check\'s body and reason', () => {
  const check: RolloutCheck = { name: 'answers-arithmetic', file: 'models/chat.yaml', path: '/v1/chat/completions', request: { messages: [{ role: 'user', content: '2+2?' }], max_tokens: 8 }, expect: EXPECT, timeoutMs: 30_000 };

  test('temperature 0 and seed 42 unless set; always streamed', () => {
    assert.deepEqual(checkBody(check), { temperature: 0, seed: 42, messages: [{ role: 'user', content: '2+2?' }], max_tokens: 8, stream: true });
    const own = checkBody({ ...check, request: { ...check.request, temperature: 0.7, seed: 7, stream: false } });
    assert.equal(own['temperature'], 0.7);
    assert.equal(own['seed'], 7);
    assert.equal(own['stream'], true);
  });

  test('the URL stays on the replica: a path that would name another host is refused', () => {
    assert.equal(checkUrl('http://10.0.0.5:8080', '/v1/chat/completions'), 'http://10.0.0.5:8080/v1/chat/completions');
    assert.equal(checkUrl('http://10.0.0.5:8080/', '/v1/completions'), 'http://10.0.0.5:8080/v1/completions');
    assert.equal(checkUrl('http://10.0.0.5:8080/engine', '/v1/completions'), 'http://10.0.0.5:8080/engine/v1/completions');
    assert.equal(checkUrl('http://10.0.0.5:8080', '@evil.example/v1/chat/completions'), null);
    assert.equal(checkUrl('http://10.0.0.5:8080', 'v1/chat/completions'), null);
    assert.equal(checkUrl('http://10.0.0.5:8080', '/\\evil.example/x'), 'http://10.0.0.5:8080/\\evil.example/x');
  });

  test('a failure names the check, its file, what it expected and what came back, capped', () => {
    const r = checkFailure(check, 'text matching /4/', 'z'.repeat(2000));
    assert.ok(!r.ok);
    assert.equal(r.reason.code, 'ROLLOUT_CHECK_FAILED');
    assert.ok(r.got.length <= CAP_CHARS);
    assert.match(r.reason.message, /^check "answers-arithmetic" \(models\/chat\.yaml\) failed: expected text matching \/4\/, got z+… \(\d+ more\)$/);
  });
});
