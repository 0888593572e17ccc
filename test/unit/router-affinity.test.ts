/** Prefix affinity, pure: the key of a request, the ring, and the choice with bounded load. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { affinityKey, choose, chooseSticky, isPromptPath, KEY_CHARS, LOAD_FACTOR, loadCap, PROMPT_KEY_CHARS, StickyKeys } from '../../src/router/affinity.js';
import { Ring, type ReplicaLoads } from '../../src/router/ring.js';

const chat = (...messages: { role: string; content: unknown }[]) => ({ model: 'm', messages });
const sys = { role: 'system', content: 'You are terse.' };
const doc = (n: number) => ({ role: 'user', content: `Document ${n}: ${'lorem ipsum '.repeat(50)}` });

describe('affinityKey', () => {
  const C = '/v1/chat/completions';
  test('a conversation keeps its key across turns; the key is the messages up to the first user message', () => {
    const turn1 = affinityKey(C, chat(sys, doc(1)));
    const turn3 = affinityKey(C, chat(sys, doc(1), { role: 'assistant', content: 'ok' }, { role: 'user', content: 'and?' }, { role: 'assistant', content: 'so' }, { role: 'user', content: 'more' }));
    assert.notEqual(turn1, null);
    assert.equal(turn3, turn1);
  });

  const distinct: [string, unknown, unknown][] = [
    ['another document', chat(sys, doc(1)), chat(sys, doc(2))],
    ['another system prompt', chat(sys, doc(1)), chat({ role: 'system', content: 'You are verbose.' }, doc(1))],
    ['no system prompt', chat(sys, doc(1)), chat(doc(1))],
    ['the same text split otherwise between messages', chat({ role: 'system', content: 'ab' }, { role: 'user', content: 'c' }), chat({ role: 'system', content: 'a' }, { role: 'user', content: 'bc' })],
    ['content parts: another text', chat({ role: 'user', content: [{ type: 'text', text: 'x' }] }), chat({ role: 'user', content: [{ type: 'text', text: 'y' }] })],
    ['content parts: another image', chat({ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:a' } }] }), chat({ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:b' } }] })],
  ];
  for (const [what, a, b] of distinct) {
    test(`keys differ: ${what}`, () => assert.notEqual(affinityKey(C, a as Record<string, unknown>), affinityKey(C, b as Record<string, unknown>)));
  }

  test('a string and its one text part give the same key (the same prompt)', () => {
    assert.equal(affinityKey(C, chat({ role: 'user', content: 'hello' })), affinityKey(C, chat({ role: 'user', content: [{ type: 'text', text: 'hello' }] })));
  });

  test('only the first KEY_CHARS characters count', () => {
    const long = 'x'.repeat(KEY_CHARS);
    assert.equal(affinityKey(C, chat({ role: 'user', content: long + 'a' })), affinityKey(C, chat({ role: 'user', content: long + 'b' })));
    assert.notEqual(affinityKey(C, chat({ role: 'user', content: 'a' + long })), affinityKey(C, chat({ role: 'user', content: 'b' + long })));
  });

  const P = '/v1/completions';
  const prefix = 'p'.repeat(PROMPT_KEY_CHARS);
  const completions: [string, unknown, unknown, boolean][] = [
    ['a prompt that grows past the prefix keeps its key', { prompt: prefix + ' turn 1' }, { prompt: prefix + ' turn 1 … turn 2' }, true],
    ['prompts differing in the prefix differ', { prompt: 'a' + prefix }, { prompt: 'b' + prefix }, false],
    ['an array prompt keys on its first string', { prompt: [prefix + 'x', 'other'] }, { prompt: prefix + 'y' }, true],
    ['token prompts key on their first tokens', { prompt: [1, 2, 3] }, { prompt: [1, 2, 4] }, false],
  ];
  for (const [what, a, b, same] of completions) {
    test(`completions: ${what}`, () => {
      const ka = affinityKey(P, a as Record<string, unknown>);
      const kb = affinityKey(P, b as Record<string, unknown>);
      assert.notEqual(ka, null);
      if (same) assert.equal(ka, kb);
      else assert.notEqual(ka, kb);
    });
  }

  const none: [string, string, unknown][] = [
    ['embeddings', '/v1/embeddings', { input: 'x' }],
    ['a path that only starts like chat', '/v1/chat/completionsx', chat(doc(1))],
    ['no messages', C, { model: 'm' }],
    ['empty messages', C, { messages: [] }],
    ['messages not an array', C, { messages: 'hi' }],
    ['no prompt', P, { model: 'm' }],
    ['empty prompt', P, { prompt: '' }],
  ];
  for (const [what, path, body] of none) {
    test(`no key: ${what}`, () => assert.equal(affinityKey(path, body as Record<string, unknown>), null));
  }

  test('a query string does not change the path kind', () => {
    assert.equal(affinityKey(`${C}?x=1`, chat(doc(1))), affinityKey(C, chat(doc(1))));
    assert.equal(isPromptPath(`${P}?a`), true);
    assert.equal(isPromptPath('/v1/embeddings'), false);
  });
});

/** Loads for `choose` from arrays; slot times and seconds per token 0 (not known) unless given. */
function loads(load: number[], slots: number | number[] = Infinity, down: number[] = [], slotSeconds = 0, secondsPerToken = 0): ReplicaLoads {
  return {
    usable: (i) => !down.includes(i),
    load: (i) => load[i]!,
    slots: (i) => (Array.isArray(slots) ? slots[i]! : slots),
    slotSeconds: () => slotSeconds,
    secondsPerToken: () => secondsPerToken,
  };
}

