/** The router's hot prefixes (pure): rank by traffic, tokens saved and recency; bounds per model; the isolated key's own entries. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { affinityKey, isolatedKey } from '../../src/router/affinity.js';
import { HALF_LIFE_MS, HOT_BOUNDS, HotPrefixes, SAVED_TOKENS_PER_POINT, rankOf } from '../../src/router/hot-prefixes.js';

const C = '/v1/chat/completions';
const body = (s: string): Buffer => Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'system', content: 'sys' }, { role: 'user', content: s }] }));
const T0 = 1_000_000;

describe('HotPrefixes', () => {
  test('ranked by requests, tokens saved and recency (hottest first)', () => {
    const h = new HotPrefixes();
    // a: 3 requests; b: 1 request that saved 4 points' worth of tokens; c: 3 requests an hour ago
    for (let i = 0; i < 3; i++) h.seen('m', 1, C, body('a'), T0);
    h.seen('m', 2, C, body('b'), T0)!.answered(4 * SAVED_TOKENS_PER_POINT, 5000);
    for (let i = 0; i < 3; i++) h.seen('m', 3, C, body('c'), T0 - 6 * HALF_LIFE_MS);
    assert.deepEqual(h.hottest('m', 10, T0).map((e) => e.key), [2, 1, 3]);
    assert.equal(h.hottest('m', 10, T0)[0]!.tokens, 5000);
    assert.deepEqual(h.hottest('m', 1, T0).map((e) => e.key), [2]);
    assert.deepEqual(h.hottest('other', 10, T0), []);
  });

  test('the heat halves every HALF_LIFE_MS without traffic', () => {
    const h = new HotPrefixes();
    const e = h.seen('m', 1, C, body('a'), T0)!;
    assert.equal(rankOf(e, T0), 1);
    assert.equal(rankOf(e, T0 + HALF_LIFE_MS), 0.5);
    h.seen('m', 1, C, body('a'), T0 + HALF_LIFE_MS);
    assert.equal(rankOf(e, T0 + HALF_LIFE_MS), 1.5);
  });

  test('an entry holds the latest body of its key (a conversation\'s next turn, which holds the earlier ones)', () => {
    const h = new HotPrefixes();
    h.seen('m', 1, C, body('turn 1'), T0);
    const longer = body('turn 1 and turn 2');
    h.seen('m', 1, C, longer, T0 + 1);
    assert.deepEqual(h.hottest('m', 1, T0 + 1)[0]!.body, longer);
    assert.deepEqual(h.size('m'), { entries: 1, bytes: longer.length });
  });

  test('bounded in entries: the lowest-ranked goes, never the one just counted', () => {
    const h = new HotPrefixes({ ...HOT_BOUNDS, entries: 3 });
    for (let k = 1; k <= 3; k++) for (let i = 0; i < k; i++) h.seen('m', k, C, body(`k${k}`), T0);
    h.seen('m', 4, C, body('k4'), T0); // 1 request: as cold as key 1, and kept as the newest
    assert.equal(h.size('m').entries, 3);
    assert.deepEqual(h.hottest('m', 10, T0).map((e) => e.key).sort(), [2, 3, 4]);
  });

  test('bounded in bytes per model; a body over the entry bound is not kept', () => {
    const b = body('x'.repeat(100));
    const h = new HotPrefixes({ ...HOT_BOUNDS, bytes: 3 * b.length, entryBytes: 2 * b.length });
    for (let k = 1; k <= 5; k++) h.seen('m', k, C, body('x'.repeat(99) + String(k)), T0 + k);
    assert.equal(h.size('m').entries, 3);
    assert.ok(h.size('m').bytes <= 3 * b.length);
    assert.equal(h.seen('m', 9, C, body('y'.repeat(3 * b.length)), T0), null);
    assert.equal(h.size('m').entries, 3);
    // another model has its own bound
    h.seen('n', 1, C, b, T0);
    assert.deepEqual(h.size('n'), { entries: 1, bytes: b.length });
  });

  test('bounded over every model: the model holding the most bytes gives up its coldest entry first', () => {
    const b = body('x'.repeat(100));
    const h = new HotPrefixes({ ...HOT_BOUNDS, totalBytes: 5 * b.length });
    for (let k = 1; k <= 4; k++) h.seen('big', k, C, b, T0 + k);
    h.seen('small', 1, C, b, T0);
    assert.equal(h.totalBytes, 5 * b.length);
    h.seen('small', 2, C, b, T0 + 10);
    assert.equal(h.totalBytes, 5 * b.length);
    assert.deepEqual([h.size('big').entries, h.size('small').entries], [3, 2]);
    assert.deepEqual(h.hottest('big', 10, T0 + 10).map((e) => e.key).sort(), [2, 3, 4]);
    h.retain(new Set(['small']));
    assert.equal(h.totalBytes, 2 * b.length);
  });

  test('keys with isolate_cache keep their own entries: the same prefix of two keys is two entries', () => {
    const h = new HotPrefixes();
    const fields = JSON.parse(body('same').toString()) as Record<string, unknown>;
    const k = affinityKey(C, fields)!;
    h.seen('m', isolatedKey(k, 'alice'), C, body('same'), T0);
    h.seen('m', isolatedKey(k, 'bob'), C, body('same'), T0);
    h.seen('m', k, C, body('same'), T0);
    assert.equal(h.size('m').entries, 3);
  });

  test('models that left the spec are dropped', () => {
    const h = new HotPrefixes();
    h.seen('m', 1, C, body('a'), T0);
    h.seen('gone', 1, C, body('a'), T0);
    h.retain(new Set(['m']));
    assert.equal(h.size('gone').entries, 0);
    assert.equal(h.size('m').entries, 1);
  });
});
