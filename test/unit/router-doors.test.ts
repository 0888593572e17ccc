/**
 * Two of the router's doors, the pure parts:
 * - which POST paths go to a replica (router/api-paths.ts): the allow-list, query strings kept, and
 *   llama-server's routes that reach other clients' requests left out;
 * - the bound on held bytes (router/byte-budget.ts) and what the redactors hold (router/redact.ts),
 *   so answers held for keys not trusted count against maxBufferedBytes.
 * The real stack (a real llama-server behind the router, the official openai client) is
 * test/integration/router-doors.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FORWARDED_PATHS, forwardsPath } from '../../src/router/api-paths.js';
import { ByteBudget, HeldBytes } from '../../src/router/byte-budget.js';
import { JsonBodyRedactor, REDACT_HOLD_BYTES, SseRedactor } from '../../src/router/redact.js';

describe('forwardsPath: the allow-list of POST paths', () => {
  const cases: [string, boolean, string][] = [
    ['/v1/chat/completions', true, 'OpenAI chat'],
    ['/v1/completions', true, 'OpenAI completions'],
    ['/v1/embeddings', true, 'embeddings'],
    ['/v1/responses', true, 'OpenAI responses'],
    ['/v1/responses/input_tokens', true, 'OpenAI responses token count'],
    ['/v1/messages', true, 'Anthropic messages'],
    ['/v1/messages?beta=true', true, "Anthropic SDK's beta query"],
    ['/v1/messages/count_tokens', true, 'Anthropic token count'],
    ['/v1/rerank', true, 'rerank'],
    ['/v1/reranking', true, 'rerank alias'],
    ['/v1/rerank?x=/../&y=%2e', true, 'a query string is not a path'],
    ['/v1/chat/completions/control', false, "llama-server's control of a running completion (another client's, by id)"],
    ['/v1/streams/lookup', false, "llama-server's lookup of which conversation ids have a stream running (anyone's)"],
    ['/v1/chat/completions/input_tokens', false, "llama-server's own token count (no OpenAI API)"],
    ['/v1/audio/transcriptions', false, 'multipart: the router reads JSON only'],
    ['/v1/health', false, 'a GET of llama-server'],
    ['/v1/models', false, 'a GET, served by the router itself'],
    ['/v1/chat/completionsx', false, 'a longer name'],
    ['/v1/chat/completions/', false, 'a trailing slash'],
    ['/v1/rerank.v2', false, 'an unknown name'],
    ['/v1/./chat/completions', false, 'a dot segment'],
    ['/v1/../props', false, 'leaves /v1/'],
    ['/v1/%63hat/completions', false, 'percent-encoding'],
    ['/V1/chat/completions', false, 'case'],
    ['?/v1/chat/completions', false, 'a query alone'],
    ['', false, 'empty'],
  ];
  for (const [url, want, why] of cases) {
    it(`${JSON.stringify(url)} → ${want ? 'forwarded' : 'refused'} (${why})`, () => assert.equal(forwardsPath(url), want));
  }

  it('every path of the list is under /v1/, plain segments, no query', () => {
    for (const p of FORWARDED_PATHS) assert.match(p, /^\/v1(\/[a-z_]+)+$/);
  });
});

describe('ByteBudget and HeldBytes: held bytes against one bound', () => {
  it('take counts even past the bound, says whether it still fits; give returns', () => {
    const b = new ByteBudget(100);
    const steps: [op: 'take' | 'give', n: number, fits: boolean | null, held: number][] = [
      ['take', 60, true, 60],
      ['take', 40, true, 100],
      ['take', 1, false, 101],
      ['give', 1, null, 100],
      ['give', 100, null, 0],
      ['take', 101, false, 101],
      ['give', 101, null, 0],
    ];
    for (const [op, n, fits, held] of steps) {
      if (op === 'take') assert.equal(b.take(n), fits, `take ${n}`);
      else b.give(n);
      assert.equal(b.held, held, `${op} ${n}`);
    }
  });

  it('HeldBytes follows what a redactor holds: growth is taken, shrinking given back, release gives all (once)', () => {
    const b = new ByteBudget(1000);
    assert.equal(b.take(300), true); // a request body
    const h = new HeldBytes(b);
    const steps: [now: number, fits: boolean, held: number][] = [
      [0, true, 300],
      [200, true, 500],
      [700, true, 1000],
      [650, true, 950],
      [10, true, 310],
      [701, false, 1001],
    ];
    for (const [now, fits, held] of steps) {
      assert.equal(h.hold(now), fits, `hold ${now}`);
      assert.equal(b.held, held, `hold ${now}`);
    }
    h.release();
    assert.equal(b.held, 300);
    h.release();
    assert.equal(b.held, 300, 'a second release gives nothing');
  });

  it('answers held at once share the bound: the one that would pass it is refused, and the others fit again once it lets go', () => {
    const b = new ByteBudget(1000);
    const calls = [new HeldBytes(b), new HeldBytes(b), new HeldBytes(b)];
    assert.equal(calls[0]!.hold(400), true);
    assert.equal(calls[1]!.hold(400), true);
    assert.equal(calls[2]!.hold(400), false, 'three answers of 400 bytes do not fit 1000');
    calls[2]!.release();
    assert.equal(b.held, 800);
    assert.equal(calls[0]!.hold(600), true, 'the first grows into the room given back');
    calls[0]!.release();
    calls[1]!.release();
    assert.equal(b.held, 0);
  });
});

describe('what a redactor holds (its `held`, counted in the bound)', () => {
  it('JsonBodyRedactor: every byte until the end, nothing after; a chunk that would pass REDACT_HOLD_BYTES is refused and not held', () => {
    const r = new JsonBodyRedactor();
    assert.equal(r.held, 0);
    assert.equal(r.push(Buffer.from('{"a":'))!.length, 0);
    assert.equal(r.held, 5);
    assert.equal(r.push(Buffer.from('1}'))!.length, 0);
    assert.equal(r.held, 7);
    assert.equal(r.end()!.toString(), '{"a":1}');
    assert.equal(r.held, 0);
    const big = new JsonBodyRedactor();
    assert.notEqual(big.push(Buffer.alloc(REDACT_HOLD_BYTES - 1)), null);
    assert.equal(big.push(Buffer.alloc(2)), null);
    assert.equal(big.held, REDACT_HOLD_BYTES - 1);
  });

  it('SseRedactor: only a line cut between chunks, until its newline', () => {
    const r = new SseRedactor();
    const steps: [chunk: string, out: string, held: number][] = [
      ['data: {"x":1}\n\n', 'data: {"x":1}\n\n', 0],
      ['data: {"timi', '', 12],
      ['ngs":{"cache_n":3},"y":2}', '', 37],
      ['\n\ndata: [DO', 'data: {"y":2}\n\n', 9],
      ['NE]\n\n', 'data: [DONE]\n\n', 0],
    ];
    for (const [chunk, out, held] of steps) {
      assert.equal(r.push(Buffer.from(chunk))!.toString(), out, JSON.stringify(chunk));
      assert.equal(r.held, held, JSON.stringify(chunk));
    }
    assert.equal(r.end()!.length, 0);
  });
});
