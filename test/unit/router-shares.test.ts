/**
 * Limits that hold fleet-wide (#37 item 4, N6): each router's share of a key limit is floored and the
 * remainder goes to the lowest router ids, so the shares of the live routers sum to the limit; a
 * router that has not counted the others refuses limited keys rather than enforce the whole limit.
 * Table tests of the share arithmetic (router/limits.ts shareOf, ha/router-shares.ts slotAmong) and
 * of the limiter under shares; the same on real etcd is test/integration/ha-key-limits.test.ts.
 */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { KeyLimits } from '../../src/fleet-spec/types.js';
import { slotAmong } from '../../src/ha/router-shares.js';
import { KeyLimiter, refusalMessage, shareOf, Ticket, type Refusal, type RouterCount } from '../../src/router/limits.js';

const L = (l: Partial<KeyLimits>): KeyLimits => ({ requestsPerMinute: null, tokensPerMinute: null, concurrency: null, ...l });

describe('shareOf: floored, the remainder to the lowest ranks, summing to the limit', () => {
  const cases: { limit: number; routers: number; shares: number[] }[] = [
    { limit: 1, routers: 1, shares: [1] },
    { limit: 1, routers: 3, shares: [1, 0, 0] },
    { limit: 2, routers: 3, shares: [1, 1, 0] },
    { limit: 3, routers: 3, shares: [1, 1, 1] },
    { limit: 10, routers: 4, shares: [3, 3, 2, 2] },
    { limit: 60, routers: 3, shares: [20, 20, 20] },
    { limit: 3000, routers: 7, shares: [429, 429, 429, 429, 428, 428, 428] },
    { limit: 0, routers: 2, shares: [0, 0] },
  ];
  for (const c of cases) {
    test(`${c.limit} over ${c.routers}: ${c.shares.join(', ')}`, () => {
      const shares = Array.from({ length: c.routers }, (_, rank) => shareOf(c.limit, c.routers, rank));
      assert.deepEqual(shares, c.shares);
      assert.equal(shares.reduce((a, b) => a + b, 0), c.limit);
    });
  }

  test('every limit 0..200 over 1..12 routers: the shares sum to the limit and differ by at most one, the larger at the lower ranks', () => {
    for (let limit = 0; limit <= 200; limit++) {
      for (let routers = 1; routers <= 12; routers++) {
        const shares = Array.from({ length: routers }, (_, rank) => shareOf(limit, routers, rank));
        assert.equal(shares.reduce((a, b) => a + b, 0), limit, `${limit} over ${routers}`);
        assert.ok(Math.max(...shares) - Math.min(...shares) <= 1);
        assert.deepEqual([...shares].sort((a, b) => b - a), shares);
      }
    }
  });

  test('a rank out of range is taken as the nearest', () => {
    assert.equal(shareOf(1, 3, 7), 0);
    assert.equal(shareOf(1, 3, -1), 1);
  });
});

describe('slotAmong: a router\'s rank among the registered keys', () => {
  const cases: { name: string; keys: string[]; own: string; want: { routers: number; rank: number } }[] = [
    { name: 'alone', keys: ['/p/routers/b'], own: '/p/routers/b', want: { routers: 1, rank: 0 } },
    { name: 'the lowest id is rank 0, whatever order etcd answers in', keys: ['/p/routers/c', '/p/routers/a', '/p/routers/b'], own: '/p/routers/a', want: { routers: 3, rank: 0 } },
    { name: 'the highest is last', keys: ['/p/routers/c', '/p/routers/a', '/p/routers/b'], own: '/p/routers/c', want: { routers: 3, rank: 2 } },
    { name: 'its own key missing (a lease just lost): counted, last', keys: ['/p/routers/a', '/p/routers/b'], own: '/p/routers/0', want: { routers: 3, rank: 2 } },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(slotAmong(c.keys, c.own), c.want));
});

describe('the limiter under shares', () => {
  const now = (): number => 0;
  test('concurrency 1 over 3 routers: one router admits one, the other two none (fleet-wide: one at a time)', () => {
    const admitted = [0, 1, 2].map((rank) => {
      const k = new KeyLimiter(now, () => ({ routers: 3, rank }));
      let n = 0;
      for (let i = 0; i < 3; i++) if (k.admit('a', 'm', L({ concurrency: 1 }), null) instanceof Ticket) n++;
      return n;
    });
    assert.deepEqual(admitted, [1, 0, 0]);
  });

  test('rpm 10 over 4 routers admits 10 in all (3, 3, 2, 2), not 12', () => {
    let total = 0;
    for (let rank = 0; rank < 4; rank++) {
      const k = new KeyLimiter(now, () => ({ routers: 4, rank }));
      for (let i = 0; i < 10; i++) if (k.admit('a', 'm', L({ requestsPerMinute: 10 }), null) instanceof Ticket) total++;
    }
    assert.equal(total, 10);
  });

  test('not counted yet: limited keys refused with KEY_LIMITS_UNCOUNTED, keys without limits admitted; once counted, its share', () => {
    let count: RouterCount = null;
    const k = new KeyLimiter(now, () => count);
    const r = k.admit('a', 'm', L({ concurrency: 5 }), null) as Refusal;
    assert.ok(!(r instanceof Ticket));
    assert.equal(r.code, 'KEY_LIMITS_UNCOUNTED');
    assert.match(refusalMessage(r), /has not counted them yet/);
    assert.ok(k.admit('b', 'm', null, null) instanceof Ticket, 'a key without limits');
    count = { routers: 2, rank: 1 };
    let n = 0;
    for (let i = 0; i < 5; i++) if (k.admit('a', 'm', L({ concurrency: 5 }), null) instanceof Ticket) n++;
    assert.equal(n, 2, 'rank 1 of 2: 5 → 2');
  });
});
