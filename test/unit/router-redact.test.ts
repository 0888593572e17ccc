/**
 * No cache oracle between keys (#36 N8), the pure parts: what router/redact.ts takes out of
 * llama-server's bodies and stream events for a key not trusted (the shapes are those of
 * tools/server/server-task.cpp in the llama.cpp build the tests run), the line-by-line stream
 * redactor against every cut of a stream into chunks, the request fields refused
 * (router/request-body.ts) and the namespaced affinity key (affinity.ts isolatedKey). The real
 * stack (a real llama-server, the router, the official clients) is test/integration/router-cache-oracle.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { affinityKey, isolatedKey } from '../../src/router/affinity.js';
import { RouterError } from '../../src/router/errors.js';
import { JsonBodyRedactor, REDACT_HOLD_BYTES, redactCacheFigures, redactForKey, redactJson, redactsPath, SseRedactor, picksSlot } from '../../src/router/redact.js';
import { readRequestBody } from '../../src/router/request-body.js';

const TIMINGS = { cache_n: 96, prompt_n: 104, prompt_ms: 20.5, prompt_per_token_ms: 0.2, prompt_per_second: 5000, predicted_n: 4, predicted_ms: 8, predicted_per_token_ms: 2, predicted_per_second: 500 };

describe('redactCacheFigures: each shape llama-server answers in', () => {
  const cases: { name: string; body: Record<string, unknown>; want: Record<string, unknown> }[] = [
    {
      name: 'chat completion (not streamed): timings and usage.prompt_tokens_details.cached_tokens go, prompt_tokens stays the whole prompt',
      body: { choices: [{ index: 0, message: { role: 'assistant', content: 'hi' } }], object: 'chat.completion', usage: { completion_tokens: 4, prompt_tokens: 200, total_tokens: 204, prompt_tokens_details: { cached_tokens: 96 } }, timings: TIMINGS },
      want: { choices: [{ index: 0, message: { role: 'assistant', content: 'hi' } }], object: 'chat.completion', usage: { completion_tokens: 4, prompt_tokens: 200, total_tokens: 204 } },
    },
    {
      name: 'a stream chunk with timings_per_token and return_progress: timings and prompt_progress go',
      body: { choices: [{ delta: { content: 'a' } }], object: 'chat.completion.chunk', timings: TIMINGS, prompt_progress: { total: 200, cache: 96, processed: 200, time_ms: 20 } },
      want: { choices: [{ delta: { content: 'a' } }], object: 'chat.completion.chunk' },
    },
    {
      name: 'verbose: __verbose (tokens_cached, timings, id_slot) goes',
      body: { object: 'text_completion', __verbose: { tokens_cached: 96, id_slot: 1, timings: TIMINGS }, choices: [] },
      want: { object: 'text_completion', choices: [] },
    },
    {
      name: 'details with other fields: only cached_tokens goes',
      body: { usage: { prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 3, audio_tokens: 0 } } },
      want: { usage: { prompt_tokens: 10, prompt_tokens_details: { audio_tokens: 0 } } },
    },
    {
      name: '/v1/responses completed event: response.usage.input_tokens_details and the event\'s timings go',
      body: { type: 'response.completed', response: { id: 'r', usage: { input_tokens: 200, output_tokens: 4, total_tokens: 204, input_tokens_details: { cached_tokens: 96 } } }, timings: TIMINGS },
      want: { type: 'response.completed', response: { id: 'r', usage: { input_tokens: 200, output_tokens: 4, total_tokens: 204 } } },
    },
    {
      name: 'Anthropic message (not streamed): cache_read_input_tokens goes, input_tokens counts the whole prompt',
      body: { type: 'message', content: [{ type: 'text', text: 'hi' }], usage: { cache_read_input_tokens: 96, input_tokens: 104, output_tokens: 4 } },
      want: { type: 'message', content: [{ type: 'text', text: 'hi' }], usage: { input_tokens: 200, output_tokens: 4 } },
    },
    {
      name: 'Anthropic message_start event: message.usage the same way',
      body: { type: 'message_start', message: { id: 'm', usage: { cache_read_input_tokens: 96, input_tokens: 104, output_tokens: 0 } } },
      want: { type: 'message_start', message: { id: 'm', usage: { input_tokens: 200, output_tokens: 0 } } },
    },
    {
      name: 'the model\'s own output is never touched: a tool input with a "timings" key, text about cache_n',
      body: { type: 'message', content: [{ type: 'tool_use', input: { timings: 1, usage: { cache_read_input_tokens: 2 } } }, { type: 'text', text: '"timings":{"cache_n":5}' }] },
      want: { type: 'message', content: [{ type: 'tool_use', input: { timings: 1, usage: { cache_read_input_tokens: 2 } } }, { type: 'text', text: '"timings":{"cache_n":5}' }] },
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const o = structuredClone(c.body);
      const changed = redactCacheFigures(o);
      assert.deepEqual(o, c.want);
      assert.equal(changed, JSON.stringify(c.body) !== JSON.stringify(c.want));
    });
  }
});

describe('redactJson and redactForKey: whole bodies', () => {
  it('a body with no figure is passed as the same bytes (not parsed, not rewritten)', () => {
    const b = Buffer.from('{"data":[{"embedding":[0.1,2e-7]}],"usage":{"prompt_tokens":3,"total_tokens":3}}');
    assert.equal(redactJson(b), b);
  });
  it('a body whose text mentions cache but carries no figure: the same bytes', () => {
    const b = Buffer.from('{"choices":[{"message":{"content":"clear the cache"}}]}');
    assert.equal(redactJson(b), b);
  });
  it('an array of answers (several prompts at once): each rid of its figures', () => {
    const out = redactJson(Buffer.from(JSON.stringify([{ index: 0, timings: TIMINGS }, { index: 1, usage: { prompt_tokens: 5, prompt_tokens_details: { cached_tokens: 5 } } }])));
    assert.deepEqual(JSON.parse(out!.toString()), [{ index: 0 }, { index: 1, usage: { prompt_tokens: 5 } }]);
  });
  it('a body that may carry a figure and is not JSON: null (refused, never passed)', () => {
    assert.equal(redactJson(Buffer.from('{"timings":{"cache_n":3')), null);
  });
  it('a body that is not JSON and carries no mark: passed', () => {
    const b = Buffer.from('<html>oops</html>');
    assert.equal(redactJson(b), b);
  });
  it('a trusted key gets the body as it came; another key without its figures', () => {
    const b = Buffer.from(JSON.stringify({ usage: { prompt_tokens: 9, prompt_tokens_details: { cached_tokens: 8 } }, timings: TIMINGS }));
    assert.equal(redactForKey(b, { trusted: true }), b);
    assert.deepEqual(JSON.parse(redactForKey(b, { trusted: false })!.toString()), { usage: { prompt_tokens: 9 } });
  });
  it('non-ASCII text survives the rewrite', () => {
    const out = redactJson(Buffer.from(JSON.stringify({ choices: [{ message: { content: 'Grüße, 世界 🚀' } }], timings: TIMINGS })));
    assert.deepEqual(JSON.parse(out!.toString('utf8')), { choices: [{ message: { content: 'Grüße, 世界 🚀' } }] });
  });
});

/** Feeds `parts` through a fresh SseRedactor; the bytes out, or null when it refused. */
function throughSse(parts: Buffer[]): string | null {
  const r = new SseRedactor();
  const out: Buffer[] = [];
  for (const p of parts) {
    const o = r.push(p);
    if (o === null) return null;
    out.push(o);
  }
  const rest = r.end();
  if (rest === null) return null;
  out.push(rest);
  return Buffer.concat(out).toString('utf8');
}