describe('Ring', () => {
  const ids = ['r-a', 'r-b', 'r-c'];
  const ring = new Ring(ids);
  const keys = Array.from({ length: 3000 }, (_, i) => affinityKey('/v1/completions', { prompt: `key ${i}` })!);

  test('the same ids in another order make the same assignment', () => {
    const other = new Ring(['r-c', 'r-a', 'r-b']);
    for (const k of keys.slice(0, 200)) assert.equal(other.ids[other.home(k)], ids[ring.home(k)]);
  });

  test('each replica holds about a third of the keys', () => {
    const counts = [0, 0, 0];
    for (const k of keys) counts[ring.home(k)]!++;
    for (const c of counts) assert.ok(c > 3000 / 3 * 0.8 && c < 3000 / 3 * 1.2, `counts ${counts}`);
  });

  test('removing a replica moves only its keys, each to the next replica on the ring', () => {
    const two = new Ring(['r-a', 'r-c']);
    for (const k of keys) {
      const before = ids[ring.home(k)]!;
      const after = two.ids[two.home(k)]!;
      if (before !== 'r-b') assert.equal(after, before);
      else assert.equal(after, ids[ring.order(k)[1]!]);
    }
  });

  test('adding a replica takes keys only to itself', () => {
    const four = new Ring([...ids, 'r-d']);
    let moved = 0;
    for (const k of keys) {
      const after = four.ids[four.home(k)]!;
      if (after !== ids[ring.home(k)]) {
        assert.equal(after, 'r-d');
        moved++;
      }
    }
    assert.ok(moved > 3000 / 4 * 0.8 && moved < 3000 / 4 * 1.2, `moved ${moved}`);
  });

  test('order lists every replica once, the home first', () => {
    for (const k of keys.slice(0, 50)) {
      const o = ring.order(k);
      assert.deepEqual([...o].sort(), [0, 1, 2]);
      assert.equal(o[0], ring.home(k));
    }
    assert.deepEqual(new Ring([]).order(1), []);
  });
});

