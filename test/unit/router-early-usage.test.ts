/**
 * What a request that ended early is charged (router/usage.ts earlyUsageOf), and how the usage book
 * and the usage log say it ended early. Table tests of the pure parts; the end-to-end case against a
 * real llama-server is test/integration/router-early-usage.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { UsageBook } from '../../src/router/usage-book.js';
import { usageLine } from '../../src/router/usage-log.js';
import { earlyUsageOf, type TokenUsage, type UsageRecord } from '../../src/router/usage.js';

describe('earlyUsageOf: the tokens seen of a request that ended early', () => {
  const cases: { name: string; tail: string | null; events: number; bodyBytes: number; want: TokenUsage }[] = [
    { name: 'nothing streamed (the client left while the prompt was evaluated): the prompt as body bytes ÷ 4', tail: null, events: 0, bodyBytes: 401, want: { prompt: 101, cached: 0, completion: 0 } },
    { name: 'a stream cut after 900 events without timings: 900 completion tokens', tail: 'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', events: 900, bodyBytes: 700, want: { prompt: 175, cached: 0, completion: 900 } },
    {
      name: 'timings in the stream (timings_per_token): the replica\'s own prompt and cache counts',
      tail: 'data: {"choices":[{"delta":{"content":"a"}}],"timings":{"cache_n":30,"prompt_n":12,"prompt_ms":1,"predicted_n":41,"predicted_ms":2}}\n\n',
      events: 41, bodyBytes: 700, want: { prompt: 12, cached: 30, completion: 41 },
    },
    {
      name: 'the final usage event got through before the cut: what it reports',
      tail: 'data: {"choices":[],"usage":{"completion_tokens":50,"prompt_tokens":20,"prompt_tokens_details":{"cached_tokens":5}}}\n\n',
      events: 50, bodyBytes: 700, want: { prompt: 15, cached: 5, completion: 50 },
    },
    {
      name: 'timings older than the events seen: the prompt from them, the completion from the events',
      tail: 'data: {"timings":{"cache_n":0,"prompt_n":12,"prompt_ms":1,"predicted_n":3,"predicted_ms":2}}\n\ndata: {"choices":[]}\n\n',
      events: 9, bodyBytes: 700, want: { prompt: 12, cached: 0, completion: 9 },
    },
  ];
  for (const c of cases) {
    it(c.name, () => assert.deepEqual(earlyUsageOf({ tail: c.tail, events: c.events, bodyBytes: c.bodyBytes }), c.want));
  }
});

describe('ended early in the usage book and the usage log', () => {
  const rec = (endedEarly: boolean, completion: number): UsageRecord => ({
    time: Date.UTC(2026, 11, 1, 12), key: 'k', model: 'm', replica: 'r', status: endedEarly ? 499 : 200, reason: '', durationSeconds: 1,
    tokens: { prompt: 10, cached: 0, completion }, ...(endedEarly ? { endedEarly: true } : {}),
  });

  it('the book counts the requests that ended early beside their partial tokens', () => {
    const book = new UsageBook(() => Date.UTC(2026, 11, 1, 12));
    book.record(rec(true, 900));
    book.record(rec(true, 10));
    book.record(rec(false, 5));
    const [row] = book.query();
    assert.equal(row!.requests, 3);
    assert.equal(row!.endedEarly, 2);
    assert.equal(row!.completionTokens, 915);
    assert.equal(row!.errors, 0, '499 is not an error');
  });

  it('the log line says ended_early', () => {
    assert.equal((JSON.parse(usageLine(rec(true, 900))) as { ended_early: boolean }).ended_early, true);
    assert.equal((JSON.parse(usageLine(rec(false, 5))) as { ended_early: boolean }).ended_early, false);
  });
});