describe('SseRedactor: a stream, line by line', () => {
  const chat = [
    `data: ${JSON.stringify({ choices: [{ delta: { role: 'assistant', content: null } }], object: 'chat.completion.chunk' })}\n\n`,
    `data: ${JSON.stringify({ choices: [{ delta: { content: 'né' } }], object: 'chat.completion.chunk', timings: TIMINGS })}\n\n`,
    `data: ${JSON.stringify({ choices: [{ finish_reason: 'stop', delta: {} }], object: 'chat.completion.chunk' })}\n\n`,
    `data: ${JSON.stringify({ choices: [], usage: { completion_tokens: 2, prompt_tokens: 200, total_tokens: 202, prompt_tokens_details: { cached_tokens: 96 } }, timings: TIMINGS })}\n\n`,
    'data: [DONE]\n\n',
  ].join('');
  const want = [
    `data: ${JSON.stringify({ choices: [{ delta: { role: 'assistant', content: null } }], object: 'chat.completion.chunk' })}\n\n`,
    `data: ${JSON.stringify({ choices: [{ delta: { content: 'né' } }], object: 'chat.completion.chunk' })}\n\n`,
    `data: ${JSON.stringify({ choices: [{ finish_reason: 'stop', delta: {} }], object: 'chat.completion.chunk' })}\n\n`,
    `data: ${JSON.stringify({ choices: [], usage: { completion_tokens: 2, prompt_tokens: 200, total_tokens: 202 } })}\n\n`,
    'data: [DONE]\n\n',
  ].join('');

  it('the whole stream in one chunk', () => {
    assert.equal(throughSse([Buffer.from(chat)]), want);
  });
  it('cut into two chunks at every byte (a multi-byte character split too): the same bytes out', () => {
    const b = Buffer.from(chat);
    for (let i = 1; i < b.length; i++) assert.equal(throughSse([b.subarray(0, i), b.subarray(i)]), want, `cut at ${i}`);
  });
  it('one byte a chunk', () => {
    const b = Buffer.from(chat);
    assert.equal(throughSse([...b].map((x) => Buffer.from([x]))), want);
  });
  it('Anthropic events (event: lines, CRLF): message_start folded, the rest as they came', () => {
    const s = `event: message_start\r\ndata: ${JSON.stringify({ type: 'message_start', message: { usage: { cache_read_input_tokens: 96, input_tokens: 104, output_tokens: 0 } } })}\r\n\r\nevent: message_stop\r\ndata: {"type":"message_stop"}\r\n\r\n`;
    const w = `event: message_start\r\ndata: ${JSON.stringify({ type: 'message_start', message: { usage: { input_tokens: 200, output_tokens: 0 } } })}\r\n\r\nevent: message_stop\r\ndata: {"type":"message_stop"}\r\n\r\n`;
    assert.equal(throughSse([Buffer.from(s)]), w);
  });
  it('a stream without a figure: every chunk passes as the same Buffer', () => {
    const r = new SseRedactor();
    const c = Buffer.from('data: {"choices":[{"delta":{"content":"x"}}]}\n\n');
    assert.equal(r.push(c), c);
  });
  it('a data line that may carry a figure and does not parse is dropped; a last line without its newline is flushed at the end', () => {
    assert.equal(throughSse([Buffer.from('data: {"timings":{"cache_n":1\n\ndata: {"a":1,"id_slot":0}')]), '\ndata: {"a":1}');
  });
  it('a line longer than REDACT_HOLD_BYTES: refused', () => {
    const r = new SseRedactor();
    assert.notEqual(r.push(Buffer.alloc(REDACT_HOLD_BYTES, 0x61)), null);
    assert.equal(r.push(Buffer.from('a')), null);
  });
});

