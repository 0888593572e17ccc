/**
 * The status fence's pure decisions (src/git/status-fence.ts): which summaries are trusted, what a
 * walk concludes from the commits it read, when it may stop early, and the fence under a bound.
 * Table tests over commit messages; the real branch is tested in test/integration/git-status-fence.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  EMPTY_HISTORY,
  FENCE_TOP,
  FENCE_TRAILER,
  FENCE_WALK,
  fenceUnder,
  formatSummary,
  historiesOf,
  mayCut,
  trustedSummary,
  withEpoch,
  type History,
  type WalkEnd,
  type WalkedCommit,
} from '../../src/git/status-fence.js';
import { EPOCH_TRAILER, withTrailer } from '../../src/git/trailers.js';

const KEY = Buffer.alloc(32, 7);
const OTHER_KEY = Buffer.alloc(32, 8);
const oid = (n: number): string => n.toString(16).padStart(40, '0');

/** A message with an epoch (null: none) and a summary (a raw value, or made under a key for a history). */
function msg(epoch: number | null, summary?: string | { below: History; parent: string; epoch?: number; key?: Buffer }): string {
  let m = 'llmgw status at abc\n';
  if (epoch !== null) m = withTrailer(m, EPOCH_TRAILER, String(epoch));
  if (summary !== undefined) {
    const v = typeof summary === 'string' ? summary : formatSummary(summary.below, summary.parent, summary.epoch ?? epoch ?? 0, summary.key ?? KEY);
    m = withTrailer(m, FENCE_TRAILER, v);
  }
  return m;
}

/** A first-parent chain, tip first: commit i has oid(i + 1) and parent oid(i + 2) (the last one is a root unless `rootless`). */
function chain(messages: readonly string[], rootless = false): WalkedCommit[] {
  return messages.map((message, i) => ({ oid: oid(i + 1), parent: i === messages.length - 1 && !rootless ? undefined : oid(i + 2), message }));
}

const H = (top: Array<[number, number]>, complete = true, cover: number | null = null): History => ({ top: top.map(([epoch, c]) => ({ epoch, commit: oid(c) })), complete, cover });

describe('status fence summaries: which are trusted', () => {
  const below = H([[7, 9], [3, 12]]);
  const parent = oid(2);
  const at = (message: string): WalkedCommit => ({ oid: oid(1), parent, message });
  const cases: ReadonlyArray<{ name: string; commit: WalkedCommit; key: Buffer | null; want: History | null }> = [
    { name: 'made under the key for this parent and epoch: the history below plus its own epoch', commit: at(msg(8, { below, parent })), key: KEY, want: H([[8, 1], [7, 9], [3, 12]]) },
    { name: 'its own epoch equal to one below: the newest commit carries it', commit: at(msg(7, { below, parent })), key: KEY, want: H([[7, 1], [3, 12]]) },
    { name: 'no key given: nothing is trusted', commit: at(msg(8, { below, parent })), key: null, want: null },
    { name: 'another cluster\'s key', commit: at(msg(8, { below, parent, key: OTHER_KEY })), key: KEY, want: null },
    { name: 'copied onto another parent', commit: at(msg(8, { below, parent: oid(5) })), key: KEY, want: null },
    { name: 'copied onto a commit with another epoch (a lower one, to reset the fence)', commit: at(msg(1, { below, parent, epoch: 8 })), key: KEY, want: null },
    { name: 'without its Llmgw-Epoch', commit: at(msg(null, formatSummary(below, parent, 8, KEY))), key: KEY, want: null },
    { name: 'a root commit has no history below to summarise', commit: { oid: oid(1), parent: undefined, message: msg(8, { below, parent }) }, key: KEY, want: null },
    { name: 'forged too low by hand: a plausible value, a made-up mac', commit: at(msg(1, `1@${oid(4)} mac=${'0'.repeat(32)}`)), key: KEY, want: null },
    { name: 'forged too high by hand', commit: at(msg(1, `999999999999@${oid(4)} mac=${'a'.repeat(32)}`)), key: KEY, want: null },
    { name: 'an entry edited after signing', commit: at(msg(8, formatSummary(below, parent, 8, KEY).replace(`7@${oid(9)}`, `2@${oid(9)}`))), key: KEY, want: null },
    { name: 'entries out of order are malformed', commit: at(msg(8, `3@${oid(12)} 7@${oid(9)} mac=${'0'.repeat(32)}`)), key: KEY, want: null },
    { name: 'no mac at all', commit: at(msg(8, `7@${oid(9)}`)), key: KEY, want: null },
    { name: 'an empty history below (only a mac)', commit: at(msg(2, { below: EMPTY_HISTORY, parent })), key: KEY, want: H([[2, 1]]) },
    { name: '`more` and `cover` survive the round trip', commit: at(msg(9, { below: H([[7, 9]], false, 6), parent })), key: KEY, want: H([[9, 1], [7, 9]], false, 6) },
  ];
  for (const c of cases) it(c.name, () => assert.deepEqual(trustedSummary(c.commit, c.key), c.want));

  it('of two Llmgw-Fence trailers the one that verifies counts; a bad one beside it changes nothing', () => {
    let m = msg(8, `1@${oid(4)} mac=${'0'.repeat(32)}`);
    m = withTrailer(m, FENCE_TRAILER, formatSummary(below, parent, 8, KEY));
    assert.deepEqual(trustedSummary(at(m), KEY), H([[8, 1], [7, 9], [3, 12]]));
  });
});