describe('choose (consistent hashing with bounded load)', () => {
  const ring = new Ring(['a', 'b', 'c']);
  const key = affinityKey('/v1/completions', { prompt: 'a conversation' })!;
  const [home, second, third] = ring.order(key) as [number, number, number];
  const at = (h: number, s: number, t: number): number[] => {
    const l = [0, 0, 0];
    l[home] = h;
    l[second] = s;
    l[third] = t;
    return l;
  };

  test('loadCap is ⌈1.25 × (total + 1) / replicas⌉', () => {
    assert.deepEqual([loadCap(0, 3), loadCap(2, 3), loadCap(3, 3), loadCap(5, 3), loadCap(59, 3)], [1, 2, 2, 3, 25]);
  });

  // [what, loads (home, second, third), slots, down, expected (home|second|third|none), hit]
  const rows: [string, number[], number, string[], 'home' | 'second' | 'third' | 'none', boolean][] = [
    ['idle: the home replica', [0, 0, 0], 2, [], 'home', true],
    ['home under its slots', [1, 0, 0], 2, [], 'home', true],
    ['home at its slots but under the cap (total 4, cap 3): stays', [2, 1, 1], 2, [], 'home', true],
    ['home at the cap: moves to the next on the ring', [3, 1, 1], 2, [], 'second', false],
    ['home and next at the cap: the one after', [3, 3, 0], 2, [], 'third', false],
    ['slots unknown: the cap alone (total 2, cap 2)', [2, 0, 0], Infinity, [], 'second', false],
    ['slots unknown, home under the cap', [1, 0, 1], Infinity, [], 'home', true],
    ['many slots: home keeps its requests up to its slots', [7, 0, 0], 8, [], 'home', true],
    ['home down: the next on the ring is the home among the usable', [0, 0, 0], 2, ['home'], 'second', true],
    ['home down, next at the cap', [0, 2, 0], 1, ['home'], 'third', false],
    ['all down', [0, 0, 0], 2, ['home', 'second', 'third'], 'none', false],
    ['home far past the cap (total 10, cap 5)', [10, 0, 0], 1, [], 'second', false],
    ['the cap rises with the total: every replica busy, home under the cap (total 11, cap 5)', [4, 4, 3], 1, [], 'home', true],
  ];
  const idx = { home, second, third } as const;
  for (const [what, l, slots, down, expected, hit] of rows) {
    test(what, () => {
      const c = choose(ring, key, loads(at(l[0]!, l[1]!, l[2]!), slots, down.map((d) => idx[d as keyof typeof idx])));
      assert.equal(c.index, expected === 'none' ? -1 : idx[expected]);
      assert.equal(c.home, hit);
    });
  }

  test('bounded load: 60 keys of which 30 have the same home, sent at once, spread within the cap', () => {
    const keys: number[] = [];
    for (let i = 0; keys.length < 60; i++) {
      const k = affinityKey('/v1/completions', { prompt: `prefix ${i}` })!;
      const h = ring.home(k);
      const onA = keys.filter((x) => ring.home(x) === 0).length;
      if (h === 0 ? onA < 30 : keys.length - onA < 30) keys.push(k);
    }
    const l = [0, 0, 0];
    for (const k of keys) {
      const c = choose(ring, k, loads(l));
      l[c.index]!++;
    }
    const cap = Math.ceil(1.25 * 20);
    for (const n of l) assert.ok(n <= cap, `loads ${l} within ${cap}`);
  });
});

