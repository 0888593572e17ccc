/** The per-key limiter (src/router/limits.ts), pure: an injected clock drives it through time. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { KeyLimits } from '../../src/fleet-spec/types.js';
import { KeyLimiter, SlidingWindow, Ticket, WINDOW_MS, refusalMessage, tighter, type Refusal } from '../../src/router/limits.js';

const L = (l: Partial<KeyLimits>): KeyLimits => ({ requestsPerMinute: null, tokensPerMinute: null, concurrency: null, ...l });

function clock(t = 1_000_000) {
  const c = { t, now: () => c.t };
  return c;
}

const refused = (x: Ticket | Refusal): Refusal => {
  assert.ok(!(x instanceof Ticket), 'expected a refusal');
  return x as Refusal;
};
const admitted = (x: Ticket | Refusal): Ticket => {
  assert.ok(x instanceof Ticket, `expected admission, got ${JSON.stringify(x)}`);
  return x as Ticket;
};

describe('SlidingWindow', () => {
  test('sums what was added in the last 60 s; entries expire exactly 60 s later', () => {
    const w = new SlidingWindow();
    w.add(0, 3);
    w.add(10_000, 4);
    assert.equal(w.total(59_999), 7);
    assert.equal(w.total(60_000), 4);
    assert.equal(w.total(70_000), 0);
  });

  const waits: [string, [number, number][], number, number, number, number][] = [
    // name, entries [t, n], now, limit, need, expected wait ms
    ['under the limit: no wait', [[0, 1]], 1000, 5, 1, 0],
    ['at the limit: until the oldest expires', [[0, 1], [5000, 1]], 10_000, 2, 1, 50_000],
    ['over by a big charge: until that charge expires', [[0, 1], [20_000, 100]], 30_000, 50, 1, 50_000],
    ['two must expire', [[0, 1], [1000, 1], [2000, 1]], 3000, 2, 1, 58_000],
    ['need larger than what any expiry frees: a whole window', [[0, 1]], 1000, 1, 5, WINDOW_MS],
  ];
  for (const [name, entries, now, limit, need, want] of waits) {
    test(`waitMs: ${name}`, () => {
      const w = new SlidingWindow();
      for (const [t, n] of entries) w.add(t, n);
      assert.equal(w.waitMs(now, limit, need), want);
    });
  }

  test('compacts its log without losing entries (many entries, all expire)', () => {
    const w = new SlidingWindow();
    for (let i = 0; i < 5000; i++) w.add(i, 1);
    assert.equal(w.total(4999), 5000);
    assert.equal(w.total(WINDOW_MS + 2499), 2500);
    assert.equal(w.total(WINDOW_MS + 5000), 0);
  });
});

describe('tighter', () => {
  test('each field the smaller; null is no limit', () => {
    assert.deepEqual(tighter(L({ requestsPerMinute: 10, concurrency: 3 }), L({ requestsPerMinute: 5, tokensPerMinute: 100 })), L({ requestsPerMinute: 5, tokensPerMinute: 100, concurrency: 3 }));
    assert.deepEqual(tighter(null, L({ concurrency: 1 })), L({ concurrency: 1 }));
    assert.equal(tighter(null, undefined), null);
  });
});

describe('KeyLimiter', () => {
  test('requests_per_minute: 3 admitted, the 4th refused with Retry-After until the first expires; a refusal is not counted', () => {
    const c = clock(0);
    const k = new KeyLimiter(c.now);
    const l = L({ requestsPerMinute: 3 });
    for (let i = 0; i < 3; i++) {
      admitted(k.admit('a', 'm', l, null)).end(0);
      c.t += 1000;
    }
    const r = refused(k.admit('a', 'm', l, null));
    assert.equal(r.code, 'KEY_RATE_LIMITED');
    assert.equal(r.retryAfterSeconds, 57); // the first (t=0) expires at 60 s; now 3 s
    for (let i = 0; i < 10; i++) refused(k.admit('a', 'm', l, null));
    c.t = 60_000;
    admitted(k.admit('a', 'm', l, null));
    refused(k.admit('a', 'm', l, null));
    c.t = 61_000;
    admitted(k.admit('a', 'm', l, null));
  });

  test('keys are counted apart', () => {
    const c = clock();
    const k = new KeyLimiter(c.now);
    const l = L({ requestsPerMinute: 1 });
    admitted(k.admit('a', 'm', l, null));
    admitted(k.admit('b', 'm', l, null));
    refused(k.admit('a', 'm', l, null));
  });

  test('key × model: counted per model; the key-wide limit over all models', () => {
    const c = clock();
    const k = new KeyLimiter(c.now);
    const perModel = L({ requestsPerMinute: 1 });
    admitted(k.admit('a', 'm1', null, perModel));
    admitted(k.admit('a', 'm2', null, perModel));
    const r = refused(k.admit('a', 'm1', null, perModel));
    assert.match(refusalMessage(r), /key 'a' on model 'm1' allows 1 requests per minute/);
    const keyWide = L({ requestsPerMinute: 2 });
    admitted(k.admit('b', 'm1', keyWide, null));
    admitted(k.admit('b', 'm2', keyWide, null));
    const r2 = refused(k.admit('b', 'm3', keyWide, null));
    assert.match(refusalMessage(r2), /key 'b' allows 2 requests per minute/);
  });

  test('a request refused by the key × model limit is not counted against the key-wide one', () => {
    const c = clock();
    const k = new KeyLimiter(c.now);
    const keyWide = L({ requestsPerMinute: 2 });
    const perModel = L({ requestsPerMinute: 1 });
    admitted(k.admit('a', 'm1', keyWide, perModel));
    refused(k.admit('a', 'm1', keyWide, perModel));
    refused(k.admit('a', 'm1', keyWide, perModel));
    admitted(k.admit('a', 'm2', keyWide, null));
  });

  test('concurrency: held until the ticket ends; end twice releases once', () => {
    const c = clock();
    const k = new KeyLimiter(c.now);
    const l = L({ concurrency: 2 });
    const t1 = admitted(k.admit('a', 'm', l, null));
    admitted(k.admit('a', 'm', l, null));
    const r = refused(k.admit('a', 'm', l, null));
    assert.equal(r.code, 'KEY_CONCURRENCY_LIMITED');
    assert.equal(r.retryAfterSeconds, 1);
    t1.end(0);
    t1.end(0);
    admitted(k.admit('a', 'm', l, null));
    refused(k.admit('a', 'm', l, null));
  });

  test('tokens_per_minute: charged at the end; a request that ran over holds the next ones back until its tokens expire', () => {
    const c = clock(0);
    const k = new KeyLimiter(c.now);
    const l = L({ tokensPerMinute: 100 });
    const a = admitted(k.admit('a', 'm', l, null));
    const b = admitted(k.admit('a', 'm', l, null)); // nothing charged yet: both in
    c.t = 5000;
    a.end(40);
    admitted(k.admit('a', 'm', l, null)).end(0);
    c.t = 10_000;
    b.end(500); // ran over
    const r = refused(k.admit('a', 'm', l, null));
    assert.equal(r.code, 'KEY_TOKENS_LIMITED');
    assert.equal(r.retryAfterSeconds, 60); // the 500 charged at 10 s expire at 70 s
    c.t = 69_999;
    refused(k.admit('a', 'm', l, null));
    c.t = 70_000;
    admitted(k.admit('a', 'm', l, null));
  });

  test('new limits take effect at the next request; counts carry over', () => {
    const c = clock();
    const k = new KeyLimiter(c.now);
    admitted(k.admit('a', 'm', L({ requestsPerMinute: 5 }), null));
    admitted(k.admit('a', 'm', L({ requestsPerMinute: 5 }), null));
    refused(k.admit('a', 'm', L({ requestsPerMinute: 2 }), null));
    admitted(k.admit('a', 'm', L({ requestsPerMinute: 3 }), null));
  });

  test('a limit of 60 rpm admits 60 of 200 requests spread over a minute', () => {
    const c = clock(0);
    const k = new KeyLimiter(c.now);
    let ok = 0;
    for (let i = 0; i < 200; i++) {
      c.t = i * 300; // 200 requests in 60 s
      const x = k.admit('a', 'm', L({ requestsPerMinute: 60 }), null);
      if (x instanceof Ticket) {
        ok++;
        x.end(0);
      }
    }
    assert.equal(ok, 60);
  });

  test('shared by 3 routers (instances on etcd): each enforces its share, named in the message; back to the whole when alone', () => {
    const c = clock(0);
    let routers = 3;
    const k = new KeyLimiter(c.now, () => routers);
    const l = L({ requestsPerMinute: 60 });
    let ok = 0;
    for (let i = 0; i < 70; i++) if (k.admit('a', 'm', l, null) instanceof Ticket) ok++;
    assert.equal(ok, 20);
    const r = refused(k.admit('a', 'm', l, null));
    assert.match(refusalMessage(r), /allows 20 requests per minute \(access\/keys.yaml, this router's share of 60 over 3 routers\)/);
    routers = 1;
    for (let i = 0; i < 40; i++) admitted(k.admit('a', 'm', l, null));
    refused(k.admit('a', 'm', l, null));
  });

  test('sweep drops scopes that hold nothing; a held ticket or a window still counting keeps its scope', () => {
    const c = clock(0);
    const k = new KeyLimiter(c.now);
    const l = L({ requestsPerMinute: 10 });
    const held = admitted(k.admit('a', 'm', l, l));
    admitted(k.admit('b', 'm', l, null)).end(0);
    k.sweep();
    assert.equal(k.size, 2);
    c.t = WINDOW_MS + 1;
    k.sweep();
    assert.equal(k.size, 1, 'b expired; a still in progress');
    held.end(0);
    k.sweep();
    assert.equal(k.size, 0);
  });
});