describe('JsonBodyRedactor: a body held whole', () => {
  it('chunks held, the body rid of its figures at the end', () => {
    const r = new JsonBodyRedactor();
    const b = Buffer.from(JSON.stringify({ id: 'x', timings: TIMINGS }));
    assert.equal(r.push(b.subarray(0, 5))!.length, 0);
    assert.equal(r.push(b.subarray(5))!.length, 0);
    assert.equal(r.end()!.toString(), '{"id":"x"}');
  });
  it('more than REDACT_HOLD_BYTES: refused', () => {
    const r = new JsonBodyRedactor();
    assert.notEqual(r.push(Buffer.alloc(REDACT_HOLD_BYTES)), null);
    assert.equal(r.push(Buffer.alloc(1)), null);
  });
  it('an empty body stays empty', () => {
    assert.equal(new JsonBodyRedactor().end()!.length, 0);
  });
});

describe('which paths are held, which request fields refused', () => {
  const paths: [string, boolean][] = [
    ['/v1/chat/completions', true],
    ['/v1/completions', true],
    ['/v1/messages', true],
    ['/v1/responses', true],
    ['/v1/audio/transcriptions', true],
    ['/v1/embeddings', false],
    ['/v1/embeddings?x=1', false],
    ['/v1/rerank', false],
    ['/v1/reranking', false],
  ];
  for (const [p, want] of paths) it(`${p}: ${want ? 'redacted' : 'passed as it comes (no figure there)'}`, () => assert.equal(redactsPath(p), want));

  const slots: [Record<string, unknown>, boolean][] = [
    [{ model: 'm' }, false],
    [{ model: 'm', id_slot: -1 }, false],
    [{ model: 'm', id_slot: null }, false],
    [{ model: 'm', id_slot: 0 }, true],
    [{ model: 'm', id_slot: 3 }, true],
    [{ model: 'm', id_slot: '0' }, true],
  ];
  for (const [body, want] of slots) it(`${JSON.stringify(body)}: ${want ? 'picks a slot' : 'does not'}`, () => assert.equal(picksSlot(body), want));

  it('readRequestBody: id_slot 0 is SLOT_PICK_REFUSED (400, param id_slot); -1 passes', () => {
    assert.throws(() => readRequestBody(Buffer.from('{"model":"m","id_slot":0}')), (e: unknown) => e instanceof RouterError && e.code === 'SLOT_PICK_REFUSED' && e.reason.http === 400 && e.param === 'id_slot');
    assert.equal(readRequestBody(Buffer.from('{"model":"m","id_slot":-1}')).name, 'm');
  });
});

describe('isolatedKey: a key\'s prefix apart from every other key\'s', () => {
  it('the same prompt: one affinity key for every key without isolation, one per key name with it, the same each time', () => {
    const k = affinityKey('/v1/chat/completions', { messages: [{ role: 'system', content: 'shared' }, { role: 'user', content: 'q' }] })!;
    const names = ['a', 'b', 'team-1', 'team-2', 'team-10'];
    const keys = names.map((n) => isolatedKey(k, n));
    assert.equal(new Set([k, ...keys]).size, names.length + 1);
    assert.deepEqual(names.map((n) => isolatedKey(k, n)), keys);
    for (const x of keys) assert.ok(Number.isInteger(x) && x >= 0 && x < 2 ** 32);
  });
  it('two prompts of one key stay apart', () => {
    assert.notEqual(isolatedKey(1, 'a'), isolatedKey(2, 'a'));
  });
});