describe('chooseSticky (where a key was served last)', () => {
  const ring = new Ring(['a', 'b', 'c']);
  const key = affinityKey('/v1/completions', { prompt: 'another conversation' })!;
  const [home, second] = ring.order(key) as [number, number, number];
  const elsewhere = [0, 1, 2].find((i) => i !== home)!;
  const with_ = (i: number, n: number, rest = 0): number[] => [0, 1, 2].map((j) => (j === i ? n : rest));

  // costs: [slot seconds, seconds per token, the key's tokens]; none = not known (the load bound decides)
  type Costs = [number, number, number];
  const none: Costs = [0, 0, 0];
  // a conversation of 2,300 tokens at 1 ms per token (2.3 s to evaluate again), turns of 0.4 s
  const long: Costs = [0.4, 0.001, 2300];
  // [what, last (index or 'none'), loads, slots, down, shared, freeSlotOnly, costs, expected index ('home' = ring home), hit]
  const rows: [string, number | 'none', number[], number, number[], boolean, boolean, Costs, number | 'home' | 'second', boolean][] = [
    ['a new key: the ring', 'none', [0, 0, 0], 2, [], false, false, none, 'home', true],
    ['a key served elsewhere goes back there, not to its ring home', elsewhere, [0, 0, 0], 2, [], false, false, none, elsewhere, true],
    ['costs unknown: stays past its slots while under 2 × the average (total 5, cap 4)', elsewhere, with_(elsewhere, 3, 1), 2, [], false, false, none, elsewhere, true],
    ['costs unknown: at 2 × the average it moves, by the ring (total 5, cap 4)', elsewhere, [0, 1, 2].map((j) => (j === elsewhere ? 4 : j === home ? 0 : 1)), 2, [], false, false, none, 'home', false],
    ['many slots: it stays up to its slots', elsewhere, with_(elsewhere, 7), 8, [], false, false, none, elsewhere, true],
    ['a shared key (already in flight) stays only under the 1.25 bound', elsewhere, with_(elsewhere, 3, 1), 2, [], true, false, none, 'home', false],
    ['a shared key is not weighed: the 1.25 bound even with costs known', elsewhere, with_(elsewhere, 3, 1), 2, [], true, false, long, 'home', false],
    ['its last replica down: the ring', elsewhere, [0, 0, 0], 2, [elsewhere], false, false, none, elsewhere === home ? 'second' : 'home', false],
    ['a long conversation at 2 × the average waits for its slot (wait 0.6 s < 2.3 s)', elsewhere, [0, 1, 2].map((j) => (j === elsewhere ? 4 : j === home ? 0 : 1)), 2, [], false, false, long, elsewhere, true],
    ['a long conversation behind a deep queue moves (wait 12 × 0.2 = 2.4 s > 2.3 s)', elsewhere, with_(elsewhere, 13, 0), 2, [], false, false, long, 'home', false],
    ['a short conversation moves to the free slot (wait 0.2 s > 23 tokens × 1 ms)', elsewhere, with_(elsewhere, 2, 0), 2, [], false, false, [0.4, 0.001, 23], 'home', false],
    ['a short conversation with a free slot on its replica stays', elsewhere, with_(elsewhere, 1, 0), 2, [], false, false, [0.4, 0.001, 23], elsewhere, true],
    ['from the queue, costs unknown: only a replica with a free slot', elsewhere, [0, 1, 2].map((j) => (j === elsewhere ? 2 : j === home ? 1 : 2)), 2, [], false, true, none, 'home', false],
    ['from the queue, a long conversation waits at its replica rather than take a free slot elsewhere', elsewhere, [0, 1, 2].map((j) => (j === elsewhere ? 2 : j === home ? 1 : 2)), 2, [], false, true, long, elsewhere, true],
    ['from the queue, a new key takes the free slot, not its busy ring home (the home among the usable)', 'none', [0, 1, 2].map((j) => (j === home ? 2 : j === second ? 2 : 1)), 2, [], false, true, none, [0, 1, 2].find((j) => j !== home && j !== second)!, true],
  ];
  const at = (x: number | 'home' | 'second') => (x === 'home' ? home : x === 'second' ? second : x);
  for (const [what, last, l, slots, down, shared, freeSlotOnly, [slotSeconds, perToken, tokens], expected, hit] of rows) {
    test(what, () => {
      const c = chooseSticky(ring, key, { last: last === 'none' ? -1 : last, shared, tokens, freeSlotOnly }, loads(l, slots, down, slotSeconds, perToken));
      assert.equal(c.index, at(expected));
      assert.equal(c.home, hit);
    });
  }

  test('StickyKeys: the same entry while remembered; the least recently used forgotten first', () => {
    const k = new StickyKeys(2);
    const e1 = k.set(1, 'a');
    k.set(2, 'b');
    assert.equal(k.set(1, 'c'), e1, 'the same entry, moved to the end');
    assert.equal(e1.id, 'c');
    k.set(3, 'd'); // forgets 2, the least recently used
    assert.equal(k.get(2), undefined);
    assert.equal(k.get(1)?.id, 'c');
    assert.equal(k.get(3)?.id, 'd');
    assert.equal(k.size, 2);
  });
});