describe('status fence walk: the history concluded from the commits walked (tip first)', () => {
  const signedOn = (below: History, parentIndex: number, epoch: number): string => msg(epoch, { below, parent: oid(parentIndex + 1), epoch });
  const cases: ReadonlyArray<{ name: string; walked: WalkedCommit[]; end: WalkEnd; want: History }> = [
    {
      name: 'plain commits to the root: every epoch counted, a commit without one resets nothing',
      walked: chain([msg(null), msg(2), msg(null), msg(7), msg(3)]),
      end: { kind: 'end' },
      want: H([[7, 4], [3, 5], [2, 2]]),
    },
    {
      name: 'a summary that verifies ends the walk: an epoch below it is the summary\'s business (here it says 5)',
      walked: chain([msg(null), msg(4), signedOn(H([[5, 10]]), 3, 4), msg(99)], true),
      end: { kind: 'end' },
      want: H([[5, 10], [4, 2]]),
    },
    {
      name: 'F8 with summaries: an unsigned commit and a lower epoch on top of epoch 7\'s signed commit reset nothing',
      walked: chain([msg(2), msg(null), signedOn(H([[6, 20]]), 3, 7)], true),
      end: { kind: 'end' },
      want: H([[7, 3], [6, 20], [2, 1]]),
    },
    {
      name: 'a forged low summary on top of epoch 7: not trusted, walked through to the real one',
      walked: chain([msg(1, `1@${oid(30)} mac=${'0'.repeat(32)}`), signedOn(H([[6, 20]]), 2, 7)], true),
      end: { kind: 'end' },
      want: H([[7, 2], [6, 20], [1, 1]]),
    },
    {
      name: 'a valid summary copied by hand onto a new commit with a low epoch: not trusted there',
      walked: chain([msg(1, formatSummary(EMPTY_HISTORY, oid(2), 1, OTHER_KEY)), signedOn(H([]), 2, 7)], true),
      end: { kind: 'end' },
      want: H([[7, 2], [1, 1]]),
    },
    {
      name: 'a forged high summary: only its commit\'s own Llmgw-Epoch counts (judged against the bound later)',
      walked: chain([msg(999999999999, `999999999998@${oid(40)} mac=${'f'.repeat(32)}`), msg(4)]),
      end: { kind: 'end' },
      want: H([[999999999999, 1], [4, 2]]),
    },
    {
      name: 'a cut walk: what was read, and the cover for the rest',
      walked: chain([msg(3), msg(null)], true),
      end: { kind: 'cut', cover: 10 },
      want: H([[3, 1]], true, 10),
    },
    {
      name: 'the rest known (the cache): epochs added on top of it',
      walked: chain([msg(9), msg(null)], true),
      end: { kind: 'known', history: H([[8, 50]], false, null) },
      want: H([[9, 1], [8, 50]], false),
    },
  ];
  for (const c of cases) it(c.name, () => assert.deepEqual(historiesOf(c.walked, c.end, KEY)[0], c.want));

  it('each commit walked gets its own history (what the cache keeps); those below a summary get none', () => {
    const walked = chain([msg(5), signedOn(H([[2, 9]]), 2, 3), msg(8)], true);
    const hs = historiesOf(walked, { kind: 'end' }, KEY);
    assert.deepEqual(hs[0], H([[5, 1], [3, 2], [2, 9]]));
    assert.deepEqual(hs[1], H([[3, 2], [2, 9]]));
    assert.equal(hs[2], undefined);
    assert.equal(hs.length, 2);
  });

  it('without the key every summary is a plain commit: the walk goes on to the root', () => {
    const walked = chain([msg(5), signedOn(H([[2, 9]]), 2, 3), msg(8)]);
    assert.deepEqual(historiesOf(walked, { kind: 'end' }, null)[0], H([[8, 3], [5, 1], [3, 2]]));
  });

  it(`more than ${FENCE_TOP} distinct epochs: the highest are kept, the history marked incomplete`, () => {
    let h = EMPTY_HISTORY;
    for (let e = 1; e <= FENCE_TOP + 2; e++) h = withEpoch(h, { epoch: e, commit: oid(e) });
    assert.equal(h.top.length, FENCE_TOP);
    assert.deepEqual(h.top.map((t) => t.epoch), [10, 9, 8, 7, 6, 5, 4, 3]);
    assert.equal(h.complete, false);
  });
});

