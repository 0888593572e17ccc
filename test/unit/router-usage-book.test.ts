/** The usage book behind GET /admin/v1/usage (pure, an injected clock) and the admin route on the real admin app. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { parseSince } from '../../src/admin/routes/usage.js';
import { renderUsage } from '../../src/cli/usage-format.js';
import { MINUTE_MS, UsageBook, p50 } from '../../src/router/usage-book.js';
import { usageOf, type UsageRecord } from '../../src/router/usage.js';

const rec = (over: Partial<UsageRecord>): UsageRecord => ({ time: 0, key: 'a', model: 'm', replica: 'r1', status: 200, reason: '', durationSeconds: 0.1, tokens: { prompt: 1, cached: 2, completion: 3 }, ...over });

describe('UsageBook', () => {
  test('sums per key × model; errors are statuses ≥ 400 but a client going away (499)', () => {
    const book = new UsageBook(() => 0);
    book.record(rec({}));
    book.record(rec({ status: 429, tokens: { prompt: 0, cached: 0, completion: 0 } }));
    book.record(rec({ status: 499 }));
    book.record(rec({ key: 'b', model: '' , status: 404 }));
    assert.deepEqual(book.query().map((r) => [r.key, r.model, r.requests, r.errors, r.promptTokens, r.cachedTokens, r.completionTokens]), [
      ['a', 'm', 3, 1, 2, 4, 6],
      ['b', '', 1, 1, 1, 2, 3],
    ]);
    assert.deepEqual(book.query({ key: 'b' }).length, 1);
    assert.deepEqual(book.query({ model: 'm' }).map((r) => r.key), ['a']);
  });

  test('since counts whole minutes from the one it falls in; minutes older than the retention go', () => {
    let now = 0;
    const book = new UsageBook(() => now, 10);
    book.record(rec({ time: 0 }));
    book.record(rec({ time: 5 * MINUTE_MS + 30_000 }));
    assert.equal(book.query({ since: 5 * MINUTE_MS + 59_000 })[0]!.requests, 1);
    assert.equal(book.query({ since: 0 })[0]!.requests, 2);
    now = 20 * MINUTE_MS;
    book.record(rec({ time: now }));
    assert.equal(book.query()[0]!.requests, 1);
  });

  test('p50 within 5 % of the median', () => {
    const book = new UsageBook(() => 0);
    for (const s of [0.01, 0.2, 0.25, 0.3, 9]) book.record(rec({ durationSeconds: s }));
    const m = book.query()[0]!.p50LatencySeconds!;
    assert.ok(Math.abs(m - 0.25) / 0.25 < 0.05, String(m));
    assert.equal(p50(new Map()), null);
  });

  test('renderUsage: a table per key × model, "(none)" for a request that named no known model', () => {
    const book = new UsageBook(() => 0);
    book.record(rec({}));
    book.record(rec({ model: '', status: 404 }));
    const text = renderUsage({ since: null, rows: book.query() });
    assert.match(text, /^usage since the router started\nKEY +MODEL +REQUESTS +ERRORS +PROMPT +CACHED +COMPLETION +P50\n/);
    assert.match(text, /a +\(none\) +1 +1 +1 +2 +3 +\d+ms/);
    assert.equal(renderUsage({ since: null, rows: [] }), 'no requests since the router started');
  });

  test('parseSince: ISO times and durations back from now; anything else is a 400', () => {
    assert.equal(parseSince('2026-12-01T10:00:00Z', 0), Date.parse('2026-12-01T10:00:00Z'));
    assert.equal(parseSince('15m', 3_600_000), 3_600_000 - 15 * 60_000);
    assert.throws(() => parseSince('yesterday', 0), /since must be/);
  });
});

describe('usageOf: tokens from what the replica reported', () => {
  const cases: [string, string, ReturnType<typeof usageOf>][] = [
    ['llama-server timings (JSON and the last stream event)', '..."usage":{"completion_tokens":9,"prompt_tokens":20},"timings":{"cache_n":15,"prompt_n":5,"prompt_ms":1.2,"predicted_n":9,"predicted_ms":3}}', { prompt: 5, cached: 15, completion: 9 }],
    ['OpenAI usage with cached tokens', '{"usage":{"prompt_tokens":20,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":12}}}', { prompt: 8, cached: 12, completion: 4 }],
    ['embeddings: prompt tokens only', '{"usage":{"prompt_tokens":7,"total_tokens":7}}', { prompt: 7, cached: 0, completion: 0 }],
    ['Anthropic usage', '{"usage":{"cache_read_input_tokens":62,"input_tokens":1,"output_tokens":3}}', { prompt: 1, cached: 62, completion: 3 }],
    ['nothing reported', '{"choices":[]}', null],
  ];
  for (const [name, tail, want] of cases) test(name, () => assert.deepEqual(usageOf(tail), want));
});