describe('status fence: when a walk may stop without a summary, and the fence under a bound', () => {
  const cut: ReadonlyArray<[number, number, number, boolean, string]> = [
    [FENCE_WALK, 10, 10, true, 'the key holder (bound = its own epoch): no real epoch above it can be below'],
    [FENCE_WALK, 10, 8, true, 'a bound below its epoch'],
    [FENCE_WALK, 10, 11, false, 'not the key holder (bound = etcd\'s revision, above): the rest may depose it, so walk on'],
    [FENCE_WALK - 1, 10, 10, false, 'fewer commits than the limit: walk on'],
  ];
  for (const [walked, epoch, bound, want, name] of cut) it(`mayCut: ${name}`, () => assert.equal(mayCut(walked, epoch, bound), want));

  const under: ReadonlyArray<[string, History, number, ReturnType<typeof fenceUnder>]> = [
    ['the highest epoch at or under the bound', H([[99, 1], [7, 2], [3, 3]]), 50, { epoch: 7, commit: oid(2) }],
    ['none under it, all known: a zero fence at the tip', H([[99, 1]]), 50, { epoch: 0, commit: oid(100) }],
    ['none under it, lower epochs did not fit: walk', H([[99, 1]], false), 50, 'walk'],
    ['an unread part covered by an epoch above the bound (an etcd restore): walk', H([[60, 1], [7, 2]], true, 60), 50, 'walk'],
    ['an unread part covered at or under the bound: what is known answers', H([[40, 1], [7, 2]], true, 40), 50, { epoch: 40, commit: oid(1) }],
    ['an unread part, nothing known under the bound: walk', H([[99, 1]], true, 40), 50, 'walk'],
  ];
  for (const [name, h, bound, want] of under) it(`fenceUnder: ${name}`, () => assert.deepEqual(fenceUnder(h, oid(100), bound), want));
});
